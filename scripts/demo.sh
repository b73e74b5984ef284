#!/usr/bin/env bash
# The main job on the shipped data, from text to a phone-ready model: set up; adapt the teacher (all-MiniLM-L6-v2,
# a pre-trained BERT from an installed package: continued MLM + NSP fits the heads it lacks); distill it into a
# MobileBERT-shaped student by progressive knowledge transfer; fine-tune on SST-2 (teacher, student, student with
# task distillation, a student of the teacher's own layers 0 and 5 with task distillation, and a student from random
# initialisation as the baseline); export the student the run configuration ships (its `ship`) to .tflite (fp32 and
# int8, with metadata, checked against PyTorch on all of SST-2 dev); benchmark it on this host and estimate Pixel
# latency; write OUT/report.md, report.json and report.png.
#   scripts/demo.sh [--force] [--out DIR] [--micro] [--scratch-teacher] [--config FILE]
#     --force            redo finished stages (otherwise a finished stage is skipped and an interrupted one resumes)
#     --out              output directory (default runs/demo)
#     --micro            seconds per stage instead of minutes: proves the stages connect (the tests run this)
#     --scratch-teacher  pre-train the demo IB-BERT teacher from scratch instead (the paper's teacher shape, but a
#                        2-core CPU can only train one that knows little) and distill it into demo_student
#     --config           the run configuration: every stage's steps, sizes and learning rates (default
#                        configs/demo.json; copy and edit it; `python -m mobilekd run-config FILE` shows it)
# Independent stages share the two cores: SST-2 from scratch runs beside teacher pre-training, the teacher's
# SST-2 fine-tuning (then the layer-subset student's) beside knowledge transfer; their logs go to OUT/logs/.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
for arg in "$@"; do  # before set-up: --help on a fresh clone installs nothing
  case "$arg" in -h|--help) usage; exit 0 ;; esac
done
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
OUT=runs/demo
CONFIG=configs/demo.json
FORCE=0
MICRO=0
SCRATCH_TEACHER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    --micro) MICRO=1 ;;
    --scratch-teacher) SCRATCH_TEACHER=1 ;;
    --out) OUT="$2"; shift ;;
    --config) CONFIG="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$FORCE" = 1 ] && rm -rf "$OUT"
mkdir -p "$OUT/logs"
MODE=$([ "$SCRATCH_TEACHER" = 1 ] && echo scratch-teacher || echo packaged-teacher)
if [ ! -f "$OUT/.demo-mode" ] && [ -f "$OUT/teacher/summary.json" ]; then  # a demo run before the mode was recorded
  python -c "import json,sys; print('packaged-teacher' if json.load(open(sys.argv[1])).get('init_from') else
             'scratch-teacher')" "$OUT/teacher/summary.json" > "$OUT/.demo-mode"
fi
if [ -f "$OUT/.demo-mode" ] && [ "$(cat "$OUT/.demo-mode")" != "$MODE" ]; then
  echo "error: $OUT holds a $(cat "$OUT/.demo-mode") demo; use another --out or --force" >&2; exit 2
fi
echo "$MODE" > "$OUT/.demo-mode"
export OMP_NUM_THREADS=1  # one thread per job: two jobs fill this 2-core machine
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # no background stage outlives the script

# The settings of this mode (and of --micro) from the run configuration, as bash arrays of flags, one per recipe:
# TRAIN_TEACHER, DISTILL, FINETUNE (every SST-2 run's), TASK_SST2, TEACHER_TASK_SST2 (the SST-2 teacher's, after
# TASK_SST2), INIT_SUBSET and FINETUNE_SUBSET (the layer-subset student's), EXPORT, LATENCY; and STUDENT (the student
# preset), TEACHER_LR, STUDENT_LR (SST-2 fine-tuning of the teacher and of the PKT students), SHIP (the SST-2 run that
# is exported).
OVERLAYS=()
[ "$MICRO" = 1 ] && OVERLAYS=(--overlay micro)
SETTINGS=$(python -m mobilekd run-config "$CONFIG" --mode "$MODE" "${OVERLAYS[@]}" --keys student teacher_lr \
           student_lr train-teacher distill finetune tasks teacher-tasks init-subset finetune-subset ship export \
           latency)
eval "$SETTINGS"
declare -p TASK_SST2 > /dev/null 2>&1 || { echo "error: $CONFIG: mode $MODE has no tasks.sst2 (the demo's task)" >&2; exit 2; }
declare -p TEACHER_TASK_SST2 > /dev/null 2>&1 || TEACHER_TASK_SST2=()  # no teacher-tasks.sst2: the task's alone
case "$SHIP" in student|student_task_kd|subset_task_kd|scratch|teacher) ;;
  *) echo "error: $CONFIG: ship is $SHIP; expected one of the SST-2 runs student, student_task_kd, subset_task_kd," \
          "scratch, teacher" >&2; exit 2 ;;
esac
TRANSFER=(--student "$STUDENT" "${DISTILL[@]}")
SST2=(--task sst2 "${TASK_SST2[@]}" "${FINETUNE[@]}")

stage_done() { [ -f "$1/summary.json" ] && [ -f "$1/model.safetensors" ] && [ -f "$1/config.json" ]; }
json_field() {  # FILE, then a Python expression over `r` (the file's JSON): prints its value; fails if unreadable
  python -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}
