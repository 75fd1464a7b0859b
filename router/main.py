"""Entry point of ``ate-router``: flags and settings, then the data path they choose, wired on
one decision core (router.core): the Python one (router.python) or nginx (router.nginx) with the
Python one relaying what nginx hands over. The two data paths never import each other; this
module puts them together."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from router.core.api_client import ApiClient
from router.settings import RouterSettings

if TYPE_CHECKING:
    from router.nginx.control import ControlService

log = logging.getLogger("router")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse command-line flags; each one overrides the matching setting.

    Args:
        argv: Arguments without the program name (None: ``sys.argv[1:]``).

    Returns:
        The parsed flags (unset ones are None).
    """
    parser = argparse.ArgumentParser(prog="ate-router", description="HTTP entry point for actor traffic.")
    parser.add_argument("--listen", help="host:port for actor traffic (default 127.0.0.1:8000)")
    parser.add_argument("--api-server", help="ate REST API base URL (default http://127.0.0.1:8080)")
    parser.add_argument(
        "--api-token-file", type=Path, help="file with the router's API token, role router (env ATE_ROUTER_API_TOKEN_FILE)"
    )
    parser.add_argument("--database-url", help="Postgres DSN for cache invalidation (LISTEN)")
    parser.add_argument("--domain", help="actor host domain: <name>.<atespace>.actors.<domain>")
    parser.add_argument(
        "--parked-request-budget",
        type=float,
        help="seconds a request may wait for its actor to be RUNNING (default 5)",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        dest="trusted_proxies",
        help="network (CIDR) of a proxy in front of the router whose X-Forwarded-For is kept (repeatable; "
        "env ATE_ROUTER_TRUSTED_PROXIES, a JSON list)",
    )
    parser.add_argument("--max-parked", type=int, help="requests allowed to wait at once (default 1000)")
    parser.add_argument("--metrics-listen", help="host:port for /metrics (default 127.0.0.1:9000)")
    parser.add_argument(
        "--head-timeout",
        type=float,
        help="seconds a client may take to send a request head before it is disconnected (default 10)",
    )
    parser.add_argument("--connect-timeout", type=float, help="seconds to connect to a worker (default 5)")
    parser.add_argument(
        "--response-head-timeout",
        type=float,
        help="seconds a worker may take to start its answer before the client gets 504 (default 120)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        help="seconds a client's body or a worker's answer may stay silent before the request is cut off (default 300)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        help="seconds a whole request may last, parking included, before it is cut off (default 3600)",
    )
    parser.add_argument(
        "--data-path",
        choices=("python", "nginx"),
        help="what proxies requests: python (this process, the default) or nginx (nginx with its Lua "
        "module, supervised by this process, which keeps resume, parking, access and error texts)",
    )
    parser.add_argument("--nginx-workers", type=int, help="nginx worker processes with --data-path nginx (default 1)")
    parser.add_argument("--nginx-run-dir", type=Path, help="directory for nginx's config, sockets and temp files")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds the requests in flight to an actor may take to finish when the control plane drains it "
        "before a checkpoint; then they are cut off (default 10)",
    )
    parser.add_argument(
        "--stop-grace",
        type=int,
        help="seconds the requests in flight may take to finish when the router stops (SIGTERM); then they "
        "are cut off, with a 503 where no answer began (default 10; keep it below the pod's "
        "terminationGracePeriodSeconds)",
    )
    parser.add_argument(
        "--replica-name",
        help="this router replica's name towards the control plane (a DNS label; default router-<host>-<pid>-<hex>)",
    )
    parser.add_argument(
        "--open-streams-keep-awake",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="an open but silent WebSocket or event stream keeps its actor awake (counts as a request in "
        "flight while open); default off: it counts as activity only while it moves bytes, and an idle "
        "action closes it (env ATE_ROUTER_OPEN_STREAMS_KEEP_AWAKE)",
    )
    parser.add_argument("--log-level", default="info", help="log level (default info)")
    return parser.parse_args(argv)


