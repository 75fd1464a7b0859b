"""The node's ``squid.conf``, rendered from a ``SquidPlan`` (a pure function, ``render``).

What the configuration makes Squid do (``atelet.egress`` has the whole path):

- listen on each worker's gateway only, three ports each: the explicit proxy (``ssl-bump``: a
  CONNECT can be terminated), intercepted plain HTTP and intercepted TLS (``intercept``, the
  redirected ports 80 and 443 of ``atelet.egress.rules``);
- ask the atelet about every request, CONNECT and intercepted TLS connection (``ate_policy``,
  an ``external_acl_type`` helper with ``ttl=0``: no answer is reused), deny what it denies
  with a 403 page carrying its message (``ERR_ATE_EGRESS``), and deny any destination that
  resolves into the protected networks (``ate_protected``, a ``dst`` ACL: ``ERR_ATE_PROTECTED``);
- intercepted TLS: let the fake CONNECT of step 1 through (nothing is known yet), peek at the
  ClientHello, then ask again with the SNI: ``terminate`` a denied one (the connection closes),
  ``bump`` one whose host has a credential (the helper annotates ``ate_bump``), ``splice`` the
  rest (the actor's TLS goes through untouched);
- verify the upstream of a bumped connection against ``upstream_ca`` only, and refuse a name
  whose DNS answer does not hold the address an intercepted sandbox dialled (``host_verify_strict``:
  409), so the ``Host`` or SNI of an intercepted connection cannot pick another address;
- add one header per known credential header name (``HeaderSlots``), only where the helper
  annotated its value (``ate_cred_<slot>``), removing any the actor sent under that name;
- log one line per transaction to the atelet (``ACCESS_FORMAT``, through ``logfile_daemon``:
  ``atelet.egress.access_log``); no cache, no ICP/HTCP, no ``Via`` nor ``X-Forwarded-For``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from atelet.egress.in_flight import IDLE_CONNECTION_SECONDS
from domain.egress import ALWAYS_PROTECTED, IpNetwork

HELPER_FORMAT = "%>a %>la %>lp %>rd %>rP %ssl::>sni %>rm"
"""The fields of each helper lookup (``atelet.egress.decision.FIELDS``)."""

ACCESS_FIELDS = (
    ("time", "%ts.%03tu"), ("client", "%>a"), ("actor", "%#{ate_actor}note"), ("status", "%Ss"),
    ("code", "%>Hs"), ("method", "%>rm"), ("host", "%#>rd"), ("port", "%>rP"), ("sni", "%#ssl::>sni"),
    ("bump", "%ssl::bump_mode"), ("sent", "%>st"), ("received", "%<st"), ("error", "%err_code"),
    ("rule", "%#{ate_rule}note"),
)  # fmt: skip
"""The access log's fields (name, Squid logformat code), space-separated in this order."""
ACCESS_FORMAT = " ".join(code for _, code in ACCESS_FIELDS)

SQUID_USER = "proxy"
"""The user Squid drops to once it bound its ports (Debian's build default)."""
DENIED_PAGE = "ERR_ATE_EGRESS"
PROTECTED_PAGE = "ERR_ATE_PROTECTED"
ERROR_PAGES = {
    DENIED_PAGE: "ate egress refused this request: %o\n",
    PROTECTED_PAGE: "ate egress refused this request: %H resolves to a protected address (this node, the control "
    "plane, the workers, loopback, link-local or metadata), never reached\n",
}
"""Squid error page templates of ate's own (``%o``: the helper's message; ``%H``: the host)."""


@dataclass(frozen=True)
class SquidPlan:
    """What ``render`` needs.

    Attributes:
        node: the node's name (in a comment).
        gateways: every worker's gateway address (Squid listens there only).
        proxy_port: the explicit proxy port at each gateway.
        http_port: the intercepted-HTTP port at each gateway.
        https_port: the intercepted-TLS port at each gateway.
        run_dir: the dir Squid's user reads and writes (pid, cache.log, certificate db, errors).
        ca_cert: PEM of the CA that signs the certificates of bumped connections.
        ca_key: its key (read by Squid as root, at start and reconfigure).
        upstream_ca: PEM bundle Squid trusts for its TLS to the upstreams of bumped connections.
        relay: the helper and log daemon program (``atelet.egress.relay`` as a script).
        socket: the atelet's decision socket (the relay's argument).
        certgen: Squid's ``security_file_certgen``.
        header_names: the credential header names, by slot.
        protected: networks never reached (``ALWAYS_PROTECTED`` is added).
        exceptions: networks let through even if protected.
        dns_nameservers: the DNS servers Squid asks; empty: /etc/resolv.conf's.
    """

    node: str
    gateways: tuple[str, ...]
    proxy_port: int
    http_port: int
    https_port: int
    run_dir: Path
    ca_cert: Path
    ca_key: Path
    upstream_ca: Path
    relay: Path
    socket: Path
    certgen: Path
    header_names: tuple[str, ...] = ()
    protected: tuple[IpNetwork, ...] = ()
    exceptions: tuple[IpNetwork, ...] = ()
    dns_nameservers: tuple[str, ...] = ()

    @property
    def errors_dir(self) -> Path:
        """Squid's ``error_directory``: its templates and ``ERROR_PAGES``."""
        return self.run_dir / "errors"

    @property
    def hosts_file(self) -> Path:
        """Squid's hosts file (``atelet.egress.squid.hosts_text``: the operator's, or /etc/hosts,
        and the workers' addresses)."""
        return self.run_dir / "hosts"

    @property
    def certificate_db(self) -> Path:
        """The cache of generated certificates (``security_file_certgen -s``)."""
        return self.run_dir / "ssl_db"

    @property
    def pid_file(self) -> Path:
        """Squid's pid file."""
        return self.run_dir / "squid.pid"

    @property
    def cache_log(self) -> Path:
        """Squid's own log."""
        return self.run_dir / "cache.log"


