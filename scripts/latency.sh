#!/usr/bin/env bash
# Latency report: host-measured, phone over adb, Pixel-class estimate. scripts/latency.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd latency "$@"
