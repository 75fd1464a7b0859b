"""The FastAPI application: routers, error handlers, /healthz, /metrics, lifespan (store, Temporal,
the liveness watcher and the automatic recovery sweep)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter as Tally
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import Depends, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from temporalio.client import Client

from api.access.authenticator import Authenticator, read_bootstrap_token
from api.access.guard import PUBLIC
from api.access.node_certificates import NodeCertificateVerifier
from api.access.oidc import OidcVerifier
from api.actor_changes import ActorChanges
from api.deps import StoreDep
from api.errors import install_error_handlers
from api.history_retention import prune_loop
from api.idle import IdleJudge
from api.limits import BodySizeLimit
from api.liveness import LivenessWatcher
from api.metrics import WAITING_FOR_ROOM, WORKERS
from api.names import check_request_names
from api.recovery import run_recovery
from api.routes import (
    actors,
    atespaces,
    local_endpoint,
    logs,
    operations,
    routers,
    schedules,
    secrets,
    snapshots,
    templates,
    tokens,
    workers,
)
from api.routes import exec as exec_route
from api.secret_box import load_secret_box, reseal_all
from api.settings import ApiSettings
from store import Store

log = logging.getLogger("ate.api")


def authenticator_for(settings: ApiSettings, store: Store) -> Authenticator:
    """The credential sources `settings` configure: ate tokens always; the bootstrap token, an
    OIDC issuer and the node CA when set (without a node CA no atelet can register).

    Raises:
        ValueError: the bootstrap token is too short or its file unreadable; the node CA file is
            unreadable or holds no certificate.
    """
    oidc = None
    if settings.oidc_issuer:
        oidc = OidcVerifier(
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
            jwks_url=settings.oidc_jwks_url,
            username_claim=settings.oidc_username_claim,
            groups_claim=settings.oidc_groups_claim,
            group_grants=settings.oidc_group_grants,
        )
    nodes = None
    if settings.node_ca_file is not None:
        try:
            nodes = NodeCertificateVerifier(Path(settings.node_ca_file).read_bytes())
        except OSError as error:
            raise ValueError(f"node_ca_file {settings.node_ca_file}: {error.strerror}") from None
    return Authenticator(store, bootstrap_token=read_bootstrap_token(settings), oidc=oidc, nodes=nodes)


def create_app(settings: ApiSettings) -> FastAPI:
    """Build the app; the lifespan opens the store (migrating it) and the Temporal client."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await Store.connect(settings.database_url, max_size=20,
                                    command_timeout=settings.database_timeout_seconds,
                                    connect_timeout=settings.database_timeout_seconds)
        await store.migrate()
        store.actor_logs.bytes_per_actor = settings.log_bytes_per_actor
        app.state.store = store
        app.state.authenticator = authenticator_for(settings, store)
        app.state.temporal = await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace)
        app.state.settings = settings
        app.state.secret_box = load_secret_box(settings.secret_keys_file, settings.secret_keys)
        app.state.actor_changes = ActorChanges(settings.database_url)
        app.state.actor_changes.start()
        watcher = LivenessWatcher(
            store,
            lease_seconds=settings.node_lease_seconds,
            grace_seconds=settings.unreachable_grace_seconds,
            every_seconds=settings.liveness_check_seconds,
        )
        judge = IdleJudge(store, app.state.temporal, every_seconds=settings.idle_check_seconds)
        background: list[asyncio.Task[object]] = [
            asyncio.create_task(watcher.run()),
            asyncio.create_task(run_recovery(store, app.state.temporal)),
            asyncio.create_task(judge.run()),
            asyncio.create_task(prune_loop(store, settings.operation_history_days, settings.operation_history_per_actor)),
        ]
        if app.state.secret_box is not None:  # a rotation: seal again what an older key sealed
            background.append(asyncio.create_task(reseal_all(app.state.secret_box, store.secrets)))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await app.state.actor_changes.stop()
            await store.close()

    app = FastAPI(
        title="ate API",
        version="1",
        description="Actors on pre-started gVisor workers: atespaces, actor templates, actors, workers.",
        lifespan=lifespan,
        dependencies=[Depends(check_request_names)],
    )
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    for module in (atespaces, templates, actors, exec_route, logs, schedules, local_endpoint, workers, routers, operations,
                   tokens, secrets, snapshots):  # fmt: skip
        app.include_router(module.router)

    @app.get("/healthz", tags=["health"], **PUBLIC)
    async def healthz(store: StoreDep) -> dict[str, str]:
        """200 when the database answers."""
        await store.ping()
        return {"status": "ok"}

    @app.get("/metrics", tags=["health"], include_in_schema=False)
    async def metrics(store: StoreDep) -> Response:
        """Prometheus metrics; worker and room-queue gauges are read from Postgres at scrape time."""
        tally: Tally[tuple[str, str]] = Tally()
        for worker in await store.nodes.list_workers():
            state = "unavailable" if worker.state != "ACTIVE" else ("busy" if worker.holders else "idle")
            tally[(worker.pool, state)] += 1
        WORKERS.clear()
        for (pool, state), count in tally.items():
            WORKERS.labels(pool, state).set(count)
        waiting = await store.room_queue.waiting_by_pool()
        WAITING_FOR_ROOM.clear()
        for pool in {p for p, _ in tally} | set(waiting):  # every pool, 0 when none waits
            WAITING_FOR_ROOM.labels(pool).set(waiting.get(pool, 0))
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
