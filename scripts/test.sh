#!/usr/bin/env bash
# Set up (if needed) and run the test suite on every core (pytest-xdist; each test's programs run on one thread):
# scripts/test.sh [pytest args], e.g. -n 0 for one process
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m pytest -n auto --dist worksteal "$@"
