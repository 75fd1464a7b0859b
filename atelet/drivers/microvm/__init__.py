"""The microvm sandbox class (issue 15), built up in parts: the guest's initramfs with the
actor's root filesystem and ate's init (``initramfs``, ``init.sh``), its network on the worker's
address (``network``; a VM restored on another worker is given that worker's address through
ate's channel, ``Vm.readdress``), its durable dirs as disk images (``disk``) and the QEMU back
end with its checkpoint and restore (``qemu``). Not yet a ``SandboxDriver``: no worker pool of
this class, and the node runs one driver for all its workers.
"""
