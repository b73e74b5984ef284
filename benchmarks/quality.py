"""Students worth shipping (issue 34): on the five shipped GLUE tasks' full training sets, over seeds, the teacher
fine-tuned on the whole set, TF-IDF + logistic regression and the majority class on the same examples, MediaPipe
Model Maker's average-word-embedding classifier (SST-2), and the toolkit's best recipe per student family, each
with its `.tflite` size and Pixel 4 estimate; rows to docs/results/quality.json, every run's dev score against the
CPU-seconds it and the stages it stands on cost to docs/results/quality_cost.json, Markdown tables (what to ship
on each task, every method's scores, the issue's goals as measured), and (--plot) docs/quality.png, accuracy against
training cost.

    python -m benchmarks.quality                               # the issue's table (--methods recipes), resumable
    python -m benchmarks.quality --methods all                 # every method: the ablations and augmented runs too
    python -m benchmarks.quality --tasks sst2 --seeds 0        # one task, one seed
    python -m benchmarks.quality --collect                     # rows of the finished runs, run nothing
    python -m benchmarks.quality --table --write --plot        # table into docs/quality.md, draw docs/quality.png

The plan (the tasks, the task-agnostic stages, every method with its budget and the default plan) is data,
configs/benchmarks/quality.toml, made into jobs by benchmarks/quality_plan.py; this module gathers the rows, the
tables and the goals.

Fine-tuning runs evaluate on dev every EVAL_POINTS-th of their steps; the evaluations (mobilekd/finetune/evaluation.py
writes them to history.json) are the cost curves: each point's CPU-seconds are the run's own wall seconds (one
thread) at that step plus the stages it stands on (teacher adaptation, task-agnostic distillation, the task
teacher's fine-tuning for KD) and making the cached set it trains over and its teacher's outputs over that set
(`set_made_seconds`, `outputs_made_seconds`, whichever run made them, in place of its own seconds getting them),
each charged in full to every run. A point inside a run is that run's
model part way through its learning-rate schedule, not a run trained for that budget: an upper bound on the time a
budget needs, and a fair one only at a run's end.

Each family's SST-2 model of the first seed run (0 by default) is exported (fp32, parity on the whole dev set; the
BiLSTM as the file an app ships, with TFLite's fused LSTM kernel) and timed beside the teacher's, Model Maker's and
the files earlier invocations exported in one `mobilekd latency` run (1 thread, sequence 128), the plan's last:
nothing trains beside it; a family's size and latency are given to its rows of every task, those of runs gone from
OUT included. Model Maker runs in a virtual environment of its own under OUT (benchmarks/model_maker.py: its pins
are not ours).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from benchmarks import methods, quality_plan
from benchmarks.baselines import baseline_rows
from benchmarks.quality_plan import (TASKS, PKT_STEPS, PKT_SHORT_STEPS, TINYBERT_STEPS, DISTILBERT_STEPS, NARROW_FFN,
                                     AUGMENTED, AUGMENTED_EPOCHS, TRANSFER, PLOT_TASKS, BILSTM_EPOCHS, METHODS,
                                     FAMILY_METHODS, FAMILY, AS_METHODS, ABLATIONS, RECIPES, DEFAULT, SWAPS, FAMILIES,
                                     EXPORTED, ORDER, MODEL_MAKER, TIMED, RESULTS, stage_dirs, run_dir, recipe,
                                     methods_for, copies, augmented_epochs, student_epochs, teacher_epochs, two_steps,
                                     epochs_against, intermediate_epochs, exported, model_maker_dir, model_maker_file,
                                     jobs)
from benchmarks.command import comparison, comparison_flags
from benchmarks.pages import method_table, task_panels
from benchmarks.rows import finetune_rows, host_fields, merge_rows, recorded_host
from benchmarks.stats import (VERDICTS, WITHIN, by_seed, columns, mean_std_cell, metric_rank, paired_differences,
                              values, verdict, within)
from mobilekd.rundir import finished_results
from mobilekd.errors import UserError
from mobilekd.fileio import RECORDED, REPO_ROOT, read_json, record_keys, save_png


def own_seconds(r: dict) -> float:
    """A run's seconds without those it spent getting each cached file it shared (`RECORDED`: its set, the teacher's
    outputs over it), where what making the file cost is known (so that it is counted once: `set_costs`,
    `outputs_costs`): its own work, the same whichever run made the file."""
    return r["train_seconds"] - sum(got for got, _ in shared_files(r))


def unshared_seconds(r: dict) -> float:
    """What making the cached files a run read cost, beyond what it spent getting them (`own_seconds`' files): the
    making a run that read a file is charged, as the run that made it was."""
    return sum(made - got for got, made in shared_files(r))


def shared_files(r: dict) -> list[tuple[float, float]]:
    """For each cached file a run (its row or results) records what making it cost (`RECORDED`): the seconds the run
    spent getting it, and what making it cost, whichever run made it."""
    keys = [record_keys(kind)[1:] for kind in RECORDED]
    return [(r[got], r[made]) for got, made in keys if r.get(made) is not None]


def set_costs(found: list[dict]) -> dict[tuple[str, str], float]:
    """Each cached set the runs of `found` shared (`shared_set`: the augmented set, the BiLSTM's transfer set), as
    (its task, its name) -> what making it cost (`set_made_seconds`, whichever run made it). Since augmentation
    keeps each sentence's word candidates in a store (`mobilekd.data.candidate_store`), an augmented set made after
    another seed's costs its new sentences' masked-LM pass only: which seed's set is made first decides which one
    pays for the sentences they share (benchmarks.candidate_store measures the saving)."""
    costs = {}
    for r in found:
        if r.get("set_made_seconds") is not None:
            key = (r["task"], r["shared_set"])
            costs[key] = max(costs.get(key, 0.0), r["set_made_seconds"])
    return costs


def outputs_costs(found: list[dict]) -> dict[str, float]:
    """The teachers' passes over the training sets of the runs of `found` (`outputs_made_seconds`, whichever run
    made them), each file once, for SEEDS_ASKED seeds, by task: a file is one seed's teacher's over one set, read by
    every run of that seed over it, so SEEDS_ASKED times the mean over the measured seeds of the seed's files."""
    name, _, made = record_keys("outputs")
    files: dict[str, dict[int, dict[str, float]]] = {}
    for r in found:
        if r.get(made) is not None:
            files.setdefault(r["task"], {}).setdefault(r["seed"], {})[r[name]] = r[made]
    return {task: SEEDS_ASKED * statistics.mean(sum(f.values()) for f in seeds.values())
            for task, seeds in files.items()}


LATENCY_FIELDS = ("tflite_bytes", "host_ms", "pixel4_ms")


def measured(out: Path) -> dict[str, dict]:
    """Per family (and model-maker): its .tflite's size, host latency (1 thread) and Pixel 4 estimate."""
    reports = sorted((out / "latency").glob("*/report.json"), key=lambda p: (len(p.parent.name.split("+")),
                                                                           p.stat().st_mtime))
    rows = read_json(reports[-1])["rows"] if reports else {}  # the run that timed the most files together
    files = {family: exported(out, family) for family in EXPORTED}
    sizes = {family: parity[f.name]["size_bytes"] for family, f in files.items()
             if (f.parent / "parity.json").is_file() and f.name in (parity := read_json(f.parent / "parity.json"))}
    if (mm := model_maker_file(out)) is not None:
        files["model-maker"], sizes["model-maker"] = mm, mm.stat().st_size
    # a family's timing only where the run timed the file it ships (not an earlier form of it, e.g. the unfused BiLSTM)
    return {family: dict(zip(LATENCY_FIELDS, (size, rows[family]["host"]["1"]["p50_ms"],
                                              rows[family]["estimate_ms"]["pixel4"])))
            for family, size in sizes.items()
            if family in rows and Path(rows[family].get("file", "")).resolve() == files[family].resolve()}


def recorded(results: Path) -> dict[str, dict]:
    """Per family (and model-maker): the size and latency the results file holds for it already, from an earlier
    invocation whose files are gone from OUT (a family is exported and timed once, from one of its SST-2 models).
    The file's rows are taken as this benchmark's, whatever OUT wrote them."""
    found = {}
    for r in read_json(results) if results.is_file() else []:
        family = family_of(r)  # a family's older shape (another `student`) was another file
        if family is not None and all(k in r for k in LATENCY_FIELDS) and r.get("student") == TIMED[family]:
            found.setdefault(family, {k: r[k] for k in LATENCY_FIELDS})
    return found


def family_of(row: dict) -> str | None:
    """The family whose file a row's size and latency are (None for the baselines without one)."""
    return "model-maker" if row["method"] == "model-maker" else METHODS.get(row["method"], (None,))[0]


def restamped(results: Path, fresh: dict[str, dict]) -> list[dict]:
    """The results file's rows of the families timed in OUT whose size or latency differ from that timing: rows of
    runs gone from OUT keep their scores and take the family's one timing (every row of a family, one run's). Only
    rows of the student timed (their `student` is the family's as it stands): a family's older shape keeps its own."""
    return [{**r, **fresh[f]} for r in (read_json(results) if results.is_file() else [])
            if (f := family_of(r)) in fresh and r.get("student") == TIMED[f]
            and any(r.get(k) != fresh[f][k] for k in LATENCY_FIELDS)]


def stage_seconds(out: Path) -> dict[str, float]:
    """Each finished shared stage's wall seconds (one thread: its CPU-seconds)."""
    found = {}
    for name, d in stage_dirs(out).items():
        if (d / "summary.json").is_file():
            found[name] = read_json(d / "summary.json").get("wall_seconds", 0.0)
        elif (d / "model.safetensors").is_file():
            found[name] = 0.0  # init: a copy of layers
    return found


def charged(out: Path, task: str, method: str, seed: int, stages: dict[str, float]) -> float | None:
    """The CPU-seconds of the stages a run stands on (None while one is unfinished)."""
    family, start, _, taught = METHODS[method]
    names = ["adapt"] + ([start] if start not in (None, "adapt") else [])
    if any(n not in stages for n in names):
        return None
    cost = sum(stages[n] for n in names)
    if taught:
        t = finished_results(run_dir(out, task, taught, seed))
        if t is None:
            return None
        cost += t["wall_seconds"]
    return cost


def budget(task: str, method: str) -> dict:
    """The budget a row was trained with, recorded in it."""
    max_len = TASKS[task][0]
    family, start, _, _ = METHODS[method]
    b = {"epochs": float(teacher_epochs(task, method) if family == "teacher" else
                         BILSTM_EPOCHS[method] if family == "bilstm" else student_epochs(task, method)),
         "max_len": int(max_len)}
    steps = {"pkt": PKT_STEPS, "pkt-short": PKT_SHORT_STEPS, "tinybert4": TINYBERT_STEPS,
             "distilbert": DISTILBERT_STEPS}.get(start)
    if steps:
        b["agnostic_steps"] = f"{steps[1]} a layer + {steps[3]} PD"
    if start == "subset2-narrow":
        b["intermediate_size"] = int(NARROW_FFN)
    if method in AUGMENTED or copies(task, method) != "0":
        b["augment"] = int(copies(task, method))
    if intermediate_epochs(task, method) is not None:
        b["intermediate_epochs"] = float(intermediate_epochs(task, method))
    if family == "bilstm":
        b["augment"] = int(TRANSFER[task])
    return b


def precisions(r: dict) -> dict:
    """A run's precisions (each "bf16" or "no": fp32), for its rows: its training's (`--mixed-precision auto` decides
    it per host) and, where it had them, its teacher's outputs' and its augmented set's masked-LM pass's."""
    trained = "+".join(dict.fromkeys(s["precision"] for s in r.get("training", []) if s.get("precision")))
    return {**({"train_precision": trained} if trained else {}),
            **{k: r[k] for k in ("teacher_outputs_precision", "augment_precision") if r.get(k)}}


def rows(out: Path, tasks: list[str], seeds: list[int], results: Path) -> tuple[list[dict], list[dict]]:
    """The finished runs' rows (the last evaluation's dev scores, one row per metric, with the run's budget and the
    seconds of the shared stage it starts from, `start_seconds`) and their cost curves; each family's size and
    latency as measured in OUT, else as `results` recorded them, else as this benchmark's own results (RESULTS)
    did: a file's size and speed are its architecture's, wherever its rows trained (e.g. on a lent GPU, into a
    results file of their own); and the recorded rows of every family timed in OUT, with that timing (`restamped`)."""
    fresh = measured(out)
    files = dict.fromkeys(f.resolve() for f in (REPO_ROOT / RESULTS, results))  # read once where they are one
    latency = {k: v for f in files for k, v in recorded(f).items()} | fresh  # the later file's figures win
    stages = stage_seconds(out)
    found, curves = [], []
    for task in tasks:
        for seed in seeds:
            for method in methods_for(task):
                family = METHODS[method][0]
                d = run_dir(out, task, method, seed)
                r = finished_results(d)
                if r is None:
                    continue
                history = read_json(d / "history.json") if (d / "history.json").is_file() else [
                    {"step": r["steps"], "wall_seconds": r["wall_seconds"], "metrics": r["metrics"]}]
                start = METHODS[method][1]
                found += [{**row, "train_examples": r.get("train_examples"), **budget(task, method), **precisions(r),
                           **({"start_seconds": round(stages[start], 1)} if start in stages else {}),
                           **latency.get(family, {})}
                          for row in finetune_rows(d, None if dev_once(r) else history[-1]["metrics"], task=task,
                                                   method=method, seed=seed, student=FAMILIES[family])]
                extra = charged(out, task, method, seed, stages)
                if extra is not None:  # a run that read a cached file is charged making it, as its maker was
                    extra += unshared_seconds(r)
                    if dev_once(r):  # one point: its dev score, read once after training (validation is no dev)
                        history = [{"step": r["steps"], "wall_seconds": r["wall_seconds"], "metrics": r["metrics"]}]
                    curves += [{"task": task, "method": method, "seed": seed, "metric": r["best_metric"],
                                "value": round(next(iter(h["metrics"].values()))[r["best_metric"]], 4),
                                "step": h["step"], **host_fields(r), "cpu_seconds": round(h["wall_seconds"] + extra, 1)}
                               for h in history if h.get("wall_seconds") is not None]
            if not any(r["task"] == task and r["seed"] == seed for r in found):
                continue  # the baselines stand beside a seed's runs, not alone
            for b in baseline_rows(task, ["--max-len", TASKS[task][0]], seed):
                found.append(b)
                if b["method"] == "tfidf" and metric_rank(task, b["metric"]) == 0:
                    curves.append({**{k: b[k] for k in ("task", "method", "seed", "metric", "value", "host")},
                                   "step": 0, "cpu_seconds": b["train_seconds"]})
            mm = model_maker_dir(out, seed) / "results.json"
            if task == "sst2" and mm.is_file():
                m = read_json(mm)
                found.append({"task": task, "method": "model-maker", "seed": seed, "metric": "accuracy",
                              "value": round(m["accuracy"], 4), "student": MODEL_MAKER,
                              "train_seconds": m["train_seconds"], "train_examples": m["train_examples"],
                              "epochs": m["epochs"], **latency.get("model-maker", {}), **recorded_host(m)})
                curves.append({"task": task, "method": "model-maker", "seed": seed, "metric": "accuracy",
                               "value": round(m["accuracy"], 4), "step": 0, "cpu_seconds": m["train_seconds"],
                               **recorded_host(m)})
    keys = {(r["task"], r["method"], r["seed"], r["metric"]) for r in found}
    found += [r for r in restamped(results, fresh) if (r["task"], r["method"], r["seed"], r["metric"]) not in keys]
    return found, curves


def dev_once(r: dict) -> bool:
    """Whether a run read dev once, after its last choice (finetune's `dev_scored`, `mobilekd.finetune.selection`):
    its results' dev metrics are its kept model's, and its history holds no dev score."""
    return "dev_scored" in r


def merge_curves(path: Path, curves: list[dict]) -> list[dict]:
    """Write the cost curves of the runs found into `path`: a run found again replaces every point of its old curve,
    so a run re-made at another budget (other steps) leaves none of its old points behind; curves of runs gone from
    OUT are kept."""
    return merge_rows(path, curves, order, key=("task", "method", "seed", "metric"))


def order(r: dict):
    """Rows by task, metric, method (ORDER's; a method this code does not know, say one an invocation of a newer
    version wrote beside it, last, by name), seed and step."""
    method = (ORDER.index(r["method"]), "") if r["method"] in ORDER else (len(ORDER), r["method"])
    return (list(TASKS).index(r["task"]), metric_rank(r["task"], r["metric"]), method, r["seed"], r.get("step", 0))


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task (official metric) and method, each with its mean share of the teacher that
    taught each run (`teacher_shares`, as the goal table's)."""
    return method_table(results, ORDER, shares=lambda task, metric, method: [] if method == "teacher" else
                        teacher_shares(results, task, metric, method))


KEEP = {"sst2": 0.97, "mrpc": 0.95, "stsb": 0.95, "cola": 0.90, "rte": 0.90}  # the share of the teacher


def teacher_pixel4(results: list[dict]) -> float | None:
    return next((r["pixel4_ms"] for r in results if r["method"] == "teacher" and r.get("pixel4_ms")), None)


def best_student(results: list[dict], task: str, metric: str) -> str | None:
    """The student method (no ablation) with the best mean on `task`'s `metric` among those whose Pixel 4 estimate is
    at most a third of the teacher's: the issue's rule (None before the teacher is timed, or with no such student).
    Of those, only the ones measured over the most seeds: a single run does not displace a verdict over three."""
    teacher_ms = teacher_pixel4(results)
    pixel = {r["method"]: r["pixel4_ms"] for r in results if r.get("pixel4_ms") is not None}
    small = [m for m in METHODS if METHODS[m][0] != "teacher" and m not in ABLATIONS
             and values(results, task, metric, m) and teacher_ms and pixel.get(m, float("inf")) <= teacher_ms / 3]
    return max(small, key=lambda m: (len(by_seed(results, task, metric, m)),
                                     statistics.mean(values(results, task, metric, m)))) if small else None


def teacher_shares(results: list[dict], task: str, metric: str, method: str) -> list[float]:
    """`method`'s score over its teacher's, seed by seed: over the teacher that taught the run (`teacher_value`, which
    runs record: `mobilekd.rundir.teacher_record`) where its row has it, else over the seed's row of the method's
    teacher (rows of runs from before; a seed's teacher made again replaces that row, so theirs may be another
    teacher's)."""
    teacher = by_seed(results, task, metric, METHODS.get(method, (None,) * 4)[3] or "teacher")
    shares: dict[int, list[float]] = {}  # a seed run on several hosts: the mean of its runs' shares (`by_seed`)
    for r in results:
        if (r["task"], r["metric"], r["method"]) == (task, metric, method):
            over = r.get("teacher_value", teacher.get(r["seed"]))
            if over is not None and over > 0:
                shares.setdefault(r["seed"], []).append(r["value"] / over)
    return [statistics.fmean(v) for _, v in sorted(shares.items())]


@dataclass
class Goal:
    """One of the issue's goals for a task's student, as measured: what the student is held against (`against`:
    a baseline's method, or "teacher" for its share of the teacher), the seed-by-seed differences or shares
    (`measured`), the target as the goal table prints it, and `stats.verdict`'s judgement."""
    student: str
    against: str
    measured: list[float]
    target: str
    verdict: str

    @property
    def share(self) -> bool:
        return self.against == "teacher"

    @property
    def name(self) -> str:
        return f"{self.student} {'/' if self.share else '-'} {self.against}"


MODEL_MAKER_MARGIN, PUBLISHED_MOBILEBERT, PUBLISHED_MARGIN = 0.06, 0.9036, -0.03  # the SST-2 goals
TRIVIAL = ("majority", "tfidf")  # a share of the teacher that these keep too says nothing of a student


def share_verdict(results: list[dict], task: str, metric: str, share: list[float]) -> str:
    """`stats.verdict` of a student's shares of its teacher against KEEP, unless a trivial model (`TRIVIAL`) keeps
    that share too (its mean share at least KEEP, as the majority class does on MRPC's F1 and RTE): then the goal
    cannot tell a student from no model and is not judged."""
    for base in TRIVIAL:
        theirs = teacher_shares(results, task, metric, base)
        if theirs and statistics.mean(theirs) >= KEEP[task]:
            return f"not judged ({base} keeps {100 * statistics.mean(theirs):.1f}% too)"
    return verdict(share, KEEP[task])



def student_goals(results: list[dict], task: str, metric: str, student: str) -> list[Goal]:
    """The issue's goals for `student` on `task`, each where its rows allow, in the goal table's order: above
    TF-IDF + LR and the majority class, seed by seed; at least KEEP's share of the teacher that taught each run
    (`teacher_shares`); on SST-2, above Model Maker's average-word-embedding classifier by MODEL_MAKER_MARGIN and
    within PUBLISHED_MARGIN of MediaPipe Model Maker's published MobileBERT, 90.36% (not the paper's figure, which is
    92.8 on GLUE's test set: Sun et al., 2020, Table 4)."""
    found = []
    for base in ("tfidf", "majority"):
        d = paired_differences(results, task, metric, student, base)
        if d:
            found.append(Goal(student, base, d, "> 0", verdict(d)))
    share = teacher_shares(results, task, metric, student)
    if share:
        found.append(Goal(student, "teacher", share, f">= {KEEP[task]:g}", share_verdict(results, task, metric,
                                                                                        share)))
    if task == "sst2":
        d = paired_differences(results, task, metric, student, "model-maker")
        if d:
            found.append(Goal(student, "model-maker", d, f"> {MODEL_MAKER_MARGIN:g}", verdict(d, MODEL_MAKER_MARGIN)))
        gap = [x - PUBLISHED_MOBILEBERT for x in values(results, task, metric, student)]
        found.append(Goal(student, f"Model Maker's published MobileBERT {PUBLISHED_MOBILEBERT}", gap,
                          f"> {PUBLISHED_MARGIN:g}",
                          verdict(gap, PUBLISHED_MARGIN)))
    return found


def ship_table(results: list[dict]) -> str:
    """What to ship, task by task: the student the goals judge (`best_student`: the best mean among the students
    measured over the most seeds whose Pixel 4 estimate is at most a third of the teacher's), its dev score, its
    share of the teacher and its margin over TF-IDF + LR, seed by seed, its file and Pixel 4 estimate, and how
    many of its task's goals (`student_goals`) hold, naming those that do not."""
    lines = ["| task (metric) | student to ship | its recipe | dev, mean ± std | of the teacher | over TF-IDF "
             "(points) | .tflite MB | Pixel 4 ms (est.) | goals |", "|---|---|---|---|---|---|---|---|---|"]
    def points(fractions, note="", signed=False):  # as points (x 100), the number of runs left to the score's cell
        return mean_std_cell([100 * f for f in fractions], note, signed=signed, digits=1, runs=False)

    for task, metric in [c for c in columns(results) if metric_rank(*c) == 0]:
        best = best_student(results, task, metric)
        if best is None:
            continue
        first = next(r for r in results if r["method"] == best)
        timed = next((r for r in results if r["method"] == best and r.get("pixel4_ms") is not None), {})
        found = {g.against: g for g in student_goals(results, task, metric, best)}
        share, over = found.get("teacher"), found.get("tfidf")
        missed = ", ".join(f"{'the share of the teacher' if g.share else g.against} {g.verdict}"
                           for g in found.values() if g.verdict != "holds")
        held = sum(g.verdict == "holds" for g in found.values())
        cells = [mean_std_cell(values(results, task, metric, best)),
                 points(share.measured, "%") if share else "-", points(over.measured, signed=True) if over else "-",
                 f"{timed['tflite_bytes'] / 1e6:.1f}" if timed.get("tflite_bytes") else "-",
                 f"{timed['pixel4_ms']:.1f}" if timed else "-",
                 f"{held} of {len(found)} hold" + (f" ({missed})" if missed else "")]
        lines.append(f"| {task} ({metric}) | {first.get('student', '-')} | `{best}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def goals(results: list[dict]) -> str:
    """The issue's goals per task, seed by seed against 2 standard errors (`stats.verdict`): the best student whose
    Pixel 4 estimate is at most a third of the teacher's, against TF-IDF + LR, the majority class and its share of
    the teacher; on SST-2 against Model Maker (+6 points) and MobileBERT's published 90.36% (-3 points); and what
    each ablation (the augmented transfer set, and longer training over it) adds, and what narrowing the layer
    subset's FFNs costs."""
    lines = ["| goal | measured, seed by seed | target | verdict |", "|---|---|---|---|"]
    two_sided = False
    for task, metric in [c for c in columns(results) if metric_rank(*c) == 0]:
        best = best_student(results, task, metric)
        if best is None:
            continue
        for goal in student_goals(results, task, metric, best):
            lines.append(f"| {task}: {goal.name} | {mean_std_cell(goal.measured, signed=not goal.share)} | "
                         f"{goal.target} | {goal.verdict} |")
        for a, b, name in (("pkt-kd", "pkt", "task KD adds"), ("pkt-kd", "pkt-short-kd", "longer PKT adds"),
                           ("subset2-kd-aug", "subset2-kd", "the augmented transfer set adds"),
                           ("subset2-narrow-kd-aug", "subset2-narrow-kd", "the augmented transfer set adds"),
                           ("pkt-kd-aug", "pkt-kd", "the augmented transfer set adds"),
                           ("teacher-long", "teacher", epochs_against(teacher_epochs(task, "teacher-long"),
                                                                      "the teacher", teacher_epochs(task, "teacher"))),
                           ("tinybert-td-teacher-long", "tinybert-td", f"a teacher of "
                            f"{teacher_epochs(task, 'teacher-long')} epochs against {teacher_epochs(task, 'teacher')}"
                            f" adds its student"),
                           *((long, short, epochs_against(intermediate_epochs(task, long), "TinyBERT's layer matching",
                                                          intermediate_epochs(task, short)))
                             for long, short in (("tinybert-td-long", "tinybert-td"),
                                                 ("subset2-narrow-td-long", "subset2-narrow-td"))),
                           ("subset2-narrow-td", "subset2-narrow-kd", "TinyBERT's two steps against logit KD add"),
                           ("tinybert-td-aug", "tinybert-td", f"TinyBERT's augmented set "
                            f"({copies(task, 'tinybert-td-aug')} new copies an example) adds"),
                           ("tinybert-td-aug", "tinybert-td-long", f"the augmented set against "
                            f"{intermediate_epochs(task, 'tinybert-td-long')} epochs of layer matching over the task's"
                            f" own examples adds"),
                           ("tinybert-td-wide", "tinybert-td", f"TinyBERT's own {copies(task, 'tinybert-td-wide')} "
                            f"new copies an example against {copies(task, 'tinybert-td')}, "
                            f"{two_steps(task, 'tinybert-td-wide')} epochs against {two_steps(task, 'tinybert-td')}, "
                            f"add"),
                           ("tinybert-td-long-pred1", "tinybert-td-long",
                            epochs_against(student_epochs(task, "tinybert-td-long-pred1"),
                                           "TinyBERT's prediction step", student_epochs(task, "tinybert-td-long"))),
                           ("bilstm-kd-aug", "bilstm-kd-aug-short", epochs_against(
                               BILSTM_EPOCHS["bilstm-kd-aug"], "the BiLSTM's training over its transfer set",
                               BILSTM_EPOCHS["bilstm-kd-aug-short"])),
                           ("tinybert-td", "tinybert-td-short",
                            f"{two_steps(task, 'tinybert-td')} epochs of TinyBERT's two steps against "
                            f"{two_steps(task, 'tinybert-td-short')} add"),
                           ("subset2-narrow-kd-aug-long", "subset2-narrow-kd-aug",
                            f"{augmented_epochs('subset2-narrow-kd-aug-long')} epochs over it against "
                            f"{AUGMENTED_EPOCHS} add"),
                           ("subset2-narrow-kd-aug-wide", "subset2-narrow-kd-aug-long",
                            f"{copies(task, 'subset2-narrow-kd-aug-wide')} new copies an example against "
                            f"{copies(task, 'subset2-narrow-kd-aug-long')}, at close to the same steps, add"),
                           ("subset2-narrow-kd-aug-wide-long", "subset2-narrow-kd-aug-wide",
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide-long')} epochs over the wider set against "
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide')} add"),
                           ("subset2-narrow-kd-aug-wide-longer", "subset2-narrow-kd-aug-wide-long",
                            f"{augmented_epochs('subset2-narrow-kd-aug-wide-longer')} epochs over the wider set "
                            f"against {augmented_epochs('subset2-narrow-kd-aug-wide-long')} add")):
            d = paired_differences(results, task, metric, a, b)
            if d:
                lines.append(f"| {task}: {name} ({a} - {b}) | {mean_std_cell(d, signed=True)} | > 0 | {verdict(d)} |")
        d = paired_differences(results, task, metric, "subset2-narrow-kd", "subset2-kd")
        if d:  # an equivalence: the cut should cost nothing, so both sides are judged
            lines.append(f"| {task}: narrowing the FFNs to fit the latency (subset2-narrow-kd - subset2-kd) | "
                         f"{mean_std_cell(d, signed=True)} | within ±0.01 | {within(d, 0.01)} |")
            two_sided = True
    lines += wall_goals(results)
    return "\n".join(lines) + f"\n\n{VERDICTS}" + (f" {WITHIN}" if two_sided else "") + "\n"


def family_method(task: str, method: str) -> str | None:
    """The method of this benchmark that stands on `task` for benchmarks.methods' `method`, for the source documents'
    orderings at these budgets (`family_orderings`), or None: the same student and task step over the full training
    set (AS_METHODS); TinyBERT with augmentation as TASK_RECIPES gives it (augmented on every task), without only
    where `tinybert-td` has no augmented set (SST-2: the same epochs, as benchmarks.methods' pair); MobileBERT's PKT
    student fine-tuned on the labels (`pkt`, on ABLATION_TASKS)."""
    if method == "tinybert":
        return "tinybert-td" if copies(task, "tinybert-td") == "0" else None
    return recipe(task, AS_METHODS[method]) if method in AS_METHODS else None


def family_orderings(results: list[dict]) -> str:
    """benchmarks.methods' orderings of the source documents' family over this benchmark's full-set runs
    (`family_method`), where both methods of a pair ran; "" where none did. The goals' table above it says what
    the verdicts mean."""
    return methods.orderings(results, family_method, title="ordering (full training sets)", legend=False)


def report(results: list[dict]) -> str:
    """The command's tables: what to ship per task, every method's scores, the goals as measured, the source
    documents' orderings at these budgets, and where the default plan's hours go."""
    costs, family = costs_table(results), family_orderings(results)
    return (f"{ship_table(results)}\n{table(results)}\n{goals(results)}" + (f"\n{family}" if family else "")
            + (f"\n{costs}" if costs else ""))


SEEDS_ASKED, HOURS_ASKED = 3, 6.0  # the issue's: 3 seeds, "within 6 hours on 2 cores"
WORKERS = 2  # runs at a time on 2 cores: the --workers default (benchmarks/command.py, comparison_flags)


SETS, OUTPUTS, STAGES = "cached sets", "teachers' outputs", "shared stages"  # plan_seconds' items beside the runs


def plan_seconds(results: list[dict], chosen=tuple(METHODS)) -> tuple[dict[str, dict[str, float]],
                                                                        dict[str, list[str]]]:
    """The single-thread seconds of `python -m benchmarks.quality --methods chosen` over SEEDS_ASKED seeds, from the
    seconds its rows recorded, by what spends them -> task -> seconds: every planned run (and the TF-IDF and Model
    Maker baselines) at the mean of its task and method's measured seeds (`own_seconds`), times SEEDS_ASKED; a
    cached set the planned runs share (TinyBERT's augmented set, the BiLSTM's transfer set) once, at what making it
    cost (SETS: `set_costs`), and a seed's teacher's outputs over a set once a seed (OUTPUTS: `outputs_costs`), where
    rows record that, whichever run made them, in the plan or not; every shared stage once (STAGES, under "all":
    `start_seconds`); and what no row records yet (method -> its tasks, "stages" -> their names), left out."""
    spent, missing, starts, planned = {}, {}, set(), []
    for task in TASKS:
        for method in [*methods_for(task, chosen), "tfidf", *(["model-maker"] if task == "sst2" else [])]:
            measured = {r["seed"]: r for r in results
                        if (r["task"], r["method"]) == (task, method) and r.get("train_seconds") is not None}
            if method in METHODS and METHODS[method][1] is not None:
                starts.add(METHODS[method][1])
            if not measured:
                missing.setdefault(method, []).append(task)
                continue
            spent.setdefault(method, {})[task] = SEEDS_ASKED * statistics.mean(
                own_seconds(r) for r in measured.values())
            planned += measured.values()
    for (task, _), seconds in set_costs(planned).items():
        sets = spent.setdefault(SETS, {})
        sets[task] = sets.get(task, 0.0) + seconds
    if outputs := outputs_costs(planned):
        spent[OUTPUTS] = outputs
    for start in sorted(starts):
        seconds = [r["start_seconds"] for r in results if r.get("start_seconds") is not None
                   and r["method"] in METHODS and METHODS[r["method"]][1] == start]
        if seconds:
            stages = spent.setdefault(STAGES, {})
            stages["all"] = stages.get("all", 0.0) + max(seconds)
        else:
            missing.setdefault("stages", []).append(start)
    return spent, missing


def wall_estimate(results: list[dict], chosen=tuple(METHODS)) -> tuple[float, dict[str, list[str]]]:
    """An estimate of the wall hours of `python -m benchmarks.quality --methods chosen` over SEEDS_ASKED seeds with
    WORKERS runs at a time: `plan_seconds`' sum spread over the workers, and what it leaves out. Its bias has no
    known sign: rows timed beside other work, and rows that do not record their cached set's making (runs before
    mobilekd kept it), which count it in every seed, make it larger; what it leaves out, exports and timing, Model
    Maker's install and its runs before the others, and the wait for the stages, make it smaller."""
    spent, missing = plan_seconds(results, chosen)
    return single_thread_hours(spent) / WORKERS, missing


def single_thread_hours(spent: dict[str, dict[str, float]]) -> float:
    """The sum of `plan_seconds`' seconds, in hours."""
    return sum(sum(by_task.values()) for by_task in spent.values()) / 3600


def left_out(missing: dict[str, list[str]]) -> str:
    """What `plan_seconds` left out (no row records it yet), as a phrase: method (its tasks), stages (their names)."""
    return "; ".join(f"{m} ({'every task' if m != 'stages' and len(t) == len(TASKS) else ', '.join(t)})"
                     for m, t in missing.items())


def costs_table(results: list[dict]) -> str:
    """Where the default plan's hours go: `plan_seconds` in single-thread hours by item and task, costliest first,
    their total, and that total over WORKERS (`wall_estimate`), then what it leaves out, if anything; empty where the
    rows are no plan (`estimable_rows`)."""
    results = estimable_rows(results)
    if not results:
        return ""
    spent, missing = plan_seconds(results, [DEFAULT])
    cols = [*TASKS, "all"]
    lines = [f"| single-thread hours, {SEEDS_ASKED} seeds | " + " | ".join(cols) + " | total |",
             "|---|" + "---|" * (len(cols) + 1)]
    for item, by_task in sorted(spent.items(), key=lambda kv: -sum(kv[1].values())):
        cells = [f"{by_task[c] / 3600:.2f}" if c in by_task else "-" for c in cols]
        lines.append(f"| {item} | " + " | ".join(cells) + f" | {sum(by_task.values()) / 3600:.2f} |")
    total = single_thread_hours(spent)
    lines.append(f"| all, over {WORKERS} workers (the wall estimate) | " + " | ".join("" for _ in cols) +
                 f" | {total:.2f} / {WORKERS} = {total / WORKERS:.2f} |")
    return "\n".join(lines) + "\n" + (f"\nLeft out, no row records them yet: {left_out(missing)}.\n" if missing else "")


def estimable_rows(results: list[dict]) -> list[dict]:
    """The rows a plan's wall time is estimated from: runs on a CPU alone (a lent GPU's rows are another budget), and
    none unless the methods' rows cover every task (a command run on some tasks, or the baselines alone, is no plan)."""
    results = [r for r in results if "gpu" not in r]
    return results if set(TASKS) <= {r["task"] for r in results if r["method"] in METHODS} else []


def wall_goals(results: list[dict]) -> list[str]:
    """The issue's "the whole quality benchmark within 6 hours on 2 cores", estimated by `wall_estimate` for the
    default plan (the issue's table, `recipes`) and for every method (--methods all), from `estimable_rows`."""
    results = estimable_rows(results)
    if not results:
        return []
    lines = []
    for name, chosen in ((f"the default plan (teacher, baselines, {', '.join(RECIPES[1:])}; {SWAPS})", [DEFAULT]),
                         ("every method (--methods all: the ablations and augmented runs too)", tuple(METHODS))):
        hours, missing = wall_estimate(results, chosen)
        judged = ("fails (an estimate)" if hours > HOURS_ASKED else "not judged (some runs left out)" if missing
                  else "holds (an estimate)")
        left = f"; left out, no row records them yet: {left_out(missing)}" if missing else ""
        hosts = ", ".join(f"`{h}`" for h in sorted({str(r.get("host")) for r in results if r.get("train_seconds")}))
        lines.append(f"| wall time of {name}, {SEEDS_ASKED} seeds on {WORKERS} cores | about {hours:.1f} h "
                     f"(an estimate: the rows' seconds summed over the hosts {hosts}, in the precision each chose; "
                     f"the plan has never run whole{left}) | <= {HOURS_ASKED:g} h | {judged} |")
    return lines


def plot(curves: list[dict], path: Path) -> None:
    """Dev score against CPU-seconds, one curve per method (the mean over seeds at each evaluation), a panel per
    task of `curves`; a method keeps its colour in every panel (tab20, then tab20b: no two of ORDER's methods share
    one while there are at most 40)."""
    from matplotlib import colormaps
    colours = [*colormaps["tab20"].colors, *colormaps["tab20b"].colors]
    drawn = task_panels(curves, 5.5, 4.2)
    if drawn is None:
        return
    fig, panels = drawn
    for ax, task in panels:
        mine = [r for r in curves if r["task"] == task]
        for method in ORDER:
            pts = [r for r in mine if r["method"] == method]
            if not pts:
                continue
            steps = sorted({r["step"] for r in pts})
            x = [statistics.mean(r["cpu_seconds"] for r in pts if r["step"] == s) / 3600 for s in steps]
            y = [statistics.mean(r["value"] for r in pts if r["step"] == s) for s in steps]
            ax.plot(x, y, "o-" if len(x) > 1 else "s", label=method, markersize=4,
                    color=colours[ORDER.index(method) % len(colours)])
        ax.set_xscale("log")
        ax.set_xlabel("CPU-hours, stages it stands on included (one thread)")
        ax.set_ylabel(f"{task} dev {mine[0]['metric']}")
        ax.set_title(task)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)


def method_list() -> str:
    """--help's list of the plan's methods, each with its `about` (configs/benchmarks/quality.toml)."""
    width = max(map(len, METHODS))
    return "The methods (per task and seed):\n" + "\n".join(
        textwrap.fill(spec["about"], 118, initial_indent=f"  {m:<{width}}  ", subsequent_indent=" " * (width + 4))
        for m, spec in quality_plan.PLAN["methods"].items())


def parse(argv=None) -> argparse.Namespace:
    """The command's flags; --methods all as every method."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=f"{__doc__}\n{method_list()}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/quality", RESULTS, list(TASKS), TASKS, plot="docs/quality.png")
    p.add_argument("--curves", default="docs/results/quality_cost.json", help="the cost curves' rows")
    p.add_argument("--methods", nargs="+", choices=[*METHODS, DEFAULT, FAMILY, "all"], default=[DEFAULT],
                   help=f"the methods to run (default {DEFAULT}, the issue's table: {', '.join(RECIPES)}; {SWAPS}; "
                        f"{FAMILY}: {', '.join(FAMILY_METHODS)}; all: every method; a method's teacher runs with it)")
    p.add_argument("--no-model-maker", action="store_true", help="leave Model Maker out (it installs TensorFlow "
                                                                 "2.15 into a venv of its own under OUT)")
    args = p.parse_args(argv)
    args.methods = list(METHODS) if "all" in args.methods else [
        m for name in args.methods for m in (FAMILY_METHODS if name == FAMILY else [name])]
    return args


def main(argv=None):
    args = parse(argv)
    out = (REPO_ROOT / args.out).resolve()
    curves_path = REPO_ROOT / args.curves

    failed = []

    def plan():
        if not args.no_model_maker and "sst2" in args.tasks:  # first: its file is timed with ours
            from benchmarks import model_maker
            try:
                failed.extend(f"model-maker seed {s}" for s in model_maker.run(out / "model_maker", args.seeds))
            except UserError as err:  # it cannot install: the other runs go on
                print(f"error: {err}", file=sys.stderr)
                failed.append("model-maker")
        return jobs(out, args.tasks, args.seeds, args.methods)

    def found():
        results, curves = rows(out, args.tasks, args.seeds, REPO_ROOT / args.results)
        merge_curves(curves_path, curves)
        return results

    def draw(_, path):
        curves = read_json(curves_path) if curves_path.is_file() else []
        plot([r for r in curves if r["task"] in args.tasks and r["task"] in PLOT_TASKS], path)

    code = comparison(args, plan, found, order, report, draw)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
