"""`mobilekd ship` measured as a user meets it (issue 74, item 4): on each task, one `ship` command at its default
latency budget (a third of the teacher's Pixel 4 estimate), seeds declared up front, every choice on a validation
split of the training data and dev scored once per seed; rows to docs/results/ship.json, the table into docs/ship.md.

    python -m benchmarks.ship --tasks stsb-genre --seeds 0 1 2     # resumable; --collect gathers finished runs
    python -m benchmarks.ship --table --write --plot               # the table and docs/ship.png from the rows

The tasks are CSVs built from text the repo ships (benchmarks/custom.py), handed to `ship` as a user's `--data`,
and the shipped GLUE tasks (`ship --task NAME`; GLUE's dev sets are then test sets: no choice reads them).
The teacher is the demo's: all-MiniLM-L6-v2 adapted (`train-teacher --init-from`, teacher_ib_bert/adaptation.json)
so that it has the masked-LM head that narrowing, augmentation and the task-agnostic families need; `ship`
fine-tunes it on each task. Each run: `mobilekd ship --teacher OUT/teacher --data DATA --seed S --families F
--search-hours H --workers 2 --threads 1`; with `--hours H`, `ship --hours H` (the whole run's wall budget, as a
user gives it) in its place, the runs' rows a space of their own beside the space they searched (`wall_space`).

Rows: one per trial (method "ship-trial": family, shape, recipe, state, val_value, pixel4_ms_est, wall_seconds,
chosen), the chosen student (method "ship": its val_value, and value, dev scored once), the teacher, TF-IDF + LR and
the majority class on the same examples, and the ship run's wall time ("ship-wall"). The table's intervals are
paired bootstraps over dev examples and seeds (mobilekd/finetune/intervals.py). The `ship` of before the search (one
fixed recipe: the teacher's layers 0 and 5 with logit KD, docs/results/custom.json) stands beside it. Runs of the
search's first draw (one draw over every shape, halving across families) keep their rows with no `draw` field;
today's carry "family", and where a task ran both ways on the same seeds their difference is paired too. A run
searched in another space than the first (configs/ship.json's shapes, starts and spaces of the families it searched,
its search and teacher settings) carries that space's name (`SPACES`) in `space`, and is paired with the nearest
space before it that ran on the task, on the seeds both ran; a run in a space `SPACES` does not name is refused
when its rows are collected, so no two spaces' rows are ever averaged together. `--families subset tinybert
mobilebert` runs the MobileBERT-shaped family too (issue 78), whose starts (PKT from the teacher) are made once per
teacher and shared by every task.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np
from filelock import FileLock

from mobilekd.finetune import intervals
from benchmarks.custom import TASKS as CUSTOM
from benchmarks.custom import write_task
from benchmarks.command import comparison, comparison_flags
from benchmarks.pages import task_panels
from benchmarks.rows import recorded_host
from benchmarks.runner import Job
from benchmarks.stats import mean_std_cell, values
from mobilekd.errors import UserError
from mobilekd.fileio import REPO_ROOT, read_json, write_json

# what the benchmark's runs search: ship's default but for the MobileBERT-shaped family, whose start (PKT, about
# 1,900 s on 2 cores in docs/results/quality.json) alone takes half the hour on a small task, and the BiLSTM
# (in ship's search since the GLUE tasks' runs began: a task's seeds search the same families)
FAMILIES = ["subset", "tinybert"]  # --families: another list searches another space (SPACES), kept apart
# the search's wall limit a run (ship --search-hours; --hours before ship's --hours became the whole run's budget
# on 2026-12-07), by task where not HOURS: the goal is 1 hour for the whole command on a task of up to
# 10,000 training examples and 3 hours on SST-2's 67,349, whose teacher took 22 minutes at --max-len 64 and whose
# trials, scaled with its size (examples_seen's scale_above), run up to 4 epochs (runs before 2026-12-05 searched
# SST-2 for 0.75 hours too). The search alone is limited, as when these spaces' first seeds ran, so that a space's
# seeds search alike on one host; the whole run then takes the teacher's minutes more (wall rows)
HOURS, TASK_HOURS = "0.75", {"sst2": "2"}
GLUE = ("rte", "mrpc", "stsb", "cola", "sst2")  # the shipped GLUE tasks, read by `ship --task`
TASKS = [*CUSTOM, *GLUE]
METHODS = ("teacher", "ship", "ship-trial", "ship-wall", "tfidf", "majority", "constant", "ship-tfidf-interval",
           "ship-majority-interval", "ship-teacher-interval", "ship-draw-interval", "ship-space-interval", "ship-start")
# the methods a ship run is paired with over its seeds' dev predictions (`keep_predictions`): TF-IDF + LR's
# always; the majority class's (classification) and the teacher's where the run folders kept them (since
# 2026-12-08: the kept predictions of earlier runs hold neither, so their intervals cover the later seeds only)
PAIRED = ("tfidf", "majority", "teacher")
# how the run's search drew its trials (a row's "draw", part of its key): absent for the search of before
# mobilekd.search.study.DRAW (one draw over every family's shapes, halving across families), "family" since
FAMILY_DRAW = "family"
# the search spaces the rows were measured in, by digest (`space_digest`), oldest first: the first, which every row
# without a `space` field was measured in, and a name and a line for each one since (configs/ship.json edited, or
# --families); each is paired with the nearest one before it that ran on the task, on the seeds both ran
# (ship-space-interval). A space of other families needs an --out of its own (ship refuses a run folder searched with
# other settings). The students' starts are made before any search (`jobs`: `ship --make-starts`), so that every
# run searches for its full --search-hours; runs before that job existed made them inside the first run's search
SPACES = {"a3a365c6": (None, "configs/ship.json's search as of 2026-12-03"),
          "d7b9ff56": ("tinybert-wide", "TinyBERT's learning rate up to 3e-3 (was 1e-3) and augmentation up to 12 "
                                        "copies (was 4): CoLA's chosen lr sat at the bound on 2 of 3 seeds"),
          "7c042a33": ("mobilebert", "tinybert-wide and the MobileBERT-shaped family (`--families subset tinybert "
                                     "mobilebert`): its starts, PKT from the teacher, made once per teacher"),
          "bc5c48dd": ("mobilebert-3000", "the MobileBERT-shaped family's starts transferred 3,000 steps a stage, "
                                          "made on a GPU (configs/ship_gpu.json, `--config`): its 6-block, 4-block "
                                          "and MobileBERT_TINY 4-block shapes"),
          "2460c6fb": ("cut", "tinybert-wide, with a trial under way at the search's wall limit (then --hours) cut "
                              "there once one is complete (search.at_wall_limit \"cut\"; before, every trial under way "
                              "finished), and MRPC's checkpoints and students chosen on the mean of F1 and accuracy "
                              "(before: F1)"),
          "4ac977db": ("mobilebert-cut", "mobilebert, with a trial under way at the search's wall limit (then "
                                         "--hours) cut there (as cut)"),
          "cea671fa": ("mobilebert-3000-cut", "mobilebert-3000, with a trial under way at the search's wall limit "
                                              "(then --hours) cut there (as cut)"),
          "cd2a1e92": ("cut-grouped", "cut, with a one-text task's validation split grouped by text: a phrase with "
                                      "the training texts holding it (SST-2's phrases of one sentence on one side)"),
          "a09ebfec": ("mobilebert-cut-grouped", "mobilebert-cut, its validation split grouped (as cut-grouped)"),
          "99b68071": ("mobilebert-3000-cut-grouped", "mobilebert-3000-cut, its validation split grouped (as "
                                                      "cut-grouped)"),
          "900dca04": ("cut-grouped-aug20k", "cut-grouped, with no augmented set drawn for a task of over 20,000 "
                                             "training examples (--augment's up_to_examples): SST-2's took a "
                                             "trial's whole share of the search"),
          "ebe4c407": ("mobilebert-cut-grouped-aug20k", "mobilebert-cut-grouped, augmented sets as "
                                                        "cut-grouped-aug20k"),
          "05e059e4": ("mobilebert-3000-cut-grouped-aug20k", "mobilebert-3000-cut-grouped, augmented sets as "
                                                             "cut-grouped-aug20k"),
          "1fc7437d": ("cut-grouped-aug20k-whole", "cut-grouped-aug20k, with --max-len measured over the whole "
                                                   "training texts (a phrase inside a longer text counted as that "
                                                   "one): SST-2's phrases put it at 32, its sentences at 64"),
          "4af052c9": ("mobilebert-cut-grouped-aug20k-whole", "mobilebert-cut-grouped-aug20k, --max-len as "
                                                              "cut-grouped-aug20k-whole"),
          "3b8f5606": ("mobilebert-3000-cut-grouped-aug20k-whole", "mobilebert-3000-cut-grouped-aug20k, --max-len as "
                                                                   "cut-grouped-aug20k-whole"),
          "976c7697": ("whole-scaled", "cut-grouped-aug20k-whole, with a trial's examples_seen scaled on a task of "
                                       "over 20,000 training examples (scale_above): SST-2's trials see 1, 2 or 4 "
                                       "epochs, where they saw 0.3 to 1.2 (and benchmarks.ship "
                                       "searches SST-2 for 2 hours, TASK_HOURS, where it searched 0.75)"),
          "070617ad": ("mobilebert-whole-scaled", "mobilebert-cut-grouped-aug20k-whole, examples_seen as "
                                                  "whole-scaled"),
          "57fca21f": ("mobilebert-3000-whole-scaled", "mobilebert-3000-cut-grouped-aug20k-whole, examples_seen as "
                                                       "whole-scaled"),
          "bca93585": ("whole-scaled-linked", "whole-scaled, with a two-text task's pairs linked by a shared sentence "
                                              "held on one side of the validation split (14-30% of MRPC's, STS-B's "
                                              "and RTE's training pairs share one); one-text tasks' runs unchanged"),
          "f1cf394e": ("mobilebert-whole-scaled-linked", "mobilebert-whole-scaled, its split as whole-scaled-linked"),
          "b8ac71af": ("mobilebert-3000-whole-scaled-linked", "mobilebert-3000-whole-scaled, its split as "
                                                              "whole-scaled-linked"),
          "c3181f06": ("whole-scaled-linked-capped", "whole-scaled-linked, with a linked group of over 5% of the "
                                                     "validation split kept in training (MAX_GROUP_SHARE): STS-B's "
                                                     "245 caption pairs were 43% of every seed's split; MRPC's and "
                                                     "RTE's splits unchanged, their runs still whole-scaled-linked"),
          "f8b9becb": ("mobilebert-whole-scaled-linked-capped", "mobilebert-whole-scaled-linked, its split as "
                                                                "whole-scaled-linked-capped"),
          "c2a64b59": ("mobilebert-3000-whole-scaled-linked-capped", "mobilebert-3000-whole-scaled-linked, its split "
                                                                     "as whole-scaled-linked-capped")}
EARLIER = "docs/results/custom.json"  # the ship of before the search: the cost of honesty's other side
QUALITY = "docs/results/quality.json"  # on the GLUE tasks, the students picked on dev (`dev_picked`)
# on each GLUE task, the student the retired benchmarks.quality picked on the dev set it is scored on (its
# `best_student` at 3f31fc1: the best dev mean, over the most seeds, within a third of the teacher's Pixel 4 estimate)
DEV_PICKED = {"sst2": "tinybert-td-aug", "mrpc": "tinybert-td", "stsb": "subset2-narrow-kd-aug-wide-longer",
              "cola": "tinybert-td-wide", "rte": "pkt-kd"}
# each finished seed's dev predictions (ship's student, TF-IDF + LR) and labels, kept as data beside the results
# file (ship.json -> ship_predictions.json): a later invocation, without an earlier one's run folders, still pools
# every seed into the paired interval
KEPT_SUFFIX = "_predictions"


def run_dir(out: Path, task: str, seed: int, hours: float | None = None) -> Path:
    """A run's folder; one under ship's --hours (`--hours`: the whole run's budget) under OUT/hoursH."""
    return (out / f"hours{hours:g}" if hours else out) / task / f"seed{seed}"


def jobs(out: Path, tasks: list[str], seeds: list[int], families: list[str] = FAMILIES,
         config: str | None = None, hours: float | None = None) -> list[Job]:
    """The teacher; per task, its candidates' starts made before any search (`ship --make-starts`: the first
    search would otherwise spend its --search-hours on them; made once per teacher, so later tasks find most made);
    then a ship a seed. `config`: ship's --config where not configs/ship.json (starts made elsewhere, as
    configs/ship_gpu.json's on a GPU, are found in the teacher's --starts folder). `hours`: the runs get ship's
    --hours, the whole run's wall budget, in place of the search's limit (`--search-hours`), in run folders of
    their own (`run_dir`) and a space of their own (`wall_space`)."""
    teacher = Job("teacher", ["train-teacher", "--init-from", "all-minilm-l6-v2", "--out", str(out / "teacher")],
                  out / "teacher")
    ship = ["ship", "--teacher", str(out / "teacher"), *(["--config", config] if config else [])]
    flags = {task: task_flags(out, task) for task in tasks}
    starts = [Job(f"{task}/starts", [*ship, *flags[task], "--families", *families, "--make-starts",
                                     "--out", str(out / "starts" / task)], out / "starts" / task, needs=["teacher"])
              for task in tasks]
    limit = (lambda task: ["--hours", f"{hours:g}"]) if hours else (
        lambda task: ["--search-hours", TASK_HOURS.get(task, HOURS)])
    runs = [Job(f"{task}/ship{f'-hours{hours:g}' if hours else ''}/{seed}",
                [*ship, *flags[task], "--seed", str(seed), "--families", *families, *limit(task), "--workers", "2",
                 "--threads", "1", "--out", str(run_dir(out, task, seed, hours))],
                run_dir(out, task, seed, hours), needs=[f"{task}/starts"]) for seed in seeds for task in tasks]
    for job in runs if not hours else []:  # a run finished before 2026-12-07 named the search's limit --hours
        job.renamed_from = [["--hours" if a == "--search-hours" else a for a in job.argv]]
    return [teacher, *starts, *runs]


def task_flags(out: Path, task: str) -> list[str]:
    """How `ship` is told the task: a shipped GLUE task by name, a custom one as the CSVs a user would hand it."""
    return ["--task", task] if task in GLUE else ["--data", str(write_task(task, out / "data"))]


def start_rows(out: Path, task: str) -> list[dict]:
    """Each start the task's `ship --make-starts` job made or found (OUT/starts/TASK/starts.json): a task-agnostic
    distillation's training seconds (its stages', with the host, GPU and precision they ran on: another machine's
    for configs/ship_gpu.json's starts) and, for PKT's (whose last stage distils the masked-LM head; TinyBERT's
    general distillation leaves it untrained), its held-out masked-LM accuracy; a start without stages (the teacher's
    layers), the seconds the job took to make it. A relative start folder is the job's working directory's: the
    checkout that holds OUT."""
    path = out / "starts" / task / "starts.json"
    if not path.is_file():
        return []
    record, found = read_json(path), []
    root = next((d for d in out.parents if (d / ".git").exists()), Path.cwd())
    for r in record["starts"]:
        start = root / r["start"]
        summary = read_json(start / "summary.json") if (start / "summary.json").is_file() else {}
        shared = {"task": task, "method": "ship-start", "seed": None, "candidate": r["candidate"],
                  "start": start.name, "made_by_the_job": r["made"]}
        stages = summary.get("stages") or []
        if stages and all("seconds" in st for st in stages):
            found.append({**shared, "metric": "train_seconds", "value": round(sum(st["seconds"] for st in stages), 1),
                          "steps": summary.get("total_steps"), **recorded_host(stages[0]),
                          **{k: stages[0][k] for k in ("gpu", "precision") if k in stages[0]}})
            if "heldout" in summary and summary.get("strategy") == "pkt":  # its PD stage teaches the MLM head
                found.append({**shared, "metric": "mlm_accuracy",
                              "value": round(summary["heldout"]["mlm_accuracy"], 4)})
        elif r["made"]:
            found.append({**shared, "metric": "wall_seconds", "value": r["seconds"], **recorded_host(record)})
    return found


def rows(out: Path, tasks: list[str], seeds: list[int], hours: float | None = None) -> list[dict]:
    from mobilekd.recipes.ship import stages_seconds  # every row's wall time: the recorded stages

    found = []
    for task in tasks:
        found += start_rows(out, task)
        for seed in seeds:
            run = run_dir(out, task, seed, hours)
            if not (run / "ship.json").is_file():
                continue
            s = read_json(run / "ship.json")
            b, metric, c = s["budget"], s["metric"], s["chosen"]
            host = recorded_host(s)
            plan = read_json(run / "plan.json")
            searched = sorted({c.split("/")[0] for c in plan["candidates"]})
            space = run_space(run, plan, s)
            wall = stages_seconds(s["wall_seconds"])
            shared = {"task": task, "seed": seed, "metric": metric, "teacher_choice": teacher_choice(s),
                      **({"val_metric": c["selection_metric"]} if c.get("selection_metric", metric) != metric else {}),
                      **({"draw": FAMILY_DRAW} if plan.get("draw") else {}), **({"space": space} if space else {}),
                      "classes": b["classes"], "families": searched,
                      "train_examples": b["train_examples"], "dev_examples": s["student"]["dev_examples"],
                      "max_len": b["max_len"], "latency_ms": b["latency_ms"]}
            found += [{**shared, "method": "ship-trial", "trial": t["trial"], "family": t["family"],
                       "shape": t["shape"], "recipe": t["recipe"], "state": t["state"], "val_value": t["val_value"],
                       "value": None, "pixel4_ms_est": t["pixel4_ms_est"], "wall_seconds": t["wall_seconds"],
                       "chosen": t["chosen"], "host": t["host"], **({"cut": t["cut"]} if "cut" in t else {})}
                      for t in s["trials"]]
            found += [
                {**shared, "method": "ship", "family": c["family"], "shape": c["shape"], "recipe": c["recipe"],
                 "val_value": round(c["val_value"], 4), "value": round(s["student"]["dev"][metric], 4),
                 "pixel4_ms_est": c["pixel4_ms_est"], "params_m": c["params_m"], "chosen": True,
                 "wall_seconds": wall, **host},
                {**shared, "method": "ship-wall", "value": wall, "metric": "wall_seconds",
                 "parts": s["wall_seconds"], **host},
                {**shared, "method": "teacher", "value": round(s["teacher"]["dev"][metric], 4),
                 "pixel4_ms_est": b["teacher_pixel4_ms_est"], "wall_seconds": s["teacher"]["train_seconds"],
                 **recorded_host({"host": s["teacher"]["host"]})},
                {**shared, "method": "majority", "value": round(s["majority"]["metrics"][metric] if s.get("majority")
                                                                else majority(task, Path(s["data"]), metric), 4)}]
            if s.get("constant"):  # the best constant answer on the trials' validation split, in their score
                found.append({**shared, "method": "constant", "split": "validation", "label": s["constant"]["label"],
                              "metric": s["constant"]["metric"], "value": None, "val_value": s["constant"]["value"]})
            if s.get("baseline"):
                found.append({**shared, "method": "tfidf", "value": round(s["baseline"]["metrics"][metric], 4),
                              "wall_seconds": s["baseline"]["seconds"], **host})
    return found


def space_digest(plan: dict) -> str:
    """The digest of what a run's search drew from, of its plan.json: the configuration's search and teacher
    settings and the shapes, starts and spaces of FAMILIES and of every other family it had candidates of (a run of
    `--families ... mobilebert`), descriptions left out (`mobilekd.recipes.ship.settings`), and how its validation
    split was grouped and what its --max-len was measured over where the plan says
    (`mobilekd.finetune.selection.grouping`, `mobilekd.recipes.ship.LENGTHS_OF`): a pair task's run
    carved since 2026-12-06, its linked pairs held together, is a space of its own."""
    from mobilekd.recipes.ship import settings

    families = dict.fromkeys([*FAMILIES, *(name.split("/")[0] for name in plan["candidates"])])
    config = settings({"config": plan["config"], "candidates": [f"{f}/" for f in families]})["config"]
    for field in ("validation", "lengths"):  # where plan.json records them (ship since 2026-12-05)
        if plan.get(field):
            config = {**config, field: plan[field]}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]


