"""Distillation into a BiLSTM (issue 18; Tang et al. 2019): per task and seed, the BiLSTM trained on the labels
alone (bilstm-ce), with logit KD from the fine-tuned teacher (bilstm-kd), and with logit KD over the transfer set
(bilstm-kd-aug), beside the teacher; one row per run and dev metric to docs/results/bilstm.json, with each model's
parameters, .tflite size, host latency and Pixel 4 estimate, a Markdown table and the claims as measured.

    python -m benchmarks.bilstm                 # SST-2 and MRPC, seeds 0-2 (about 50 minutes, one worker)
    python -m benchmarks.bilstm --collect       # rows of the finished runs, run nothing
    python -m benchmarks.bilstm --table
    python -m benchmarks.bilstm --table --write  # and put it between its markers in its page

Teachers: issue 13's fine-tuned teachers (all-MiniLM-L6-v2 adapted: 6 layers of 384), seed 0, from `--stages`
(python -m benchmarks.teacher_value makes them), as in benchmarks.methods. Every BiLSTM trains on the same 1,000
training examples per task as the students of benchmarks.methods (drawn once, seed 0), for 10 epochs over its
training set at lr 1e-3, batch 50, and is scored on the full dev set after its last step. The transfer set adds
up to 20 samples per SST-2 sentence (the paper's n_iter) and 10 per MRPC pair (augment_paired_data.py's), drawn
once (seed 0) with the paper's p_mask = p_pos = 0.1 and p_ng = 0.25. The embedding table is the teacher's
projected onto its first 64 principal components (`--embedding-size`): a 384-wide table is 89% of the model and
47 MB of its file, and in an early one-seed probe on SST-2 with KD (before the sentences left [CLS] and [SEP]
out) 64 wide scored 0.763 and 384 wide 0.759. The seed-0 KD +
transfer-set model of each task is exported at sequence length 128 (parity on the whole dev set) and timed at 1
thread, interleaved with the teacher's SST-2 file of benchmarks.methods in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import methods
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import finetune_rows
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import VERDICTS, columns, judged_cell, mean_std_cell, metric_rank, paired_differences
from mobilekd.fileio import REPO_ROOT, read_json

TASKS = {"sst2": ("64", "20"), "mrpc": ("128", "10")}  # --max-len, --augment
SHARED = ["--max-train-examples", "1000", "--subset-seed", "0", "--epochs", "10", "--embedding-size", "64"]
METHODS = {"teacher": [], "bilstm-ce": ["--loss", "ce"], "bilstm-kd": ["--loss", "kd"],
           "bilstm-kd-aug": ["--loss", "kd", "--augment"]}
EXPORTED = "bilstm-kd-aug"
SEQ_LEN = "128"


def run_dir(out: Path, task: str, method: str, seed: int) -> Path:
    return out / task / method / f"seed{seed}"


def teacher_tflite(methods_out: Path) -> Path:
    return methods_out / "tflite" / "teacher" / "model_none.tflite"


def jobs(out: Path, stages: Path, methods_out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    plan, exported = [], {}
    for seed in seeds:
        for task in tasks:
            teacher = methods.teacher_dir(methods_out, stages, task)
            max_len, augment = TASKS[task]
            for method, flags in METHODS.items():
                if method == "teacher":
                    continue
                flags = [*flags, augment] if "--augment" in flags else flags
                d = run_dir(out, task, method, seed)
                plan.append(Job(f"{task}/{method}/{seed}", [
                    "bilstm", "--teacher", str(teacher), "--task", task, *SHARED, "--max-len", max_len, "--seed",
                    str(seed), *flags, "--out", str(d), *RESUMABLE], d))
            if seed == seeds[0]:
                tflite = out / "tflite" / task
                exported[task] = tflite
                plan.append(Job(f"export/{task}", [
                    "export", "--model", str(run_dir(out, task, EXPORTED, seed)), "--max-len", SEQ_LEN, "--quantize",
                    "none", "--parity-examples", "2000", "--out", str(tflite)], tflite, [f"{task}/{EXPORTED}/{seed}"]))
    if exported:
        plan.append(Job("latency", ["latency", "--models", "--quantize", "none", "--threads", "1", "--devices",
                                    "pixel4", "--max-len", SEQ_LEN, "--out", str(out / "latency"), "--tflite",
                                    f"teacher={teacher_tflite(methods_out)}",
                                    *(f"bilstm-{t}={p / 'model_none.tflite'}" for t, p in exported.items())],
                        out / "latency", [f"export/{t}" for t in exported]))
    return plan


def measured(out: Path, methods_out: Path, task: str) -> dict[str, dict]:
    """The teacher's and the task's BiLSTM's size, host latency (1 thread) and Pixel 4 estimate, when measured."""
    report = out / "latency" / "report.json"
    rows = read_json(report)["rows"] if report.is_file() else {}
    found = {}
    for method, name, parity in (("teacher", "teacher", methods_out / "tflite" / "teacher" / "parity.json"),
                                 (EXPORTED, f"bilstm-{task}", out / "tflite" / task / "parity.json")):
        if name in rows and parity.is_file():
            r = rows[name]
            found[method] = {"tflite_bytes": read_json(parity)["model_none.tflite"]["size_bytes"],
                             "host_ms": r["host"]["1"]["p50_ms"], "pixel4_ms": r["estimate_ms"]["pixel4"]}
    return found


