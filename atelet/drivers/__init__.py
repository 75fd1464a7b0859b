"""Sandbox drivers: the runtime of each sandbox class behind one interface (``base.SandboxDriver``).

- ``base``: the interface the node uses (``SandboxDriver``, ``ExitWatch``);
- ``gvisor``: class ``gvisor``, over runsc.
"""