finetune() {  # name, then flags; skipped when its results.json says complete
  local name=$1; shift
  if [ "$(json_field "$OUT/sst2/$name/results.json" "bool(r.get('complete'))" 2>/dev/null)" = True ]; then
    echo "-- SST-2 $name: done already"
  else
    python -m mobilekd finetune "${SST2[@]}" --out "$OUT/sst2/$name" --resume "$@"
  fi
}
sst2_result() {  # name: its dev score and which model it is (finetune's results.json says how dev was read)
  json_field "$OUT/sst2/$1/results.json" "f'SST-2 $1: dev {r[\"best_metric\"]} {r[\"metrics\"][\"dev\"][r[\"best_metric\"]]:.4f}, scored {r.get(\"dev_scored\", \"at every evaluation, the best kept\")} (step {r[\"best_step\"]} of {r[\"steps\"]})'"
}
in_background() {  # name, then a command; its output goes to OUT/logs/name.log; join_background waits for it
  BG_NAME=$1; shift
  echo "-- $BG_NAME runs beside it (log: $OUT/logs/$BG_NAME.log)"
  "$@" > "$OUT/logs/$BG_NAME.log" 2>&1 &
  BG_PID=$!
}
join_background() {  # waits for the background stage and prints its result from its results.json
  wait "$BG_PID" || { tail -5 "$OUT/logs/$BG_NAME.log" >&2; echo "error: $BG_NAME failed" >&2; exit 1; }
  sst2_result "${BG_NAME#sst2_}"
}

echo "== 1/6 model presets (parameters and FLOPs beside the paper's)"
python -m mobilekd models | tee "$OUT/models.txt"

echo "== 2/6 teacher: ${TRAIN_TEACHER[*]:0:2} (MLM + NSP) -> $OUT/teacher"
[ -f "$OUT/scratch_init/config.json" ] || python -m mobilekd init "$STUDENT" "$OUT/scratch_init"
in_background sst2_scratch finetune scratch --model "$OUT/scratch_init" --lr "$STUDENT_LR"
if stage_done "$OUT/teacher"; then echo "done already (summary.json exists); --force to redo"
else python -m mobilekd train-teacher "${TRAIN_TEACHER[@]}" --out "$OUT/teacher" --resume; fi
join_background

echo "== 3/6 progressive knowledge transfer into $STUDENT -> $OUT/student"
teacher_then_subset() {  # the SST-2 teacher, then the student of the teacher's own layers that it teaches
  finetune teacher --model "$OUT/teacher" --lr "$TEACHER_LR" "${TEACHER_TASK_SST2[@]}"
  [ -f "$OUT/subset/config.json" ] || python -m mobilekd init "$OUT/teacher" "$OUT/subset" "${INIT_SUBSET[@]}"
  finetune subset_task_kd --model "$OUT/subset" --teacher "$OUT/sst2/teacher" "${FINETUNE_SUBSET[@]}"
}
in_background sst2_teacher teacher_then_subset
if stage_done "$OUT/student"; then echo "done already (summary.json exists); --force to redo"
else python -m mobilekd distill "${TRANSFER[@]}" --teacher "$OUT/teacher" --out "$OUT/student" --resume; fi
join_background
sst2_result subset_task_kd

echo "== 4/6 SST-2 fine-tuning of the student, without and with task distillation from the SST-2 teacher"
in_background sst2_student_task_kd finetune student_task_kd --model "$OUT/student" --teacher "$OUT/sst2/teacher" \
  --lr "$STUDENT_LR"
finetune student --model "$OUT/student" --lr "$STUDENT_LR"
sst2_result student
join_background

echo "== 5/6 .tflite export of the SST-2 run $SHIP (fp32, dynamic-range int8; metadata; parity on SST-2 dev)"
logged() {  # name, then a command: its output (the converters are chatty) goes to OUT/logs/name.log
  local name=$1; shift
  "$@" > "$OUT/logs/$name.log" 2>&1 || { tail -5 "$OUT/logs/$name.log" >&2; echo "error: $name failed" >&2; exit 1; }
}
exported() {  # both files written and checked (a file failing its parity check is removed), and of the run this
  # configuration ships
  [ -f "$OUT/tflite/model_none.tflite" ] && [ -f "$OUT/tflite/model_dynamic_int8.tflite" ] && [ "$(json_field "$OUT/tflite/parity.json" \
    "__import__('pathlib').Path(r['model_dynamic_int8.tflite']['model']).name" 2>/dev/null)" = "$SHIP" ]
}
if exported; then echo "done already"
else
  logged export python -m mobilekd export --model "$OUT/sst2/$SHIP" --quantize none dynamic-int8 "${EXPORT[@]}" \
    --out "$OUT/tflite"
fi
for file in model_none.tflite model_dynamic_int8.tflite; do
  json_field "$OUT/tflite/parity.json" "f'$file: {r[\"$file\"][\"size_bytes\"] / 1e6:.1f} MB, max abs diff \
{r[\"$file\"][\"max_abs_diff\"]:.2e}, agreement {r[\"$file\"][\"agreement\"]:.4f}'"
done

echo "== 6/6 latency: measured on this host, estimated for Pixel phones (beside the paper's MobileBERT)"
accuracy() { json_field "$OUT/tflite/parity.json" "r['$1']['accuracy_exported']"; }
logged latency python -m mobilekd latency --models mobilebert --quantize none "${LATENCY[@]}" \
  --tflite "student=$OUT/tflite/model_none.tflite" "student_int8=$OUT/tflite/model_dynamic_int8.tflite" \
  --accuracy "student=$(accuracy model_none.tflite)" "student_int8=$(accuracy model_dynamic_int8.tflite)" \
  --out "$OUT/latency"

echo
python -m mobilekd report "$OUT"
