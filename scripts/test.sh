#!/usr/bin/env bash
# Installs everything (scripts/install.sh), then runs the checks and the whole test suite:
# ruff, mypy, the generated-code staleness check, and pytest (unit, integration against real
# Postgres / Temporal / runsc, and the end-to-end tour). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/scripts/install.sh"
cd "$here"
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
