#!/usr/bin/env bash
# Installs everything ate needs on a fresh Debian bookworm machine (as root), idempotently:
# system packages (runsc from bookworm-backports, umoci, iproute2...) and a Python virtualenv
# at .venv with ate and its dependencies. Safe to run again: it skips what is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"

need_apt=()
runsc_ok=0
if command -v runsc >/dev/null 2>&1 && runsc --version 2>/dev/null | grep '20240729' >/dev/null; then runsc_ok=1; fi
command -v umoci >/dev/null 2>&1 || need_apt+=(umoci)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v busybox >/dev/null 2>&1 || need_apt+=(busybox-static)
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)  # a real headless browser for the router's /statusz test
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)  # `python -m bench proxy`: the load generator
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)  # `python -m bench proxy`: the reverse proxy the router is compared with
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || need_apt+=(libnginx-mod-http-lua)  # the router's nginx data path
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86)  # the microvm sandbox class's VMM (MICROVM.md)
[ -x /usr/sbin/squid ] && [ -x /usr/lib/squid/security_file_certgen ] || need_apt+=(squid-openssl)  # the per-node egress proxy (docs/egress-proxy.md); its service stays off
command -v skopeo >/dev/null 2>&1 || need_apt+=(skopeo)  # images from OCI registries (containers/image)
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)  # the registry the tests run on loopback; its service stays off
command -v mke2fs >/dev/null 2>&1 && command -v debugfs >/dev/null 2>&1 || need_apt+=(e2fsprogs)  # the microvm class: durable dirs as ext4 disk images

if [ "$runsc_ok" = 0 ] || [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "ate install: root is needed to install: runsc (bookworm-backports) ${need_apt[*]}" >&2
    echo "  run as root: sudo bash scripts/install.sh" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ "$runsc_ok" = 0 ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    # GVISOR.md: only the bookworm-backports build both runs multi-threaded programs and
    # checkpoints epoll servers; the stock bookworm build and sid's build each fail one of them.
    cat > /etc/apt/sources.list.d/ate-bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  apt-get update -qq
  if [ "${#need_apt[@]}" -gt 0 ]; then
    # no package may start a service (nginx's would take port 80): the benchmarks run their own
    no_services=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; no_services=1; fi
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
    if [ "$no_services" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  fi
  if [ "$runsc_ok" = 0 ]; then apt-get install -y -qq -t bookworm-backports runsc >/dev/null; fi
fi
if ! runsc --version 2>/dev/null | grep '20240729' >/dev/null; then
  echo "ate install: runsc from bookworm-backports is required; run as root:" >&2
  echo "  apt-get install -t bookworm-backports runsc" >&2
  exit 1
fi

py="${ATE_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then "$py" -m venv .venv; fi
stamp=.venv/.ate-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi

# The microvm class's guest kernel (Debian's cloud kernel, unpacked once per machine into a cache
# outside the repository; never installed as the host's kernel).
echo "== guest kernel: $(bash scripts/guest-kernel.sh)"

# The example workload's OCI image (a static Go counter packed with umoci; no registry).
bash examples/counter/build.sh
