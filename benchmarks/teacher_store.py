"""The teacher's stored layer features beside the teacher run at every step (issue 76, item 1): TinyBERT's task
distillation (`finetune --method tinybert`: intermediate-layer matching against the fine-tuned teacher, then the
prediction step) of one student, each seed run twice at once on the two cores, one thread each: reading the
teacher's features from its store (`mobilekd/finetune/teacher_features.py`; seed 0's run builds it, the others
read it, adding the few examples their own validation carve leaves in training) and with `--teacher-store-gb 0`
(the teacher run at every intermediate step, as task_distill.py does). Seeds 0-2, declared here.

    python -m benchmarks.teacher_store                    # about 45 minutes on 2 cores; resumable
    python -m benchmarks.teacher_store --table --write    # the table into docs/throughput.md from the rows

The teacher is the demo's (all-MiniLM-L6-v2 adapted, as benchmarks.minilm uses), fine-tuned on the task's
training examples; the student its layers 0 and 5 (`mobilekd init TEACHER OUT --layers spread:2`: 12 heads, so
TinyBERT's attention scores pair head by head). Every run: the same 8,000 SST-2 training examples (drawn once,
seed 0), 2 intermediate epochs then 2 prediction epochs at the students' learning rate, its step chosen on a
validation split of those examples, dev scored once. Rows (docs/results/teacher_store.json): each run's dev and
validation scores with its seconds (the intermediate step's, the whole run's, the store's making or reading) and
host; the store's size; the paired interval (mobilekd/finetune/intervals.py) of stored - live in the task's metric.
A second machine's runs stand beside the first's, and the table gives each host its own lines and ratios.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from benchmarks import teacher_value
from benchmarks.rows import dev_predictions as predictions
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import finetune_rows, recorded_host
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import mean_std_cell, values
from mobilekd.finetune import intervals
from mobilekd.rundir import finished_results
from mobilekd.data.tasks import GLUE_TASKS
from mobilekd.fileio import REPO_ROOT

TASKS = {"sst2": "64"}  # --max-len per task
DATA = ["--max-train-examples", "8000", "--subset-seed", "0"]
FINETUNE = [*DATA, "--epochs", "2", "--intermediate-epochs", "2", "--select-on", "validation",
            "--lr", teacher_value.STUDENT_LR, "--threads", "1"]
VARIANTS = {"stored": [], "live": ["--teacher-store-gb", "0"]}  # the teacher's features read, or computed each step
NAMES = {"stored": "teacher's features from the store", "live": "teacher run at every step"}


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    teacher = out / "teacher"
    plan = [Job("teacher", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("init", ["init", str(teacher), str(out / "init"), "--layers", "spread:2"], out / "init",
                needs=["teacher"])]
    for task, length in TASKS.items():
        if task not in tasks:
            continue
        tuned = out / task / "teacher"
        plan.append(Job(f"{task}/teacher", ["finetune", "--model", str(teacher), "--task", task, "--max-len", length,
                                            *DATA, "--lr", teacher_value.TEACHER_LR,
                                            *teacher_value.TEACHER_TASKS.get(task, []), "--select-on", "validation",
                                            "--threads", "1", "--out", str(tuned)], tuned,
                        needs=["teacher"]))
        previous: list[str] = []
        for seed in seeds:  # a seed's two runs start together, after the previous seed's two have ended
            pair = [f"{task}/{v}/{seed}" for v in VARIANTS]
            plan += [Job(name, ["finetune", "--model", str(out / "init"), "--teacher", str(tuned), "--task", task,
                                "--method", "tinybert", "--max-len", length, *FINETUNE, *VARIANTS[v], "--seed",
                                str(seed), "--out", str(out / task / v / f"seed{seed}")],
                         out / task / v / f"seed{seed}", needs=["init", f"{task}/teacher"], after=previous)
                     for name, v in zip(pair, VARIANTS)]
            previous = pair
    return plan


def timing_rows(run: Path, **identity) -> list[dict]:
    """A finished run's seconds: its intermediate step's, the whole run's and the store's (getting it: making or
    reading), each with the host that measured them."""
    r = finished_results(run)
    if r is None:
        return []
    stage = next(s for s in r["training"] if s["stage"] == "intermediate")
    host = recorded_host(stage)
    found = [{**identity, "metric": "intermediate_seconds", "value": stage["seconds"], "steps": stage["steps"],
              **host},
             {**identity, "metric": "wall_seconds", "value": r["wall_seconds"], **host}]
    if "teacher_store_bytes" in r:
        found.append({**identity, "metric": "teacher_store_seconds", "value": r["teacher_store_seconds"],
                      "hit_rate": r["teacher_store_hit_rate"], "bytes": r["teacher_store_bytes"],
                      "precision": r["teacher_store_precision"],
                      **host})
    return found


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        for v in VARIANTS:
            for seed in seeds:
                run = out / task / v / f"seed{seed}"
                found += finetune_rows(run, task=task, method=v, seed=seed)
                found += timing_rows(run, task=task, method=v, seed=seed)
        done = [s for s in seeds if all((out / task / v / f"seed{s}" / "dev_predictions.tsv").is_file()
                                        for v in VARIANTS)]
        if done:
            got = {v: [predictions(out / task / v / f"seed{s}") for s in done] for v in VARIANTS}
            labels, metric = got["live"][0][0], GLUE_TASKS[task].metrics[0]
            hosts = sorted({r["host"] for r in found if r["task"] == task and r.get("host")})
            found.append({"task": task, "method": "stored-live", "seed": None, "metric": metric, "value": None,
                          "host": ", ".join(hosts), "seeds": done, "interval": intervals.paired_bootstrap(
                              labels, np.array([p for _, p in got["stored"]]), np.array([p for _, p in got["live"]]),
                              metric=intervals.metric_function(task, metric))})
    return found


def _cell(results, task, metric, method) -> str:  # results: one host's rows
    v = values(results, task, metric, method)
    return f"{np.mean(v):.1f} ± {np.std(v):.1f}" if v else "-"


def table(results: list[dict]) -> str:
    lines = ["| task (metric) | method | dev score | intermediate step (s) | whole run (s) | seeds | host |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for task, host in sorted({(r["task"], r["host"]) for r in results if r["task"] in TASKS and r.get("host")},
                             key=lambda th: (list(TASKS).index(th[0]), th[1])):
        # each host's runs apart: a second machine's seconds stand beside the first's, never averaged with them
        mine = [r for r in results if r["task"] == task and r.get("host") == host]
        metric = next((r["metric"] for r in mine if r["method"] == "live" and r["metric"] in GLUE_TASKS[task].metrics),
                      None)
        if metric is None:
            continue
        here = []
        for v in VARIANTS:
            score = values(mine, task, metric, v)
            lines.append(f"| {task} ({metric}) | {NAMES[v]} | {mean_std_cell(score) if score else '-'} | "
                         f"{_cell(mine, task, 'intermediate_seconds', v)} | "
                         f"{_cell(mine, task, 'wall_seconds', v)} | {len(score)} | {host} |")
        step = {v: {r["seed"]: r["value"] for r in mine if r["method"] == v and r["metric"] == "intermediate_seconds"}
                for v in VARIANTS}
        wall = {v: {r["seed"]: r["value"] for r in mine if r["method"] == v and r["metric"] == "wall_seconds"}
                for v in VARIANTS}
        paired = sorted(set(step["stored"]) & set(step["live"]))
        if paired:
            ratios = [step["live"][s] / step["stored"][s] for s in paired]
            whole = [wall["live"][s] / wall["stored"][s] for s in paired if s in wall["live"] and s in wall["stored"]]
            met = "met" if min(whole[1:] or [0]) >= 1.8 else "missed"
            here.append(f"{task} on {host}: the intermediate step {np.mean(ratios):.2f}x as fast with the store as "
                        f"with the teacher run at every step ({', '.join(f'{x:.2f}' for x in ratios)} for seeds "
                        f"{', '.join(map(str, paired))}), the whole run {np.mean(whole):.2f}x "
                        f"({', '.join(f'{x:.2f}' for x in whole)}; goal for a seed after the first, 1.8x: {met})")
        store = [r for r in mine if r["metric"] == "teacher_store_seconds"]
        if store:
            here.append(f"the store ({max(r['bytes'] for r in store) / 1e9:.2f} GB, {store[0]['precision']}): "
                        + ", ".join(f"seed {r['seed']} found {r['hit_rate']:.0%} of its examples stored and spent "
                                    f"{r['value']:.0f} s getting it" for r in store))
        walls = {r["seed"]: r["value"] for r in mine if r["method"] == "stored" and r["metric"] == "wall_seconds"}
        first = next((r["seed"] for r in store if r["hit_rate"] == 0), None)
        if first in walls and len(walls) > 1:
            later = [v for s, v in walls.items() if s != first]
            here.append(f"a later seed's whole run {walls[first] / np.mean(later):.2f}x as fast as the seed that "
                        f"made the store")
        diff = [r for r in mine if r["method"] == "stored-live"]
        if diff:
            here.append(f"stored - live {intervals.cell(diff[0]['interval'])} points of {metric} "
                        f"(paired 95% bootstrap over dev examples and seeds {diff[0]['seeds']})")
        if here:
            notes.append("; ".join(here) + ".")
    return "\n".join(lines) + "\n" + "".join(f"\n{n}\n" for n in notes)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.teacher_store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/teacher_store", "docs/results/teacher_store.json", list(TASKS), TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    metrics = ["intermediate_seconds", "wall_seconds", "teacher_store_seconds"]
    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (list(TASKS).index(r["task"]), r.get("host") or "", r["method"], r.get("seed") or 0,
                                 metrics.index(r["metric"]) if r["metric"] in metrics else -1), table)


if __name__ == "__main__":
    sys.exit(main())
