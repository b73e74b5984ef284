"""What one linked group did to STS-B's validation split, and what the split does now (`MAX_GROUP_SHARE`).

    python -m benchmarks.linked_groups --runs runs/ship   # rows from the data, and from the ship runs found there
    python -m benchmarks.linked_groups --table --write    # the table into docs/ship_runs.md from the rows

Holding pairs linked by a shared sentence on one side of the validation split (`mobilekd.finetune.selection`,
2026-12-06) chained 245 of STS-B's 5,749 training pairs, short video captions ("A man is playing a flute."), into one
group; StratifiedGroupKFold's first fold took it whole for every seed. Rows in docs/results/linked_groups.json:

- `split-before` and `split`, from the training data alone (any machine): the split of each of seeds 0-2 as `carve`
  drew it from 2026-12-06 (`max_group_share=None`) and as it draws it today, on STS-B, MRPC and RTE: the share of
  it its largest linked group fills, and the share it has in common with seed 0's.
- `search`, from the ship runs of STS-B searched in a linked space before the share (`benchmarks.ship.run_space`)
  found under `--runs`: each trial's validation Pearson on the whole split (what chose), on the caption group alone
  and on the rest, from its validation_predictions.tsv, with the labels' spread in each part (a narrow spread
  lowers a Pearson by itself). Run folders stay on the machine that ran them: rows found once are kept
  (`merge_rows`), a host's runs beside another's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr

from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows, recorded_host
from benchmarks.ship import run_dir, run_space
from mobilekd.data.tasks import load_task, task_data
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.finetune.intervals import prediction_rows
from mobilekd.finetune.selection import carve, text_groups

RESULTS = "docs/results/linked_groups.json"
KEY = ("task", "method", "seed", "metric", "part", "trial")
TASKS, SEEDS = ("stsb", "mrpc", "rte"), (0, 1, 2)
PARTS = ("all", "caption group", "rest")


def held_indices(task, seed: int, **rule) -> list[int]:
    """The training indices of the validation split `carve` draws for `seed` (`rule`: its keyword arguments)."""
    return carve(task, task.train, seed, **rule).held


def split_rows() -> list[dict]:
    """Seeds 0-2's splits on each pair task, before the share and today: the largest linked group's share of each,
    and its share in common with seed 0's."""
    rows = []
    for name in TASKS:
        task = load_task(name, task_data(name))
        groups, _ = text_groups(task.train)
        for method, rule in (("split-before", {"max_group_share": None}), ("split", {})):
            held = {seed: held_indices(task, seed, **rule) for seed in SEEDS}
            for seed in SEEDS:
                found = {"largest_group_share": np.bincount(groups[held[seed]]).max() / len(held[seed]),
                         "overlap": len(set(held[0]) & set(held[seed])) / len(held[seed])}
                rows += [{"task": name, "method": method, "seed": seed, "metric": k, "part": "split",
                          "value": round(float(v), 4), "pairs": len(held[seed])}
                         for k, v in found.items() if seed or k != "overlap"]
    return rows


def pearson(y: np.ndarray, p: np.ndarray) -> float | None:
    """Pearson's r, None where either side is constant (undefined)."""
    return round(float(pearsonr(y, p)[0]), 4) if y.std() > 0 and p.std() > 0 else None


