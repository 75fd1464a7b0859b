"""`python -m bench egress`: what the node's egress proxy adds to an actor's outbound request,
against a direct request to the same stand-in upstream, measured in the same run (issue 28).

A real `ate dev --workers 1` (bench.stack; its atelet runs Squid) holds one counter actor whose
egress policy allows `model.bench.test` (port 443) with a credential (header `x-api-key` from a
secret) and `plain.bench.test` (port 80) without one (a credential never goes in clear). The stand-in upstream (tests/atelet/egress_upstream.py, HTTP on 80 and HTTPS on
443 with a certificate of a CA made here, which Squid is told to trust) runs in a network
namespace the benchmark makes, on two addresses: `.3`, which `model.bench.test` names in the
proxy's hosts file, and `.2`, which is taken around the proxy for the baseline: only for this
benchmark, the node forwards the worker's packets to `.2` (an ACCEPT in FORWARD, a RETURN ahead
of the node's nat redirect, forwarding on the two interfaces), all undone at the end. Nothing
leaves the machine.

Each request is made by the sandbox itself (the counter's `POST /fetch`, a new connection per
request, keep-alives off) and timed there (`elapsed_ms`): so a row is the request as the actor
sees it, and the rows differ only in the path. Per cycle, interleaved, one request of each row:

- HTTP (`plain.bench.test`): direct to `.2:80`; through the proxy settings (`HTTP_PROXY`);
  transparently (dialling `.3:80`, redirected to Squid);
- HTTPS: direct to `.2:443` (the actor verifies the stand-in's CA); through the proxy settings
  (`CONNECT`, Squid terminates the actor's TLS with the egress CA, adds the header, opens its own
  TLS, verified); transparently (dialling `.3:443`).

The KEY line gives the p50/p95 added per request, through the proxy settings, for HTTPS (the
model-API call an agent makes) and HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.actors import COUNTER
from bench.common import ROOT, Log, machine, ms, summary, table, write_result

HOST = "model.bench.test"
PLAIN = "plain.bench.test"  # allowed without a credential: a credential never goes in clear
NET = "10.252.77"
NAMESPACE = "atebench-up"
HOST_IF, NS_IF = "abuph", "abupn"
UPSTREAM = ROOT / "tests" / "atelet" / "egress_upstream.py"
ROWS = (
    ("http_direct", "HTTP direct (around the proxy, the baseline)"),
    ("http_proxy", "HTTP through the proxy settings"),
    ("http_transparent", "HTTP transparent (port 80 redirected)"),
    ("https_direct", "HTTPS direct (around the proxy, the baseline)"),
    ("https_proxy", "HTTPS through the proxy settings (TLS terminated, header added)"),
    ("https_transparent", "HTTPS transparent (port 443 redirected)"),
)


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


class Upstream:
    """The stand-in's namespace, addresses and server; ``close`` removes them."""

    def __init__(self, directory: Path) -> None:
        from ate.dev.certificates import CertificateAuthority

        self.ca = CertificateAuthority.create("bench egress upstream CA")
        issued = self.ca.issue(HOST, server=True, dns_names=[HOST])
        self.ca_file, cert, key = directory / "upstream-ca.crt", directory / "up.crt", directory / "up.key"
        self.ca_file.write_bytes(self.ca.cert_pem)
        cert.write_bytes(issued.cert_pem)
        key.write_bytes(issued.key_pem)
        self.hosts = directory / "hosts"
        self.hosts.write_text(f"{NET}.3 {HOST} {PLAIN}\n")
        self.record = directory / "record.jsonl"
        self.process: subprocess.Popen[str] | None = None
        _sh("ip", "netns", "delete", NAMESPACE, check=False)
        _sh("ip", "link", "delete", HOST_IF, check=False)
        _sh("ip", "netns", "add", NAMESPACE)
        _sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        _sh("ip", "link", "set", NS_IF, "netns", NAMESPACE)
        _sh("ip", "addr", "add", f"{NET}.1/24", "dev", HOST_IF)
        _sh("ip", "link", "set", HOST_IF, "up")
        for last in (2, 3):
            _sh("ip", "-n", NAMESPACE, "addr", "add", f"{NET}.{last}/24", "dev", NS_IF)
        _sh("ip", "-n", NAMESPACE, "link", "set", NS_IF, "up")
        _sh("ip", "-n", NAMESPACE, "link", "set", "lo", "up")
        _sh("ip", "-n", NAMESPACE, "route", "add", "default", "via", f"{NET}.1")
        files = f"{cert},{key}"
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", NAMESPACE, sys.executable, str(UPSTREAM), str(self.record),
             f"{NET}.2={files}", f"{NET}.3={files}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the stand-in upstream did not start")

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        _sh("ip", "netns", "delete", NAMESPACE, check=False)
        _sh("ip", "link", "delete", HOST_IF, check=False)


