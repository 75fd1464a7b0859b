"""The store as each of its consumers sees it: one narrow interface per consumer.

Each consumer of the store (the api-server's routes, its liveness and recovery loops, the
controller, the Postgres activities, the atelet activities) takes the `typing.Protocol` below
that names the storage it needs and nothing more (as Substrate's `controlapi/workflow.go`
does); the wiring code passes the real `Store`, and mypy checks that `Store` satisfies each
protocol (also in `_every_protocol_is_satisfied_by_the_store` below).

How narrow: a part of the store that holds one concern (the transitions of one workflow, like
`Resumes`; one catalog, like `Actors`) is named by its own class. A part that serves several
unrelated consumers (`Nodes`, `Liveness`, `RouterDrains`, `Snapshots`, `Placement`) is named by a
protocol of the few methods that consumer calls, so that, for example, the controller cannot
register a node's workers and the atelet activities cannot list them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from domain.liveness import NODE_LEASE_SECONDS, UNREACHABLE_GRACE_SECONDS
from domain.operations.resume import ResumePlan
from domain.operations.snapshot_gc import GarbageSnapshot
from domain.refs import ActorRef
from store.actor_logs import ActorLogs
from store.actors import Actors
from store.atespaces import Atespaces
from store.drains import Drains
from store.execs import Execs
from store.forks import Forks
from store.freezes import Freezes
from store.golden_snapshots import GoldenSnapshots
from store.history import OperationHistory
from store.idleness import Idleness
from store.image_pulls import ImagePulls
from store.liveness import MAX_RECOVERIES_PER_WINDOW, RECOVERY_WINDOW_SECONDS, CrashedActor, Unreachability
from store.nodes import FencingOrder
from store.pauses import Pauses
from store.pressure import Pressure
from store.records import WorkerRecord, WorkerRegistration
from store.resumes import Resumes
from store.reverts import Reverts
from store.room_queue import RoomQueue
from store.router_drains import DrainProgress, PendingDrain, RouterReplica
from store.secrets import Secrets
from store.snapshot_listing import SnapshotListing
from store.suspends import Suspends
from store.tags import Tags
from store.templates import Templates
from store.tokens import AccessTokens
from store.uploads import Uploads

if TYPE_CHECKING:
    from store.store import Store

# ---- the few methods of a broad part that one consumer calls ---------------------------------


class NodeRegistry(Protocol):
    """`Nodes` as the api-server's worker routes use it: atelets register and report."""

    async def register(
        self,
        node: str,
        address: str,
        runsc_version: str,
        workers: list[WorkerRegistration],
        running: dict[str, tuple[str, str] | None] | None = None,
        exited: frozenset[str] = frozenset(),
    ) -> list[FencingOrder]:
        """See `Nodes.register`."""

    async def record_sandbox_exit(self, node: str, worker: str, ref: ActorRef, reason: str) -> bool:
        """See `Nodes.record_sandbox_exit`."""

    async def exists(self, node: str) -> bool:
        """See `Nodes.exists`."""

    async def list_workers(self) -> list[WorkerRecord]:
        """See `Nodes.list_workers`."""


class PodNodes(Protocol):
    """`Nodes` as the controller uses it: worker pods become nodes, deleted pods retire them."""

    async def sync_pod(self, node: str, address: str, worker: WorkerRegistration, ready: bool) -> bool:
        """See `Nodes.sync_pod`."""

    async def retire(self, node: str, reason: str) -> list[tuple[ActorRef, str]]:
        """See `Nodes.retire`."""

    async def live_pod_nodes(self) -> list[str]:
        """See `Nodes.live_pod_nodes`."""

    async def list_workers(self) -> list[WorkerRecord]:
        """See `Nodes.list_workers`."""


class WorkerFencing(Protocol):
    """`Nodes` as a revert or a failed rollback uses it: keep a worker out of placement."""

    async def fence_worker(self, worker_id: int, reason: str) -> None:
        """See `Nodes.fence_worker`."""


class LiveAtelets(Protocol):
    """`Nodes` as the snapshot deletion uses it: which atelet can do the call."""

    async def live_atelet_of(self, node: str) -> str | None:
        """See `Nodes.live_atelet_of`."""

    async def any_live_atelet(self) -> tuple[str, str] | None:
        """See `Nodes.any_live_atelet`."""


class ActorUnreachability(Protocol):
    """`Liveness` as the api-server's actor routes use it: why an actor is UNREACHABLE."""

    async def unreachable(self, ref: ActorRef) -> Unreachability | None:
        """See `Liveness.unreachable`."""


