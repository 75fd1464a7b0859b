"""Placement as pure rules (ARCHITECTURE.md, "Placement: six checks, then the less loaded of two"):
what a placement asks for (`Demand`), what a worker offers (`WorkerShape` and its usage), the
first check a worker fails (`refusal`), how many workers each check removed and the "no room"
message built from those counts (`Tally`, `no_room_message`), and the load that decides between
two candidates (`NodeLoad.after`).

The checks, in order: (1) ACTIVE; (2) the snapshot's sandbox class; (3) on the node holding the
actor's LOCAL snapshot, if one pins it; (4) a runtime that can restore the snapshot's memory: a
FULL snapshot restores only under the runtime that wrote it (a runsc build for gVisor; for microvm
the VMM's version, machine type and accelerator), each worker's own (its node's runsc build when
its atelet does not say); (5) pool labels containing the
template's workerSelector and the actor's worker_selector; (6) room: a free place (a worker hosts
one actor: one sandbox, one address), then the actor's cpu and memory limits.

Load. A worker hosts one actor at a time, so every free worker is empty and a worker's own load
cannot tell two free candidates apart. What differs is the machine they share: the load of a
candidate is the fullest dimension (places, cpu, memory) of its node, summed over the node's
workers, after this placement. Where every node has one worker (a worker pod in Kubernetes is its
own node) all free candidates tie, and the sample of two is a random choice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from domain.quantities import format_cpu, format_memory
from domain.states import WorkerState


class Check(IntEnum):
    """The placement checks, in the order they are applied (room is split in three)."""

    ACTIVE = 1
    SANDBOX_CLASS = 2
    PINNED_NODE = 3
    RUNTIME = 4
    LABELS = 5
    PLACE = 6
    CPU = 7
    MEMORY = 8


@dataclass(frozen=True)
class WorkerShape:
    """What the checks read of a worker besides its node and usage. Workers of one pool with one
    runtime share a shape, so a view can count them by shape.

    `labels` are its pool's labels as sorted (key, value) pairs; `runsc_version` its runtime
    (check 4: the one its atelet reports for it, else its node's runsc build; '' when neither
    says); `places`, `cpu_millis` (millicores) and `memory_bytes` its
    capacity.
    """

    state: str
    sandbox_class: str
    labels: tuple[tuple[str, str], ...]
    runsc_version: str
    places: int
    cpu_millis: int
    memory_bytes: int
    drain_held: bool = False
    """UNAVAILABLE because its actor crashed and the router replicas have yet to drain that actor
    (store/crashes.py); the "no room" message says so, since it passes in seconds."""
    unavailable_because: str = ""
    """Why an UNAVAILABLE worker is, when it is one the user can act on or wait for
    (`unavailable_reason`): the "no room" message says it."""

    @classmethod
    def of(
        cls,
        *,
        state: str,
        sandbox_class: str,
        labels: Mapping[str, str],
        runsc_version: str | None,
        places: int,
        cpu_millis: int,
        memory_bytes: int,
        drain_held: bool = False,
        node: str = "",
        state_reason: str | None = None,
    ) -> WorkerShape:
        """Build from a worker row's values (labels as a mapping; `node` and `state_reason` for
        `unavailable_reason`)."""
        return cls(
            state=state,
            sandbox_class=sandbox_class,
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            runsc_version=runsc_version or "",
            places=places,
            cpu_millis=cpu_millis,
            memory_bytes=memory_bytes,
            drain_held=drain_held and state == WorkerState.UNAVAILABLE,
            unavailable_because=unavailable_reason(node, state, state_reason),
        )


def unavailable_reason(node: str, state: str, state_reason: str | None) -> str:
    """How the "no room" message explains an UNAVAILABLE worker: its node's drain (and how to end
    it), its node's loss, or its pod not Ready; '' for any other reason (a fenced worker's names
    an actor and passes at the node's next heartbeat) and for an ACTIVE worker."""
    if state != WorkerState.UNAVAILABLE:
        return ""
    if state_reason == "draining":
        return f"node {node} is draining; `ate undrain node {node}` takes it back"
    if state_reason == "node lost":
        return f"node {node} stopped answering"
    if state_reason == "pod not Ready":
        return "its pod is not Ready"
    return ""


