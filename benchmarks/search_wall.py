"""What `mobilekd ship`'s search owes its wall time to two of its savings (issue 76: a search is many trainings, make
each cheaper): the same search run both ways, alternating, on a small task a user might bring.

    python -m benchmarks.search_wall [--reps 2] [--trials 8]    # --compare start: trials forked or fresh
    python -m benchmarks.search_wall --compare store            # the teacher's store kept or not
    python -m benchmarks.search_wall --table [--write]          # the tables, into docs/throughput.md

--compare start: every trial forked from a server that made the heavy imports once (mobilekd/launch.py; the
default) or a fresh `python -m mobilekd` (MOBILEKD_FORK=0); the subset family, the packaged all-MiniLM-L6-v2.
--compare store: the fine-tuned teacher's logits and layer features computed once per example and read by every
trial (`ship --teacher-store-gb`'s default) or the teacher run at every step of every trial (`--teacher-store-gb
0`); the subset and TinyBERT families, so the adapted teacher that has the masked-LM head they need
(`mobilekd train-teacher --init-from all-minilm-l6-v2 --out runs/ship/teacher`, as `python -m benchmarks.ship`
makes it). Its augmented sets and the TinyBERT start are kept in the shared caches, so a first run, not timed and
kept as variant "warm-up", makes them, and every timed run finds them made, as a user's second seed does.

The task: stsb-genre (benchmarks/custom.py: a sentence -> its genre, 3 classes), --examples of its training
sentences (seed 0) and its dev set; `ship` fine-tunes the teacher itself; --trials trials, one worker of one
thread, seed 0. Every run starts from an empty folder; its rows are the search's wall time (ship.json's
wall_seconds.search) and its trials' median wall time, with the host and when the run started (no run replaces
another).
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

RESULTS = "docs/results/search_wall.json"
TASK = "stsb-genre"
# per comparison: its two variants (first the default) as the environment and `ship` flags each runs with, the
# families searched, the teacher, the training examples, and whether an untimed run first fills the shared caches
COMPARISONS = {
    "start": {"variants": {"forked": ({"MOBILEKD_FORK": "1"}, []), "fresh": ({"MOBILEKD_FORK": "0"}, [])},
              "families": ["subset"], "teacher": "all-minilm-l6-v2", "examples": 300, "warm_up": False},
    "store": {"variants": {"store": ({}, []), "no store": ({}, ["--teacher-store-gb", "0"])},
              "families": ["subset", "tinybert"], "teacher": "runs/ship/teacher", "examples": 1000, "warm_up": True},
}
KEY = ("task", "method", "variant", "metric", "started")


def comparison_of(row: dict) -> str:
    """Which comparison a row belongs to, by its variant (the first rows, of `start`, name none)."""
    return next((name for name, c in COMPARISONS.items() if row["variant"] in c["variants"]), "store")


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


def search(data: Path, out: Path, compare: dict, variant: str, trials: int, log: Path) -> list[dict]:
    """One `ship` run as `variant` says (its environment and flags; "warm-up": the first variant's): its rows."""
    env, flags = compare["variants"].get(variant, next(iter(compare["variants"].values())))
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    argv = [sys.executable, "-m", "mobilekd", "ship", "--teacher", compare["teacher"], "--data", str(data),
            "--families", *compare["families"], "--trials", str(trials), "--workers", "1", "--threads", "1",
            "--seed", "0", *flags, "--out", str(out)]
    with open(log, "w") as f:
        code = subprocess.run(argv, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, **env, "OMP_NUM_THREADS": "1"}).returncode
    if code != 0:
        raise UserError(f"{log}: ship exited {code}: {last_line(log.read_text())}")
    s = read_json(out / "ship.json")
    walls = [t["wall_seconds"] for t in s["trials"] if t.get("wall_seconds") is not None]
    shared = {"task": f"{TASK}-{s['budget']['train_examples']}", "method": "ship-search", "variant": variant,
              "seed": 0, "started": started, "trials": len(s["trials"]), **recorded_host(s)}
    return [{**shared, "metric": "search_wall_seconds", "value": s["wall_seconds"]["search"]},
            {**shared, "metric": "trial_wall_seconds_median", "value": statistics.median(walls)}]


