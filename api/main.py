"""`ate api-server`: loads settings from flags and ATE_* variables, serves the API with uvicorn."""

from __future__ import annotations

import argparse
import json
import logging

import uvicorn

from api.app import create_app
from api.errors import error_body
from api.settings import ApiSettings
from domain.reasons import Reason
from serving.protocol import guarded_http

log = logging.getLogger("ate.api")


def main(argv: list[str] | None = None) -> None:
    """`ate api-server [--host H] [--port P] [--database-url URL] [--temporal-address A] [--snapshot-location URI]`."""
    parser = argparse.ArgumentParser(prog="ate api-server", description="ate REST API server")
    parser.add_argument("--host", help="listen address (env ATE_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (env ATE_PORT, default 8080)")
    parser.add_argument("--database-url", help="PostgreSQL URL (env ATE_DATABASE_URL)")
    parser.add_argument("--temporal-address", help="Temporal host:port (env ATE_TEMPORAL_ADDRESS)")
    parser.add_argument("--namespace", help="Temporal namespace (env ATE_TEMPORAL_NAMESPACE)")
    parser.add_argument(
        "--snapshot-location",
        help="default snapshot storage: file:///abs/path, s3://bucket/prefix, gs://... or az://... "
        "(env ATE_SNAPSHOT_LOCATION)",
    )
    parser.add_argument(
        "--other-snapshot-location",
        action="append",
        dest="other_snapshot_locations",
        help="a further location templates may choose (repeatable; env ATE_OTHER_SNAPSHOT_LOCATIONS, a JSON list)",
    )
    parser.add_argument(
        "--node-lease-seconds",
        type=float,
        help="a node without a heartbeat for this long is lost: its workers UNAVAILABLE, its running actors "
        "UNREACHABLE (env ATE_NODE_LEASE_SECONDS, default 4)",
    )
    parser.add_argument(
        "--unreachable-grace-seconds",
        type=float,
        help="how long an UNREACHABLE actor waits for its node before it is CRASHED "
        "(env ATE_UNREACHABLE_GRACE_SECONDS, default 60)",
    )
    args = parser.parse_args(argv)
    overrides = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "database_url": args.database_url,
            "temporal_address": args.temporal_address,
            "temporal_namespace": args.namespace,
            "snapshot_location": args.snapshot_location,
            "other_snapshot_locations": args.other_snapshot_locations,
            "node_lease_seconds": args.node_lease_seconds,
            "unreachable_grace_seconds": args.unreachable_grace_seconds,
        }.items()
        if v is not None and v != [] and v != ""
    }
    settings = ApiSettings(**overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("settings: %s", settings.redacted())
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        http=guarded_http(settings.head_timeout_seconds, settings.max_head_bytes, error_json),
        log_level="warning",
        access_log=False,
    )


def error_json(status: int, message: str) -> tuple[bytes, bytes]:
    """A refusal the HTTP protocol writes before the app runs (431), in the one error format."""
    reason = Reason.HEADERS_TOO_LARGE if status == 431 else Reason.INVALID_ARGUMENT
    return b"application/json", json.dumps(error_body(reason, message)).encode()


if __name__ == "__main__":
    main()