@dataclass(frozen=True)
class Usage:
    """What the places on a worker (or a node) hold: places taken, millicores, bytes."""

    places: int = 0
    cpu_millis: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.places + other.places, self.cpu_millis + other.cpu_millis, self.memory_bytes + other.memory_bytes
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.places - other.places, self.cpu_millis - other.cpu_millis, self.memory_bytes - other.memory_bytes
        )


@dataclass(frozen=True)
class Demand:
    """What one placement asks for.

    `label` names the holder in messages ("the actor demo/c1"); `selector` is the union of the
    template's workerSelector and the actor's worker_selector as sorted (key, value) pairs (two
    values for one key select nothing, as two selectors that disagree should); `runsc_version`
    is the runtime a FULL snapshot needs, as its manifest names it (None: no memory to restore,
    any runtime will do); `node`
    the node the actor's LOCAL snapshot pins it to (None: any node).
    """

    label: str
    sandbox_class: str
    selector: tuple[tuple[str, str], ...]
    cpu_millis: int
    memory_bytes: int
    runsc_version: str | None = None
    node: str | None = None

    @classmethod
    def of(
        cls,
        *,
        label: str,
        sandbox_class: str,
        selectors: Iterable[Mapping[str, str]],
        cpu_millis: int,
        memory_bytes: int,
        runsc_version: str | None = None,
        node: str | None = None,
    ) -> Demand:
        """Build from the template's and the actor's selectors."""
        pairs = {(str(k), str(v)) for selector in selectors for k, v in selector.items()}
        return cls(
            label=label,
            sandbox_class=sandbox_class,
            selector=tuple(sorted(pairs)),
            cpu_millis=cpu_millis,
            memory_bytes=memory_bytes,
            runsc_version=runsc_version,
            node=node,
        )

    @property
    def usage(self) -> Usage:
        """What binding it takes: one place and its limits."""
        return Usage(1, self.cpu_millis, self.memory_bytes)


def fits(shape: WorkerShape, demand: Demand) -> bool:
    """Checks 1, 2, 4, 5 and the capacity half of 6: whether an idle worker of this shape takes
    the demand, wherever it is (the pinned node, check 3, is the caller's)."""
    return refusal(shape, True, Usage(), demand) is None


def _class_ok(shape: WorkerShape, demand: Demand) -> bool:
    return shape.sandbox_class == demand.sandbox_class


def _runtime_ok(shape: WorkerShape, demand: Demand) -> bool:
    return demand.runsc_version is None or shape.runsc_version == demand.runsc_version


def _labels_ok(shape: WorkerShape, demand: Demand) -> bool:
    labels = dict(shape.labels)
    return all(labels.get(k) == v for k, v in demand.selector)


def _misfit(shape: WorkerShape, demand: Demand) -> Check | None:
    """The first check a worker fails by configuration alone (class, runtime, labels, capacity
    for the limits), whatever its state, node and usage; None when it would take the demand."""
    if not _class_ok(shape, demand):
        return Check.SANDBOX_CLASS
    if not _runtime_ok(shape, demand):
        return Check.RUNTIME
    if not _labels_ok(shape, demand):
        return Check.LABELS
    if shape.cpu_millis < demand.cpu_millis:
        return Check.CPU
    if shape.memory_bytes < demand.memory_bytes:
        return Check.MEMORY
    return None


def refusal(shape: WorkerShape, on_node: bool, used: Usage, demand: Demand) -> Check | None:
    """The first check a worker fails, or None when it is a candidate.

    Args:
        shape: the worker.
        on_node: whether it is on the demand's pinned node (pass True when nothing pins it).
        used: what its places hold now.
        demand: the placement.
    """
    if shape.state != WorkerState.ACTIVE:
        return Check.ACTIVE
    if not _class_ok(shape, demand):
        return Check.SANDBOX_CLASS
    if not on_node:
        return Check.PINNED_NODE
    if not _runtime_ok(shape, demand):
        return Check.RUNTIME
    if not _labels_ok(shape, demand):
        return Check.LABELS
    if used.places + 1 > shape.places:
        return Check.PLACE
    if used.cpu_millis + demand.cpu_millis > shape.cpu_millis:
        return Check.CPU
    if used.memory_bytes + demand.memory_bytes > shape.memory_bytes:
        return Check.MEMORY
    return None


