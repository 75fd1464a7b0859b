"""A stand-in for the ate API that `bench proxy` puts behind the router: every actor exists, is
public and RUNNING at one address. The benchmark measures the router's data path, so its control
path must answer at once (after the first request of each actor, the router serves from its cache).

`python -m bench.proxy_api --port P --upstream-port U`
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def build_app(upstream_port: int) -> Starlette:
    """The stand-in API: resume (RUNNING at 127.0.0.1), the template (its port), the actor, and
    the router replicas' heartbeats (a lease, no drains)."""

    async def resume(request: Request) -> JSONResponse:
        atespace, name = request.path_params["atespace"], request.path_params["name"]
        body: dict[str, Any] = {
            "atespace": atespace, "name": name, "template": "web", "state": "RUNNING", "version": 1,
            "worker": {"pool": "default", "name": "w-0", "node": "bench", "ip": "127.0.0.1"},
        }  # fmt: skip
        return JSONResponse(body)

    async def template(request: Request) -> JSONResponse:
        spec = {"containers": [{"name": "app", "image": "oci:app:latest", "port": upstream_port}]}
        return JSONResponse({"name": request.path_params["template"], "phase": "Ready", "spec": spec})

    async def actor(request: Request) -> JSONResponse:
        return JSONResponse({"name": request.path_params["name"], "template": "web", "state": "RUNNING"})

    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def heartbeat(request: Request) -> JSONResponse:  # a router replica's lease: no drain, ever
        return JSONResponse({"name": request.path_params["replica"], "drains": []})

    async def release(_request: Request) -> JSONResponse:
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/v1/atespaces/{atespace}/actors/{name}/resume", resume, methods=["POST"]),
            Route("/v1/atespaces/{atespace}/templates/{template}", template),
            Route("/v1/atespaces/{atespace}/actors/{name}", actor),
            Route("/v1/routers/{replica}", heartbeat, methods=["PUT"]),
            Route("/v1/routers/{replica}", release, methods=["DELETE"]),
            Route("/healthz", healthz),
        ]
    )


def main() -> None:
    """Serve the stand-in API on 127.0.0.1."""
    parser = argparse.ArgumentParser(prog="python -m bench.proxy_api")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(args.upstream_port), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
