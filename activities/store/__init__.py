"""The Postgres store: named SQL queries, migrations, and the `Store` that runs them (see `store`)."""

from activities.store.errors import (
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
from activities.store.migrations import migrate
from activities.store.store import Store

__all__ = [
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
