"""Sandbox drivers: the runtime of each sandbox class behind one interface (``base.SandboxDriver``).

- ``base``: the interface the node uses (``SandboxDriver``, ``ExitWatch``);
- ``gvisor``: class ``gvisor``, over runsc;
- ``microvm``: class ``microvm``, over QEMU (``microvm.driver``).

A node runs one driver per sandbox class among its worker pools, each worker's calls going to
its pool's class's driver (``Drivers``).
"""

from atelet.drivers.base import SandboxDriver

Drivers = dict[str, SandboxDriver]
"""The drivers of a node by sandbox class (``drivers[worker.pool.sandbox_class]``)."""