def run_space(run: Path, plan: dict, s: dict | None = None) -> str | None:
    """The name of the space `run` searched (None: the first); one line where SPACES does not name it. Where its
    ship.json `s` says the run had ship's --hours (the whole run's wall budget, `wall_limit`), that space under it
    (`wall_space`)."""
    digest = space_digest(plan)
    if digest not in SPACES:
        raise UserError(f"{run / 'plan.json'}: its search space (digest {digest}) is not one benchmarks.ship "
                        f"names: add it to SPACES (a name and a line) so that its rows stand apart")
    hours = ((s or {}).get("wall_limit") or {}).get("hours")
    return wall_space(SPACES[digest][0], hours) if hours else SPACES[digest][0]


WHOLE_RUN = "-hours"  # a space's name, then this and --hours: its runs under ship's --hours (`wall_space`)
SPACE_LINES = {name: line for name, line in SPACES.values()}  # SPACES by name, oldest first (None: the first)


def wall_space(space: str | None, hours: float) -> str:
    """The space of the runs that searched `space` under ship's --hours `hours`, the whole run's wall budget (the
    search gets what the run before it, the teacher's fine-tuning the most of it, leaves, less
    mobilekd.search.config.FINAL_RESERVE for the last stages: mobilekd.recipes.ship.search_left), where the space's
    own runs limit the search alone (--search-hours, `TASK_HOURS`): the same search, its wall rule the one a user's
    flag gives. Paired with `space` on the seeds both ran (`earlier_space`); never a task's current rows
    (`current`): a measurement beside its space."""
    return f"{space or 'first'}{WHOLE_RUN}{hours:g}"