def measure(args) -> list[dict]:
    compare = COMPARISONS[args.compare]
    if compare["teacher"].startswith("runs/") and not (REPO_ROOT / compare["teacher"] / "model.safetensors").is_file():
        raise UserError(f"{compare['teacher']}: no teacher here; make it with `mobilekd train-teacher --init-from "
                        f"all-minilm-l6-v2 --out {compare['teacher']}`")
    work = (REPO_ROOT / args.out / time.strftime("%Y%m%dT%H%M%S")).resolve()  # a fresh folder an invocation
    data = small_task(work, args.examples or compare["examples"])
    variants, rows = list(compare["variants"]), []
    runs = [("warm-up", 0)] if compare["warm_up"] else []
    runs += [(v, rep) for rep in range(args.reps) for v in (variants if rep % 2 == 0 else variants[::-1])]
    for variant, rep in runs:  # alternated: drift hits both
        name = f"{variant.replace(' ', '-')}{rep}"
        print(f"rep {rep}: {variant} ({work / f'{name}.log'})", file=sys.stderr, flush=True)
        rows += search(data, work / name, compare, variant, args.trials, work / f"{name}.log")
    return rows


def table(rows: list[dict]) -> str:
    """Per comparison, host and task: each variant's median search and trial wall time over its runs, and their
    ratio (warm-up runs left out)."""
    out = []
    for name, compare in COMPARISONS.items():
        first, second = compare["variants"]
        mine = [r for r in rows if comparison_of(r) == name and r["variant"] != "warm-up"]
        lines = [f"| task | host | trials a search | runs | search, {first} | search, {second} | a trial, {first} | "
                 f"a trial, {second} | {second} / {first} (search) |", "|---|---|---|---|---|---|---|---|---|"]
        for task, host in sorted({(r["task"], r["host"]) for r in mine}):
            here = [r for r in mine if (r["task"], r["host"]) == (task, host)]

            def med(variant, metric):
                return statistics.median(r["value"] for r in here if (r["variant"], r["metric"]) == (variant, metric))

            runs = min(sum(r["variant"] == v and r["metric"] == "search_wall_seconds" for r in here)
                       for v in (first, second))
            if not runs:
                continue
            a, b = med(first, "search_wall_seconds"), med(second, "search_wall_seconds")
            lines.append(f"| {task} | {host} | {here[0]['trials']} | {runs} | {a:.0f} s | {b:.0f} s | "
                         f"{med(first, 'trial_wall_seconds_median'):.1f} s | "
                         f"{med(second, 'trial_wall_seconds_median'):.1f} s | {b / a:.2f}x |")
        if len(lines) > 2:
            out.append(f"`--compare {name}` ({', '.join(compare['families'])}):\n\n" + "\n".join(lines))
    return "\n\n".join(out) + "\n\nMedians over the runs of each variant, run alternately on one host (ship.json's "\
        "wall_seconds.search; a trial's wall time is its process's, start-up included).\n"


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.search_wall", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, RESULTS)
    p.add_argument("--compare", choices=list(COMPARISONS), default="start",
                   help="what the two variants differ in (default start)")
    p.add_argument("--out", default="runs/search_wall", help="where its runs go (default runs/search_wall)")
    p.add_argument("--reps", type=int, default=2, help="runs of each variant (default 2)")
    p.add_argument("--trials", type=int, default=8, help="trials a search (default 8)")
    p.add_argument("--examples", type=int, help="training examples of the task (default 300 for start, 1,000 for "
                                                "store)")
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        merge_rows(path, measure(args), lambda r: (r["task"], r["started"], r["variant"], r["metric"]), KEY)
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
