"""A sandbox's CPU limit, applied once the sandbox is up instead of by runsc at its start.

Measured on this machine's kind (cgroup v1, 2 cores; bench/README.md, "A restore at full speed"):
`runsc restore` of the example counter took 198 / 272 ms p50 / p95 with the template's 500m CPU
limit in the bundle, and 169 / 233 without it. runsc puts the sandbox and its gofer in the
container's cgroup before they start, so their own start (seccomp filter optimisation, loading
the kernel's state) ran under the actor's quota. The atelet therefore leaves the CPU limit out of
the bundle and writes it into the sandbox's cgroup right after `runsc run` or `runsc restore`
returns, before the wakeup probe (the memory limit stays in the bundle: gVisor sizes the
sandbox's memory from it). If the limit cannot be written the sandbox is not used.
"""

from __future__ import annotations

from pathlib import Path

from atelet.bundle import CPU_PERIOD_US

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CgroupError(Exception):
    """The sandbox's cgroup could not be found or written; the message says which file."""


class SharedCgroup(CgroupError):
    """The process's CPU cgroup is not one runsc made for its container (the name of that cgroup
    holds the container ID): a limit written there would throttle other processes too."""


def cpu_cgroup_dir(pid: int, root: Path = CGROUP_ROOT) -> tuple[Path, int]:
    """The directory of the CPU cgroup of process `pid` and the cgroup version (1 or 2).

    Raises:
        CgroupError: the process is gone, or its CPU cgroup is not under `root`.
    """
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError as exc:
        raise CgroupError(f"cannot read the cgroups of process {pid}: {exc}") from exc
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                directory = root / name / path.lstrip("/")
                if (directory / "cpu.cfs_quota_us").exists():
                    return directory, 1
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            directory = root / path.lstrip("/")
            if (directory / "cpu.max").exists():
                return directory, 2
    raise CgroupError(f"no CPU cgroup of process {pid} under {root} (its cgroups: {'; '.join(lines)})")


def set_cpu_limit(pid: int, cpu_millis: int, container_id: str, root: Path = CGROUP_ROOT) -> Path:
    """Limit the CPU cgroup of process `pid`, the sandbox of runsc container `container_id`, to
    `cpu_millis` millicores (a quota of `cpu_millis * 100` µs every 100 ms); returns the file written.

    runsc puts a container's processes in a cgroup of its own, named after the container ID unless
    the bundle names one (``/<id>``; on cgroup v2 possibly with a leaf below it); the limit is only
    written into such a cgroup.

    Raises:
        SharedCgroup: the cgroup's path does not name the container.
        CgroupError: the cgroup cannot be found or written.
    """
    directory, version = cpu_cgroup_dir(pid, root)
    if container_id not in directory.parts:
        raise SharedCgroup(f"the CPU cgroup of sandbox {container_id} (process {pid}) is {directory}, not one "
                           "runsc made for it")
    quota = max(1000, cpu_millis * CPU_PERIOD_US // 1000)
    try:
        if version == 1:
            (directory / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            target = directory / "cpu.cfs_quota_us"
            target.write_text(str(quota))
        else:
            target = directory / "cpu.max"
            target.write_text(f"{quota} {CPU_PERIOD_US}")
    except OSError as exc:
        raise CgroupError(f"cannot write the CPU limit into {directory}: {exc}") from exc
    return target
