"""The demo as a measurement: `scripts/demo.sh` run once on a fresh output directory and timed, its report
(`OUT/report.json`, written by `mobilekd report`) turned into rows of docs/results/demo.json, and the demo page's
tables printed from those rows.

    python -m benchmarks.demo                               # scripts/demo.sh --force --out runs/demo_benchmark
    python -m benchmarks.demo --from-report runs/demo       # rows of a finished demo run (no wall time of its own)
    python -m benchmarks.demo --table [--write]             # docs/demo.md's tables from the rows

One run, seed 0, as the demo is: its scores are single runs (the means over seeds are benchmarks.teacher_value's,
whose seed-0 runs are the demo's settings). Rows: task (pretraining, pkt, sst2, tflite, latency, demo), method,
seed 0, metric, value, and on every row the CPU, the commit and the run's total wall time when this command ran it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.command import show_table, table_flags
from benchmarks.rows import host_of, write_rows
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.recipes.demo_report import feature_map_terms

OUT = "runs/demo_benchmark"
RESULTS = "docs/results/demo.json"
NAMES = {"teacher": "teacher", "student": "PKT student", "student_task_kd": "PKT student + task distillation",
         "subset_task_kd": "teacher layers 0, 5 + task distillation", "scratch": "student from random initialisation"}


def rows_of(report: dict, wall: float | None) -> list[dict]:
    """The report's figures as rows (seed 0: the demo is one run). The CPU is the one the report's latency stage
    ran on; the commit is this tree's only when this command ran the demo (`wall` given), else unknown (None)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip() if wall is not None else None
    host = report["latency"]["host"]
    shared = {"seed": 0, "cpu": host["cpu"], "cpu_count": host["cpu_count"], **host_of(host), "commit": commit or None}
    rows = []

    def row(task, method, metric, value, **more):
        rows.append({"task": task, "method": method, "metric": metric, "value": value, **shared, **more})

    t, s = report["teacher_pretraining"], report["student_transfer"]
    for method, r in ((f"teacher: {t['name']}", t), ("PKT student", s)):
        for metric in ("mlm_accuracy", "unigram_accuracy", "nsp_accuracy", "nsp_majority_accuracy", "wall_seconds"):
            row("pretraining", method, metric, round(r[metric], 4))
    for stage, fmt in feature_map_terms(s["stages"]):
        row("pkt", stage["stage"], "fmt_loss_start", round(stage["start"][fmt], 4))
        row("pkt", stage["stage"], "fmt_loss_end", round(stage["end"][fmt], 4))
    for name, r in report["sst2"].items():
        row("sst2", NAMES.get(name, name), "accuracy", round(r["accuracy"], 4))
        row("sst2", NAMES.get(name, name), "wall_seconds", round(r["wall_seconds"], 1))
    base = report["sst2_baseline"]
    method = f"bag of words ({base['method']}, the same {base['train_examples']} examples)"
    row("sst2", method, "accuracy", round(base["metrics"]["accuracy"], 4))
    row("sst2", method, "wall_seconds", round(base["seconds"], 1))
    for name, r in report["tflite"].items():
        run = Path(r["model"]).name  # the SST-2 run the demo exported (its configuration's `ship`)
        for metric in ("size_bytes", "max_abs_diff", "agreement", "accuracy_exported", "accuracy_torch"):
            row("tflite", name, metric, r[metric], shipped=NAMES.get(run, run))
    host = report["latency"]["host"]
    for name, r in report["latency"]["rows"].items():
        for threads, timed in r["host"].items():
            row("latency", name, "host_p50_ms", timed["p50_ms"], threads=int(threads))
        for device, ms in r["estimate_ms"].items():
            row("latency", name, f"{device}_ms", ms)
    row("latency", "host matmul peak", "peak_gflops_fp32", host["peak_gflops"]["fp32"][str(host["threads"][0])],
        threads=host["threads"][0])
    if wall is not None:
        row("demo", "scripts/demo.sh", "wall_seconds", round(wall))
    return rows


def shipped(rows: list[dict]) -> str:
    """The name of the student whose .tflite the demo's rows describe (rows before `ship` existed: the PKT student)."""
    return next((r.get("shipped", "PKT student") for r in rows if r["task"] == "tflite"), "PKT student")


def _get(rows, task, method, metric, **more):
    return next((r["value"] for r in rows if (r["task"], r["method"], r["metric"]) == (task, method, metric)
                 and all(r.get(k) == v for k, v in more.items())), None)


