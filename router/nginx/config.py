"""The nginx configuration of the router's nginx data path, generated from ``RouterSettings``.

How the router's settings reach nginx:

- ``head_timeout_seconds`` -> ``client_header_timeout`` and ``keepalive_timeout`` (a client must
  send its head within it, from connecting or from the end of its previous request).
- ``upstream_connect_timeout_seconds``, ``response_head_timeout_seconds``,
  ``idle_timeout_seconds`` and ``request_timeout_seconds`` -> the Lua exchange with the worker
  (router/nginx/ate_exchange.lua), each its own as on the Python data path; the idle timeout
  also -> ``client_body_timeout`` and ``send_timeout`` (towards the client).
- ``max_head_bytes`` -> ``large_client_header_buffers 1 <max_head_bytes>``; a larger head (nginx's
  414 or 494) gets the Python path's 431 and text (the status line has no reason phrase: nginx
  knows none for 431).
- ``trusted_proxies`` -> a ``geo`` block: the client's ``X-Forwarded-For`` is kept (and the peer
  appended) only from those networks, replaced by the peer otherwise.
- the DNS-label rule (``domain.labels.DNS_LABEL``, the project's one) -> ``ate.configure`` in
  ``init_by_lua_block``: nginx's target check uses that very pattern, it keeps no copy of it.

The exchange with a worker is Lua's (content phase, a cosocket, ``Connection: close``, the answer
streamed, a ``Content-Length`` body streamed both ways at once). WebSocket upgrades and requests
asking for an event stream (``Accept: text/event-stream``) are relayed (location ``@relay``) to
the control service's Python router, which proxies them as the Python data path does: a drain
or a stop ends them with a close frame and a reason, or the end of the stream. So are requests
with a chunked body (streamed uploads), which Lua cannot read: a stalled one is answered 408.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from domain.labels import DNS_LABEL
from router.core.access import REVIEW_SECONDS
from router.core.metrics import DURATION_BUCKETS
from router.settings import RouterSettings, split_host_port

LUA_DIR = Path(__file__).resolve().parent
"""Where ``ate_router.lua`` and its modules (``ate_*.lua``) are (package data)."""

MODULES = ("/usr/lib/nginx/modules/ndk_http_module.so", "/usr/lib/nginx/modules/ngx_http_lua_module.so")
"""Debian's nginx Lua module and the devel kit it needs (libnginx-mod-http-lua)."""

PARK_MARGIN_SECONDS = 30
"""How much longer than the parked-request budget nginx waits for the control service."""

CONTROL_KEEPALIVE_SECONDS = 4
"""How long nginx keeps an idle connection to the control service (uvicorn closes its own after
5 s: a connection uvicorn closes just as nginx sends a request on it would fail that request)."""

RELAY_MARGIN_SECONDS = 30
"""How much longer than the Python router's own read timeouts nginx waits on a relayed request."""

RELAY_PREFIX = "/relay"
"""The path under which nginx relays a request to the control service (router.nginx.control)."""


@dataclass(frozen=True, slots=True)
class NginxLayout:
    """Where the nginx data path keeps its files and reaches its peers.

    Attributes:
        run_dir: Directory of nginx.conf, the pid file, temp files and the admin socket.
        control: The control service: ``unix:/path`` or ``host:port``.
        access_log: Where nginx writes one line per request (``/dev/stderr`` by default; None:
            nowhere, as the Python data path logs none above log level info).
        workers: nginx worker processes.
        user: The ``user`` directive (only when nginx starts as root), or None.
    """

    run_dir: Path
    control: str
    access_log: str | None = "/dev/stderr"
    workers: int = 1
    user: str | None = None

    @property
    def admin_socket(self) -> Path:
        """The unix socket of nginx's admin server (invalidate, flush, stats, recent, inflight)."""
        return self.run_dir / "admin.sock"

    @property
    def conf(self) -> Path:
        """The generated nginx.conf."""
        return self.run_dir / "nginx.conf"


