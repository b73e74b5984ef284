#!/usr/bin/env bash
# Your BERT and your data to a phone-ready .tflite in one command: the teacher fine-tuned on your task, the most
# accurate student within a latency budget found by a search, exported and checked. scripts/ship.sh --help.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd ship "$@"
