"""What the official MobileBERT code's choices do downstream (issue 14): PKT students distilled from the teacher of
`benchmarks.teacher_value` with each choice changed alone, fine-tuned on SST-2 (by default; `--tasks` adds others) over
seeds beside the default PKT student; rows to docs/results/fidelity.json.

    python -m benchmarks.fidelity              # resumable; reuses teacher_value's teacher, PKT student and its runs
    python -m benchmarks.fidelity --table
    python -m benchmarks.fidelity --table --write  # and put it between its markers in its page

Variants (each against `pkt`, the defaults):
    pkt_mean_var  mean and variance transfer at the official run's weights (5000 and 5; README command of
                  google-research mobilebert, flags beta_distill_factor / gamma_distill_factor)
    pkt_soft      --freeze soft: TF1's layer-wise learning rates and per-phase schedule (distill_util.py)
    pkt_mask6     the student masks padding as TF1 since 2021: scores * mask + (1 - mask) * -6 (modeling.py)
Everything else is the teacher_value benchmark's (its TRANSFER flags, TASKS, student learning rate, last model
scored on the whole dev set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import teacher_value as tv
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import finetune_rows
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import VERDICTS, columns, judged_cell, mean_std_cell, metric_rank, paired_differences, values
from mobilekd.fileio import REPO_ROOT

VARIANTS = {
    "pkt": [],
    "pkt_mean_var": ["--mean-weight", "5000", "--var-weight", "5"],
    "pkt_soft": ["--freeze", "soft"],
    "pkt_mask6": ["--masked-score", "-6"],
}


def student_dir(base: Path, out: Path, variant: str) -> Path:
    return base / "students" / "pkt" if variant == "pkt" else out / "students" / variant


def run_dir(base: Path, out: Path, task: str, variant: str, seed: int) -> Path:
    return tv.finetune_dir(base if variant == "pkt" else out, task, variant, seed)


def jobs(base: Path, out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    """The teacher and default PKT student are teacher_value's (the same runs, skipped when done there)."""
    teacher = base / "teacher"
    plan = [Job("adapt", ["train-teacher", *tv.ADAPT, "--out", str(teacher), *RESUMABLE], teacher)]
    for variant, flags in VARIANTS.items():
        d = student_dir(base, out, variant)
        plan.append(Job(f"distill/{variant}", ["distill", *tv.TRANSFER, *flags, "--teacher", str(teacher),
                                               "--out", str(d), *RESUMABLE], d, ["adapt"]))
    for seed in seeds:
        for task in tasks:
            for variant in VARIANTS:
                d = run_dir(base, out, task, variant, seed)
                plan.append(Job(f"{task}/{variant}/{seed}", [
                    "finetune", "--task", task, *tv.TASKS[task], "--model", str(student_dir(base, out, variant)),
                    "--lr", tv.STUDENT_LR, "--seed", str(seed), "--eval-every", "0", "--out", str(d), *RESUMABLE],
                    d, [f"distill/{variant}"]))
    return plan


def rows(base: Path, out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    return [row for task in tasks for variant in VARIANTS for seed in seeds
            for row in finetune_rows(run_dir(base, out, task, variant, seed), task=task, method=variant, seed=seed,
                                     student=tv.STUDENT)]


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task, metric and variant, and the difference to the default PKT student seed by
    seed with its verdict (`stats.verdict`: does the variant score above the default beyond the seeds' noise)."""
    cols = columns(results)
    lines = ["| variant | " + " | ".join(f"{t} ({m})" for t, m in cols) + " | "
             + " | ".join(f"{t} ({m}) - pkt, seed by seed: above 0?" for t, m in cols) + " |",
             "|---|" + "---|" * 2 * len(cols)]
    for variant in VARIANTS:
        cells, deltas = [], []
        for task, metric in cols:
            vals = values(results, task, metric, variant)
            cells.append(mean_std_cell(vals) if vals else "-")
            paired = paired_differences(results, task, metric, variant, "pkt")
            deltas.append(judged_cell(paired) if paired and variant != "pkt" else "-")
        lines.append(f"| {variant} | " + " | ".join(cells + deltas) + " |")
    return "\n".join(lines) + f"\n\n{VERDICTS}\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="runs/teacher_value", help="the teacher_value benchmark's directory")
    comparison_flags(p, "runs/fidelity", "docs/results/fidelity.json", ["sst2"], tv.TASKS)
    args = p.parse_args(argv)
    base, out = (REPO_ROOT / args.base).resolve(), (REPO_ROOT / args.out).resolve()
    return comparison(args, lambda: jobs(base, out, args.tasks, args.seeds),
                      lambda: rows(base, out, args.tasks, args.seeds),
                      lambda r: (r["task"], metric_rank(r["task"], r["metric"]), list(VARIANTS).index(r["method"]),
                                 r["seed"]), table)


if __name__ == "__main__":
    sys.exit(main())