def rows(out: Path, stages: Path, methods_out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        latency = measured(out, methods_out, task)
        for method in METHODS:
            for seed in [0] if method == "teacher" else seeds:
                d = methods.teacher_dir(methods_out, stages, task) if method == "teacher" else \
                    run_dir(out, task, method, seed)
                found += [{**r, **latency.get(method if method in ("teacher", EXPORTED) else "", {})}
                          for r in finetune_rows(d, task=task, method=method, seed=seed)]
    return found


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task and method, with parameters, size and latency (the exported models')."""
    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    lines = ["| task | method | params | .tflite MB | host ms | Pixel 4 ms (est.) | dev score | train s |",
             "|---|---|---|---|---|---|---|---|"]
    for task, metric in cols:
        for method in METHODS:
            mine = [r for r in results if (r["task"], r["metric"], r["method"]) == (task, metric, method)]
            if not mine:
                continue
            r0 = next((r for r in mine if r.get("tflite_bytes")), mine[0])

            def fmt(key, scale=1.0, digits=1, r0=r0):
                return f"{r0[key] / scale:.{digits}f}" if r0.get(key) is not None else "-"

            seconds = statistics.mean(r["train_seconds"] for r in mine)
            lines.append(f"| {task} ({metric}) | {method} | {r0['params'] / 1e6:.2f}M | {fmt('tflite_bytes', 1e6)} | "
                         f"{fmt('host_ms', digits=2)} | {fmt('pixel4_ms')} | "
                         f"{mean_std_cell([r['value'] for r in mine])} | {seconds:.0f} |")
    return "\n".join(lines) + "\n"


def claims(results: list[dict]) -> str:
    """The source documents' claims, per task on its official metric: paired differences seed by seed with their
    verdict (`stats.verdict`), and the ratios to the teacher."""
    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    lines = ["| claim | " + " | ".join(t for t, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    for a, b, name in (("bilstm-kd", "bilstm-ce", "KD helps the BiLSTM"),
                       ("bilstm-kd-aug", "bilstm-kd", "the transfer set helps further")):
        cells = []
        for c in cols:
            d = paired_differences(results, *c, a, b)
            cells.append(judged_cell(d) if d else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for key, name, digits in (("params", "parameters, teacher / BiLSTM", 0), ("tflite_bytes", ".tflite size", 1),
                              ("host_ms", "host latency (1 thread)", 1), ("pixel4_ms", "Pixel 4 estimate", 1)):
        cells = []
        for task, metric in cols:
            pick = {m: next((r for r in results if (r["task"], r["metric"], r["method"]) == (task, metric, m)
                             and r.get(key) is not None), None) for m in ("teacher", EXPORTED)}
            cells.append(f"{pick['teacher'][key] / pick[EXPORTED][key]:.{digits}f}x" if all(pick.values()) else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{VERDICTS}\n"


def report(results: list[dict]) -> str:
    return table(results) + "\n" + claims(results)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.bilstm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/bilstm", "docs/results/bilstm.json", list(TASKS), TASKS)
    p.add_argument("--stages", default="runs/teacher_value", help="where issue 13's fine-tuned teachers are")
    p.add_argument("--methods-out", default="runs/methods",
                   help="benchmarks.methods' runs: its teachers for the tasks issue 13 did not fine-tune, and its "
                        "exported teacher file, timed beside the BiLSTMs")
    args = p.parse_args(argv)
    out, stages = (REPO_ROOT / args.out).resolve(), (REPO_ROOT / args.stages).resolve()
    methods_out = (REPO_ROOT / args.methods_out).resolve()
    order = list(METHODS)
    return comparison(args, lambda: jobs(out, stages, methods_out, args.tasks, args.seeds),
                      lambda: rows(out, stages, methods_out, args.tasks, args.seeds),
                      lambda r: (list(TASKS).index(r["task"]), metric_rank(r["task"], r["metric"]),
                                 order.index(r["method"]), r["seed"]), report)


if __name__ == "__main__":
    sys.exit(main())
