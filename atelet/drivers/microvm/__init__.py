"""The microvm sandbox class (issue 15), built up in parts: the guest's initramfs and init
(``initramfs``, ``init.sh``) and the QEMU back end with its checkpoint and restore (``qemu``).
Not yet a ``SandboxDriver``: no network, root filesystem or durable dir in the guest, and no
worker pool of this class."""