class LostNodes(Protocol):
    """`Liveness` as the api-server's liveness loop uses it."""

    async def mark_lost(
        self, lease_seconds: float = NODE_LEASE_SECONDS, grace_seconds: float = UNREACHABLE_GRACE_SECONDS
    ) -> list[str]:
        """See `Liveness.mark_lost`."""

    async def expire_unreachable(self, limit: int = 1000) -> list[ActorRef]:
        """See `Liveness.expire_unreachable`."""


class CrashRecovery(Protocol):
    """`Liveness` as the api-server's recovery loop uses it."""

    async def crashed_to_recover(
        self,
        limit: int = 100,
        window_seconds: float = RECOVERY_WINDOW_SECONDS,
        max_recoveries: int = MAX_RECOVERIES_PER_WINDOW,
    ) -> list[CrashedActor]:
        """See `Liveness.crashed_to_recover`."""

    async def stop_crash_loops(
        self, window_seconds: float = RECOVERY_WINDOW_SECONDS, max_recoveries: int = MAX_RECOVERIES_PER_WINDOW
    ) -> list[ActorRef]:
        """See `Liveness.stop_crash_loops`."""


class RouterReplicas(Protocol):
    """`RouterDrains` as the api-server's router routes use it: leases and acknowledgements."""

    async def heartbeat(self, replica: str, lease_seconds: float, drain_timeout_seconds: float) -> list[PendingDrain]:
        """See `RouterDrains.heartbeat`."""

    async def release(self, replica: str) -> None:
        """See `RouterDrains.release`."""

    async def replicas(self) -> list[RouterReplica]:
        """See `RouterDrains.replicas`."""

    async def acknowledge(self, drain_id: int, replica: str, busy: bool = False) -> None:
        """See `RouterDrains.acknowledge`."""


class DrainRequests(Protocol):
    """`RouterDrains` as the drain step uses it: ask the replicas, then wait for them."""

    async def request(self, actor: ActorRef, operation_id: str, if_idle: bool = False) -> int:
        """See `RouterDrains.request`."""

    async def waiting(self, drain_id: int) -> DrainProgress:
        """See `RouterDrains.waiting`."""


class GarbageSnapshots(Protocol):
    """`Snapshots` as the snapshot garbage collection lists its work."""

    async def garbage(self, limit: int, min_age_seconds: float) -> list[GarbageSnapshot]:
        """See `Snapshots.garbage`."""


class ForgottenSnapshots(Protocol):
    """`Snapshots` as the snapshot deletion drops a row."""

    async def forget(self, snapshot_id: int) -> None:
        """See `Snapshots.forget`."""


class HeldPlaces(Protocol):
    """`Placement` as an atelet call checks that its operation still holds the worker."""

    async def held(self, holder: str, worker_id: int, operation_id: str) -> bool:
        """See `Placement.held`."""


class RestoreCommits(Protocol):
    """`Resumes` as the atelet activities use it: place, and commit RUNNING after the restore."""

    async def begin(self, ref: ActorRef, operation_id: str, waited_for_room: bool = False) -> ResumePlan:
        """See `Resumes.begin`."""

    async def finish(self, ref: ActorRef, operation_id: str) -> None:
        """See `Resumes.finish`."""

    async def finished(self, ref: ActorRef, operation_id: str) -> bool:
        """See `Resumes.finished`."""


class CheckpointCommits(Protocol):
    """`Suspends` as the atelet activities use it: commit SUSPENDED after the checkpoint."""

    async def complete(
        self, ref: ActorRef, operation_id: str, snapshot_id: int, manifest: dict[str, Any], size_bytes: int
    ) -> None:
        """See `Suspends.complete`."""

    async def completed(self, ref: ActorRef, snapshot_id: int) -> bool:
        """See `Suspends.completed`."""


# ---- one protocol per consumer -----------------------------------------------------------------


