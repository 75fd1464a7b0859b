#!/usr/bin/env bash
# Installs everything (scripts/install.sh) and runs the whole ate stack on this machine:
# embedded Postgres, Temporal dev server + UI, api-server, worker, atelet with gVisor workers,
# router. Extra arguments go to `ate dev` (e.g. --example, --workers 3, --data-dir DIR; see
# `ate dev --help`).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/install.sh"
cd "$here"
exec .venv/bin/ate dev "$@"