DRAIN_HELD = "held until the router replicas drained the actor that crashed there (seconds; retry)"
"""How the "no room" message names workers that are `drain_held`."""


@dataclass
class Tally:
    """How many workers each check removed, for the "no room" message.

    `removed[check]` counts the removed workers by what they showed instead (their state, their
    sandbox class, their runtime; '' for the other checks); `configured` counts the workers
    that would take the demand as they are configured (class, runtime, labels, capacity for the
    limits) whatever their state, node or usage; `candidates` those that pass every check.
    """

    total: int = 0
    removed: dict[Check, Counter[str]] = field(default_factory=dict)
    configured: int = 0
    candidates: int = 0
    misfits: Counter[Check] = field(default_factory=Counter)
    """The workers that are not `configured`, by the first configuration check they fail."""

    def add(self, shape: WorkerShape, on_node: bool, used: Usage, demand: Demand, count: int = 1) -> None:
        """Count `count` workers of one shape, node side and usage."""
        if count <= 0:
            return
        self.total += count
        check = refusal(shape, on_node, used, demand)
        if check is None:
            self.candidates += count
        else:
            detail = {
                Check.ACTIVE: DRAIN_HELD if shape.drain_held else (
                    f"{shape.state} ({shape.unavailable_because})" if shape.unavailable_because else shape.state
                ),
                Check.SANDBOX_CLASS: shape.sandbox_class,
                Check.RUNTIME: shape.runsc_version,
            }.get(check, "")
            self.removed.setdefault(check, Counter())[detail] += count
        misfit = _misfit(shape, demand)
        if misfit is None:
            self.configured += count
        else:
            self.misfits[misfit] += count

    @property
    def permanent(self) -> bool:
        """Whether configuration alone rules out every registered worker (none would take the
        actor even if every worker were ACTIVE, on the right node and empty): waiting for a
        worker to come back or to be freed will not help."""
        return self.total > 0 and self.configured == 0


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def _run(n: int) -> str:
    return "runs" if n == 1 else "run"


def _selector(pairs: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs)


def _runtime(sandbox_class: str, build: str) -> str:
    """A runtime as messages name it: a gVisor runtime is a runsc build (`runsc 0.0~20240729.0`);
    a microvm runtime names its VMM itself (`QEMU 7.2.22 (Debian ...), machine pc-q35-7.2, accelerator tcg,
    devices ...`)."""
    if sandbox_class == "gvisor":
        return f"runsc {build}" if build else "a runsc build its node did not report"
    return build or "a runtime its worker did not report"


def _runtime_phrase(demand: Demand, counts: dict[str, int]) -> str:
    """``1 runs X, the snapshot needs Y`` for check 4. A runtime made of ``, ``-separated parts
    (a microvm one: ``QEMU <version>, machine <type>, accelerator <kvm|tcg>, devices <kinds>``)
    is named only by the parts that differ from the snapshot's: ``1 runs accelerator tcg, the
    snapshot needs accelerator kvm``; the snapshot's whole runtime is named when some worker's
    cannot be compared part by part (it reports none, or another shape)."""
    needs = demand.runsc_version or ""
    parts = needs.split(", ")
    comparable = demand.sandbox_class != "gvisor" and len(parts) > 1
    alike = [b for b in counts if comparable and b and len(b.split(", ")) == len(parts)]
    differ = sorted({i for b in alike for i, part in enumerate(b.split(", ")) if part != parts[i]})
    named = []
    for build, c in sorted(counts.items()):
        shown = ", ".join(build.split(", ")[i] for i in differ) if build in alike else _runtime(demand.sandbox_class, build)
        named.append(f"{c} {_run(c)} {shown}")
    wanted = ", ".join(parts[i] for i in differ) if alike and len(alike) == len(counts) else _runtime(
        demand.sandbox_class, needs
    )
    return f"{' and '.join(named)}, the snapshot needs {wanted}"


