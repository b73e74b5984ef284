"""What a teacher that knows English is worth downstream (issue 13): over seeds and GLUE tasks, fine-tune the
adapted teacher (all-MiniLM-L6-v2 + MLM/NSP heads), the PKT student, the PKT student with task distillation from
the fine-tuned teacher, the same student architecture from random initialisation, and AKT and JKT students at PKT's
total steps; write one row per run and dev metric to docs/results/teacher_value.json and print its Markdown table
and the issue's goals as measured.

    python -m benchmarks.teacher_value                      # everything (several hours on 2 cores), resumable
    python -m benchmarks.teacher_value --seeds 0 --tasks sst2 --workers 1
    python -m benchmarks.teacher_value --collect            # write the finished runs' rows now, run nothing
    python -m benchmarks.teacher_value --table              # print the table from the results file only

Every run is a subprocess of the toolkit's own recipes (`python -m mobilekd train-teacher | distill | init |
finetune`), one thread each, `--workers` at a time; a finished run (its summary.json or complete results.json)
is skipped, an interrupted one resumes from its checkpoint. The task-agnostic stages run once (seed 0: one
adapted teacher, one student per strategy); every fine-tuning run is repeated per seed (its data order,
classifier and dropout; the from-scratch student also gets its own initialisation per seed). Fine-tuning is
scored on dev once, after its last step (--eval-every 0): the reported model is the last one, not one picked on
dev.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.runner import (RESUMABLE, Job, columns, comparison, comparison_flags, finetune_rows, mean_std_cell,
                               metric_rank, values)
from mobilekd.fileio import REPO_ROOT
from mobilekd.run_config import DEMO, flag_text, flags, run_settings

# The settings are the demo's run configuration (configs/demo.json, its packaged-teacher mode: the one home of its
# steps and learning rates); scripts/demo.sh runs them once (seed 0, SST-2 only), this benchmark over seeds and tasks.
SETTINGS = run_settings(DEMO, "packaged-teacher")
TEACHER = SETTINGS["train-teacher"]["--init-from"]
STUDENT = SETTINGS["student"]
STRATEGIES = ("pkt", "akt", "jkt")
ADAPT = flags(SETTINGS["train-teacher"])
TRANSFER = ["--student", STUDENT, *flags(SETTINGS["distill"])]
TASKS = {task: flags(task_flags) for task, task_flags in SETTINGS["tasks"].items()}  # fine-tuning flags per task
TEACHER_LR, STUDENT_LR = flag_text(SETTINGS["teacher_lr"]), flag_text(SETTINGS["student_lr"])
METHODS = ("teacher", "pkt", "pkt_task_kd", "scratch", "akt", "jkt")


def finetune_dir(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "finetune" / task / method / f"seed{seed}"


def jobs(out: Path, tasks: list[str], seeds: list[int], stages: Path | None = None) -> list[Job]:
    """Every run, in the order they should start: seed by seed, so that partial results are whole seeds, and the
    AKT and JKT students last (they run both models at full depth with attention maps in every layer-wise step,
    so they cost several times PKT at equal steps). The teacher and students live in `stages` (default `out`)."""
    stages = stages or out
    teacher = stages / "teacher"
    students = {s: stages / "students" / s for s in STRATEGIES}
    one = RESUMABLE
    plan = [Job("adapt", ["train-teacher", *ADAPT, "--out", str(teacher), *one], teacher)]
    for seed in seeds:
        scratch = stages / "students" / f"scratch_seed{seed}"
        plan.append(Job(f"init/{seed}", ["init", STUDENT, str(scratch), "--seed", str(seed)], scratch))
    distills = [Job(f"distill/{s}", ["distill", *TRANSFER, "--strategy", s, "--teacher", str(teacher),
                                     "--out", str(students[s]), *one], students[s], ["adapt"])
                for s in STRATEGIES]
    plan.append(distills[0])
    later = distills[1:]
    for seed in seeds:
        for task in tasks:
            def ft(method, model, lr, needs, *extra):
                d = finetune_dir(out, task, method, seed)
                return Job(f"{task}/{method}/{seed}", ["finetune", "--task", task, *TASKS[task], "--model", str(model),
                                                       "--lr", lr, "--seed", str(seed), "--eval-every", "0",
                                                       "--out", str(d), *one,
                                                       *extra], d, needs)
            t_dir = finetune_dir(out, task, "teacher", seed)
            plan += [ft("teacher", teacher, TEACHER_LR, ["adapt"]),
                     ft("scratch", stages / "students" / f"scratch_seed{seed}", STUDENT_LR, [f"init/{seed}"])]
            plan += [ft("pkt", students["pkt"], STUDENT_LR, ["distill/pkt"]),
                     ft("pkt_task_kd", students["pkt"], STUDENT_LR, ["distill/pkt", f"{task}/teacher/{seed}"],
                        "--teacher", str(t_dir))]
            later += [ft(s, students[s], STUDENT_LR, [f"distill/{s}"]) for s in STRATEGIES[1:]]
    return plan + later


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    """The finished fine-tuning runs' rows (their dev scores at the end of training, one row per metric)."""
    return [row for task in tasks for method in METHODS for seed in seeds
            for row in finetune_rows(finetune_dir(out, task, method, seed), task=task, method=method, seed=seed,
                                     student=TEACHER if method == "teacher" else STUDENT)]


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task, metric and method, with the share of the teacher's mean."""
    cols = columns(results)
    lines = ["| method | params | " + " | ".join(f"{t} ({m})" for t, m in cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for method in METHODS:
        params = next((f"{r['params'] / 1e6:.1f}M" for r in results if r["method"] == method), "-")
        cells = []
        for task, metric in cols:
            vals, teacher = values(results, task, metric, method), values(results, task, metric, "teacher")
            shown = teacher and method != "teacher" and statistics.mean(teacher) > 0
            share = f" ({100 * statistics.mean(vals) / statistics.mean(teacher):.0f}%)" if vals and shown else ""
            cells.append(mean_std_cell(vals, share) if vals else "-")
        lines.append(f"| {method} | {params} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def goals(results: list[dict]) -> str:
    """Issue 13's goals, measured on every (task, metric) column: PKT beats scratch on SST-2 by 3 points and
    elsewhere by more than two standard deviations; task distillation adds on average (over the tasks' official
    metrics); the student keeps 90% of the teacher's SST-2 score; and the downstream order of AKT, JKT and PKT."""
    def mean(col, method):
        v = values(results, *col, method)
        return statistics.mean(v) if v else float("nan")

    cols = [c for c in columns(results) if values(results, *c, "pkt") and values(results, *c, "scratch")]
    official = [c for c in cols if metric_rank(*c) == 0]
    lines = ["| goal | measured | target | met |", "|---|---|---|---|"]
    for col in cols:
        name, gap = f"{col[0]} {col[1]}", round(mean(col, "pkt") - mean(col, "scratch"), 4)
        if col[0] == "sst2":
            lines.append(f"| PKT - scratch, {name} | {gap:+.4f} | +0.03 | {'yes' if gap >= 0.03 else 'no'} |")
            continue
        spread = [statistics.stdev(values(results, *col, m)) for m in ("pkt", "scratch")
                  if len(values(results, *col, m)) > 1]
        if len(spread) < 2:
            lines.append(f"| PKT - scratch, {name} | {gap:+.4f} | > 2 std | n/a (fewer than 2 seeds) |")
            continue
        bar = 2 * max(spread)  # the larger std of the two, over fine-tuning seeds (each student is distilled once)
        lines.append(f"| PKT - scratch, {name} | {gap:+.4f} | > 2 std ({bar:.4f}) | {'yes' if gap > bar else 'no'} |")
    kd = [mean(c, "pkt_task_kd") - mean(c, "pkt") for c in official if values(results, *c, "pkt_task_kd")]
    if kd:
        kd_mean = statistics.mean(kd)
        lines.append(f"| task KD - PKT, mean over {len(kd)} tasks | {kd_mean:+.4f} | > 0 | "
                     f"{'yes' if kd_mean > 0 else 'no'} |")
    sst2 = ("sst2", "accuracy")
    if values(results, *sst2, "teacher") and values(results, *sst2, "pkt"):
        share = mean(sst2, "pkt") / mean(sst2, "teacher")
        lines.append(f"| PKT student / teacher, sst2 | {share:.1%} | 90% | {'yes' if share >= 0.9 else 'no'} |")
    for col in official:
        seeds = [{r["seed"] for r in results if (r["task"], r["metric"], r["method"]) == (*col, m)}
                 for m in ("akt", "jkt", "pkt")]
        shared = set.intersection(*seeds)
        if not shared:
            continue

        def on_shared(m, col=col, shared=shared):
            return statistics.mean(r["value"] for r in results
                                   if (r["task"], r["metric"], r["method"]) == (*col, m) and r["seed"] in shared)

        order = sorted(("akt", "jkt", "pkt"), key=lambda m: -on_shared(m))
        lines.append(f"| downstream order, {col[0]} {col[1]}, {len(shared)} seeds (paper: pkt > jkt > akt) | "
                     f"{' > '.join(f'{m} {on_shared(m):.4f}' for m in order)} | - | - |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.teacher_value", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/teacher_value", "docs/results/teacher_value.json", ["sst2", "stsb", "mrpc"], TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (r["task"], metric_rank(r["task"], r["metric"]), METHODS.index(r["method"]), r["seed"]),
                      lambda results: table(results) + "\n" + goals(results))


if __name__ == "__main__":
    sys.exit(main())
