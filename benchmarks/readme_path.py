"""The README's MobileBERT path as printed, on a user's CSV (issue 74, item 3: the defaults a user gets from
`finetune` fit the model they are given): steps 1-4 with every flag at its default, the student's task distillation
(step 4) at finetune's default learning rate (`default`: 5e-4 for a model under 20M parameters, `mobilekd.data.tasks.
default_lr`) against BERT's 5e-5 (`bert-lr`), the default that step gave `mobilebert_h384` (14.8M) before the
threshold moved from 10M to 20M. Seeds 0-2 for step 4, declared here; steps 1-2 run once, step 3 once a task.

    python -m benchmarks.readme_path                  # about 25 minutes on 2 cores; resumable
    python -m benchmarks.readme_path --table --write  # the table into docs/guide.md from the rows

The tasks (benchmarks.custom, from text the repo ships), each handed to `--task custom --data` as a user's CSV:
stsb-genre (the STS-B sentences' genre, 3 classes, 5,749 training sentences) and docstring-library (a Python
docstring's library, 6 classes, 2,160), the second added after stsb-genre's seed 0 had run (a small many-class
task, as the issue's 10-class example, where BERT's rate gave a useless model). Step 1: `train-teacher --init-from
all-minilm-l6-v2`; step 2: `distill --teacher T --layer-map uniform` (PKT into `mobilebert_h384`, the recipe's
default steps); step 3: the teacher fine-tuned on the task; step 4: the student with `--teacher` (logit KD), its
step chosen on a validation split of the training data, dev scored once. Rows (docs/results/readme_path.json):
each step-4 run's dev accuracy (with its teacher's, `teacher_value`), TF-IDF + LR's and the majority class's on
each seed's training split (methods "tfidf" and "majority"), and the paired interval (mobilekd/finetune/intervals.py)
of default - bert-lr per task.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mobilekd.finetune import intervals
from benchmarks.command import comparison, comparison_flags
from benchmarks.custom import write_task
from benchmarks.rows import baseline_rows, paired_runs
from benchmarks.runner import Job
from benchmarks.stats import mean_std_cell, values
from mobilekd.data.tasks import BERT_LR
from mobilekd.fileio import REPO_ROOT

TASKS = ("stsb-genre", "docstring-library")
METHODS = ("default", "bert-lr")
PAIRS = (("default", "bert-lr"),)
METRIC = "accuracy"


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    teacher, student = out / "teacher", out / "student"
    plan = [Job("1-adapt", ["train-teacher", "--init-from", "all-minilm-l6-v2", "--out", str(teacher)], teacher),
            Job("2-pkt", ["distill", "--teacher", str(teacher), "--layer-map", "uniform", "--out", str(student)],
                student, needs=["1-adapt"])]
    lr = {"default": [], "bert-lr": ["--lr", str(BERT_LR)]}
    for name in tasks:
        task, taught = ["--task", "custom", "--data", str(write_task(name, out / "data"))], out / name / "teacher"
        plan.append(Job(f"{name}/3-teacher", ["finetune", "--model", str(teacher), *task, "--out", str(taught)],
                        taught, needs=["1-adapt"]))
        plan += [Job(f"{name}/4-student/{m}/{seed}", [
            "finetune", "--model", str(student), *task, "--teacher", str(taught), *lr[m], "--seed", str(seed),
            "--out", str(out / name / m / f"seed{seed}")], out / name / m / f"seed{seed}",
            needs=["2-pkt", f"{name}/3-teacher"]) for seed in seeds for m in METHODS]
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        found += paired_runs(out, task, seeds, METHODS, PAIRS, metric=METRIC)
        for seed in seeds:  # TF-IDF + LR on the seed's training split (both methods' runs of a seed carve one)
            found += baseline_rows(out / task / METHODS[0] / f"seed{seed}", task, seed, METRIC)
    return found


def table(results: list[dict]) -> str:
    lines = ["| task | step 4 at finetune's default lr | step 4 at BERT's 5e-5 (the default before) | default - BERT's "
             "| teacher (step 3) | TF-IDF + LR |", "|---|---|---|---|---|---|"]
    for task in TASKS:
        mine = [r for r in results if r["task"] == task]
        if not mine:
            continue
        cells = [mean_std_cell(v) if (v := values(results, task, METRIC, m)) else "-" for m in METHODS]
        stored = [r for r in mine if r["method"] == "default-bert-lr"]
        teacher = sorted({r["teacher_value"] for r in mine if r.get("teacher_value") is not None})
        tfidf = sorted(values(results, task, METRIC, "tfidf"))
        lines.append(f"| {task} ({METRIC}) | {cells[0]} | {cells[1]} | "
                     f"{intervals.cell(stored[0]['interval']) if stored else '-'} | "
                     f"{', '.join(f'{x:.4f}' for x in teacher) or '-'} | "
                     f"{', '.join(f'{x:.4f}' for x in tfidf) or '-'} |")
    lrs = {m: sorted({r["lr"] for r in results if r["method"] == m and "lr" in r}) for m in METHODS}
    used = "; ".join(f"{m} " + ", ".join(f"{x:g}" for x in v) for m, v in lrs.items() if v) or "-"
    return "\n".join(lines) + (
        f"\n\nThe README's MobileBERT path with every flag at its default but step 4's --lr (learning rates used: "
        f"{used}); the difference "
        "in points with its paired 95% bootstrap interval over dev examples and seeds "
        "(mobilekd/finetune/intervals.py).\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.readme_path", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/readme_path", "docs/results/readme_path.json", list(TASKS), TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (TASKS.index(r["task"]), METHODS.index(r["method"]) if r["method"] in METHODS
                                 else len(METHODS), r.get("seed") or 0, r["metric"]), table)


if __name__ == "__main__":
    sys.exit(main())
