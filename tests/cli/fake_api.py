"""A tiny in-memory stand-in for the ate REST API, enough to drive the CLI end to end.

It answers with the same shapes and the same error JSON (`{"reason","message","details"}`)
as docs/rest-api.md describes.
"""

from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

CREATED_AT = "2026-01-01T00:00:00Z"


class ApiFailure(Exception):
    """Raised by handlers; rendered as the API's error JSON."""

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.details = status, reason, message, details or {}


@dataclass
class Store:
    """The fake API's state; tests may poke at it."""

    atespaces: dict[str, dict[str, Any]] = field(default_factory=dict)
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    actors: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    workers: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    outcomes: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)
    """Phase and reason a Pending template shows from its next GET on."""
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)
    """GETs a template stays Pending for, its golden snapshot waiting for a free worker."""


def build_app() -> FastAPI:
    """The fake API app; its state is `app.state.store`."""
    app = FastAPI()
    store = Store()
    app.state.store = store

    @app.exception_handler(ApiFailure)
    async def on_failure(_request: Request, exc: ApiFailure) -> JSONResponse:
        body = {"reason": exc.reason, "message": exc.message, "details": exc.details}
        return JSONResponse(body, status_code=exc.status)

    @app.middleware("http")
    async def record(request: Request, call_next: Any) -> Any:
        store.requests.append((request.method, request.url.path, request.url.query))
        return await call_next(request)

    def atespace_or_404(name: str) -> dict[str, Any]:
        if name not in store.atespaces:
            raise ApiFailure(404, "NotFound", f"atespace {name} not found")
        return store.atespaces[name]

    def actor_or_404(atespace: str, name: str) -> dict[str, Any]:
        atespace_or_404(atespace)
        actor = store.actors.get((atespace, name))
        if actor is None:
            raise ApiFailure(404, "NotFound", f"actor {atespace}/{name} not found")
        return actor

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/atespaces", status_code=201)
    async def create_atespace(body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        if name in store.atespaces:
            raise ApiFailure(409, "AlreadyExists", f"atespace {name} already exists")
        if name != name.lower():
            raise ApiFailure(400, "InvalidArgument", f"name {name!r} is not a DNS-1123 label")
        store.atespaces[name] = {"name": name, "created_at": CREATED_AT}
        return store.atespaces[name]

    @app.get("/v1/atespaces")
    async def list_atespaces() -> dict[str, Any]:
        return {"items": list(store.atespaces.values())}

    @app.get("/v1/atespaces/{atespace}")
    async def get_atespace(atespace: str) -> dict[str, Any]:
        return atespace_or_404(atespace)

    @app.delete("/v1/atespaces/{atespace}", status_code=204)
    async def delete_atespace(atespace: str) -> Response:
        atespace_or_404(atespace)
        if any(a == atespace for a, _ in store.actors) or any(a == atespace for a, _ in store.templates):
            raise ApiFailure(409, "FailedPrecondition", f"atespace {atespace} is not empty")
        del store.atespaces[atespace]
        return Response(status_code=204)

    @app.post("/v1/atespaces/{atespace}/templates", status_code=201)
    async def create_template(atespace: str, body: dict[str, Any], wait: bool = False) -> dict[str, Any]:
        atespace_or_404(atespace)
        key = (atespace, body["name"])
        if key in store.templates:
            raise ApiFailure(409, "AlreadyExists", f"template {atespace}/{body['name']} already exists")
        spec = body["spec"]
        failed = spec.get("containers") is None
        outcome = ("Failed", "spec.containers: at least one container is required") if failed else ("Ready", None)
        template = {
            "atespace": atespace,
            "name": body["name"],
            "spec": spec,
            "phase": outcome[0] if wait else "Pending",
            "reason": outcome[1] if wait else None,
            "golden_snapshot": None,
            "created_at": CREATED_AT,
        }
        store.templates[key] = template
        if not wait and body["name"].startswith("slow"):  # "slow*" wait for a worker for 3 GETs
            store.waiting[key] = 3
            store.outcomes[key] = outcome
        elif not wait and not body["name"].startswith("later"):  # "later*" stay Pending
            store.outcomes[key] = outcome
        return dict(template)

    @app.get("/v1/operations")
    async def running_operations(atespace: str | None = None) -> dict[str, Any]:
        items = [
            {"workflow_id": f"template/{a}/{n}", "operation": "GoldenSnapshot", "atespace": a, "actor": None,
             "started_at": CREATED_AT,
             "step": f"waiting for a free worker ({10 * (3 - left)} s so far): no worker has room for the golden "
                     f"boot of template {a}/{n}: 2 workers: 2 full"}
            for (a, n), left in store.waiting.items() if left > 0 and atespace in (None, a)
        ]  # fmt: skip
        return {"items": items}

    @app.get("/v1/atespaces/{atespace}/templates")
    async def list_templates(atespace: str) -> dict[str, Any]:
        atespace_or_404(atespace)
        return {"items": [t for (a, _), t in store.templates.items() if a == atespace]}

    @app.get("/v1/atespaces/{atespace}/templates/{name}")
    async def get_template(atespace: str, name: str) -> dict[str, Any]:
        atespace_or_404(atespace)
        if (atespace, name) not in store.templates:
            raise ApiFailure(404, "NotFound", f"template {atespace}/{name} not found")
        template = store.templates[(atespace, name)]
        if store.waiting.get((atespace, name), 0) > 0:
            store.waiting[(atespace, name)] -= 1
            return template
        outcome = store.outcomes.pop((atespace, name), None)
        if outcome is not None:
            template.update(phase=outcome[0], reason=outcome[1])
        return template

    @app.post("/v1/atespaces/{atespace}/actors", status_code=201)
    async def create_actor(atespace: str, body: dict[str, Any]) -> dict[str, Any]:
        atespace_or_404(atespace)
        key = (atespace, body["name"])
        if key in store.actors:
            raise ApiFailure(409, "AlreadyExists", f"actor {atespace}/{body['name']} already exists")
        actor = {
            "atespace": atespace,
            "name": body["name"],
            "template": body["template"],
            "state": "SUSPENDED",
            "version": 1,
            "worker_selector": body.get("worker_selector") or {},
            "worker": None,
            "latest_snapshot": None,
            "created_at": CREATED_AT,
            "updated_at": CREATED_AT,
        }
        store.actors[key] = actor
        return actor

    def page(items: list[dict[str, Any]], page_size: int, page_token: str | None) -> dict[str, Any]:
        page_size = min(page_size, 3)  # small pages, so that clients must follow the token
        start = int(page_token or 0)
        chunk = items[start : start + page_size]
        nxt = str(start + page_size) if start + page_size < len(items) else None
        return {"items": chunk, "next_page_token": nxt}

    @app.get("/v1/actors")
    async def list_all_actors(atespace: str | None = None, page_size: int = 100, page_token: str | None = None) -> Any:
        items = [a for (s, _), a in sorted(store.actors.items()) if atespace in (None, s)]
        return page(items, page_size, page_token)

    @app.get("/v1/atespaces/{atespace}/actors")
    async def list_actors(atespace: str, page_size: int = 100, page_token: str | None = None) -> Any:
        atespace_or_404(atespace)
        items = [a for (s, _), a in sorted(store.actors.items()) if s == atespace]
        return page(items, page_size, page_token)

    @app.get("/v1/atespaces/{atespace}/actors/{name}")
    async def get_actor(atespace: str, name: str) -> dict[str, Any]:
        return actor_or_404(atespace, name)

    @app.delete("/v1/atespaces/{atespace}/actors/{name}", status_code=204)
    async def delete_actor(atespace: str, name: str) -> Response:
        actor = actor_or_404(atespace, name)
        if actor["state"] != "SUSPENDED":
            raise ApiFailure(
                409, "FailedPrecondition", f"actor {atespace}/{name} is not suspended (state: {actor['state']})"
            )
        del store.actors[(atespace, name)]
        return Response(status_code=204)

    @app.post("/v1/atespaces/{atespace}/actors/{name}/resume")
    async def resume(atespace: str, name: str) -> dict[str, Any]:
        actor = actor_or_404(atespace, name)
        if actor.get("template") == "busy":
            raise ApiFailure(
                409,
                "OperationInProgress",
                "another operation is in progress for this actor",
                {"operation": "SuspendActor"},
            )
        if actor["state"] != "RUNNING":
            actor.update(
                state="RUNNING",
                version=actor["version"] + 1,
                worker={"pool": "default", "name": "w-0", "node": "vm", "ip": "10.77.0.2"},
            )
        return actor

    @app.post("/v1/atespaces/{atespace}/actors/{name}/suspend")
    async def suspend(atespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        actor = actor_or_404(atespace, name)
        if actor["state"] != "SUSPENDED":
            actor.update(state="SUSPENDED", version=actor["version"] + 1, worker=None)
        return actor

    @app.get("/v1/workers")
    async def workers() -> dict[str, Any]:
        return {"items": store.workers}

    return app
