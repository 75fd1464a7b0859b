"""FastAPI dependencies: the store, the Temporal client and the settings of this process."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from activities.store import Store
from api.settings import ApiSettings


def get_store(request: Request) -> Store:
    """The process's `Store`."""
    store: Store = request.app.state.store
    return store


def get_temporal(request: Request) -> Client:
    """The process's Temporal client."""
    client: Client = request.app.state.temporal
    return client


def get_settings(request: Request) -> ApiSettings:
    """The process's settings."""
    settings: ApiSettings = request.app.state.settings
    return settings


StoreDep = Annotated[Store, Depends(get_store)]
TemporalDep = Annotated[Client, Depends(get_temporal)]
SettingsDep = Annotated[ApiSettings, Depends(get_settings)]
