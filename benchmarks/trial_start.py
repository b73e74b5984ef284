"""What starting a process costs `mobilekd ship`'s search, and what forking its trials from a server of the heavy
imports saves (mobilekd/launch.py; issue 76: a search is many trainings, make each cheaper): the same search run
with every trial forked (the default) and with every trial a fresh `python -m mobilekd` (MOBILEKD_FORK=0),
alternating, on a small task a user might bring.

    python -m benchmarks.trial_start [--reps 2] [--trials 8]   # rows to docs/results/trial_start.json
    python -m benchmarks.trial_start --table [--write]         # the table, into docs/throughput.md

The task: stsb-genre (benchmarks/custom.py: a sentence -> its genre, 3 classes), --examples of its training
sentences (seed 0) and its dev set; the teacher: the packaged all-MiniLM-L6-v2, fine-tuned by `ship` itself; the
search: the subset family alone, --trials trials, one worker of one thread, seed 0. Every run starts from an empty
folder; its rows are the search's wall time (ship.json's wall_seconds.search) and its trials' median wall time,
with the host and when the run started (no run replaces another).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.command import show_table, table_flags
from benchmarks.custom import write_task
from benchmarks.rows import merge_rows, recorded_host
from mobilekd.errors import UserError, cli_entry, last_line
from mobilekd.fileio import REPO_ROOT, read_json

RESULTS = "docs/results/trial_start.json"
TASK = "stsb-genre"
VARIANTS = {"forked": "1", "fresh": "0"}  # MOBILEKD_FORK
KEY = ("task", "method", "variant", "metric", "started")


def small_task(out: Path, examples: int) -> Path:
    """TASK's dev set and `examples` of its training rows (drawn with seed 0: the file is sorted by label), under
    `out`."""
    full = write_task(TASK, out / "full")
    data = out / f"{TASK}-{examples}"
    data.mkdir(parents=True, exist_ok=True)
    with open(full / "train.csv", newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    with open(data / "train.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *random.Random(0).sample(rows, examples)])
    (data / "dev.csv").write_bytes((full / "dev.csv").read_bytes())
    return data


def search(data: Path, out: Path, variant: str, trials: int, log: Path) -> list[dict]:
    """One `ship` run with its trials started as `variant` says: its rows."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    argv = [sys.executable, "-m", "mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", str(data),
            "--families", "subset", "--trials", str(trials), "--workers", "1", "--threads", "1", "--seed", "0",
            "--out", str(out)]
    with open(log, "w") as f:
        code = subprocess.run(argv, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "MOBILEKD_FORK": VARIANTS[variant], "OMP_NUM_THREADS": "1"}).returncode
    if code != 0:
        raise UserError(f"{log}: ship exited {code}: {last_line(log.read_text())}")
    s = read_json(out / "ship.json")
    walls = [t["wall_seconds"] for t in s["trials"] if t.get("wall_seconds") is not None]
    shared = {"task": f"{TASK}-{s['budget']['train_examples']}", "method": "ship-search", "variant": variant,
              "seed": 0, "started": started, "trials": len(s["trials"]), **recorded_host(s)}
    return [{**shared, "metric": "search_wall_seconds", "value": s["wall_seconds"]["search"]},
            {**shared, "metric": "trial_wall_seconds_median", "value": statistics.median(walls)}]


def measure(args) -> list[dict]:
    rows = []
    work = (REPO_ROOT / args.out / time.strftime("%Y%m%dT%H%M%S")).resolve()  # a fresh folder an invocation
    data = small_task(work, args.examples)
    for rep in range(args.reps):
        for variant in (VARIANTS if rep % 2 == 0 else reversed(VARIANTS)):  # alternated: drift hits both
            print(f"rep {rep}: {variant} ({work / f'{variant}{rep}.log'})", file=sys.stderr, flush=True)
            rows += search(data, work / f"{variant}{rep}", variant, args.trials, work / f"{variant}{rep}.log")
    return rows


def table(rows: list[dict]) -> str:
    """Per host and task: each variant's median search and trial wall time over its runs, and their ratio."""
    lines = ["| task | host | trials a search | runs | search, forked | search, fresh | a trial, forked | "
             "a trial, fresh | fresh / forked (search) |", "|---|---|---|---|---|---|---|---|---|"]
    for task, host in sorted({(r["task"], r["host"]) for r in rows}):
        mine = [r for r in rows if (r["task"], r["host"]) == (task, host)]

        def med(variant, metric):
            return statistics.median(r["value"] for r in mine if (r["variant"], r["metric"]) == (variant, metric))

        runs = min(sum(r["variant"] == v and r["metric"] == "search_wall_seconds" for r in mine) for v in VARIANTS)
        if not runs:
            continue
        fork, fresh = med("forked", "search_wall_seconds"), med("fresh", "search_wall_seconds")
        lines.append(f"| {task} | {host} | {mine[0]['trials']} | {runs} | {fork:.0f} s | {fresh:.0f} s | "
                     f"{med('forked', 'trial_wall_seconds_median'):.1f} s | "
                     f"{med('fresh', 'trial_wall_seconds_median'):.1f} s | {fresh / fork:.2f}x |")
    return "\n".join(lines) + "\n\nMedians over the runs of each variant, run alternately on one host (ship.json's "\
        "wall_seconds.search; a trial's wall time is its process's, start-up included).\n"


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trial_start", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, RESULTS)
    p.add_argument("--out", default="runs/trial_start", help="where its runs go (default runs/trial_start)")
    p.add_argument("--reps", type=int, default=2, help="runs of each variant (default 2)")
    p.add_argument("--trials", type=int, default=8, help="trials a search (default 8)")
    p.add_argument("--examples", type=int, default=300, help="training examples of the task (default 300)")
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        merge_rows(path, measure(args), lambda r: (r["task"], r["started"], r["variant"], r["metric"]), KEY)
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
