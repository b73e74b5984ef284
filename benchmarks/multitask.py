"""MT-DNN knowledge distillation on the shipped GLUE tasks (issue 19): single-task models, their per-task
ensembles, one multi-task model without and with distillation from those ensembles; one row per run, task and dev
metric to docs/results/multitask.json, a Markdown table, and the one shared .tflite against the single-task files.

    python -m benchmarks.multitask                   # everything, resumable (about 4 hours on 2 cores)
    python -m benchmarks.multitask --seeds 0         # one seed of the multi-task runs (the ensembles need 3 teachers)
    python -m benchmarks.multitask --collect         # write the finished runs' rows now, run nothing
    python -m benchmarks.multitask --table           # print the table from the file
    python -m benchmarks.multitask --table --write   # and put it between its markers in its page

As in Liu et al. (2019) the student has the teachers' architecture: the adapted all-MiniLM-L6-v2 of issue 13
(`--stages`, runs/teacher_value), whose encoder every run starts from.

    single-task             the teacher fine-tuned on one task, seeds 0-2: issue 13's runs for SST-2, STS-B and MRPC
                            (benchmarks.teacher_value's flags), issue 16's flags for RTE and CoLA (benchmarks.methods);
                            scored by the distilled multi-task run at sequence 128, as every row here is
    ensemble                per task, those three models' averaged probabilities (regression: their mean score); one
                            ensemble, so one row (seed 0)
    multi-task              one encoder and five task layers (`mobilekd multitask`), seeds 0-2
    multi-task-ensemble-kd  the same with each task's ensemble as its teacher (soft targets added to the labels, the
                            official code's sum; regression: MSE to the ensemble's mean score too), seeds 0-2
    variants (seed 0)       the KD run with the paper's average instead of the sum, and without the regression KD

Budget: every multi-task run reads at most 10,000 training examples per task (drawn once, seed 0: all of STS-B,
MRPC, RTE and CoLA, a tenth of SST-2, as the single-task SST-2 models have), for 1 epoch of task-shuffled
mini-batches of 32, at the teachers' learning rate, sequence 128. The single-task models had 1 epoch on SST-2 and
STS-B and 3 on MRPC, RTE and CoLA (4,000 examples): the multi-task runs see those three tasks fewer times.
The seed-0 distilled model is exported once, one file for all tasks, beside each task's own file, and timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import methods, teacher_value
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import parameters
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import (VERDICTS, columns, judged_cell, mean_std_cell, metric_rank, paired_differences, values,
                              verdict)
from mobilekd.rundir import finished_results
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.rundir import trained_on

TASKS = ["sst2", "mrpc", "stsb", "rte", "cola"]
MULTITASK = ["--max-train-examples", "10000", "--subset-seed", "0", "--epochs", "1", "--max-len", "128",
             "--lr", teacher_value.TEACHER_LR]
# method -> the multitask flags beyond the shared ones, whether it learns from the ensembles, its seeds (None: all)
RUNS = {"multi-task": ([], False, None), "multi-task-ensemble-kd": ([], True, None),
        "multi-task-ensemble-kd-mean": (["--kd-combine", "mean"], True, [0]),
        "multi-task-ensemble-kd-no-regression-kd": (["--no-regression-kd"], True, [0])}
METHODS = ["single-task", "ensemble", *RUNS]
ENSEMBLE_SEEDS = [0, 1, 2]


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / method / f"seed{seed}"


def jobs(out: Path, stages: Path, methods_out: Path, seeds: list[int]) -> list[Job]:
    """The adapted teacher, the single-task models (the ensembles' members), the multi-task runs seed by seed, the
    export and timing of the seed-0 distilled model, then the variants."""
    plan = [j for j in teacher_value.jobs(stages, [], [], stages) if j.name == "adapt"]
    teachers = {t: [methods.teacher_job(methods_out, stages, t, s) for s in ENSEMBLE_SEEDS] for t in TASKS}
    plan += [teachers[t][i] for i in range(len(ENSEMBLE_SEEDS)) for t in TASKS]
    ensembles = ["--teachers", *(f"{t}={','.join(str(j.out) for j in teachers[t])}" for t in TASKS)]
    runs = []
    for method, (flags, taught, only) in RUNS.items():
        for seed in (only or seeds):
            d = run_dir(out, method, seed)
            runs.append(Job(f"{method}/{seed}", ["multitask", "--model", str(stages / "teacher"), "--tasks", *TASKS,
                                                 *MULTITASK, *flags, *(ensembles if taught else []), "--seed",
                                                 str(seed), "--out", str(d), *RESUMABLE],
                            d, ["adapt"] + ([j.name for ts in teachers.values() for j in ts] if taught else [])))
    variants = [j for j in runs if j.name.split("/")[0] not in ("multi-task", "multi-task-ensemble-kd")]
    plan += [j for j in runs if j not in variants]
    if 0 in seeds:  # the file and its timing are the seed-0 distilled model's, made before the variants run
        model, tflite = run_dir(out, "multi-task-ensemble-kd", 0), out / "tflite"
        plan.append(Job("export", ["export", "--model", str(model), "--max-len", "128", "--single-task-files",
                                   "--parity-examples", "1000", "--out", str(tflite)], tflite,
                        ["multi-task-ensemble-kd/0"]))
        plan.append(Job("latency", ["latency", "--models", "--quantize", "none", "--threads", "1", "--devices",
                                    "pixel4", "--out", str(out / "latency"), "--tflite",
                                    f"multi-task={tflite}/model_multitask_none.tflite",
                                    *(f"{t}={tflite}/model_{t}.tflite" for t in TASKS)], out / "latency", ["export"]))
    return plan + variants


def rows(out: Path, seeds: list[int]) -> list[dict]:
    """The finished runs' rows, every one scored on the full dev sets at sequence 128 by a multi-task run: the
    multi-task models'; the single-task models' (the ensemble members, as the first finished distilled run scored
    them, so on the same encodings as the ensemble and the multi-task models) and the ensemble's."""
    found, members = [], None
    for method, (_, taught, only) in RUNS.items():
        for seed in (only or seeds):
            d = run_dir(out, method, seed)
            r = finished_results(d)
            if r is None:
                continue
            shared = {"params": parameters(d), "train_seconds": r["wall_seconds"], "steps": r["steps"], "lr": r["lr"],
                      **trained_on(r)}
            for task, scores in r["tasks"].items():
                found += _metric_rows(task, method, seed, next(iter(scores["metrics"].values())), shared)
            if taught and members is None:
                members = r["tasks"]
    for task, scores in (members or {}).items():
        for seed, teacher in zip(ENSEMBLE_SEEDS, scores["teachers"]):
            own = finished_results(Path(teacher["model"])) or {}
            found += _metric_rows(task, "single-task", seed, teacher["metrics"],
                                  {"train_seconds": own.get("wall_seconds"), "steps": own.get("steps"),
                                   **trained_on(own)})
        found += _metric_rows(task, "ensemble", 0, scores["ensemble"], {"members": len(scores["teachers"])})
    sizes = _sizes(out)
    return [{**r, **sizes.get((r["method"], r["seed"]), {})} for r in found]


def _metric_rows(task: str, method: str, seed: int, metrics: dict, shared: dict) -> list[dict]:
    names = sorted(metrics, key=lambda m: metric_rank(task, m))
    return [{"task": task, "method": method, "seed": seed, "metric": m, "value": round(metrics[m], 4), **shared}
            for m in names]


def _sizes(out: Path) -> dict:
    """The exported seed-0 distilled model's file, and the single-task files of the same weights: bytes, host
    latency at 1 thread and the Pixel 4 estimate, keyed (method, seed)."""
    parity, report = out / "tflite" / "parity.json", out / "latency" / "report.json"
    if not (parity.is_file() and report.is_file()):
        return {}
    files, timed = read_json(parity), read_json(report)["rows"]
    shared = timed.get("multi-task")
    if "model_multitask_none.tflite" not in files or shared is None:
        return {}
    single = [files[f"model_{t}.tflite"]["size_bytes"] for t in TASKS if f"model_{t}.tflite" in files]
    return {("multi-task-ensemble-kd", 0): {
        "tflite_bytes": files["model_multitask_none.tflite"]["size_bytes"], "single_task_tflite_bytes": sum(single),
        "host_ms": shared["host"]["1"]["p50_ms"], "pixel4_ms": shared["estimate_ms"]["pixel4"],
        "single_task_host_ms": [timed[t]["host"]["1"]["p50_ms"] for t in TASKS if t in timed]}}


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task (official metric) and method, and their average over the tasks."""
    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    lines = ["| method | " + " | ".join(f"{t} ({m})" for t, m in cols) + " | mean of the task means |",
             "|---|" + "---|" * (len(cols) + 1)]
    for method in METHODS:
        cells = [mean_std_cell(values(results, *c, method)) if values(results, *c, method) else "-" for c in cols]
        means = [statistics.mean(values(results, *c, method)) for c in cols if values(results, *c, method)]
        if means:
            average = f"{statistics.mean(means):.4f}" if len(means) == len(cols) else "-"
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {average} |")
    return "\n".join(lines) + "\n"


def claim(results: list[dict]) -> str:
    """The source documents' claim, per task on its official metric, each difference judged against the seeds'
    noise (`stats.verdict`): the ensemble's gain over each single-task model (one ensemble, n=1, against the three
    models it averages), the multi-task models' gains over the single-task models and KD's own effect (with -
    without), each paired by seed; and the share of the ensemble's gain the distilled model keeps, where there is a
    gain that holds."""
    lines = ["| task | single-task | ensemble gain over each single-task model (one ensemble, n=1) | multi-task gain | "
             "multi-task + ensemble KD gain | KD's effect | share of the ensemble's gain kept |",
             "|---|---|---|---|---|---|---|"]
    for col in [c for c in columns(results) if metric_rank(*c) == 0]:
        single = values(results, *col, "single-task")
        ensemble, kd = values(results, *col, "ensemble"), values(results, *col, "multi-task-ensemble-kd")
        if not (single and ensemble and kd):
            continue
        gain = [ensemble[0] - s for s in single]
        mt, with_kd, effect = (paired_differences(results, *col, a, b) for a, b in (
            ("multi-task", "single-task"), ("multi-task-ensemble-kd", "single-task"),
            ("multi-task-ensemble-kd", "multi-task")))
        kept = statistics.mean(kd) - statistics.mean(single)
        share = (f"{kept / statistics.mean(gain):.0%}" if verdict(gain) == "holds"
                 else f"none to keep (the ensemble's gain: {verdict(gain)})")
        lines.append(f"| {col[0]} ({col[1]}) | {mean_std_cell(single)} | {judged_cell(gain)} | "
                     f"{judged_cell(mt) if mt else '-'} | {judged_cell(with_kd) if with_kd else '-'} | "
                     f"{judged_cell(effect) if effect else '-'} | {share} |")
    sized = next((r for r in results if r.get("tflite_bytes")), None)
    if sized:
        lines += ["", f"One multi-task file: {sized['tflite_bytes'] / 1e6:.1f} MB, against "
                      f"{sized['single_task_tflite_bytes'] / 1e6:.1f} MB for the {len(TASKS)} single-task files; "
                      f"host {sized['host_ms']:.1f} ms (1 thread; single-task files "
                      f"{min(sized['single_task_host_ms']):.1f}-{max(sized['single_task_host_ms']):.1f} ms in the "
                      f"same run), Pixel 4 estimate {sized['pixel4_ms']:.1f} ms."]
    return "\n".join(lines + ["", VERDICTS]) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.multitask", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/multitask", "docs/results/multitask.json")
    p.add_argument("--stages", default="runs/teacher_value", help="where the adapted teacher and issue 13's "
                                                                  "fine-tuned teachers are (or go)")
    p.add_argument("--methods-out", default="runs/methods", help="where issue 16's RTE and CoLA teachers are (or go)")
    args = p.parse_args(argv)
    out, stages, methods_out = ((REPO_ROOT / d).resolve() for d in (args.out, args.stages, args.methods_out))
    return comparison(args, lambda: jobs(out, stages, methods_out, args.seeds),
                      lambda: rows(out, args.seeds),
                      lambda r: (TASKS.index(r["task"]), metric_rank(r["task"], r["metric"]),
                                 METHODS.index(r["method"]), r["seed"]),
                      lambda results: table(results) + "\n" + claim(results))


if __name__ == "__main__":
    sys.exit(main())