def searched_space(name: str | None) -> tuple[str | None, float | None]:
    """`name`'s search space and, for a `wall_space`, its --hours (else None)."""
    found = re.fullmatch(rf"(.+){WHOLE_RUN}(\d+(?:\.\d+)?(?:e[+-]?\d+)?)", name or "")
    if found and name not in SPACE_LINES:  # a SPACES name is its own, whatever it reads
        return (None if found[1] == "first" else found[1]), float(found[2])
    return name, None


def space_line(name: str) -> str:
    """What a space's name stands for: SPACES' line, and a `wall_space`'s wall rule."""
    space, hours = searched_space(name)
    return SPACE_LINES[space] + (f"; under ship's --hours {hours:g}, the whole run's wall budget, where its own "
                                 "runs limit the search alone (--search-hours)" if hours else "")


def teacher_choice(s: dict) -> str:
    """How the run's teacher was fine-tuned: "validation" (ship's learning rates and steps, the best on its
    validation split: OUT/teacher/chosen.json) or "fixed" (the ship of before that choice: 3 epochs at 5e-5, last
    step). Part of a row's key, so the runs of both stand side by side in the results file."""
    return "validation" if s["teacher"].get("chosen") else "fixed"


TEACHER_CHOICE = {"fixed": "fixed: 3 epochs at 5e-5", "validation": "lr and step chosen on validation"}
DRAWS = {None: "one draw over all shapes, halved across families", FAMILY_DRAW: "family drawn first, halved within it"}


