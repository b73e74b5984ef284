#!/usr/bin/env bash
# Fine-tune and evaluate a model on GLUE, SQuAD or your own data. scripts/finetune.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd finetune "$@"
