"""The Postgres store: named SQL queries, migrations, and the `Store` that runs them (see `store`)."""

from store.errors import (
    ActorUnreachable,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NodeRetired,
    NoMatchingWorker,
    NotFound,
    PinnedNodeFull,
    StoreError,
    VersionConflict,
)
from store.migrations import migrate
from store.store import Store

__all__ = [
    "ActorUnreachable",
    "AlreadyExists",
    "FailedPrecondition",
    "InvalidArgument",
    "NoCapacity",
    "NoMatchingWorker",
    "NodeRetired",
    "NotFound",
    "PinnedNodeFull",
    "Store",
    "StoreError",
    "VersionConflict",
    "migrate",
]