def version(row: dict) -> tuple[str, str | None, str | None]:
    """Which `ship` a row measured: its teacher choice, its search's draw and its search space."""
    return row.get("teacher_choice") or "", row.get("draw"), row.get("space")


def run_version(run: Path, s: dict, plan: dict) -> tuple[str, str | None, str | None]:
    """`version` of a run folder's ship.json and plan.json."""
    return teacher_choice(s), FAMILY_DRAW if plan.get("draw") else None, run_space(run, plan, s)


def current(rows: list[dict]) -> list[dict]:
    """On each task, the rows of today's `ship`: its latest version that has a chosen student there (the teacher
    chosen on validation over the earlier fixed one, the family-first draw over the one before; every version is
    kept in the results file); what the pages beside benchmarks.ship's own table (the README's summary, SetFit's
    comparison) read."""
    latest = {}
    for r in rows:
        if r["method"] == "ship" and searched_space(r.get("space"))[1] is None:  # a wall_space: beside its space
            latest[r["task"]] = max(latest.get(r["task"], ("", "", -1)), _sortable(version(r)))
    return [r for r in rows if _sortable(version(r)) == latest.get(r["task"])]


def _sortable(v: tuple[str, str | None, str | None]) -> tuple[str, str, float]:
    """A version's place in order: its teacher choice, draw and space (a `wall_space` just after its space)."""
    space, hours = searched_space(v[2])
    return v[0], v[1] or "", list(SPACE_LINES).index(space) + (0.5 if hours else 0)


def majority(task: str, data: Path, metric: str) -> float:
    """The dev `metric` of always answering the training set's most frequent label (the data a run was given;
    `mobilekd.finetune.baseline.majority_baseline`; for regression 0: a constant score has no correlation), for a
    ship.json from before ship recorded it."""
    from mobilekd.data.tasks import load_task
    from mobilekd.finetune.baseline import majority_baseline

    t = load_task("custom" if task in CUSTOM else task, data)
    always = majority_baseline(t, t.train, next(iter(t.dev.values())))
    return always["metrics"][metric] if always else 0.0