def build_settings(args: argparse.Namespace) -> RouterSettings:
    """Merge environment settings with flag overrides (the flags win), validated.

    Args:
        args: Flags from ``parse_args``.

    Returns:
        The settings in force.

    Raises:
        SystemExit: A flag or ``ATE_ROUTER_*`` variable is out of range or malformed; the
            message names the flag (or the variable) and what is allowed.
    """
    overrides = {
        "listen": args.listen,
        "api_server": args.api_server,
        "api_token_file": args.api_token_file,
        "database_url": args.database_url,
        "domain": args.domain,
        "parked_request_budget_seconds": args.parked_request_budget,
        "max_parked": args.max_parked,
        "trusted_proxies": args.trusted_proxies,
        "metrics_listen": args.metrics_listen,
        "head_timeout_seconds": args.head_timeout,
        "upstream_connect_timeout_seconds": args.connect_timeout,
        "response_head_timeout_seconds": args.response_head_timeout,
        "idle_timeout_seconds": args.idle_timeout,
        "request_timeout_seconds": args.request_timeout,
        "data_path": args.data_path,
        "nginx_workers": args.nginx_workers,
        "nginx_run_dir": args.nginx_run_dir,
        "drain_timeout_seconds": args.drain_timeout,
        "stop_grace_seconds": args.stop_grace,
        "replica_name": args.replica_name,
        "open_streams_keep_awake": args.open_streams_keep_awake,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return RouterSettings(**given)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            if field in given:
                flag = _FLAG_OF.get(field, "--" + field.replace("_", "-"))
                where = f"{flag} {given[field]!r}"
            else:
                where = f"ATE_ROUTER_{field.upper()}"
            problems.append(f"{where}: {error['msg']}")
        raise SystemExit("router: " + "; ".join(problems)) from None


_FLAG_OF = {
    "parked_request_budget_seconds": "--parked-request-budget",
    "head_timeout_seconds": "--head-timeout",
    "upstream_connect_timeout_seconds": "--connect-timeout",
    "response_head_timeout_seconds": "--response-head-timeout",
    "idle_timeout_seconds": "--idle-timeout",
    "request_timeout_seconds": "--request-timeout",
    "drain_timeout_seconds": "--drain-timeout",
    "stop_grace_seconds": "--stop-grace",
    "trusted_proxies": "--trusted-proxy",
}
"""The flag of each setting whose flag is not its name with dashes."""


def main(argv: list[str] | None = None) -> None:
    """Run ``ate-router``.

    Args:
        argv: Command-line arguments without the program name (None: ``sys.argv[1:]``).
    """
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = build_settings(args)
    log.info("settings: %s", settings.redacted())
    if settings.data_path == "nginx":
        from router.nginx.run import serve_nginx
        from router.nginx.supervisor import NginxError

        try:
            asyncio.run(serve_nginx(settings, nginx_control_service))
        except NginxError as exc:
            raise SystemExit(f"router: {exc}") from None
        return
    from router.python.serve import serve, uvicorn_config

    config = uvicorn_config(settings)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve(settings, config))


def nginx_control_service(
    settings: RouterSettings, admin_socket: str, api_client: ApiClient | None = None
) -> ControlService:
    """The nginx data path's control service, wired: one decision core whose cache and drains
    reach nginx (admin socket ``admin_socket``), and the Python data path's ``ActorRouter`` on
    that core for the requests nginx relays.

    Args:
        settings: Settings in force.
        admin_socket: nginx's admin socket path.
        api_client: Optional API client (built from settings when omitted).

    Returns:
        The control service (an ASGI app).
    """
    from router.nginx.admin import NginxAdmin
    from router.nginx.control import ControlService, NotifyingCache
    from router.nginx.drain import NginxDrain
    from router.nginx.metrics import RelayedTally
    from router.python.app import ActorRouter, Mechanics

    admin = NginxAdmin(admin_socket)
    mechanics = Mechanics.new(settings)
    core = mechanics.core(settings, api_client, cache=NotifyingCache(admin), elsewhere=NginxDrain(admin))
    relayed = RelayedTally()
    return ControlService(core, admin, ActorRouter(core, mechanics, observe=relayed.observe), relayed)