class Bypass:
    """The node forwards ``worker_ip``'s packets to the baseline address ``.2``, around the
    proxy (module doc); ``close`` undoes each change."""

    def __init__(self, worker_ip: str) -> None:
        route = _sh("ip", "-o", "route", "get", worker_ip).stdout.split()
        self.worker_if = route[route.index("dev") + 1]
        self.undo: list[list[str]] = []
        direct = f"{NET}.2"
        # the node's nat chain: the one PREROUTING sends this veth's packets to (atelet.egress.rules)
        jumps = [line.split() for line in _sh("iptables", "-w", "5", "-t", "nat", "-S", "PREROUTING").stdout.splitlines()]
        [nat] = [j[j.index("-j") + 1] for j in jumps if "-i" in j and "-j" in j
                 and self.worker_if.startswith(j[j.index("-i") + 1].rstrip("+"))
                 and j[j.index("-j") + 1].startswith("ATE-EGRESS-")]  # fmt: skip
        self._do(["iptables", "-w", "5", "-t", "nat", "-I", nat, "1", "-d", f"{direct}/32", "-j", "RETURN"],
                 ["iptables", "-w", "5", "-t", "nat", "-D", nat, "-d", f"{direct}/32", "-j", "RETURN"])  # fmt: skip
        for source, destination in ((worker_ip, direct), (direct, worker_ip)):
            rule = ["FORWARD", "-s", f"{source}/32", "-d", f"{destination}/32", "-j", "ACCEPT"]
            self._do(["iptables", "-w", "5", "-I", *rule[:1], "1", *rule[1:]], ["iptables", "-w", "5", "-D", *rule])
        for interface in (self.worker_if, HOST_IF):
            key = f"net.ipv4.conf.{interface}.forwarding"
            before = _sh("sysctl", "-n", key).stdout.strip()
            self._do(["sysctl", "-qw", f"{key}=1"], ["sysctl", "-qw", f"{key}={before}"])

    def _do(self, command: list[str], undo: list[str]) -> None:
        _sh(*command)
        self.undo.append(undo)

    def close(self) -> None:
        for command in reversed(self.undo):
            _sh(*command, check=False)