@functools.cache
def constant_validation(task: str, seed: int, metric: str) -> float | None:
    """The best constant answer's `metric` on the validation split a ship run with `seed` carves from a task's
    training data (`mobilekd.finetune.baseline.constant_on_validation`; a GLUE task's shipped files, a custom task's
    written again from the text it is built of), for rows from before ship recorded it: today's carve of today's
    data, so it may differ by a few examples from the split of a run made before the carve kept a repeated text's
    copies on one side (2026-12-02) or, for a custom task built from installed packages' text, under other package
    versions; a pair task's as carved before its linked pairs were kept together (2026-12-06): every run without a
    recorded constant predates that. None for regression."""
    import tempfile

    from mobilekd.data.tasks import load_task, task_data
    from mobilekd.finetune.baseline import constant_on_validation

    with tempfile.TemporaryDirectory() as tmp:
        t = load_task(task, task_data(task)) if task in GLUE else load_task("custom", write_task(task, Path(tmp)))
        always = constant_on_validation(t, seed, metric=metric, linked_pairs=False)
    return always and always["value"]


def keep_predictions(out: Path, task: str, done: dict[int, tuple], kept: Path,
                     hours: float | None = None) -> dict[tuple, dict[int, dict]]:
    """Every seed's dev predictions of `task`, by `version` and seed: those of the run folders of `done` (seed ->
    its run's version; under ship's --hours `hours`: `run_dir`), written into `kept` (under its lock, as
    "task/teacher choice[/draw][/space:NAME]/seedN"), and those `kept` already holds from earlier invocations."""
    with FileLock(f"{kept}.lock"):
        held = read_json(kept) if kept.is_file() else {}
        for s, (choice, draw, space) in done.items():
            r = run_dir(out, task, s, hours)
            if (r / "baseline_dev_predictions.tsv").is_file() and (r / "student/dev/dev_predictions.tsv").is_file():
                labels, ship = intervals.read_predictions(r / "student/dev/dev_predictions.tsv")
                summary = read_json(r / "ship.json") if (r / "ship.json").is_file() else {}
                majority = (summary.get("majority") or {}).get("label")
                teacher = r / "teacher/dev/dev_predictions.tsv"
                held["/".join([task, choice, *([draw] if draw else []), *([f"space:{space}"] if space else []),
                               f"seed{s}"])] = {
                    "labels": labels.tolist(), "ship": ship.tolist(),
                    "tfidf": intervals.read_predictions(r / "baseline_dev_predictions.tsv")[1].tolist(),
                    **({"majority": [majority] * len(labels)} if majority is not None else {}),
                    **({"teacher": intervals.read_predictions(teacher)[1].tolist()} if teacher.is_file() else {})}
        write_json(kept, dict(sorted(held.items())))
    found = {}
    for key, value in held.items():
        name, *v, seed = key.split("/")
        if name == task:
            space = next((x[6:] for x in v[1:] if x.startswith("space:")), None)
            draw = next((x for x in v[1:] if not x.startswith("space:")), None)
            found.setdefault((v[0], draw, space), {})[int(seed[4:])] = value
    return found


def predictions(by_seed: dict[int, dict], methods=("ship", "tfidf")) -> dict | None:
    """Per method of `methods`, the dev predictions of each seed (labels, and rows of predictions), for the
    bootstrap."""
    if not by_seed:
        return None
    seeds = sorted(by_seed)
    return {"labels": np.array(by_seed[seeds[0]]["labels"]),
            **{m: np.array([by_seed[s][m] for s in seeds]) for m in methods}}


def paired_intervals(task: str, metric: str, by_version: dict[tuple, dict[int, dict]]) -> list[dict]:
    """Per version of `keep_predictions`' and method of PAIRED, ship's paired interval against it over the seeds
    whose kept predictions hold that method's (every seed for TF-IDF; the majority class's and the teacher's only
    where the run folder kept them)."""
    got = []
    for v, by_seed in by_version.items():
        for other in PAIRED:
            have = {s: p for s, p in by_seed.items() if other in p}
            if not have:
                continue
            p_ = predictions(have, ("ship", other))
            got.append({"task": task, "method": f"ship-{other}-interval", "seed": None, "metric": metric,
                        "teacher_choice": v[0], **({"draw": v[1]} if v[1] else {}), **({"space": v[2]} if v[2] else {}),
                        "value": None, "seeds": sorted(have),
                        "interval": intervals.paired_bootstrap(p_["labels"], p_["ship"], p_[other],
                                                               metric=intervals.metric_function(task, metric))})
    return got


def dev_picked(task: str, metric: str) -> list[float]:
    """On a GLUE task, the dev scores of the student benchmarks.quality picked on the dev set it is scored on
    (DEV_PICKED): the figure ship's honest score is measured against, the cost of honesty's other side; [] elsewhere."""
    path = REPO_ROOT / QUALITY
    if task not in DEV_PICKED or not path.is_file():
        return []
    return values(read_json(path), task, metric, DEV_PICKED[task])


