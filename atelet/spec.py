"""Request validation shared by the sandbox operations: actor references and workload specs.

Both raise INVALID_ARGUMENT naming the offending field; neither touches the disk or a sandbox.
Names are checked against the project's one DNS-1123 label rule, ``domain.labels.DNS_LABEL``
(the same the API checks them with), with the atelet's own messages.
"""

from __future__ import annotations

from atelet.errors import invalid
from atelet.proto import atelet_pb2 as pb
from domain.labels import DNS_LABEL


def actor_key(ref: pb.ActorRef) -> tuple[str, str]:
    """``(atespace, name)`` of ``ref``; INVALID_ARGUMENT (``actor.atespace`` / ``actor.name``)
    unless both are DNS-1123 labels."""
    for fname, value in (("actor.atespace", ref.atespace), ("actor.name", ref.name)):
        if not DNS_LABEL.fullmatch(value):
            raise invalid(f"{fname}: {value!r} is not a DNS-1123 label")
    return ref.atespace, ref.name


def validate_spec(spec: pb.WorkloadSpec) -> pb.Container:
    """The single container of ``spec``; INVALID_ARGUMENT naming the field otherwise."""
    if len(spec.containers) != 1:
        raise invalid(f"spec.containers: exactly one container per sandbox is supported, got {len(spec.containers)}")
    container = spec.containers[0]
    if not container.image:
        raise invalid("spec.containers[0].image: required")
    volumes = {v.name: v for v in spec.volumes}
    for i, vm in enumerate(container.volume_mounts):
        if vm.name not in volumes:
            raise invalid(f"spec.containers[0].volume_mounts[{i}].name: no volume {vm.name!r} in spec.volumes")
        if not volumes[vm.name].durable_dir:
            raise invalid(f"spec.volumes: volume {vm.name!r} must be a durable_dir")
        if not vm.mount_path.startswith("/") or ".." in vm.mount_path.split("/"):
            raise invalid(f"spec.containers[0].volume_mounts[{i}].mount_path: {vm.mount_path!r} must be absolute")
    for v in spec.volumes:
        if not DNS_LABEL.fullmatch(v.name):
            raise invalid(f"spec.volumes: name {v.name!r} is not a DNS-1123 label")
    port = container.wakeup_probe.port
    if port < 0 or port > 65535:
        raise invalid(f"spec.containers[0].wakeup_probe.port: {port} is not a port")
    if spec.cpu_millis < 0 or spec.memory_bytes < 0:
        raise invalid("spec: cpu_millis and memory_bytes must be >= 0")
    return container
