"""The worker bounds how long Temporal keeps closed workflows (issue 30, bounded storage): at start
it sets the namespace's retention to ATE_TEMPORAL_RETENTION_DAYS, on a real Temporal dev server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError
from temporalio.client import Client

from temporal_worker.namespace_retention import ensure_retention, namespace_retention
from temporal_worker.settings import WorkerSettings


async def test_the_namespace_keeps_closed_workflows_for_the_days_set(temporal_address: str) -> None:
    client = await Client.connect(temporal_address)
    assert await ensure_retention(client, "default", 3) in (True, False)
    assert await namespace_retention(client, "default") == timedelta(days=3)
    assert await ensure_retention(client, "default", 3) is False  # already so: nothing to change
    assert await ensure_retention(client, "default", 7) is True
    assert await namespace_retention(client, "default") == timedelta(days=7)
    assert await ensure_retention(client, "no-such-namespace", 7) is False  # logged, not raised


def test_the_default_is_a_week_and_the_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WorkerSettings().temporal_retention_days == 7
    for bad in ("0", "91"):
        monkeypatch.setenv("ATE_TEMPORAL_RETENTION_DAYS", bad)
        with pytest.raises(ValidationError, match=r"ATE_TEMPORAL_RETENTION_DAYS: \d+ is outside 1..90 days"):
            WorkerSettings()
