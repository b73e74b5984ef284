"""What a second machine sees (issue 14): the seed-0 SST-2 fine-tuning runs of `benchmarks.teacher_value` again,
on this host with torch, MKL and oneDNN limited to AVX2 (the instruction set of a CPU without AVX-512, whose
kernels round differently, as another machine's do), from the same adapted teacher and distilled student. Each
run's difference to the native run is set beside the spread over seeds that `benchmarks.teacher_value` measured
natively. The task-distilled student learns from the teacher fine-tuned under AVX2, as it would on that machine.
Rows (the AVX2 runs, each saying whether its weights equal the native run's bit for bit) to
docs/results/second_machine.json.

    python -m benchmarks.second_machine          # about 20 minutes on 2 cores, once teacher_value's stages exist
    python -m benchmarks.second_machine --table
    python -m benchmarks.second_machine --table --write  # and put it between its markers in its page

What it does not cover: the teacher's adaptation and the distillation, which a second machine would also redo
(they are reused here), and operating-system or library differences beyond the instruction set.
"""

from __future__ import annotations

import argparse
import filecmp
import statistics
import sys
from pathlib import Path

from benchmarks import teacher_value as tv
from benchmarks.command import comparison, comparison_flags
from benchmarks.stats import by_seed
from mobilekd.fileio import REPO_ROOT, read_json

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
METHODS = ("teacher", "pkt", "pkt_task_kd", "scratch")
TASK, SEED = "sst2", 0


def jobs(base: Path, out: Path):
    """teacher_value's fine-tuning runs of these methods (task, seed 0) into `out`, from `base`'s stages."""
    plan = [j for j in tv.jobs(out, [TASK], [SEED], stages=base)
            if j.argv[0] == "finetune" and j.name.split("/")[1] in METHODS]
    names = {j.name for j in plan}
    for j in plan:
        j.needs = [n for n in j.needs if n in names]  # the stages are base's, done there
        j.env = AVX2
    return plan


def rows(base: Path, out: Path) -> list[dict]:
    """The AVX2 runs' rows, each with whether its trained weights equal the native run's bit for bit."""
    found = []
    for r in tv.rows(out, [TASK], [SEED]):
        a, b = (tv.finetune_dir(d, TASK, r["method"], SEED) / "model.safetensors" for d in (base, out))
        found.append({**r, "machine": "this host, AVX2 only",
                      "weights_identical_to_native": filecmp.cmp(a, b, shallow=False)})
    return found


SETTINGS = ("steps", "lr")  # a run's settings its row records: a native and an AVX2 row compare where they agree
TAUGHT_BY = {"pkt_task_kd": "teacher"}  # and a taught run's only where its teacher's rows agree too


def seed_row(rows: list[dict], method: str) -> dict | None:
    return next((r for r in rows if (r["task"], r["metric"], r["method"], r["seed"]) ==
                 (TASK, "accuracy", method, SEED)), None)


def other_settings(method: str, results: list[dict], native: list[dict]) -> str:
    """How the native and AVX2 rows of `method` (and of its teacher, for a taught run) differ in SETTINGS; ''
    where they agree: after the native runs are made again with other settings (configs/demo.json), until this
    benchmark runs again."""
    notes = []
    for m, whose in ((method, ""), *([(TAUGHT_BY[method], "its teacher's ")] if method in TAUGHT_BY else [])):
        a, b = seed_row(native, m), seed_row(results, m)
        if a and b:
            notes += [f"{whose}{k} {a.get(k)} against {b.get(k)}" for k in SETTINGS if a.get(k) != b.get(k)]
    return ", ".join(notes)


def table(results: list[dict], native: list[dict]) -> str:
    """Each AVX2 run beside its native twin (seed SEED), where both ran with the same settings (`other_settings`)."""
    lines = [f"| {TASK} dev accuracy, seed {SEED} | native | AVX2 only | difference | native std over seeds | "
             "difference / std | weights bit-identical |", "|---|---|---|---|---|---|---|"]
    for method in METHODS:
        avx2 = seed_row(results, method)
        seeds = by_seed(native, TASK, "accuracy", method)
        other = other_settings(method, results, native)
        if avx2 is None or SEED not in seeds or other:
            cells = [f"{seeds[SEED]:.4f}" if SEED in seeds else "-", f"{avx2['value']:.4f}" if avx2 else "-"]
            lines.append(f"| {method} | {' | '.join(cells)} | {'other settings: ' + other if other else '-'} "
                         "| - | - | - |")
            continue
        diff = avx2["value"] - seeds[SEED]
        std = statistics.stdev(seeds.values()) if len(seeds) > 1 else 0.0
        ratio = f"{abs(diff) / std:.1f}" if std > 0 else "-"
        lines.append(f"| {method} | {seeds[SEED]:.4f} | {avx2['value']:.4f} | {diff:+.4f} | {std:.4f} "
                     f"(n={len(seeds)}) | {ratio} | {'yes' if avx2['weights_identical_to_native'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.second_machine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="runs/teacher_value", help="the teacher_value benchmark's directory")
    p.add_argument("--native", default="docs/results/teacher_value.json", help="teacher_value's results file")
    comparison_flags(p, "runs/second_machine", "docs/results/second_machine.json", seeds=False)
    args = p.parse_args(argv)
    base, out = (REPO_ROOT / args.base).resolve(), (REPO_ROOT / args.out).resolve()
    native_path = REPO_ROOT / args.native
    if not native_path.is_file():
        print(f"error: {native_path}: no such file (run python -m benchmarks.teacher_value first)", file=sys.stderr)
        return 2
    native = read_json(native_path)
    return comparison(args, lambda: jobs(base, out), lambda: rows(base, out),
                      lambda r: (METHODS.index(r["method"]), r["metric"]), lambda results: table(results, native))


if __name__ == "__main__":
    sys.exit(main())