def collapsed(networks: Sequence[IpNetwork]) -> list[IpNetwork]:
    """``networks`` without overlaps (IPv4 first): Squid ignores the wider of two overlapping
    entries of an ACL ("to keep splay tree searching predictable"), which would leave a
    network out."""
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    return [*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6)]


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def _mapped(network: IpNetwork) -> bool:
    """Whether ``network`` lies in the IPv4-mapped IPv6 range."""
    return isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED)


def _networks(networks: Sequence[IpNetwork]) -> str:
    return " ".join(str(n) for n in collapsed(networks))


def render(plan: SquidPlan) -> str:
    """The ``squid.conf`` text of ``plan``.

    Raises:
        ValueError: no gateway (Squid would listen nowhere).
    """
    if not plan.gateways:
        raise ValueError("the egress proxy needs at least one worker gateway to listen on")
    tls = (f"tls-cert={plan.ca_cert} tls-key={plan.ca_key} generate-host-certificates=on "
           "dynamic_cert_mem_cache_size=4MB")  # fmt: skip
    lines = [
        f"# The egress proxy of node {plan.node}, rendered by the atelet (atelet.egress): do not edit.",
        "# Ports: on each worker's gateway only.",
    ]
    for index, gateway in enumerate(plan.gateways):
        lines += [
            f"http_port {gateway}:{plan.proxy_port} ssl-bump {tls} name=ate-proxy-{index}",
            f"http_port {gateway}:{plan.http_port} intercept name=ate-http-{index}",
            f"https_port {gateway}:{plan.https_port} intercept ssl-bump {tls} name=ate-https-{index}",
        ]
    intercepted_tls = " ".join(f"ate-https-{i}" for i in range(len(plan.gateways)))
    # Squid keeps IPv4 addresses as IPv4-mapped IPv6: an entry for the mapped range would match
    # every IPv4 destination. The decision refuses a mapped literal already (domain.egress).
    protected = _networks([n for n in (*ALWAYS_PROTECTED, *plan.protected) if not _mapped(n)])
    lines += [
        "",
        "# Squid itself: no cache, no peers, no disclosure of the client.",
        f"cache_effective_user {SQUID_USER}",
        f"pid_filename {plan.pid_file}",
        f"cache_log {plan.cache_log}",
        "cache_store_log none",
        "coredump_dir none",  # no core file: it would hold secrets' values and the CA's key
        f"error_directory {plan.errors_dir}",
        "visible_hostname ate-egress",
        "cache deny all",
        "cache_mem 8 MB",
        "pinger_enable off",
        "netdb_filename none",
        "icp_port 0",
        "htcp_port 0",
        "shutdown_lifetime 1 seconds",
        f"client_idle_pconn_timeout {IDLE_CONNECTION_SECONDS} seconds",
        "via off",
        "forwarded_for delete",
        "httpd_suppress_version_string on",
        "host_verify_strict on",
        "on_unsupported_protocol tunnel all",
        f"hosts_file {plan.hosts_file}",
        *([f"dns_nameservers {' '.join(plan.dns_nameservers)}"] if plan.dns_nameservers else []),
        f"sslcrtd_program {plan.certgen} -s {plan.certificate_db} -M 4MB",
        "sslcrtd_children 4 startup=1 idle=1",
        f"tls_outgoing_options cafile={plan.upstream_ca} default-ca=off",
        "",
        "# One access log line per transaction, to the atelet (atelet.egress.access_log).",
        f"logfile_daemon {plan.relay}",
        f"logformat ate {ACCESS_FORMAT}",
        f"access_log daemon:{plan.socket} ate",
        "",
        "# The atelet decides (atelet.egress.decision); ttl=0: every lookup is asked.",
        f"external_acl_type ate_policy ttl=0 negative_ttl=0 concurrency=64 children-max=4 children-startup=1 "
        f"children-idle=1 {HELPER_FORMAT} {plan.relay} acl {plan.socket} {len(plan.header_names)}",
        "acl ate_policy external ate_policy",
        "acl ate_bump note ate_bump 1",
        f"acl ate_protected dst {protected}",
        *([f"acl ate_excepted dst {_networks(plan.exceptions)}"] if plan.exceptions else []),
        f"acl ate_tls_intercept myportname {intercepted_tls}",
        "acl ate_connect method CONNECT",
        "acl ate_step1 at_step SslBump1",
        "http_access allow ate_tls_intercept ate_connect ate_step1",
        "http_access deny !ate_policy",
        "http_access deny ate_protected" + (" !ate_excepted" if plan.exceptions else ""),
        "http_access allow all",
        f"deny_info {DENIED_PAGE} ate_policy",
        f"deny_info {PROTECTED_PAGE} ate_protected",
        "ssl_bump peek ate_step1",
        "ssl_bump terminate !ate_policy",
        "ssl_bump bump ate_bump",
        "ssl_bump splice all",
        "",
        "# Credentials: one header name per slot, added where the helper annotated its value.",
    ]
    for slot, name in enumerate(plan.header_names):
        lines += [
            f"acl ate_cred_{slot} note ate_cred_{slot}",
            f"request_header_access {name} deny ate_cred_{slot}",
            f"request_header_add {name} \"%'{{ate_cred_{slot}}}note\" ate_cred_{slot}",
        ]
    return "\n".join(lines) + "\n"
