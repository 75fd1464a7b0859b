"""Worker pools of this atelet: read from a local YAML file of the WorkerPool custom resource's
shape (one pool per YAML document, parsed by `domain.pools.parse_worker_pool`), or the default
pool when no file is given.

``load_pools`` raises ``PoolError`` with a message naming the file, the document and the field.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from domain.pools import PoolError, WorkerPoolSpec, parse_worker_pool

__all__ = ["PoolError", "WorkerPoolSpec", "default_pool", "load_pools"]


def load_pools(path: Path) -> list[WorkerPoolSpec]:
    """Loads every WorkerPool document of ``path``; raises PoolError (unique names, >= 1 pool)."""
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except OSError as exc:
        raise PoolError(f"pool file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PoolError(f"pool file {path}: invalid YAML: {exc}") from None
    if not docs:
        raise PoolError(f"pool file {path}: holds no WorkerPool document")
    pools = [parse_worker_pool(doc, f"pool file {path}, document {i + 1}") for i, doc in enumerate(docs)]
    names = [p.name for p in pools]
    for name in names:
        if names.count(name) > 1:
            raise PoolError(f"pool file {path}: metadata.name {name!r} appears more than once")
    return pools


def default_pool(workers: int) -> WorkerPoolSpec:
    """The pool used without a pool file: ``default``, ``workers`` gvisor workers."""
    return WorkerPoolSpec(name="default", replicas=workers)
