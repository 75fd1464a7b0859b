#!/usr/bin/env bash
# Installs everything (scripts/install.sh, and scripts/kube-apiserver.sh once per machine), then
# runs the checks and the whole test suite: ruff, mypy, the generated-code staleness check, and
# pytest (unit, integration against real Postgres / Temporal / runsc / SeaweedFS / kube-apiserver,
# and the end-to-end tour). Extra arguments go to one pytest run instead (e.g. a path).
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
# --durations: the slowest tests at the end of every run, to keep the suite within its budget.
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=25)
if [ "$#" -gt 0 ]; then
  echo "== pytest $*"
  exec "${pytest[@]}" "$@"
fi
# The whole suite, in two phases (35 minutes on 2 cores at most; one process each was 38).
# 1. tests/durability (the kill matrix: a stack of its own, with its own ports 25xxx-26xxx,
#    node `dur`, subnet and runsc root, and no egress proxy; mostly waiting out the timeouts it
#    provokes) runs beside the quick part of the other dirs that need no sandbox nor whole stack
#    (-m "not slow and not runsc"; tests/router and tests/workflows, which time their answers, and
#    tests/kubernetes wait for phase 2). Its output is shown once it ends.
# 2. Everything else, alone: the sandboxes, the end-to-end stack, QEMU, the router, the workflows,
#    the Kubernetes control plane.
quick=(tests/activities tests/api tests/atelet tests/cli tests/dev tests/domain tests/test_docs.py tests/test_layers.py)
durability_log="$(mktemp -t ate-durability.XXXXXX)"
echo "== pytest, phase 1: tests/durability (output below when it ends) beside the quick tests"
"${pytest[@]}" tests/durability >"$durability_log" 2>&1 &
durability=$!
trap 'kill "$durability" 2>/dev/null || true' EXIT  # a run cut short takes its phase-1 half with it
status=0
"${pytest[@]}" -m "not slow and not runsc" "${quick[@]}" || status=$?
wait "$durability" || status=$?
echo "== pytest tests/durability"
cat "$durability_log"
rm -f "$durability_log"
echo "== pytest, phase 2: the sandboxes, the stacks, QEMU, the router, the workflows, Kubernetes"
"${pytest[@]}" -m "slow or runsc" "${quick[@]}" || status=$?
"${pytest[@]}" tests/router tests/workflows tests/e2e tests/kubernetes tests/microvm || status=$?
exit "$status"
