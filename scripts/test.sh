#!/usr/bin/env bash
# Set up (if needed) and run the test suite: scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m pytest "$@"