def _listen(value: str) -> str:
    host, port = split_host_port(value)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _seconds(value: float) -> str:
    return f"{max(int(value * 1000), 1)}ms"


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


BODY_BUFFER_BYTES = 64 * 1024
"""How much of a request body nginx holds in memory before it writes the rest to a temp file."""


def render(settings: RouterSettings, layout: NginxLayout) -> str:
    """The nginx.conf text for ``settings``.

    Args:
        settings: The router's settings (listen address, domain, timeouts, trusted proxies...).
        layout: Files and peers (see ``NginxLayout``).

    Returns:
        A complete nginx.conf (``daemon off``: the router supervises nginx's master process).
    """
    run = layout.run_dir
    control = layout.control if layout.control.startswith("unix:") else _listen(layout.control)
    trusted = "\n".join(f"    {network} 1;" for network in settings.trusted_proxies)
    buckets = ", ".join(f"{b:g}" for b in DURATION_BUCKETS)
    user = f"user {layout.user};\n" if layout.user else ""
    park = int(settings.parked_request_budget_seconds) + PARK_MARGIN_SECONDS
    head_bytes = max(settings.max_head_bytes, 1024)
    # The Python router times a relayed request out itself; nginx waits longer for it: parked
    # (twice the budget when a drain held it), connecting, then the longer read timeout.
    relay_seconds = int(
        2 * settings.parked_request_budget_seconds
        + settings.drain_timeout_seconds
        + settings.upstream_connect_timeout_seconds
        + max(settings.response_head_timeout_seconds, settings.idle_timeout_seconds)
    )
    relay_seconds += RELAY_MARGIN_SECONDS
    modules = "".join(f"load_module {m};\n" for m in MODULES)
    return f"""# generated by router.nginx.config for ate-router --data-path nginx; do not edit
{modules}{user}daemon off;
master_process on;
worker_processes {layout.workers};
worker_shutdown_timeout {settings.stop_grace_seconds}s;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  lua_package_path "{LUA_DIR}/?.lua;;";
  lua_shared_dict ate_routes 32m;
  lua_shared_dict ate_stats 8m;
  lua_shared_dict ate_control 8m;
  lua_shared_dict ate_active 4m;
  init_by_lua_block {{
    ate = require("ate_router")
    ate_admin = require("ate_admin")
    ate.configure({{ domain = {_lua_string(settings.domain)}, buckets = {{ {buckets} }},
                    token_seconds = {REVIEW_SECONDS:g},
                    request_seconds = {settings.request_timeout_seconds:g},
                    connect_seconds = {settings.upstream_connect_timeout_seconds:g},
                    head_seconds = {settings.response_head_timeout_seconds:g},
                    idle_seconds = {settings.idle_timeout_seconds:g},
                    max_head_bytes = {settings.max_head_bytes},
                    label = {_lua_string(DNS_LABEL.pattern)} }})
  }}
  client_body_temp_path {run}/body;
  proxy_temp_path {run}/proxy;
  fastcgi_temp_path {run}/fastcgi;
  uwsgi_temp_path {run}/uwsgi;
  scgi_temp_path {run}/scgi;
  server_tokens off;
  underscores_in_headers on;
  lua_check_client_abort on;
  lua_transform_underscores_in_response_headers off;
  lua_socket_log_errors off;
  recursive_error_pages on;
  log_format ate 'request $ate_request_id $http_ate_target_actor $request_method $uri $status $ate_outcome_logged $request_time s';
  access_log {f"{layout.access_log} ate" if layout.access_log else "off"};
  geo $ate_trusted {{
    default 0;
{trusted}
  }}
  map $ate_trusted $ate_forwarded_for {{
    1 $proxy_add_x_forwarded_for;
    default $remote_addr;
  }}
  map $status $ate_outcome_logged {{
    499 client_gone;
    default $ate_outcome;
  }}
  upstream ate_control {{
    server {control};
    keepalive 32;
    keepalive_timeout {CONTROL_KEEPALIVE_SECONDS}s;  # below uvicorn's 5 s: nginx closes first
  }}
  server {{
    listen {_listen(settings.listen)} backlog=4096;
    client_header_timeout {_seconds(settings.head_timeout_seconds)};
    keepalive_timeout {_seconds(settings.head_timeout_seconds)};
    client_body_timeout {_seconds(settings.idle_timeout_seconds)};
    send_timeout {_seconds(settings.idle_timeout_seconds)};
    client_header_buffer_size 1k;
    large_client_header_buffers 1 {head_bytes};
    client_max_body_size 0;
    client_body_buffer_size {BODY_BUFFER_BYTES};
    error_page 494 414 =431 /_ate/head_too_large;
    set $ate_request_id "";
    set $ate_outcome "";
    set $ate_relay_connection "";
    set $ate_relay_upgrade "";

    location / {{
      access_by_lua_block {{ ate.access() }}
      content_by_lua_block {{ ate.proxy() }}
      log_by_lua_block {{ ate.log() }}
    }}
    location @relay {{
      proxy_pass http://ate_control{RELAY_PREFIX}$request_uri;
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout {relay_seconds}s;
      proxy_send_timeout {relay_seconds}s;
      proxy_pass_header Date;
      proxy_pass_header Server;
      proxy_set_header Host $http_host;
      proxy_set_header Connection $ate_relay_connection;
      proxy_set_header Upgrade $ate_relay_upgrade;
      proxy_set_header X-Ate-Peer $remote_addr:$remote_port;
      proxy_set_header X-Ate-Connection $http_connection;
      client_body_timeout {relay_seconds}s;
      error_page 502 504 = @control_down;
    }}
    location @control_down {{
      content_by_lua_block {{ ate.control_down() }}
      header_filter_by_lua_block {{ ate.header_filter() }}
      log_by_lua_block {{ ate.log() }}
    }}
    location = /_ate/head_too_large {{
      internal;
      content_by_lua_block {{ ate.head_too_large() }}
    }}
    location @statusz {{
      proxy_pass http://ate_control/statusz$is_args$args;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      header_filter_by_lua_block {{ ate.header_filter() }}
    }}
    location = /_ate/route {{
      internal;
      proxy_pass http://ate_control/route;
      proxy_http_version 1.1;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header Connection "";
      proxy_set_header Upgrade "";
      proxy_set_header Expect "";
      proxy_read_timeout {park}s;
    }}
    location = /_ate/failed {{
      internal;
      proxy_pass http://ate_control/failed;
      proxy_http_version 1.1;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header Connection "";
      proxy_set_header Upgrade "";
      proxy_set_header Expect "";
    }}
  }}
  server {{
    listen unix:{layout.admin_socket};
    access_log off;
    location = /invalidate {{ content_by_lua_block {{ ate_admin.invalidate() }} }}
    location = /flush {{ content_by_lua_block {{ ate_admin.flush() }} }}
    location = /stats {{ content_by_lua_block {{ ate_admin.stats() }} }}
    location = /recent {{ content_by_lua_block {{ ate_admin.recent() }} }}
    location = /inflight {{ content_by_lua_block {{ ate_admin.inflight() }} }}
    location = /active {{ content_by_lua_block {{ ate_admin.active() }} }}
    location = /drain {{ content_by_lua_block {{ ate_admin.drain() }} }}
    location = /cut {{ content_by_lua_block {{ ate_admin.cut() }} }}
    location = /lease {{ content_by_lua_block {{ ate_admin.lease() }} }}
    location / {{ return 404; }}
  }}
}}
"""


def write(settings: RouterSettings, layout: NginxLayout) -> Path:
    """Write nginx.conf (and the temp directories nginx wants) into ``layout.run_dir``.

    Returns:
        The path of nginx.conf.
    """
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (layout.run_dir / name).mkdir(exist_ok=True)
    layout.conf.write_text(render(settings, layout))
    return layout.conf
