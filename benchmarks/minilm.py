"""MiniLM's deep self-attention distillation beside DistilBERT's triple loss, on one student (issue 77, item 3):
the teacher's layers 0, 3 and 5 (`mobilekd init TEACHER OUT --layers spread:3`, DistilBERT's initialisation),
distilled task-agnostically by each strategy for the same 500 steps, then fine-tuned on the task; the same student
fine-tuned with no task-agnostic step ("init") is the floor both must clear. Seeds 0-2, declared here.

    python -m benchmarks.minilm                           # about half an hour on 2 cores; resumable
    python -m benchmarks.minilm --table --write           # the table into docs/methods.md from the rows

The teacher is the demo's: all-MiniLM-L6-v2 adapted (`train-teacher --init-from`), as benchmarks.ship uses.
Task-agnostic steps as the retired benchmarks.methods ran DistilBERT's (3 x 100 layer steps + 200 PD steps = 500
steps of 32 sequences of 64 tokens on the shipped corpora; MiniLM's and DistilBERT's plans are one stage of all 500). Each
student fine-tunes on the same 2,000 training examples (drawn once, seed 0) for 3 epochs at the students' learning
rate, its step chosen on a validation split of those examples, dev scored once. Rows (docs/results/minilm.json):
each fine-tuned run's dev and validation scores, each distillation's wall time with its host, and the paired
intervals (mobilekd/finetune/intervals.py: bootstrap over dev examples and seeds) of MiniLM - init, DistilBERT -
init and MiniLM - DistilBERT, in the task's metric.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from benchmarks import teacher_value
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import paired_runs, recorded_host
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import paired_cells
from mobilekd.fileio import REPO_ROOT, read_json

TASKS = {"sst2": "64", "mrpc": "128"}  # --max-len per task
STRATEGIES = ("minilm", "distilbert")
GENERAL = ["--layer-steps", "100", "--pd-steps", "200"]  # 3 x 100 + 200 = 500 steps, as benchmarks.methods did
FINETUNE = ["--max-train-examples", "2000", "--subset-seed", "0", "--epochs", "3", "--select-on", "validation",
            "--lr", teacher_value.STUDENT_LR, "--threads", "1"]
METHODS = ("init", *STRATEGIES)
PAIRS = (("minilm", "init"), ("distilbert", "init"), ("minilm", "distilbert"))


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    teacher = out / "teacher"
    plan = [Job("teacher", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("init", ["init", str(teacher), str(out / "init"), "--layers", "spread:3"], out / "init",
                needs=["teacher"])]
    plan += [Job(f"distill/{s}", ["distill", "--teacher", str(teacher), "--student", str(out / "init"), "--strategy", s,
                                  *GENERAL, "--threads", "1", "--resume", "--out", str(out / s)], out / s,
                 needs=["init"]) for s in STRATEGIES]
    plan += [Job(f"{task}/{m}/{seed}", ["finetune", "--model", str(out / m), "--task", task, "--max-len", length,
                                        *FINETUNE, "--seed", str(seed), "--out", str(out / task / m / f"seed{seed}")],
                 out / task / m / f"seed{seed}", needs=["init" if m == "init" else f"distill/{m}"])
             for task, length in TASKS.items() if task in tasks for seed in seeds for m in METHODS]
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for s in STRATEGIES:
        if (out / s / "summary.json").is_file():
            summary = read_json(out / s / "summary.json")
            found.append({"task": None, "method": s, "seed": 0, "metric": "wall_seconds",  # no task: every task's
                          "value": summary["wall_seconds"], "steps": summary["total_steps"],
                          **recorded_host(summary["stages"][0])})  # its one stage: where the seconds were measured
    for task in tasks:
        found += paired_runs(out, task, seeds, METHODS, PAIRS)
    return found


def table(results: list[dict]) -> str:
    lines = ["| task (metric) | init: no task-agnostic step | DistilBERT, 500 steps | MiniLM, 500 steps | "
             "MiniLM - init | DistilBERT - init | MiniLM - DistilBERT |", "|---|---|---|---|---|---|---|"]
    for task in TASKS:
        mine = [r for r in results if r["task"] == task]
        if not mine:
            continue
        metric = next((r["metric"] for r in mine if r["method"] == "init"), None)
        if metric is None:
            continue
        cells = paired_cells(results, task, metric, ("init", "distilbert", "minilm"), PAIRS)
        lines.append(f"| {task} ({metric}) | " + " | ".join(cells) + " |")
    walls = {r["method"]: r for r in results if r["task"] is None}
    note = "; ".join(f"{m} {walls[m]['value'] / 60:.1f} min on {walls[m]['host']}" for m in STRATEGIES if m in walls)
    return "\n".join(lines) + ("\n\nDifferences in points of the task's metric with their paired 95% bootstrap "
                               "intervals over dev examples and seeds (mobilekd/finetune/intervals.py). "
                               f"Task-agnostic wall time, 1 thread: {note or '-'}.\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.minilm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/minilm", "docs/results/minilm.json", list(TASKS), TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    order = [*TASKS, None]  # the task-agnostic stages' rows (task None) last
    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (order.index(r["task"]), r["method"], r.get("seed") or 0), table)


if __name__ == "__main__":
    sys.exit(main())
