#!/usr/bin/env bash
# Your BERT and your data to a phone-ready .tflite in one command: the teacher fine-tuned on your task, a student of
# its own layers fine-tuned with task distillation, exported and checked. scripts/ship.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd ship "$@"
