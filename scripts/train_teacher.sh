#!/usr/bin/env bash
# Pre-train the IB-BERT teacher (MLM + NSP). scripts/train_teacher.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd train-teacher "$@"
