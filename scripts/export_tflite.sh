#!/usr/bin/env bash
# Export a model directory to .tflite with a parity check. scripts/export_tflite.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd export "$@"