def _phrases(tally: Tally, demand: Demand) -> list[str]:
    """One phrase per check that removed workers, in check order."""
    phrases: list[str] = []
    for check in sorted(tally.removed):
        counts = tally.removed[check]
        n = sum(counts.values())
        if check == Check.ACTIVE:
            phrases += [f"{c} {state}" for state, c in sorted(counts.items())]
        elif check == Check.SANDBOX_CLASS:
            phrases += [f"{c} of sandbox class {cls}" for cls, c in sorted(counts.items())]
        elif check == Check.PINNED_NODE:
            phrases.append(f"{n} not on node {demand.node} (it holds the actor's local snapshot)")
        elif check == Check.RUNTIME:  # the workers it removed are of the demand's class (check 2 came first)
            phrases.append(_runtime_phrase(demand, counts))
        elif check == Check.LABELS:
            phrases.append(f"{n} without labels {_selector(demand.selector)}")
        elif check == Check.PLACE:
            phrases.append(f"{n} busy (a worker hosts one actor)")
        elif check == Check.CPU:
            phrases.append(f"{n} with less than {format_cpu(demand.cpu_millis)} CPU free")
        elif check == Check.MEMORY:
            phrases.append(f"{n} with less than {format_memory(demand.memory_bytes)} memory free")
    return phrases


def _hints(tally: Tally, demand: Demand) -> list[str]:
    """What to change when configuration rules out every worker. A pool of the demand's class is
    asked for only when no worker is of that class: where some are, what to change is what ruled
    those out (their runtime, labels or capacity), and another pool like them would not help."""
    hints: list[str] = []
    if tally.misfits[Check.SANDBOX_CLASS] == tally.total:
        hints.append(f"add a worker pool of sandbox class {demand.sandbox_class}")
    if Check.RUNTIME in tally.misfits:
        needs = _runtime(demand.sandbox_class, demand.runsc_version or "")
        where = "nodes" if demand.sandbox_class == "gvisor" else f"{demand.sandbox_class} workers"
        hints.append(f"run {where} with {needs}")
    if Check.LABELS in tally.misfits:
        hints.append(
            f"label a worker pool {_selector(demand.selector)} or change the actor's worker_selector "
            "(or the template's workerSelector)"
        )
    if Check.CPU in tally.misfits or Check.MEMORY in tally.misfits:
        hints.append("lower the template's resources.limits or add a worker pool with more capacity")
    return hints


def no_room_message(tally: Tally, demand: Demand) -> str:
    """The "no room" message: how many workers are registered and, for each check that removed
    some, how many it removed, e.g. `no worker has room for the actor demo/c1: 6 workers: 2
    UNAVAILABLE, 1 of sandbox class microvm, 3 without labels gpu=true`; when configuration rules
    out every worker, what to change."""
    head = f"no worker has room for {demand.label}"
    if tally.total == 0:
        return f"{head}: no worker is registered (is an atelet running?)"
    phrases = _phrases(tally, demand)
    if tally.candidates:
        phrases.append(f"{tally.candidates} taken by other placements meanwhile (retry)")
    message = f"{head}: {_workers(tally.total)}: {', '.join(phrases)}"
    if tally.permanent:
        message += "; no worker can take it as configured: " + "; or ".join(_hints(tally, demand))
    return message


@dataclass
class NodeLoad:
    """A node's capacity and usage, summed over its workers."""

    capacity: Usage = field(default_factory=Usage)
    used: Usage = field(default_factory=Usage)

    def after(self, demand: Demand) -> float:
        """The node's fullest dimension (places, cpu, memory) as a fraction of its capacity once
        the demand is bound on it; a dimension the node has none of counts as full."""
        used = self.used + demand.usage
        fractions = [
            used.places / self.capacity.places if self.capacity.places else 1.0,
            used.cpu_millis / self.capacity.cpu_millis if self.capacity.cpu_millis else 1.0,
            used.memory_bytes / self.capacity.memory_bytes if self.capacity.memory_bytes else 1.0,
        ]
        return max(fractions)
