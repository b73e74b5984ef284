#!/usr/bin/env bash
# The main job on the shipped data: set up, pre-train the demo IB-BERT teacher, distill it into the demo
# MobileBERT student with progressive knowledge transfer, and print the model table.
#   scripts/demo.sh [--force]     (--force redoes finished stages; otherwise a finished stage is skipped and an
#                                  interrupted one resumes from its checkpoint)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
OUT=runs/demo
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $arg (use --force or --help)" >&2; exit 2 ;;
  esac
done
[ "$FORCE" = 1 ] && rm -rf "$OUT"
mkdir -p "$OUT"

stage_done() { [ -f "$1/summary.json" ] && [ -f "$1/model.safetensors" ] && [ -f "$1/config.json" ]; }

echo "== 1/3 model presets (parameters and FLOPs beside the paper's)"
python -m mobilekd.cli models | tee "$OUT/models.txt"

echo "== 2/3 teacher pre-training (demo IB-BERT, MLM + NSP) -> $OUT/teacher"
if stage_done "$OUT/teacher"; then echo "done already (summary.json exists); --force to redo"
else python -m teacher_ib_bert.train --out "$OUT/teacher" --resume; fi

echo "== 3/3 progressive knowledge transfer into the demo MobileBERT -> $OUT/student"
if stage_done "$OUT/student"; then echo "done already (summary.json exists); --force to redo"
else python -m mobilekd.transfer.distill --teacher "$OUT/teacher" --out "$OUT/student" --resume; fi

echo
cat "$OUT/student/summary.md"
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
t = json.load(open(f"{out}/teacher/summary.json"))["heldout"]
s = json.load(open(f"{out}/student/summary.json"))["heldout"]
print(f"teacher held-out MLM accuracy {t['mlm_accuracy']:.3f}, student {s['mlm_accuracy']:.3f}, "
      f"unigram baseline {t['unigram_accuracy']:.3f}")
PY
