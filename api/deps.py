"""FastAPI dependencies: the store, the Temporal client and the settings of this process.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in its thread pool, a
thread hop per dependency per request (the throughput benchmark's profile showed the api-server
spending a fifth of its time in thread handoffs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from activities.store import Store
from api.settings import ApiSettings


async def get_store(request: Request) -> Store:
    """The process's `Store`."""
    store: Store = request.app.state.store
    return store


async def get_temporal(request: Request) -> Client:
    """The process's Temporal client."""
    client: Client = request.app.state.temporal
    return client


async def get_settings(request: Request) -> ApiSettings:
    """The process's settings."""
    settings: ApiSettings = request.app.state.settings
    return settings


StoreDep = Annotated[Store, Depends(get_store)]
TemporalDep = Annotated[Client, Depends(get_temporal)]
SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