def table(results: list[dict]) -> str:
    lines = ["| task | ship's teacher | train / dev | budget (Pixel 4, est.) | chosen student (validation) | "
             "ship, dev once | teacher | TF-IDF + LR | majority | ship - TF-IDF | ship - majority | ship / teacher | "
             "ship's wall time | before: `ship` of one recipe (CSV tasks), the best student picked on dev (GLUE); "
             "ship - it |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    earlier = read_json(REPO_ROOT / EARLIER) if (REPO_ROOT / EARLIER).is_file() else []
    for task, v in dict.fromkeys((r["task"], version(r)) for r in results):
        mine = [r for r in results if r["task"] == task and version(r) == v]
        choice = v[0] or None
        chosen = [r for r in mine if r["method"] == "ship"]
        if not chosen:
            continue
        first, metric = chosen[0], chosen[0]["metric"]

        def values(method, rows=mine):
            return [r["value"] for r in rows if r["method"] == method]

        def cell(method):  # "-" where a method has no rows (no TF-IDF baseline for a regression task)
            return mean_std_cell(values(method)) if values(method) else "-"
        picks = "; ".join(f"{r['family']} {r['shape']} {r['pixel4_ms_est']:.1f} ms ({r['val_value']:.4f}, seed "
                          f"{r['seed']}; searched {', '.join(r['families'])})" for r in chosen)
        shares = [s / t for s, t in zip(values("ship"), values("teacher")) if t > 0]  # MCC may be 0
        before = [r["value"] for r in earlier if r["task"] == task and r["method"] == "ship"] or \
            dev_picked(task, metric)
        cost = f"; {(statistics.mean(values('ship')) - statistics.mean(before)) * 100:+.1f}" if before else ""
        pairs = f"{interval_cell(mine)} | {interval_cell(mine, 'majority')}"
        lines.append(f"| {task} ({metric}) | {TEACHER_CHOICE[choice]}" + (f"; {DRAWS[v[1]]}" if v[1] else "")
                     + (f"; searched in {space_line(v[2])}" if v[2] else "") + " | "
                     f"{first['train_examples']:,} / {first['dev_examples']:,} | "
                     f"{first['latency_ms']:.1f} ms | {picks} | {cell('ship')} | {cell('teacher')} | {cell('tfidf')} | "
                     f"{cell('majority')} | {pairs} | "
                     + (f"{statistics.mean(shares) * 100:.1f}% | " if shares else "- | ")
                     + f"{statistics.mean(values('ship-wall')) / 60:.0f} min | "
                     + (f"{mean_std_cell(before)}{cost} |" if before else "- |"))
    return "\n".join(lines) + ("\n\nship - TF-IDF, ship - majority: the difference in points with its paired 95% "
                               "bootstrap interval over dev examples and seeds (mobilekd/finetune/intervals.py; "
                               "the majority class's over the seeds whose runs kept its label, n; none for a "
                               "regression task); before: on the GLUE "
                               "tasks, the student the retired benchmarks.quality picked (the best dev mean within "
                               "the budget, chosen on the dev set it is scored on), then ship's mean minus it, in "
                               "points (the cost of honesty); ship's wall time: its recorded stages (the teacher's "
                               "runs, the search, the last stages), not the start-up and the summary around them "
                               "(up to a minute more); Pixel figures are ESTIMATES of a cost model.\n") + \
        model_maker(results) + draws(results) + spaces(results) + family_table(results) + starts_table(results)


def model_maker(results: list[dict]) -> str:
    """On SST-2, today's ship against MediaPipe Model Maker's average-word-embedding classifier (its rows in
    docs/results/quality.json, made by the retired `benchmarks.model_maker`): issue 74 asks for at least 6 points
    above it."""
    ship = [r["value"] for r in current(results) if r["task"] == "sst2" and r["method"] == "ship"]
    path = REPO_ROOT / QUALITY
    maker = [r for r in (read_json(path) if path.is_file() else [])
             if r["task"] == "sst2" and r["method"] == "model-maker"]
    if not ship or not maker:
        return ""
    gap = (statistics.mean(ship) - statistics.mean(r["value"] for r in maker)) * 100
    return (f"\nSST-2: ship {mean_std_cell(ship)} against Model Maker's average-word-embedding model "
            f"{mean_std_cell([r['value'] for r in maker])} (its .tflite {maker[0]['tflite_bytes'] / 1e6:.1f} MB): "
            f"{gap:+.1f} points, the goal at least +6 {'met' if gap >= 6 else 'missed'} on the means.\n")


def starts_table(results: list[dict]) -> str:
    """The task-agnostic starts the searches began from (`start_rows`): where and how long each was made, and its
    held-out masked-LM accuracy."""
    made = [r for r in results if r["method"] == "ship-start" and r["metric"] == "train_seconds"]
    if not made:
        return ""
    mlm = {(r["task"], r["start"]): r["value"] for r in results
           if r["method"] == "ship-start" and r["metric"] == "mlm_accuracy"}
    lines = ["\nThe students' task-agnostic starts (made once per teacher before a task's searches, shared by its "
             "seeds; `ship --make-starts`):\n", "| task | candidate | start | steps | training time | where | "
             "held-out masked-LM accuracy |", "|---|---|---|---|---|---|---|"]
    for r in made:
        lines.append(f"| {r['task']} | {r['candidate']} | {r['start']} | {r['steps']:,} | {r['value'] / 60:.1f} min | "
                     f"{r.get('gpu') or r['host']} | {mlm.get((r['task'], r['start']), '-')} |")
    return "\n".join(lines) + "\n"


def on_frontier(trials: list[dict]) -> list[dict]:
    """The trials no other trial dominates (as fast or faster by Pixel estimate and as good or better on validation,
    one of the two strictly): the validation-score x latency frontier of one search."""
    return [t for t in trials if not any(
        o["pixel4_ms_est"] <= t["pixel4_ms_est"] and o["val_value"] >= t["val_value"]
        and (o["pixel4_ms_est"], o["val_value"]) != (t["pixel4_ms_est"], t["val_value"]) for o in trials)]


def family_table(results: list[dict]) -> str:
    """Where a search held more than one family: per family, its trials, its best complete trial's validation score
    and Pixel estimate a seed (what the family offers in that search; a pruned trial stopped early and is not
    compared), the seeds it was chosen on and the seeds its best stood on the frontier of the families' bests
    (validation score x Pixel estimate). The families' bests, not every trial: a weak trial of a shape a few hundredths
    of a millisecond faster than the others (a 1-layer subset at MCC 0.05 beside TinyBERT's 0.22) would stand on a
    frontier of all trials and say nothing of what a user would ship. Issue 78's goal, a MobileBERT-shaped student on
    the frontier of 3 of the 5 GLUE tasks, is judged here on validation, where every trial was scored (dev scores only
    the chosen one), on most of a task's seeds, in the newest space that searched the family on it. Searches of the
    first draw (one draw over every shape, halved across families) are left out: their families were not drawn
    equally."""
    lines = ["\nThe families of each search, on validation (complete trials; frontier: of the families' best "
             "complete trials in one seed's search, validation score x Pixel 4 estimate, with the best constant "
             "answer at 0 ms: a best at or below its validation score is not on it).\n",
             "| task | space | family | trials (complete), all seeds | best complete trial a seed: validation | "
             "its Pixel 4 (est.) | a constant answer: validation | chosen on | on the frontier on |",
             "|---|---|---|---|---|---|---|---|---|"]
    met = {}
    for task, v in dict.fromkeys((r["task"], version(r)) for r in results if r["method"] == "ship-trial"):
        trials = [r for r in results if r["method"] == "ship-trial" and r["task"] == task and version(r) == v]
        if len({t["family"] for t in trials}) < 2 or not v[1]:  # one family, or the first draw's runs
            continue
        seeds = sorted({t["seed"] for t in trials})
        bests = {(f, s): max((t for t in trials if t["family"] == f and t["seed"] == s and t["state"] == "complete"),
                             key=lambda t: t["val_value"], default=None) for f in {t["family"] for t in trials}
                 for s in seeds}
        floor = {s: constant(results, trials, task, v, s) for s in seeds}
        frontier = {s: on_frontier([b for (f, seed), b in bests.items() if seed == s and b and (
            floor[s] is None or b["val_value"] > floor[s])]) for s in seeds}
        for family in dict.fromkeys(t["family"] for t in trials):
            mine = [t for t in trials if t["family"] == family]
            best = [bests[family, s] for s in seeds if bests[family, s]]
            chosen = sorted({t["seed"] for t in mine if t["chosen"]})
            front = [s for s in seeds if any(t["family"] == family for t in frontier[s])]
            if family == "mobilebert" and task in GLUE:
                points = [b for (f, seed), b in bests.items() if f == family and b in frontier[seed]]
                tops = [max(frontier[seed], key=lambda b: b["val_value"]) for seed in front]
                # the newest space that searched the family (not one under ship's --hours: a run beside its space)
                if searched_space(v[2])[1] is None and (task not in met or _sortable(v) > met[task][0]):
                    met[task] = (_sortable(v), 2 * len(front) > len(seeds), f"{len(front)} of {len(seeds)} seeds" + (
                        f": {_spread(points)}, where that seed's best student is {_spread(tops)}" if points else ""))
            lines.append(f"| {task} | {v[2] or 'the first'} | {family} | {len(mine)} "
                         f"({sum(t['state'] == 'complete' for t in mine)}) | "
                         + (f"{mean_std_cell([b['val_value'] for b in best])} | "
                            f"{', '.join(sorted({b['shape'] + ' ' + format(b['pixel4_ms_est'], '.1f') for b in best}))}"
                            f" ms |" if best else "- | - |")
                         + f" {_floor_cell(floor, seeds)} | {len(chosen)} of {len(seeds)} | "
                           f"{len(front)} of {len(seeds)} |")
    if len(lines) == 3:
        return ""
    verdict = (f"\nIssue 78's goal, a MobileBERT-shaped student on the frontier (on most seeds) of at least 3 of the 5 "
               f"GLUE tasks: {sum(ok for _, ok, _ in met.values())} of the {len(met)} searched with it so far ("
               + "; ".join(f"{t}: {'on it' if ok else 'not'}, {why}" for t, (_, ok, why) in met.items()) + "); "
               + ("**met**" if sum(ok for _, ok, _ in met.values()) >= 3 else "**not met**") + ".\n") if met else ""
    return "\n".join(lines) + "\n" + verdict


def constant(results: list[dict], trials: list[dict], task: str, v: tuple, seed: int) -> float | None:
    """The best constant answer's validation score in the search of (`task`, `v`, `seed`), in the score its trials
    were chosen on: its "constant" row's `val_value`, else `constant_validation`. A constant costs nothing on a
    phone, so it stands on every frontier at 0 ms: a family's best at or below it is dominated."""
    row = next((r for r in results if r["method"] == "constant" and r["task"] == task and r["seed"] == seed
                and version(r) == v), None)
    if row:
        return row["val_value"]
    t = next(t for t in trials if t["seed"] == seed)
    return constant_validation(task, seed, t.get("val_metric", t["metric"]))


def _floor_cell(floor: dict[int, float | None], seeds: list[int]) -> str:
    known = [floor[s] for s in seeds if floor[s] is not None]
    return mean_std_cell(known) if known else "-"


def _spread(trials: list[dict]) -> str:
    """Trials' shapes and estimates, and their validation scores' range: "x 1.2 ms at 0.1134-0.1182"."""
    shapes = ", ".join(sorted({f"{t['shape']} {t['pixel4_ms_est']:.1f} ms" for t in trials}))
    low, high = min(t["val_value"] for t in trials), max(t["val_value"] for t in trials)
    return f"{shapes} at {low:.4f}" + (f"-{high:.4f}" if high > low else "")


def draws(results: list[dict]) -> str:
    """Where a task ran under both draws of the search with the same teacher choice and seeds: the family-first
    draw's dev score minus the earlier draw's, paired over dev examples and those seeds."""
    found = [r for r in results if r["method"] == "ship-draw-interval"]
    if not found:
        return ""
    lines = ["\nThe search's draw, paired on the seeds run both ways (the same teacher, seed and validation split): "
             f"{DRAWS[FAMILY_DRAW]}, against {DRAWS[None]}.\n",
             "| task | seeds | before | family first | family first - before |", "|---|---|---|---|---|"]
    for r in found:
        mine = [x for x in results if x["task"] == r["task"] and x["method"] == "ship" and x["seed"] in r["seeds"]
                and x.get("teacher_choice") == r["teacher_choice"] and not x.get("space")]
        lines.append(f"| {r['task']} ({r['metric']}) | {', '.join(map(str, r['seeds']))} | "
                     f"{mean_std_cell([x['value'] for x in mine if not x.get('draw')])} | "
                     f"{mean_std_cell([x['value'] for x in mine if x.get('draw') == FAMILY_DRAW])} | "
                     f"{intervals.cell(r['interval'])} |")
    return "\n".join(lines) + "\n"


def earlier_space(name: str, ran=None) -> str | None:
    """The search space `name` is paired with: the nearest SPACES lists before it among those `ran` holds (a
    container of space names; default every space), None meaning the first space; asked of the first, ValueError.
    A `wall_space`'s: the space it searched, whatever `ran` holds."""
    space, hours = searched_space(name)
    if hours:
        return space
    names = list(SPACE_LINES)
    if names.index(name) == 0:
        raise ValueError("the first search space has none before it")
    return next((n for n in reversed(names[:names.index(name)]) if ran is None or n in ran), None)


def spaces(results: list[dict]) -> str:
    """Where a task ran in a later search space (SPACES) and in the one before it, under the family-first draw with
    the same teacher choice and seeds: the later space's dev score minus the earlier's, paired over dev examples and
    those seeds."""
    found = [r for r in results if r["method"] == "ship-space-interval"]
    if not found:
        return ""
    lines = ["\nThe search space, paired on the seeds run in both (the same teacher, seed, validation split and "
             "draw): a later space of configs/ship.json against the nearest one before it that ran on the task, or a "
             "space's runs under ship's --hours (the whole run's wall budget) against that space's own.\n",
             "| task | seeds | space | the space before | before | this space | this - before |",
             "|---|---|---|---|---|---|---|"]
    for r in found:
        mine = [x for x in results if x["task"] == r["task"] and x["method"] == "ship" and x["seed"] in r["seeds"]
                and x.get("teacher_choice") == r["teacher_choice"] and x.get("draw") == FAMILY_DRAW]
        against = r.get("against")
        lines.append(f"| {r['task']} ({r['metric']}) | {', '.join(map(str, r['seeds']))} | {r['space']}: "
                     f"{space_line(r['space'])} | {against or 'the first'} | "
                     f"{mean_std_cell([x['value'] for x in mine if x.get('space') == against])} | "
                     f"{mean_std_cell([x['value'] for x in mine if x.get('space') == r['space']])} | "
                     f"{intervals.cell(r['interval'])} |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    """One panel per task: the first seed's trials, validation score against Pixel 4 estimate (the frontier)."""
    from mobilekd.fileio import save_png
    from mobilekd.search.frontier import draw

    trials = [r for r in current(results) if r["method"] == "ship-trial"]
    panels = task_panels(trials, 5.5, 4.2)
    if panels is None:
        return
    fig, axes = panels
    for ax, task in axes:
        choice = max(r.get("teacher_choice") or "" for r in trials if r["task"] == task)  # "validation" if run
        seed = min(r["seed"] for r in trials if r["task"] == task and (r.get("teacher_choice") or "") == choice)
        mine = [r for r in trials if r["task"] == task and r["seed"] == seed and (r.get("teacher_choice") or "")
                == choice]
        floor = constant(results, mine, task, version(mine[0]), seed)
        draw(ax, mine, mine[0]["latency_ms"], mine[0].get("val_metric", mine[0]["metric"]),
             f"{task}, seed {seed}, teacher {choice}", None if floor is None else {"value": floor})
    save_png(fig, path)


def interval_cell(mine: list[dict], other: str = "tfidf") -> str:
    """ship's paired interval against `other` (a method of PAIRED), as `found` stored it (among one task's rows of
    one teacher choice)."""
    stored = [r for r in mine if r["method"] == f"ship-{other}-interval"]  # `mine`: one version's rows
    return intervals.cell(stored[0]["interval"]) if stored else "-"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.ship", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/ship", "docs/results/ship.json", list(CUSTOM), TASKS, plot="docs/ship.png")
    p.set_defaults(tasks=None)  # runs: the CSV tasks unless named; the table and plot: every task with rows
    p.add_argument("--families", nargs="+", default=FAMILIES, help=f"the families its runs search (default "
                   f"{' '.join(FAMILIES)}); a run's rows are kept apart by the space it searched (SPACES)")
    p.add_argument("--config", help="ship's --config for its runs (default configs/ship.json); another file's "
                   "space is kept apart likewise")
    p.add_argument("--hours", type=float, help="give the runs ship's --hours, the whole run's wall budget, in place "
                   f"of a limit on the search alone (--search-hours {HOURS}, SST-2's {TASK_HOURS['sst2']}): run "
                   "folders OUT/hoursH/TASK/seedS, their rows a space of their own paired with the space they searched "
                   "(with --collect: give --hours again to gather them)")
    args = p.parse_args(argv)
    if args.hours is not None and args.hours <= 0:
        p.error(f"--hours must be above 0, not {args.hours:g}")
    run = args.tasks or list(CUSTOM)
    out = (REPO_ROOT / args.out).resolve()
    tasks = list(TASKS)

    def found():
        got = rows(out, run, args.seeds, args.hours)
        for task in run:  # the interval as data too, so the table needs no run directory; over every seed
            done = {int(d.name[4:]): run_version(d, read_json(d / "ship.json"), read_json(d / "plan.json"))
                    for d in run_dir(out, task, 0, args.hours).parent.glob("seed*") if (d / "ship.json").is_file()}
            results = REPO_ROOT / args.results
            by_version = keep_predictions(out, task, done, results.with_name(results.stem + KEPT_SUFFIX
                                                                             + results.suffix), args.hours)
            metric = next((r["metric"] for r in [*got, *(read_json(results) if results.is_file() else [])]
                           if r["task"] == task and r["method"] == "ship"), None)
            got += paired_intervals(task, metric, by_version)
            first = by_version.get(("validation", FAMILY_DRAW, None), {})
            pairs = [("ship-draw-interval", {"draw": FAMILY_DRAW}, first, by_version.get(("validation", None, None),
                                                                                            {}))]
            ran = {v[2] for v in by_version if v[:2] == ("validation", FAMILY_DRAW)}
            for v, by_seed in by_version.items():  # a later space against the nearest one before it run here
                if v[:2] == ("validation", FAMILY_DRAW) and v[2]:
                    base = earlier_space(v[2], ran)
                    pairs.append(("ship-space-interval", {"draw": FAMILY_DRAW, "space": v[2],
                                                          **({"against": base} if base else {})},
                                  by_seed, by_version.get(("validation", FAMILY_DRAW, base), {})))
            for method, which, after, before in pairs:  # a version against the one before it, on the seeds both ran
                both = sorted(set(before) & set(after))
                if both:
                    a, b = predictions({s: after[s] for s in both}), predictions({s: before[s] for s in both})
                    got.append({"task": task, "method": method, "seed": None, "metric": metric,
                                "teacher_choice": "validation", **which, "value": None, "seeds": both,
                                "interval": intervals.paired_bootstrap(
                                    a["labels"], a["ship"], b["ship"], metric=intervals.metric_function(task, metric))})
        return got

    return comparison(args, lambda: jobs(out, run, args.seeds, args.families, args.config, args.hours), found,
                      lambda r: (tasks.index(r["task"]), *_sortable(version(r)),
                                 METHODS.index(r["method"]) if r["method"] in METHODS else len(METHODS),
                                 r.get("seed") or 0, r.get("trial", -1), r.get("start") or ""),
                      table, draw=plot, key=("task", "teacher_choice", "draw", "space", "method", "seed", "metric",
                                                        "trial", "start"))


if __name__ == "__main__":
    sys.exit(main())
