"""What one linked group did to STS-B's validation split, and what the split does now (`MAX_GROUP_SHARE`).

    python -m benchmarks.linked_groups --runs runs/ship   # rows from the data, and from the ship runs found there
    python -m benchmarks.linked_groups --table --write    # the table into docs/ship_runs.md from the rows

Holding pairs linked by a shared sentence on one side of the validation split (`mobilekd.finetune.selection`,
2026-12-06) chained 245 of STS-B's 5,749 training pairs, short video captions ("A man is playing a flute."), into one
group; StratifiedGroupKFold's first fold took it whole for every seed. Two sets of rows, in
docs/results/linked_groups.json:

- `split`, from the training data alone (no run needed, any machine): for the split of each of seeds 0-2 as
  `carve` draws it today, the share of it that its largest linked group fills and the share it has in common with
  seed 0's; for MRPC and RTE the same (their largest groups are under the share, so their splits are as before).
- `search`, from the ship runs of STS-B searched before the rule (plan.json without `OVERSIZED`) found under
  `--runs`: for each trial, its validation Pearson on the whole split (what chose), on the caption group alone and
  on the rest, from its `validation_predictions.tsv`, and the same two shares for the split it was scored on. Run
  folders stay on the machine that ran them: rows found once are kept (`merge_rows`), a host's runs beside
  another's.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr

from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows
from mobilekd.data.tasks import load_task, task_data
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.finetune.selection import OVERSIZED, carve, text_groups

RESULTS = "docs/results/linked_groups.json"
KEY = ("task", "method", "seed", "metric", "part", "trial")
TASKS, SEEDS = ("stsb", "mrpc", "rte"), (0, 1, 2)


def held_indices(task, seed: int) -> list[int]:
    """The training indices of the validation split `carve` draws today for `seed`."""
    at = {id(e): i for i, e in enumerate(task.train)}
    return sorted(at[id(e)] for e in carve(task, task.train, seed).validation)


def shares(groups: np.ndarray, held: list[int], other: list[int]) -> dict:
    """The share of a validation split (`held`, training indices) its largest linked group fills, and the share it
    has in common with `other` (another seed's split)."""
    return {"largest_group_share": float(np.bincount(groups[held]).max() / len(held)),
            "overlap": len(set(other) & set(held)) / len(held)}


def split_rows() -> list[dict]:
    """Today's splits of seeds 0-2 on each pair task: the two shares, the overlap with seed 0's (seed 0: none)."""
    rows = []
    for name in TASKS:
        task = load_task(name, task_data(name))
        groups, _ = text_groups(task.train)
        held = {seed: held_indices(task, seed) for seed in SEEDS}
        for seed in SEEDS:
            found = shares(groups, held[seed], held[0])
            rows += [{"task": name, "method": "split", "seed": seed, "metric": k, "part": "split", "value": round(v, 4),
                      "size": len(held[seed]), **({"overlap_with_seed": 0} if k == "overlap" else {})}
                     for k, v in found.items() if seed or k != "overlap"]
    return rows


def predictions(path: Path) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A validation_predictions.tsv: each row's training line (its `source`'s suffix), label and prediction."""
    with path.open() as f:
        r = list(csv.DictReader(f, delimiter="\t"))
    return ([int(x["source"].rsplit(":", 1)[1]) for x in r], np.array([float(x["label"]) for x in r]),
            np.array([float(x["prediction"]) for x in r]))


def search_rows(runs: Path) -> list[dict]:
    """Every trial of the STS-B ship runs under `runs` searched before OVERSIZED: its validation Pearson on the
    whole split, the caption group and the rest; and per run, its split's two shares (the overlap with the first
    run found)."""
    task = load_task("stsb", task_data("stsb"))
    groups, _ = text_groups(task.train)
    largest = int(np.argmax(np.bincount(groups)))
    line = {int(e.source.rsplit(":", 1)[1]): i for i, e in enumerate(task.train)}  # a training line -> its index
    rows, first = [], None
    for run in sorted(runs.glob("stsb/seed*")):
        grouped = read_json(run / "plan.json").get("validation", "") if (run / "plan.json").is_file() else ""
        if not (run / "ship.json").is_file() or "linked" not in grouped or OVERSIZED in grouped:
            continue
        s, seed = read_json(run / "ship.json"), int(run.name[len("seed"):])
        host = s["host"]["id"] if isinstance(s["host"], dict) else s["host"]
        split = None
        for t in s["trials"]:
            file = run / "trials" / f"{t['trial']:04d}" / "validation_predictions.tsv"
            if not file.is_file():  # a trial cut before its first evaluation
                continue
            lines, y, p = predictions(file)
            split = [line[k] for k in lines]
            caption = groups[split] == largest
            shared = {"task": "stsb", "method": "search", "seed": seed, "trial": t["trial"], "family": t["family"],
                      "shape": t["shape"], "state": t["state"], "chosen": t["chosen"], "host": t["host"],
                      **({"dev_value": round(s["student"]["dev"]["pearson"], 4)} if t["chosen"] else {})}
            rows += [{**shared, "metric": "pearson", "part": part, "value": round(float(pearsonr(y[m], p[m])[0]), 4),
                      "examples": int(m.sum())}
                     for part, m in (("all", np.ones_like(caption)), ("caption group", caption), ("rest", ~caption))]
        if split is None:
            continue
        first = first or (seed, split)
        found = shares(groups, split, first[1])
        rows += [{"task": "stsb", "method": "search-split", "seed": seed, "metric": k, "part": "split",
                  "value": round(v, 4), "size": len(split), "host": host,
                  **({"overlap_with_seed": first[0]} if k == "overlap" else {})}
                 for k, v in found.items() if first[0] != seed or k != "overlap"]
    return rows


def table(rows: list[dict]) -> str:
    """The splits (before, from the runs; today, from the data), then each run's trials on the three parts."""
    def value(method, task, seed, metric):
        return next((r for r in rows if (r["method"], r["task"], r["seed"], r["metric"]) == (method, task, seed,
                                                                                             metric)), None)

    lines = ["| task | seed | split | pairs | its largest linked group's share | in common with another seed's |",
             "|---|---|---|---|---|---|"]
    for method, what in (("search-split", "before (the runs' own)"), ("split", "today (`carve`)")):
        for task in TASKS:
            for seed in SEEDS:
                big, common = value(method, task, seed, "largest_group_share"), value(method, task, seed, "overlap")
                if big:
                    lines.append(f"| {task} | {seed} | {what} | {big['size']} | {big['value']:.0%} | " +
                                 (f"{common['value']:.0%} (seed {common['overlap_with_seed']})" if common else "-") +
                                 " |")
    lines += ["", "| seed (host) | trial | student | state | validation Pearson: all (what chose) | caption group | "
              "rest | dev, once |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for seed in sorted({r["seed"] for r in rows if r["method"] == "search"}):
        mine = [r for r in rows if r["method"] == "search" and r["seed"] == seed and r["metric"] == "pearson"]
        by = {}
        for r in mine:
            by.setdefault(r["trial"], {})[r["part"]] = r
        for trial, parts in sorted(by.items()):
            a = parts["all"]
            lines.append(f"| {seed} ({a['host']}) | {trial} | {a['family']} {a['shape']} | {a['state']}"
                         f"{', chosen' if a['chosen'] else ''} | {a['value']:.4f} | "
                         f"{parts['caption group']['value']:.4f} | {parts['rest']['value']:.4f} | "
                         f"{a.get('dev_value', '-')} |")
        complete = {t: p for t, p in by.items() if p["all"]["state"] == "complete"}
        if complete:
            on_rest = max(complete, key=lambda t: complete[t]["rest"]["value"])
            chosen = next(t for t, p in by.items() if p["all"]["chosen"])
            notes.append(f"seed {seed}: on the rest alone the complete trial ranked first is "
                         f"{'the one chosen' if on_rest == chosen else f'trial {on_rest}, not the chosen {chosen}'}")
    return "\n".join(lines) + ("\n\n" + "; ".join(notes) + "." if notes else "") + "\n"


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.linked_groups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="runs/ship", help="where benchmarks.ship's run folders are (default runs/ship)")
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        merge_rows(path, split_rows() + search_rows((REPO_ROOT / args.runs).resolve()),
                   lambda r: (r["method"], r["task"], r["seed"], r.get("trial", -1), r["metric"], r["part"]), KEY)
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
