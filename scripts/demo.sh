#!/usr/bin/env bash
# The main job on the shipped data: set up, pre-train the demo IB-BERT teacher, distill it into the demo
# MobileBERT student with progressive knowledge transfer, fine-tune teacher and students on SST-2, and export
# the SST-2 student to .tflite (fp32 and dynamic-range int8) checked against PyTorch on the whole dev set.
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

echo "== 1/5 model presets (parameters and FLOPs beside the paper's)"
python -m mobilekd.cli models | tee "$OUT/models.txt"

echo "== 2/5 teacher pre-training (demo IB-BERT, MLM + NSP) -> $OUT/teacher"
if stage_done "$OUT/teacher"; then echo "done already (summary.json exists); --force to redo"
else python -m teacher_ib_bert.train --out "$OUT/teacher" --resume; fi

echo "== 3/5 progressive knowledge transfer into the demo MobileBERT -> $OUT/student"
if stage_done "$OUT/student"; then echo "done already (summary.json exists); --force to redo"
else python -m mobilekd.transfer.distill --teacher "$OUT/teacher" --out "$OUT/student" --resume; fi

echo "== 4/5 SST-2: the teacher, the distilled student (with and without task distillation) and a student"
echo "   trained from random initialisation, each fine-tuned on 20,000 shipped SST-2 examples, scored on dev"
SST2=(--task sst2 --max-train-examples 20000 --epochs 1 --max-len 64 --eval-every 200)
finetune() {  # name, then flags
  local name=$1; shift
  if python -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get('complete') else 1)" \
       "$OUT/sst2/$name/results.json" 2>/dev/null; then
    echo "-- $name: done already"
  else
    echo "-- $name"; python -m mobilekd.finetune.run "${SST2[@]}" --out "$OUT/sst2/$name" --resume "$@"
  fi
}
[ -f "$OUT/scratch_init/config.json" ] || python -m mobilekd.cli init demo_student "$OUT/scratch_init"
finetune teacher --model "$OUT/teacher" --lr "${TEACHER_LR:-5e-4}"
finetune student --model "$OUT/student" --lr 5e-4
finetune student_task_kd --model "$OUT/student" --teacher "$OUT/sst2/teacher" --lr 5e-4
finetune scratch --model "$OUT/scratch_init" --lr 5e-4

echo "== 5/5 .tflite export of the SST-2 student, with parity against PyTorch on all 872 dev sentences"
for q in none dynamic-int8; do
  if [ -f "$OUT/tflite/$q/parity.json" ]; then echo "-- $q: done already"
  else python -m mobilekd.export.run --model "$OUT/sst2/student" --quantize "$q" --parity-examples 872 \
         --out "$OUT/tflite/$q" 2>&1 | grep -v -e '^(' -e '^I0000' -e '^INFO' -e '^W1122' ; fi
done

echo
cat "$OUT/student/summary.md"
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
t = json.load(open(f"{out}/teacher/summary.json"))["heldout"]
s = json.load(open(f"{out}/student/summary.json"))["heldout"]
print(f"\npre-training: teacher held-out MLM accuracy {t['mlm_accuracy']:.3f}, PKT student {s['mlm_accuracy']:.3f}, "
      f"unigram baseline {t['unigram_accuracy']:.3f}\n")
rows = {n: json.load(open(f"{out}/sst2/{n}/results.json")) for n in ("teacher", "student", "student_task_kd", "scratch")}
base = rows["teacher"]["best_score"]
lines = ["| SST-2 dev | accuracy | share of teacher | fine-tuning time |", "|---|---|---|---|"]
for name, r in rows.items():
    lines.append(f"| {name} | {r['best_score']:.4f} | {100 * r['best_score'] / base:.1f}% | {r['wall_seconds']} s |")
table = "\n".join(lines)
print(table)
lite = {q: json.load(open(f"{out}/tflite/{q}/parity.json")) for q in ("none", "dynamic-int8")}
export = ["| .tflite | size | max abs diff | agreement | dev accuracy (PyTorch) |", "|---|---|---|---|---|"]
for q, r in lite.items():
    export.append(f"| {q} | {r['size_bytes'] / 1e6:.1f} MB | {r['max_abs_diff']:.2e} | {r['agreement']:.4f} | "
                  f"{r['accuracy_tflite']:.4f} ({r['accuracy_torch']:.4f}) |")
print("\n" + "\n".join(export))
open(f"{out}/report.md", "w").write(open(f"{out}/student/summary.md").read() + "\n" + table + "\n\n"
                                    + "\n".join(export) + "\n")
json.dump({"teacher_pretraining": t, "student_pretraining": s,
           "sst2": {n: r["metrics"]["dev"] | {"wall_seconds": r["wall_seconds"]} for n, r in rows.items()},
           "tflite": lite}, open(f"{out}/report.json", "w"), indent=2)
print(f"\nreport: {out}/report.md, {out}/report.json")
PY
