#!/usr/bin/env bash
# Distill the teacher into a MobileBERT student (PKT by default). scripts/pkt_distill.sh --help for the flags.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec python -m mobilekd distill "$@"
