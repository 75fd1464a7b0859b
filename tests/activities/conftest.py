"""Fixtures shared by the store tests."""

from __future__ import annotations

import pytest

from store import Store
from tests.activities.test_store import ready_template, worker

ONE_NODE_WORKERS = [worker("w0"), worker("w1")]
"""The two one-place workers of node n1 in `stage`."""


@pytest.fixture
async def two_nodes(store: Store) -> Store:
    """Nodes n1 (worker w1) and n2 (worker w2), one place each, and the Ready template demo/counter."""
    await store.nodes.register("n1", "127.0.0.1:1", "v", [worker("w1")])
    await store.nodes.register("n2", "127.0.0.2:1", "v", [worker("w2")])
    await ready_template(store)
    return store


@pytest.fixture
async def stage(store: Store) -> Store:
    """Node n1 with workers w0 and w1 (one place each), and the Ready template demo/counter."""
    await store.nodes.register("n1", "127.0.0.1:1", "v", ONE_NODE_WORKERS)
    await ready_template(store)
    return store