def table(rows: list[dict]) -> str:
    """The demo page's tables, from the rows."""
    first = rows[0]
    wall = _get(rows, "demo", "scripts/demo.sh", "wall_seconds")
    lines = ["One run of `scripts/demo.sh` on a fresh output directory, seed 0, "
             + (f"at commit {first['commit']} " if first["commit"] else "")
             + f"on `{first.get('host', 'unknown')}` ({first['cpu']}, {first['cpu_count']} cores)"
             + (f": {wall // 60:.0f} min {wall % 60:.0f} s in all, the venv already set up." if wall else "."), "",
             "| model | held-out MLM accuracy | unigram baseline | NSP accuracy | NSP majority | wall time |",
             "|---|---|---|---|---|---|"]
    for method in dict.fromkeys(r["method"] for r in rows if r["task"] == "pretraining"):
        v = {m: _get(rows, "pretraining", method, m) for m in ("mlm_accuracy", "unigram_accuracy", "nsp_accuracy",
                                                               "nsp_majority_accuracy", "wall_seconds")}
        lines.append(f"| {method} | {v['mlm_accuracy']:.3f} | {v['unigram_accuracy']:.3f} | {v['nsp_accuracy']:.3f} "
                     f"| {v['nsp_majority_accuracy']:.3f} | {v['wall_seconds']:.0f} s |")
    lines += ["", "| PKT stage | feature-map transfer loss, start -> end |", "|---|---|"]
    for stage in dict.fromkeys(r["method"] for r in rows if r["task"] == "pkt"):
        lines.append(f"| {stage} | {_get(rows, 'pkt', stage, 'fmt_loss_start'):.3f} -> "
                     f"{_get(rows, 'pkt', stage, 'fmt_loss_end'):.3f} |")
    teacher = _get(rows, "sst2", "teacher", "accuracy")
    lines += ["", "| SST-2 dev (872 sentences) | accuracy | share of the teacher's | fine-tuning time |",
              "|---|---|---|---|"]
    for method in dict.fromkeys(r["method"] for r in rows if r["task"] == "sst2"):
        accuracy = _get(rows, "sst2", method, "accuracy")
        seconds = _get(rows, "sst2", method, "wall_seconds")
        lines.append(f"| {method} | {accuracy:.4f} | {100 * accuracy / teacher:.1f}% | "
                     f"{seconds:.{1 if seconds < 10 else 0}f} s |")
    lines += ["", f"| .tflite of the {shipped(rows)} (with metadata) | size | max abs diff to PyTorch | prediction "
                  "agreement | dev accuracy (PyTorch) |", "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["method"] for r in rows if r["task"] == "tflite"):
        v = {m: _get(rows, "tflite", name, m) for m in ("size_bytes", "max_abs_diff", "agreement",
                                                       "accuracy_exported", "accuracy_torch")}
        lines.append(f"| {name} | {v['size_bytes'] / 1e6:.1f} MB | {v['max_abs_diff']:.1e} | "
                     f"{100 * v['agreement']:.1f}% | {v['accuracy_exported']:.4f} ({v['accuracy_torch']:.4f}) |")
    timed = [r for r in rows if r["task"] == "latency" and r["metric"] == "host_p50_ms"]
    threads = sorted({r["threads"] for r in timed})
    lines += ["", "| latency, sequence 128 | " + " | ".join(f"host p50, {t} thread{'s' * (t > 1)}" for t in threads)
              + " | Pixel 4 estimate |", "|---|" + "---|" * (len(threads) + 1)]
    for name in dict.fromkeys(r["method"] for r in timed):
        lines.append(f"| {name} | " + " | ".join(f"{_get(rows, 'latency', name, 'host_p50_ms', threads=t):.1f} ms"
                                                 for t in threads)
                     + f" | {_get(rows, 'latency', name, 'pixel4_ms'):.0f} ms |")
    lines += ["", "Host times are this run's (read the ratios between rows, not the milliseconds); Pixel columns "
                  "are the cost model's estimates ([latency.md](latency.md))."]
    return "\n".join(lines)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=OUT, help=f"the demo's output directory, redone from scratch (default {OUT})")
    p.add_argument("--from-report", metavar="RUN", help="take the rows of this finished demo run; run nothing")
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    results = REPO_ROOT / args.results
    if not args.table:
        run, wall = Path(args.from_report or REPO_ROOT / args.out), None
        if not args.from_report:
            start = time.time()
            code = subprocess.run([str(REPO_ROOT / "scripts/demo.sh"), "--force", "--out", str(run)],
                                  cwd=REPO_ROOT).returncode
            if code:
                print(f"error: scripts/demo.sh failed (exit {code}); its logs are in {run}/logs", file=sys.stderr)
                return 1
            wall = time.time() - start
        write_rows(results, rows_of(read_json(run / "report.json"), wall))
        print(f"rows in {results}" + (f"; the demo took {wall:.0f} s" if wall else ""))
    return show_table(args, results, table)


if __name__ == "__main__":
    sys.exit(main())