def search_rows(runs: Path) -> list[dict]:
    """Every trial of the STS-B ship runs under `runs` searched in a linked space (`SPACES`' names ending in
    "-linked"): its validation Pearson on the whole split, the caption group and the rest."""
    task = load_task("stsb", task_data("stsb"))
    groups, _ = text_groups(task.train)
    largest = int(np.argmax(np.bincount(groups)))
    line = {e.source.rsplit(":", 1)[1]: i for i, e in enumerate(task.train)}  # a training line -> its index
    rows = []
    for seed in SEEDS:
        run = run_dir(runs, "stsb", seed)
        if not (run / "ship.json").is_file() or not (run_space(run, read_json(run / "plan.json")) or
                                                      "").endswith("-linked"):
            continue
        s = read_json(run / "ship.json")
        for t in s["trials"]:
            file = run / "trials" / f"{t['trial']:04d}" / "validation_predictions.tsv"
            if not file.is_file():  # a trial cut before its first evaluation
                continue
            got = prediction_rows(file)
            caption = groups[[line[r["source"].rsplit(":", 1)[1]] for r in got]] == largest
            y, p = (np.array([float(r[k]) for r in got]) for k in ("label", "prediction"))
            shared = {"task": "stsb", "method": "search", "seed": seed, "trial": t["trial"], "family": t["family"],
                      "shape": t["shape"], "state": t["state"], "chosen": t["chosen"], **recorded_host(s),
                      **({"dev_value": round(s["student"]["dev"]["pearson"], 4)} if t["chosen"] else {})}
            for part, m in zip(PARTS, (np.ones_like(caption), caption, ~caption)):
                rows.append({**shared, "metric": "pearson", "part": part, "value": pearson(y[m], p[m]),
                             "pairs": int(m.sum()), "label_mean": round(float(y[m].mean()), 3),
                             "label_std": round(float(y[m].std()), 3)})
    return rows


def table(rows: list[dict]) -> str:
    """The splits (before the share and today), then each run's trials on the three parts."""
    def value(method, task, seed, metric):
        return next((r for r in rows if (r["method"], r["task"], r["seed"], r["metric"]) == (method, task, seed,
                                                                                             metric)), None)

    def cell(v):
        return "-" if v is None else f"{v:.4f}"

    lines = ["| task | seed | split | pairs | its largest linked group's share | in common with seed 0's |",
             "|---|---|---|---|---|---|"]
    for task in TASKS:
        for method, what in (("split-before", "2026-12-06 (no share)"), ("split", "today")):
            for seed in SEEDS:
                big, common = value(method, task, seed, "largest_group_share"), value(method, task, seed, "overlap")
                if big:
                    lines.append(f"| {task} | {seed} | {what} | {big['pairs']} | {big['value']:.0%} | "
                                 f"{format(common['value'], '.0%') if common else '-'} |")
    lines += ["", "| seed (host) | trial | student | state | validation Pearson: all (what chose) | caption group | "
              "rest | dev, once |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    searched = [r for r in rows if r["method"] == "search" and r["metric"] == "pearson"]
    for seed, host in dict.fromkeys((r["seed"], r["host"]) for r in searched):
        by = {}
        for r in searched:
            if (r["seed"], r["host"]) == (seed, host):
                by.setdefault(r["trial"], {})[r["part"]] = r
        for trial, parts in sorted(by.items()):
            a, c, rest = (parts[k] for k in PARTS)
            lines.append(f"| {seed} ({host}) | {trial} | {a['family']} {a['shape']} | {a['state']}"
                         f"{', chosen' if a['chosen'] else ''} | {cell(a['value'])} | {cell(c['value'])} | "
                         f"{cell(rest['value'])} | {a.get('dev_value', '-')} |")
        c, rest = (next(iter(by.values()))[k] for k in PARTS[1:])
        notes.append(f"seed {seed}'s split: the caption group {c['pairs']} pairs, scores {c['label_mean']:.2f} ± "
                     f"{c['label_std']:.2f}; the rest {rest['pairs']}, {rest['label_mean']:.2f} ± "
                     f"{rest['label_std']:.2f}")
        complete = {t: p for t, p in by.items() if p["rest"]["state"] == "complete" and p["rest"]["value"] is not None}
        chosen = next((t for t, p in by.items() if p["all"]["chosen"]), None)
        if len(complete) > 1 and chosen in complete:
            first = max(complete, key=lambda t: complete[t]["rest"]["value"])
            notes.append(f"seed {seed}: of its {len(complete)} complete trials, the rest alone ranks first "
                         f"{'the one chosen' if first == chosen else f'trial {first}, not the chosen {chosen}'}")
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
                   lambda r: (r["method"], TASKS.index(r["task"]), r["seed"], r.get("trial", -1), r["metric"],
                              PARTS.index(r["part"]) if r["part"] in PARTS else -1), KEY)
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
