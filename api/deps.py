"""FastAPI dependencies: the store, the Temporal client and the settings of this process.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in its thread pool, a
thread hop per dependency per request (the throughput benchmark's profile showed the api-server
spending a fifth of its time in thread handoffs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from api.actor_changes import ActorChanges
from api.settings import ApiSettings
from store.interfaces import ApiStore


async def get_store(request: Request) -> ApiStore:
    """The process's `Store`, as the routes see it (`store.interfaces.ApiStore`)."""
    store: ApiStore = request.app.state.store
    return store


async def get_temporal(request: Request) -> Client:
    """The process's Temporal client."""
    client: Client = request.app.state.temporal
    return client


async def get_settings(request: Request) -> ApiSettings:
    """The process's settings."""
    settings: ApiSettings = request.app.state.settings
    return settings


async def get_actor_changes(request: Request) -> ActorChanges:
    """The process's LISTEN on actor changes."""
    changes: ActorChanges = request.app.state.actor_changes
    return changes


StoreDep = Annotated[ApiStore, Depends(get_store)]
ActorChangesDep = Annotated[ActorChanges, Depends(get_actor_changes)]
TemporalDep = Annotated[Client, Depends(get_temporal)]
SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