def _measure(cycles: int, warmup: int, log: Log) -> dict[str, Any]:
    """Starts the stack and the stand-in, runs the cycles; the figures (seconds) per row."""
    import httpx

    from ate.cli.client import ApiClient
    from ate.cli.manifest import load_template_spec
    from bench import stack as stack_mod

    directory = Path(tempfile.mkdtemp(prefix="ate-bench-egress-"))
    secret = f"sk-bench-{uuid.uuid4().hex}"
    upstream = Upstream(directory)
    bypass: Bypass | None = None
    env = {"ATE_ATELET_EGRESS_HOSTS_FILE": str(upstream.hosts), "ATE_ATELET_EGRESS_UPSTREAM_CA_FILE": str(upstream.ca_file),
           "ATE_ATELET_EGRESS": "on"}  # fmt: skip
    stack = stack_mod.start(workers=1, env=env, log=log)
    figures: dict[str, list[float]] = {key: [] for key, _ in ROWS}
    try:
        spec = load_template_spec(COUNTER)
        spec["egress"] = {"allow": [{"host": HOST, "ports": [443]}, {"host": PLAIN, "ports": [80]}],
                          "credentials": [{"host": HOST, "header": "x-api-key", "secret": "bench-key"}]}  # fmt: skip
        with ApiClient(stack.api_url, timeout=300, token=stack.token) as cli:
            cli.create_atespace("bench")
            cli.create_secret("bench", "bench-key", secret.encode())
            template = cli.create_template("bench", "egress", spec, wait=True)
            if template.get("phase") != "Ready":
                raise RuntimeError(f"template not Ready: {template}")
            cli.create_actor("bench", "caller", "egress", {})
        target = {"ate-target-actor": "bench/caller"}
        ca_pem = upstream.ca.cert_pem.decode()
        requests: dict[str, dict[str, Any]] = {
            "http_direct": {"url": f"http://{PLAIN}/", "direct": True, "dial": f"{NET}.2:80"},
            "http_proxy": {"url": f"http://{PLAIN}/"},
            "http_transparent": {"url": f"http://{PLAIN}/", "direct": True, "dial": f"{NET}.3:80"},
            "https_direct": {"url": f"https://{HOST}/", "direct": True, "dial": f"{NET}.2:443", "ca_pem": ca_pem},
            "https_proxy": {"url": f"https://{HOST}/"},
            "https_transparent": {"url": f"https://{HOST}/", "direct": True, "dial": f"{NET}.3:443"},
        }
        with httpx.Client(timeout=60) as client, httpx.Client(headers=stack.headers, timeout=60) as api:
            assert client.get(stack.router_url + "/", headers=target).status_code == 200  # resumes it
            worker_ip = api.get(f"{stack.api_url}/v1/atespaces/bench/actors/caller").json()["worker"]["ip"]
            bypass = Bypass(worker_ip)

            def fetch(key: str) -> float:
                answer = client.post(stack.router_url + "/fetch", headers=target,
                                     json={**requests[key], "timeout_seconds": 20})  # fmt: skip
                seen = answer.json() if answer.status_code == 200 else {"error": answer.text[:200]}
                if seen.get("status") != 200:
                    raise RuntimeError(f"{key}: {seen}")
                arrived = json.loads(seen["body"])
                credential = key.startswith("https") and not key.endswith("_direct")
                if (arrived["headers"].get("x-api-key") == secret) != credential:
                    raise RuntimeError(f"{key}: the credential header was {'not ' if credential else ''}added")
                return float(seen["elapsed_ms"]) / 1000

            for i in range(warmup + cycles):
                for key, _ in ROWS:
                    seconds = fetch(key)
                    if i >= warmup:
                        figures[key].append(seconds)
            log(f"{cycles} cycles of {len(ROWS)} requests done")
    finally:
        if bypass is not None:
            bypass.close()
        stack.stop()
        upstream.close()
    return {"figures": figures}


def run(cycles: int, warmup: int, log: Log) -> None:
    """Runs the benchmark and prints its table and KEY line (see the module doc)."""
    started = time.monotonic()
    result = _measure(cycles, warmup, log)
    s = {key: summary(values) for key, values in result["figures"].items()}
    rows = [[label, ms(s[key]["p50"]), ms(s[key]["p95"]), ms(s[key]["max"])] for key, label in ROWS]

    def added(row: str, base: str, q: str) -> float:
        return ms(s[row][q] - s[base][q])

    key = (
        f"KEY egress proxy added per request: HTTPS {added('https_proxy', 'https_direct', 'p50'):.1f}/"
        f"{added('https_proxy', 'https_direct', 'p95'):.1f} ms p50/p95 (direct {ms(s['https_direct']['p50']):.1f}/"
        f"{ms(s['https_direct']['p95']):.1f}), HTTP {added('http_proxy', 'http_direct', 'p50'):.1f}/"
        f"{added('http_proxy', 'http_direct', 'p95'):.1f} ms (direct {ms(s['http_direct']['p50']):.1f}/"
        f"{ms(s['http_direct']['p95']):.1f})"
    )
    title = f"bench egress: {cycles} cycles, ate dev --workers 1, gVisor counter, requests timed inside the sandbox"
    data: dict[str, Any] = {"machine": machine(), "cycles": cycles, "summary": s,
                            "figures": result["figures"], "seconds": time.monotonic() - started}  # fmt: skip
    path = write_result("egress", data)
    print("\n".join([title, table(["ms", "p50", "p95", "max"], rows), f"results: {path}", key]))
