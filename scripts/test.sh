#!/usr/bin/env bash
# Installs everything (scripts/install.sh, and scripts/kube-apiserver.sh once per machine), then
# runs the checks and the whole test suite: ruff, mypy, the generated-code staleness check, and
# pytest (unit, integration against real Postgres / Temporal / runsc / SeaweedFS / kube-apiserver,
# and the end-to-end tour). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/install.sh"
# tests/kubernetes run a real kube-apiserver, built once per machine into ~/.cache/ate (minutes
# the first time, nothing after).
echo "== kube-apiserver: $(bash "$here/scripts/kube-apiserver.sh")"
cd "$here"
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
# --durations: the slowest tests at the end of every run, to keep the suite within its budget.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
