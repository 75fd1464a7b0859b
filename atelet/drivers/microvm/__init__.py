"""The microvm sandbox class: actors in QEMU virtual machines.

- ``driver``: the class's ``SandboxDriver`` (what the node calls), with ``prepare`` (the guest's
  initramfs, disks and ``plan.json``), ``sandbox_record`` (what it keeps per VM, ``sandbox.json``),
  ``disk_read_back`` (the disks read back into the durable dirs) and ``exit_watch`` (a VM that
  ended on its own);
- ``qemu``: the VMM back end, one QEMU per VM over QMP (boot, checkpoint, restore, adopt), on
  ``vm_config`` (a VM's shape), ``qemu_process`` (its command line, the QEMU binary, adoption's
  process handle) and ``vm_snapshot`` (a checkpoint's files and recorded shape);
- ``initramfs`` and ``init.sh``: the guest, the actor's image as its root filesystem and ate's
  init;
- ``network``: the worker's address on a tap bridged with the worker's namespace (a VM restored
  on another worker is given that worker's address through ate's channel, ``Vm.readdress``);
- ``disk``: the durable dirs as ext4 disk images, read back into the node's dirs;
- ``accelerator``: KVM where it really runs guests, else TCG.
"""
