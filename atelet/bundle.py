"""OCI runtime bundle (``config.json``) for one actor's sandbox.

Starts from umoci's runtime config of the unpacked image and sets: the process (template
command, image env overlaid by ate's own variables, overlaid by the template env, ``terminal:
false``), the shared read-only-by-overlay rootfs by absolute path, the worker's network namespace
by path, one bind mount per durable-dir volume mount (from the actor's host dir), the egress
settings (``atelet.egress.sandbox``: the proxy variables, the CA bundle and its mount), and
CPU/memory limits when given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from atelet.egress.sandbox import SandboxEgress
from atelet.images import UnpackedImage
from atelet.proto import atelet_pb2 as pb
from domain.local_endpoint import ENVIRONMENT_VARIABLE, URL

CPU_PERIOD_US = 100_000


def _merge_env(base: list[str], overrides: dict[str, str]) -> list[str]:
    env: dict[str, str] = {}
    for item in base:
        key, _, value = item.partition("=")
        env[key] = value
    env.update(overrides)
    return [f"{k}={v}" for k, v in env.items()]


def cpu_resources(cpu_millis: int) -> dict[str, int]:
    """The OCI ``linux.resources.cpu`` of a limit of ``cpu_millis`` millicores: a quota of
    ``cpu_millis * 100`` µs every ``CPU_PERIOD_US`` (100 ms)."""
    return {"quota": cpu_millis * CPU_PERIOD_US // 1000, "period": CPU_PERIOD_US}

def build_config(
    image: UnpackedImage,
    container: pb.Container,
    netns_path: str,
    volume_dirs: dict[str, Path],
    cpu_millis: int = 0,
    memory_bytes: int = 0,
    hostname: str = "actor",
    egress: SandboxEgress | None = None,
) -> dict[str, Any]:
    """The config.json dict. ``volume_dirs`` maps volume name → host dir (must cover every mount);
    ``egress``: the node's egress settings for its sandboxes (None: none)."""
    config: dict[str, Any] = json.loads(json.dumps(image.config))  # deep copy
    process = config.setdefault("process", {})
    process["terminal"] = False
    if container.command:
        process["args"] = list(container.command)
    # every sandbox learns where its local endpoint and egress proxy are; the template's env wins
    ours = {ENVIRONMENT_VARIABLE: URL, **(egress.env() if egress is not None else {})}
    process["env"] = _merge_env(process.get("env", []), {**ours, **dict(container.env)})
    config["root"] = {"path": str(image.rootfs.resolve()), "readonly": False}
    config["hostname"] = hostname
    linux = config.setdefault("linux", {})
    namespaces = [ns for ns in linux.get("namespaces", []) if ns.get("type") != "network"]
    namespaces.append({"type": "network", "path": netns_path})
    linux["namespaces"] = namespaces
    linux.pop("uidMappings", None)
    linux.pop("gidMappings", None)
    mounts = [m for m in config.get("mounts", [])
              if m.get("destination") not in {vm.mount_path for vm in container.volume_mounts}]
    for vm in container.volume_mounts:
        mounts.append({"destination": vm.mount_path, "type": "bind",
                       "source": str(volume_dirs[vm.name].resolve()), "options": ["rbind", "rw"]})
    if egress is not None:
        taken = {m.get("destination") for m in mounts}
        mounts += [m for m in egress.mounts() if m["destination"] not in taken]
    config["mounts"] = mounts
    resources: dict[str, Any] = {}
    if cpu_millis > 0:
        resources["cpu"] = cpu_resources(cpu_millis)
    if memory_bytes > 0:
        resources["memory"] = {"limit": memory_bytes}
    if resources:
        linux["resources"] = resources
    else:
        linux.pop("resources", None)
    return config


def write_bundle(bundle_dir: Path, config: dict[str, Any]) -> Path:
    """Writes ``bundle_dir/config.json`` atomically; returns bundle_dir."""
    bundle_dir.mkdir(parents=True, exist_ok=True)
    tmp = bundle_dir / "config.json.tmp"
    tmp.write_text(json.dumps(config, indent=1))
    os.replace(tmp, bundle_dir / "config.json")
    return bundle_dir