class ApiStore(Protocol):
    """The store as the api-server's routes, health check and authenticator use it (`api.deps.StoreDep`)."""

    @property
    def atespaces(self) -> Atespaces: ...  # noqa: D102 (the part's class says it)
    @property
    def templates(self) -> Templates: ...  # noqa: D102
    @property
    def actors(self) -> Actors: ...  # noqa: D102
    @property
    def tags(self) -> Tags: ...  # noqa: D102
    @property
    def history(self) -> OperationHistory: ...  # noqa: D102
    @property
    def tokens(self) -> AccessTokens: ...  # noqa: D102
    @property
    def secrets(self) -> Secrets: ...  # noqa: D102
    @property
    def drains(self) -> Drains: ...  # noqa: D102
    @property
    def nodes(self) -> NodeRegistry: ...  # noqa: D102
    @property
    def liveness(self) -> ActorUnreachability: ...  # noqa: D102
    @property
    def router_drains(self) -> RouterReplicas: ...  # noqa: D102
    @property
    def idleness(self) -> Idleness: ...  # noqa: D102
    @property
    def room_queue(self) -> RoomDemand: ...  # noqa: D102
    @property
    def actor_logs(self) -> ActorLogs: ...  # noqa: D102
    @property
    def image_pulls(self) -> ImagePulls: ...  # noqa: D102
    @property
    def snapshot_listing(self) -> SnapshotListing: ...  # noqa: D102
    @property
    def forks(self) -> Forks: ...  # noqa: D102

    async def ping(self) -> None:
        """See `Store.ping` (the health check)."""


class LivenessStore(Protocol):
    """The store as the api-server's liveness loop uses it (`api.liveness.LivenessWatcher`)."""

    @property
    def liveness(self) -> LostNodes: ...  # noqa: D102

    async def ping(self) -> None:
        """See `Store.ping`."""


class RecoveryStore(Protocol):
    """The store as the api-server's recovery loop uses it (`api.recovery`)."""

    @property
    def liveness(self) -> CrashRecovery: ...  # noqa: D102


class IdleStore(Protocol):
    """The store as the api-server's idle judge uses it (`api.idle`)."""

    @property
    def idleness(self) -> Idleness: ...  # noqa: D102


class RoomDemand(Protocol):
    """The room queue as the api-server's metrics read it (`store.room_queue.RoomQueue`)."""

    async def waiting_by_pool(self) -> dict[str, int]:
        """See `RoomQueue.waiting_by_pool`."""


class ControllerStore(Protocol):
    """The store as the Kubernetes controller uses it (`controller`)."""

    @property
    def nodes(self) -> PodNodes: ...  # noqa: D102


class DbActivitiesStore(Protocol):
    """The store as the Postgres activities use it (`activities.db.DbActivities`)."""

    @property
    def resumes(self) -> Resumes: ...  # noqa: D102
    @property
    def suspends(self) -> Suspends: ...  # noqa: D102
    @property
    def pauses(self) -> Pauses: ...  # noqa: D102
    @property
    def uploads(self) -> Uploads: ...  # noqa: D102
    @property
    def golden_snapshots(self) -> GoldenSnapshots: ...  # noqa: D102
    @property
    def reverts(self) -> Reverts: ...  # noqa: D102
    @property
    def drains(self) -> Drains: ...  # noqa: D102
    @property
    def nodes(self) -> WorkerFencing: ...  # noqa: D102
    @property
    def router_drains(self) -> DrainRequests: ...  # noqa: D102
    @property
    def snapshots(self) -> GarbageSnapshots: ...  # noqa: D102
    @property
    def freezes(self) -> Freezes: ...  # noqa: D102
    @property
    def pressure(self) -> Pressure: ...  # noqa: D102
    @property
    def execs(self) -> Execs: ...  # noqa: D102
    @property
    def room_queue(self) -> RoomQueue: ...  # noqa: D102


class AteletActivitiesStore(Protocol):
    """The store as the atelet activities use it (`activities.atelet.AteletActivities`)."""

    @property
    def resumes(self) -> RestoreCommits: ...  # noqa: D102
    @property
    def suspends(self) -> CheckpointCommits: ...  # noqa: D102
    @property
    def placement(self) -> HeldPlaces: ...  # noqa: D102
    @property
    def nodes(self) -> LiveAtelets: ...  # noqa: D102
    @property
    def snapshots(self) -> ForgottenSnapshots: ...  # noqa: D102


if TYPE_CHECKING:

    def _every_protocol_is_satisfied_by_the_store(store: Store) -> None:
        """Never called: mypy checks here that the real `Store` is each consumer's store."""
        api: ApiStore = store
        liveness: LivenessStore = store
        recovery: RecoveryStore = store
        idle: IdleStore = store
        controller: ControllerStore = store
        db: DbActivitiesStore = store
        atelet: AteletActivitiesStore = store
        del api, liveness, recovery, idle, controller, db, atelet
