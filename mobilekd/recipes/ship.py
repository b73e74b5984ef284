"""From your BERT and your data to the most accurate phone-ready `.tflite` your latency budget allows, in one
command, chosen without reading your dev set.

    mobilekd ship --teacher path/to/your-bert --data my_data --out runs/my
    mobilekd ship --teacher T --data D --out O --latency-ms 5 --hours 1 --workers 2
    mobilekd ship --teacher T --data D --out O --dry-run        # the budgets and the candidates, nothing trained
    mobilekd ship --teacher T --data D --out O --make-starts    # the students' starts first, outside --hours

DATA holds train and dev files (.csv with a header `text,label` or `text,text_pair,label`, .tsv, or .jsonl with the
same keys; `--regression` for numeric labels), as `mobilekd finetune --task custom` reads them. What it does, each
stage skipped when its output is complete, so the same command resumes:

  OUT/teachers/lrX   your BERT fine-tuned on the task at each learning rate of configs/ship.json's teacher section,
                     scored on a validation split carved from the training data (seeded, stratified; dev is not read)
  OUT/teacher        the run and step with the best validation score: the teacher (dev scored after the search)
  OUT/trials/NNNN    the search: an Optuna study over the student families of configs/ship.json (the teacher's
                     own layers with narrowed FFNs, TinyBERT's student, a MobileBERT-shaped one, Tang et al.'s
                     BiLSTM) and their flags, every candidate shape priced by its Pixel estimate first and trained
                     only if it fits the budget; each trial is `mobilekd finetune` with task distillation from the
                     teacher (`mobilekd bilstm` for the BiLSTM), scored on a validation split carved from the
                     training data (seeded, stratified; dev is never read), cut short by successive halving when
                     its early evaluations trail its own family's (each family drawn as often as the others at
                     first, whatever its number of shapes: mobilekd/search/study.py)
  OUT/student        the trial with the best validation score, its checkpoint chosen on validation; dev read once,
                     now, to score it; README.md is its model card
  OUT/student/tflite its .tflite files (export, parity with PyTorch on all of dev)
  OUT/ship.json      the budget, what was chosen and why, every trial, the teacher's and TF-IDF's dev scores
  OUT/frontier.png   every trial's validation score against its Pixel 4 estimate

The budget: --latency-ms (default: a third of the teacher's own Pixel 4 estimate at the task's sequence length),
--trials (configs/ship.json's), --hours (the whole run's wall budget: the search gets what the run's start-up and
the teacher's fine-tuning leave of it, less three minutes for the dev scorings, the export and the summary; no trial
starts after that, and one under way is cut there once a trial is complete, as configs/ship.json's
search.at_wall_limit says), --search-hours (a wall limit on the search alone). The families that need the teacher's
masked-LM head (narrowing, augmentation, task-agnostic distillation) are left out, with a line saying so, for a
teacher without one (a transformers BertModel: fit them with scripts/train_teacher.sh --init-from). Sequence length
and the teacher's epochs come from the data (`budget`); Pixel figures are ESTIMATES of a cost model
(android_bench/estimate.py), not measurements on a phone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from mobilekd import launch
from mobilekd.data.examples import source_file
from mobilekd.errors import UserError, cli_entry, located
from mobilekd.flags import add_flags, from_flags
from mobilekd.fileio import atomic_path, file_digest, read_json, write_json
from mobilekd.host import identity
from mobilekd.rundir import COMPLETE, completed, finished_results, owned, training_host
from mobilekd.finetune.selection import grouping, validation_size, whole_texts
from mobilekd.search.config import FINAL_RESERVE, STARTS, ShipConfig, check
from mobilekd.search.space import BATCH_SIZE, Candidate, load_space, needs_head, shapes, start_argv, verb

LENGTHS = (32, 64, 128)  # the --max-len choices
LENGTH_SAMPLE = 2_000  # training texts tokenized to measure the length distribution
# what --max-len is measured over, recorded in plan.json (absent: every training example, as ship did before)
LENGTHS_OF = "whole texts: a text inside a longer training text counted as that one"
SHARE = 1 / 3  # the default budget: this share of the teacher's own Pixel 4 estimate
MODEL_FILES = ("config.json", "model.safetensors", "results.json", "history.json", "dev_predictions.tsv")


def budget(train_examples: int, lengths: list[int], teacher: dict) -> dict:
    """Sequence length and the teacher's epochs (at most: its step is chosen on validation) and learning rates for a
    task of `train_examples` examples whose word-piece lengths (special tokens included) are `lengths` (a sample of
    them), by `teacher`, configs/ship.json's teacher section."""
    p95 = float(np.percentile(lengths, 95))
    return {"max_len": next((n for n in LENGTHS if n >= p95), LENGTHS[-1]),
            "teacher_epochs": teacher["epochs"]["small" if train_examples <= teacher["small_task"] else "large"],
            "teacher_lrs": teacher["lr"], "length_p95": round(p95, 1), "train_examples": train_examples}


def teacher_runs(b: dict, teacher_spec: dict, flags: list[str], teacher: Path, out: Path) -> dict[str, list[str]]:
    """OUT/teachers/<run> -> its finetune argv: one run a learning rate, each for up to the budget's epochs,
    evaluated on the validation split `evaluations_per_epoch` times an epoch, its checkpoint chosen there."""
    per_epoch = math.ceil((b["train_examples"] - validation_size(b["train_examples"])) / BATCH_SIZE)
    every = max(1, math.ceil(per_epoch / teacher_spec["evaluations_per_epoch"]))
    return {f"lr{lr:g}": ["finetune", *flags, "--model", str(teacher), "--epochs", str(b["teacher_epochs"]),
                          "--lr", str(lr), "--batch-size", str(BATCH_SIZE), "--select-on", "validation",
                          "--eval-every", str(every), "--skip-dev",
                          "--out", str(out / "teachers" / f"lr{lr:g}"), "--resume"] for lr in b["teacher_lrs"]}


def before_search(here: float, teacher_seconds: float, teacher_here: float) -> float:
    """The seconds a run spent before its search: this process's so far (`here`: its start-up, the budget's
    measurement, and the teacher's fine-tuning where it ran here, `teacher_here` of it) and the fine-tuning earlier
    processes ran (the teacher runs' own recorded time, `teacher_seconds`, less what ran here)."""
    return here + max(teacher_seconds - teacher_here, 0.0)


def search_left(hours: float | None, search_hours: float | None, before: float, searched: float) -> float | None:
    """The seconds the search may still run (None: no limit; at or under 0: none): --hours, the whole run's budget,
    less what the run spent before its search (`before`: `before_search`, the teacher's fine-tuning the most of it),
    the search so far (`searched`: every earlier process's, `study.wall_seconds`) and `FINAL_RESERVE` for the last
    stages; --search-hours less the search so far; the smaller."""
    limits = ([hours * 3600 - before - searched - FINAL_RESERVE] if hours else []) + (
        [search_hours * 3600 - searched] if search_hours else [])
    return min(limits) if limits else None


def choose_teacher(runs: dict[str, list[str]], out: Path) -> dict:
    """The run whose chosen checkpoint scored best on validation, copied to OUT/teacher (whole, by a rename) with
    OUT/teacher/chosen.json: every run's validation score, step and seconds, and which was chosen."""
    from mobilekd.finetune.evaluation import chosen_by

    scores = []
    for name in runs:
        r = read_json(out / "teachers" / name / "results.json")
        metric, score = chosen_by(r)  # the score its checkpoint was chosen by (MRPC: F1 and accuracy's mean)
        scores.append({"run": name, "lr": r["lr"], "val_value": score, "metric": metric,
                       "best_step": r["best_step"], "steps": r["steps"], "wall_seconds": r["wall_seconds"]})
    scored = [x for x in scores if x["val_value"] == x["val_value"]]  # a NaN (Pearson of constant scores) loses
    if not scored:
        raise UserError(f"{out / 'teachers'}: no teacher run has a validation score (each is NaN); see their "
                        f"history.json")
    best = max(scored, key=lambda x: x["val_value"])
    record = {"chosen": best["run"], "why": f"the best validation {best['metric']} of {len(scores)} runs", "runs":
              scores, "wall_seconds": round(sum(x["wall_seconds"] for x in scores), 1)}
    if (out / "teacher").exists():  # half made
        shutil.rmtree(out / "teacher")
    take_chosen(out / "teachers" / best["run"], out / "teacher")
    write_json(out / "teacher" / "chosen.json", record)
    return record


def measure(teacher: Path, task_name: str, data: Path, regression: bool, teacher_spec: dict) -> dict:
    """The budget of this data from its training split alone: its size, its classes, and the lengths under the
    teacher's tokenizer of its whole texts (`LENGTHS_OF`: a text found inside a longer training text counted as
    that one, `whole_texts`), and how its validation split is grouped (`grouping`, for plan.json). A task's inputs
    are whole texts: SST-2's training phrases put its 95th percentile at 32 word pieces and its sentences at 45, and
    a --max-len of 32 cut a quarter of its dev sentences short (a diagnosis of the runs of before; the rule itself
    reads training texts alone). On SST-2 the student scored the same at 64 as at 32 (seed 0, docs/ship_runs.md):
    the rule measures what an app will send."""
    from mobilekd.data.tasks import load_task
    from mobilekd.data.tokenizer import load_tokenizer

    task = load_task(task_name, data, regression=regression)
    tokenizer = load_tokenizer(teacher)
    texts = whole_texts(task.train)
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in rng.choice(len(texts), min(LENGTH_SAMPLE, len(texts)), replace=False)]
    lengths = [len(tokenizer(e.text_a, e.text_b)["input_ids"]) for e in sample]
    trained_on = file_digest(source_file(task.train[0].source))
    return budget(len(task.train), lengths, teacher_spec) | {"classes": len(task.labels) if task.labels else None,
                                                             "pair": task.train[0].text_b is not None,
                                                             "validation": grouping(task.train),
                                                             "train_sha256": trained_on}


def task_flags(task: str, data: Path, b: dict, seed: int, regression: bool, threads: int | None) -> list[str]:
    return ["--task", task, "--data", str(data), "--max-len", str(b["max_len"]), "--seed", str(seed),
            *(["--regression"] if regression else []), *(["--threads", str(threads)] if threads else [])]


def head_problem(teacher: Path) -> str | None:
    """Why the teacher's masked-LM head cannot serve (None: it can)."""
    from mobilekd.models.hf import load_pretrained

    try:
        load_pretrained(teacher, "pretraining", require_head=True)
    except UserError as err:
        return str(err)
    return None


def candidates(space: dict, families: list[str], teacher: Path, config, starts: Path, seq_len: int, device: str,
               limit_ms: float, has_head: bool, pair: bool = False) -> tuple[list[Candidate], list[str]]:
    """Every shape of the asked families, priced; those within `limit_ms`, and a line for each family left out.
    A shape's start is made in `starts`, which every task and seed of this teacher shares. A BiLSTM is priced as
    the fused-LSTM file it ships as (siamese where the task's examples are `pair`s)."""
    from android_bench.budget import estimate_bilstm, estimate_shape

    fits, left = [], []
    for family in families:
        spec = space["families"][family]
        priced = []
        try:
            for shape, shape_config, values in shapes(family, spec, config):
                if needs_head(spec, values) and not has_head:
                    continue
                # the start's name says what made it: its stage's words (an edited stage makes another start)
                stage = hashlib.sha256(json.dumps([spec.get("start", []), values]).encode()).hexdigest()[:8]
                start = starts / f"{family}-{shape}-{stage}"
                partial = start.with_name(start.name + ".partial")  # renamed to `start` once made (study.make_start)
                estimate = (estimate_bilstm(values, config.vocab_size, pair, seq_len, device) if shape_config is None
                            else estimate_shape(shape_config, seq_len, device))
                priced.append(Candidate(family, shape, shape_config, start_argv(spec, teacher, partial, values), start,
                                        estimate, values))
        except UserError as err:  # e.g. the TensorFlow venv the BiLSTM's fused file needs cannot be made
            left.append(f"{family}: {err}")
            continue
        if not priced:
            left.append(f"{family}: needs the teacher's masked-LM head")
            continue
        within = [c for c in priced if c.estimate["ms"] <= limit_ms]
        if not within:
            smallest = min(priced, key=lambda c: c.estimate["ms"])
            left.append(f"{family}: its smallest shape, {smallest.shape}, is {smallest.estimate['ms']:.1f} ms")
        fits += within
    return fits, left


def teacher_starts(teacher: Path) -> Path:
    """The default --starts: a folder per teacher (by its weights' digest), so that a start a task-agnostic stage
    made once serves every task and seed of that teacher."""
    return Path(STARTS) / file_digest(teacher / "model.safetensors")[:16]


def run_stage(name: str, argv: list[str], out: Path) -> None:
    print(f"== {name}: mobilekd {' '.join(argv)}", flush=True)
    code = launch.run(argv)
    if code != 0:
        raise UserError(f"{out}: the {name} stage failed (exit {code}; its error is above); run the same command "
                        f"again to resume")


def without_threads(argv: list[str]) -> list[str]:
    """`argv` less its --threads and value: how many threads a run uses does not change what it computes."""
    i = argv.index("--threads") if "--threads" in argv else None
    return argv if i is None else argv[:i] + argv[i + 2:]


def keep_plan(out: Path, plan: dict) -> None:
    """OUT/plan.json records the settings a search runs under: a later run into OUT with others (data, seed,
    budget, families) would otherwise resume the old study under the new settings; threads, workers and --trials
    (a search extended) may change. The training file and the teacher's weights are recorded by digest: edited
    between two invocations, the old teacher and trials would stand for data they never saw (rows moved into the
    new validation split among them). A run whose plan does not record what its --max-len was measured over (before
    `LENGTHS_OF`) is refused too, even where the length came out the same (its plan alone cannot tell)."""
    path = out / "plan.json"
    kept = read_json(path) if path.is_file() else None
    if kept is not None and isinstance(kept.get("teacher"), list):
        raise located(out, "holds a run of a ship from before the teacher was chosen on validation (one teacher "
                           "run in its plan.json); its ship.json stands as it is: use another --out for a new run")
    for field, how, unrecorded in (("draw", "drawn another way", "one draw over every shape, halved across families"),
                                   ("validation", "whose validation split was grouped otherwise", "a text's copies"),
                                   ("lengths", "whose --max-len was measured otherwise", "every training example")):
        if kept is not None and kept.get(field) != plan.get(field):  # unrecorded: what an older plan.json meant
            raise located(out, f"holds a search {how} ({kept.get(field) or unrecorded}; this mobilekd: "
                               f"{plan.get(field)}): finish it with the mobilekd that began it, or use another --out")
    changed = [k for k, v in (plan.get("inputs") or {}).items() if kept and kept.get("inputs", {}).get(k, v) != v]
    if changed:  # a plan of before inputs were recorded is taken at its word
        raise located(out, f"holds a search begun on another {' and '.join(changed)} file (the digests in its "
                           f"plan.json): its teacher and trials learned from that one; use another --out")
    if kept is not None and settings(kept) != settings(plan):
        raise located(out, "holds a run with other settings (its plan.json); use another --out, or delete it")
    if kept is None and (out / "trials").is_dir() and not (out / "teacher" / "chosen.json").is_file():
        raise located(out, "holds trials but no plan.json nor a teacher chosen on validation: its students learned "
                           "from a teacher this run would replace; use another --out")
    write_json(path, plan)


def settings(plan: dict) -> dict:
    """What a search's results depend on, of its plan.json: all of it but --trials (a search extended), its
    inputs' digests (`keep_plan` compares them apart, naming the file that changed), the configuration file's
    descriptions (its own and its families') and the families it has no candidate of (a family added to
    configs/ship.json, or a description edited, leaves a run resumable)."""
    config, used = plan.get("config") or {}, {name.split("/")[0] for name in plan.get("candidates", [])}
    kept = {k: v for k, v in plan.items() if k not in ("trials", "inputs")}
    return {**kept, "config": {**{k: v for k, v in config.items() if k not in ("description", "families")},
                               "families": {f: {k: x for k, x in v.items() if k != "description"}
                                            for f, v in config.get("families", {}).items() if f in used}}}


def take_chosen(trial_dir: Path, student: Path) -> None:
    """OUT/student: the chosen trial's model and records, copied beside it and renamed into place whole."""
    tmp = Path(tempfile.mkdtemp(prefix=".student.", dir=student.parent))
    try:
        for f in sorted(trial_dir.iterdir()):
            if f.is_file() and f.name not in MODEL_FILES and not f.name.endswith(".log"):
                shutil.copy2(f, tmp / f.name)  # tokenizer files
        for name in MODEL_FILES:
            if (trial_dir / name).is_file():
                shutil.copy2(trial_dir / name, tmp / name)
        os.chmod(tmp, 0o755)
        os.replace(tmp, student)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def scored(model: Path) -> bool:
    """Whether `model` has had its one dev scoring (OUT/MODEL/dev/results.json)."""
    path = model / "dev" / "results.json"
    return path.is_file() and "dev" in read_json(path).get("metrics", {})


BASELINE_NAMES = {"tfidf+logreg": "TF-IDF + LR", "tfidf+ridge": "TF-IDF + ridge"}  # `bag_of_words_baseline`'s


def model_card(s: dict) -> str:
    """OUT/student/README.md: what the model is, how it was chosen, what it scores, what it costs."""
    c, metric = s["chosen"], s["metric"]
    selected = c.get("selection_metric", metric)  # the validation score that chose it (MRPC's: F1 and accuracy's mean)
    return "\n".join([
        "---", *(["library_name: transformers"] if c.get("verb", "finetune") == "finetune" else []),
        "pipeline_tag: text-classification",
        "tags: [mobilekd, knowledge-distillation, tflite]", "---", "",
        f"# {c['family']} student ({c['shape']}), distilled by mobilekd ship", "",
        f"A {c['params_m']:.1f}M-parameter student of `{s['teacher']['model']}` fine-tuned on `{s['data']}`, "
        f"chosen by `mobilekd ship` among {len(s['trials'])} trials as the best validation {selected} within a "
        f"Pixel 4 budget of {s['budget']['latency_ms']:.1f} ms (an ESTIMATE of a cost model, not a measurement "
        f"on a phone).", "",
        "| | dev " + metric + " | note |", "|---|---|---|",
        f"| this student | {s['student']['dev'][metric]:.4f} | dev read once, after every choice; validation "
        f"{selected} {c['val_value']:.4f} chose it |",
        f"| teacher | {s['teacher']['dev'][metric]:.4f} | {teacher_choice(s)} |",
        *([f"| {BASELINE_NAMES.get(s['baseline'].get('method'), 'TF-IDF + LR')} | "
           f"{s['baseline']['metrics'][metric]:.4f} | all of the training examples |"]
          if s.get("baseline") else []),
        *([f"| majority class | {s['majority']['metrics'][metric]:.4f} | always `{s['majority']['label']}` |"]
          if s.get("majority") else []), "", *[f"- {line}." for line in differences(s)],
        *([f"- **{w}**."] if (w := constant_warning(s)) else []),
        f"- Recipe: `mobilekd {c.get('verb', 'finetune')} {c['recipe']}` from `{c['start']}`.",
        f"- Pixel 4 estimate: {c['pixel4_ms_est']:.1f} ms at sequence {s['budget']['max_len']} "
        f"(the teacher's: {s['budget']['teacher_pixel4_ms_est']:.1f} ms).",
        f"- Trained on host `{s['host']['id']}` ({s['host']['cpu']}).",
        "- Files: `tflite/` (with metadata: the labels and the vocabulary); this directory loads in transformers "
        "where the shape has a transformers layout.",
        "- Limits: scores are on the user's dev set, one seed; the search saw a validation split of the training "
        "data only.", ""])


def teacher_choice(s: dict) -> str:
    """How the teacher was chosen, in a few words (a ship.json from before the choice: its last step's model)."""
    picked = s["teacher"].get("chosen")
    if not picked:
        return "its last step's model"
    run = next(r for r in picked["runs"] if r["run"] == picked["chosen"])
    return (f"lr {run['lr']:g}, step {run['best_step']} of {run['steps']}, chosen on validation "
            f"({run['val_value']:.4f}) among {len(picked['runs'])} runs")


def constant_warning(s: dict) -> str | None:
    """One line where the chosen student's validation score is not above the best constant answer's on the same
    split (`chosen.above_constant`): the search found nothing better than a constant, whatever dev says."""
    c = s["chosen"]
    if c.get("above_constant", True):
        return None
    v = s["constant"]
    return (f"WARNING: the chosen student's validation {v['metric']} {c['val_value']:.4f} is not above always "
            f"answering '{v['label']}' ({v['value']:.4f} on the same {v['examples']} examples): no trial learned more "
            "than a constant answer. More training data, a stronger teacher or a longer search (--hours, --trials) "
            "may help; do not ship it as a model of the task")


def report(s: dict) -> str:
    metric, c = s["metric"], s["chosen"]
    t, st = s["teacher"]["dev"][metric], s["student"]["dev"][metric]
    base = s["baseline"]["metrics"][metric] if s.get("baseline") else None
    counts = {state: sum(r["state"] == state for r in s["trials"]) for state in ("complete", "pruned", "fail")}
    walled = sum("cut" in r for r in s["trials"])
    families = ", ".join(f"{f} {n}" for f, n in Counter(r["family"] for r in s["trials"]).most_common())
    lines = [f"| model | dev {metric} | Pixel 4 (est.) |", "|---|---|---|",
             f"| teacher (your BERT, fine-tuned) | {t:.4f} | {s['budget']['teacher_pixel4_ms_est']:.1f} ms |",
             f"| student: {c['family']} {c['shape']} ({c['params_m']:.1f}M), validation "
             f"{c.get('selection_metric', metric)} {c['val_value']:.4f} | "
             f"{st:.4f} | {c['pixel4_ms_est']:.1f} ms |",
             *([f"| bag of words ({s['baseline']['method']}) | {base:.4f} | - |"] if base is not None else []),
             *([f"| majority class ({s['majority']['label']}) | {s['majority']['metrics'][metric]:.4f} | - |"]
               if s.get("majority") else []), "",
             f"search: {len(s['trials'])} trials ({counts['complete']} complete, {counts['pruned']} cut short"
             + (f" ({walled} at the wall limit)" if walled else "") + ", "
             f"{counts['fail']} failed; {families}) in {s['search_seconds'] / 60:.1f} min; budget "
             f"{s['budget']['latency_ms']:.1f} ms (est.)"
             + (f"; {s['wall_seconds']['total'] / 60:.1f} min of --hours {hours:g}"
                + ("" if "summary" in s["wall_seconds"] else " in its recorded stages")
                if (hours := s.get("wall_limit", {}).get("hours")) else "")]
    lines += differences(s)
    lines += [w for w in [constant_warning(s)] if w]
    if base is not None and "student-baseline" not in s.get("intervals", {}):  # a ship.json from before intervals
        lines.append(f"the student is {'above' if st > base else 'NOT above'} the bag-of-words baseline by "
                     f"{st - base:+.4f}")
    return "\n".join(lines)


def differences(s: dict) -> list[str]:
    """The student against the teacher, the bag-of-words baseline and the majority class on dev, each difference
    with its 95% interval (`dev_intervals`) and what it says: above, below, or neither (a tie on this dev set)."""
    from mobilekd.finetune.intervals import side

    lines = []
    for name, what in (("teacher", "the teacher"), ("baseline", "the bag-of-words baseline"),
                       ("majority", "the majority class")):
        i = s.get("intervals", {}).get(f"student-{name}")
        if i:
            verdict = {"tie": "neither above nor below"}.get(side(i), side(i))
            lines.append(f"student - {what}: {i['mean']:+.4f} {s['metric']} [{i['low']:+.4f}, {i['high']:+.4f}]: "
                         f"{verdict} it (95% paired bootstrap over the {i['examples']} dev examples)")
    return lines


def parse_args(argv) -> ShipConfig:
    p = argparse.ArgumentParser(prog="mobilekd ship", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, ShipConfig)
    return check(from_flags(ShipConfig, p.parse_args(argv)))


@cli_entry
def main(argv=None):
    begun = time.time()  # --hours counts the whole process, its start-up and the budget's measurement included
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    from mobilekd.models.foreign import is_foreign, model_type
    from mobilekd.models.hf import load_config
    from mobilekd.models.pretrained import model_dir
    from mobilekd.search import study as search

    from mobilekd.data.tasks import task_data

    teacher, data, out = model_dir(args.teacher), task_data(args.task, args.data), Path(args.out)
    if not (teacher / "config.json").is_file():
        raise located(teacher, "not a model directory (no config.json)")
    if is_foreign(teacher):  # what it can teach, it teaches through finetune
        raise located(teacher / "config.json", f"a transformers {model_type(teacher)} teacher: ship's families start "
                                               "from a BERT-family teacher's layers or masked-LM head; distil it with "
                                               "`mobilekd init PRESET OUT --vocab TEACHER` and `mobilekd finetune "
                                               "--method tinybert --teacher TEACHER` (docs/teachers.md)")
    config, _ = load_config(teacher)  # a BERT (ours or transformers'), or one line saying why not
    space = load_space(Path(args.config))
    families = args.families or list(space["families"])
    unknown = [f for f in families if f not in space["families"]]
    if unknown:
        raise located(args.config, f"has no family {', '.join(unknown)} (it has {', '.join(space['families'])})")
    b = measure(teacher, args.task, data, args.regression, space["teacher"])
    from android_bench.budget import estimate_shape

    teacher_ms = estimate_shape(config, b["max_len"], args.device)["ms"]
    limit = args.latency_ms or round(teacher_ms * SHARE, 2)
    b |= {"latency_ms": limit, "device": args.device, "teacher_pixel4_ms_est": teacher_ms}
    problem = head_problem(teacher)
    starts = Path(args.starts) if args.starts else teacher_starts(teacher)
    from mobilekd.export.fused_lstm import FUSED

    unfused = [q for q in args.quantize if q not in FUSED]  # the fused-LSTM file a BiLSTM ships as has not these
    lstm = [f for f in families if verb(space["families"][f]) == "bilstm"] if unfused else []
    found, left = candidates(space, [f for f in families if f not in lstm], teacher, config, starts, b["max_len"],
                             args.device, limit, problem is None, b["pair"])
    left += [f"{f}: its fused-LSTM file is written for --quantize {' and '.join(FUSED)}, not {' '.join(unfused)}"
             for f in lstm]
    if not args.join:
        print(f"budget from the data ({b['train_examples']} training examples, "
              + (f"{b['classes']} classes, " if b["classes"] else "")
              + f"95% of its whole texts within {b['length_p95']:.0f} word pieces): --max-len {b['max_len']}; "
              f"teacher up to {b['teacher_epochs']:g} epochs at lr {' or '.join(f'{x:g}' for x in b['teacher_lrs'])}, "
              f"chosen on validation; students within {limit:.1f} ms on "
              f"{args.device} (est.; the teacher's {teacher_ms:.1f} ms)")
        for c in found:
            print(f"  candidate {c.name}: {c.estimate['params_m']:.1f}M parameters, {c.estimate['ms']:.1f} ms (est.)")
            if args.dry_run and c.start and not c.start_dir.is_dir():  # to make here, or on a GPU and copy back
                partial = str(c.start_dir.with_name(c.start_dir.name + ".partial"))  # where a search makes it
                print(f"    its start: mobilekd {' '.join(str(c.start_dir) if a == partial else a for a in c.start)}")
        for line in left:
            print(f"  left out: {line}" + (f" ({problem})" if "masked-LM" in line and problem else ""))
    if not found:
        raise UserError(f"{args.config}: no student shape fits {limit:.1f} ms on {args.device} (est.); raise "
                        f"--latency-ms or add smaller shapes")
    if args.make_starts:
        with owned(out, argv=argv):
            made = make_starts([c for c in found if verb(space["families"][c.family]) != "bilstm"])  # a BiLSTM: none
            write_json(out / "starts.json", {"teacher": str(teacher), "starts": made, "host": identity()})
        print(f"the starts: {out / 'starts.json'}")
        return
    trials = args.trials or space["search"]["trials"]
    flags = task_flags(args.task, data, b, args.seed, args.regression, args.threads)  # a trial's
    # a finetune trial's layer matching reads the teacher's store
    verb_flags = {"finetune": ["--teacher-store-gb", f"{args.teacher_store_gb:g}"]}
    # the stages no trial runs beside (the teacher, the scorings) get every worker's threads
    whole = task_flags(args.task, data, b, args.seed, args.regression, args.threads and args.threads * args.workers)
    runs = teacher_runs(b, space["teacher"], whole, teacher, out)
    if args.dry_run:
        for name, run in runs.items():
            print(f"== teacher {name}: mobilekd {' '.join(run)}")
        print(f"== then the teacher run best on validation, and a search of {trials} trials over {len(found)} "
              f"candidates; the chosen student scored on dev once and exported")
        return

    def open_study():
        return search.open_study(out, args.seed, space["search"]["reduction_factor"], args.join,
                                 startup=max(2, trials // 3))

    def objective(deadline: float | None):
        """The search's objective, its trials cut at `deadline` (seconds since the epoch; None: never) where
        configs/ship.json's search.at_wall_limit says so."""
        cut = deadline is not None and space["search"]["at_wall_limit"] == "cut"
        return search.Objective(out, found, space["families"], teacher, out / "teacher", flags, problem is None,
                                b["train_examples"], space["search"]["rungs"], verb_flags,
                                cut_at=deadline if cut else None)

    if args.join:  # a worker of the parent below, which holds OUT; stopped by it, it stops its trial (run_trial)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        deadline = args.deadline  # the parent's: no trial starts here past it
        search.search(open_study(), objective(deadline), trials,
                      None if deadline is None else max(deadline - time.time(), 0.0))
        return
    with owned(out, argv=argv):  # one ship at a time in OUT: a second would fail the first's running trials as stale
        keep_plan(out, {"teacher": {name: without_threads(argv) for name, argv in runs.items()},
                        "candidates": [c.name for c in found], "seed": args.seed, "config": space,
                        "latency_ms": limit, "trials": trials, "draw": search.DRAW, "validation": b["validation"],
                        "lengths": LENGTHS_OF, "inputs": {"training": b["train_sha256"],
                                                          "teacher": file_digest(teacher / "model.safetensors")}})
        teacher_here, started = 0.0, time.time()
        if not (out / "teacher" / "chosen.json").is_file():
            for name, run in runs.items():
                if finished_results(out / "teachers" / name) is None:
                    run_stage(f"teacher {name}", run, out)
            choose_teacher(runs, out)
            teacher_here = time.time() - started
        study = open_study()
        stale = search.fail_stale(study)  # no worker runs yet: any trial left running was interrupted
        if stale:
            print(f"{stale} trial(s) an interrupted search left running marked failed; the search resumes")
        teacher_seconds = read_json(out / "teacher" / "chosen.json")["wall_seconds"]
        before = before_search(time.time() - begun, teacher_seconds, teacher_here)
        searched = search.wall_seconds(study)
        left = search_left(args.hours, args.search_hours, before, searched)  # after fail_stale: its spans
        timeout = None if left is None else max(left, 0.0)
        deadline = None if left is None else time.time() + timeout
        if left is not None:
            print(wall_limit_line(args, left, search.has_complete(study), before, teacher_seconds, searched))
        workers = [subprocess.Popen([sys.executable, "-m", "mobilekd", "ship", *argv, "--join", str(k),
                                     *(["--deadline", repr(deadline)] if deadline is not None else [])],
                                    env=os.environ) for k in range(1, args.workers)]
        from tqdm import tqdm

        try:
            with tqdm(total=trials, initial=min(trials, search.finished(study)), desc="search", unit="trial") as bar:
                search.search(study, objective(deadline), trials, timeout,
                              progress=lambda n: bar.update(min(trials, n) - bar.n), until_complete=True)
                for w in workers:
                    w.wait()
                bar.update(min(trials, search.finished(study)) - bar.n)
        finally:  # interrupted: no worker outlives its parent
            for w in workers:
                if w.poll() is None:
                    w.terminate()
                    w.wait()
        finish(args, study, out, data, teacher, b, whole, search.wall_seconds(study),
               {"hours": args.hours, "search_hours": args.search_hours, "before_search_seconds": round(before, 1),
                "left_seconds": None if left is None else round(left, 1),
                "search_limit_seconds": None if timeout is None else round(timeout, 1)})


def wall_limit_line(args, left: float, complete: bool, before: float, teacher_seconds: float,
                    searched: float) -> str:
    """What the search may take of --hours and --search-hours (`search_left`), said before it starts; `complete`:
    whether the study holds a complete trial already."""
    why = "; ".join([*([f"--hours {args.hours:g} less {before / 60:.1f} min before the search (the teacher's "
                        f"fine-tuning {teacher_seconds / 60:.1f} of it) and {FINAL_RESERVE / 60:g} min for the last "
                        "stages"] if args.hours else []),
                     *([f"--search-hours {args.search_hours:g}"] if args.search_hours else []),
                     *([f"less {searched / 60:.1f} min searched before"] if searched else [])])
    if left > 0:
        return f"the search's wall limit: {left / 60:.1f} min ({why})"
    return (f"the budget is spent before the search ({why}): " + (
        "no trial starts" if complete else "trials run until one is complete, so that there is a student to choose"))


def make_starts(found: list[Candidate]) -> list[dict]:
    """Each candidate's start, the smallest Pixel estimate first, as a search would make it (`study.make_start`:
    once, under a lock, renamed into place when whole); a stage that fails is one line naming its log. Returns a
    record a start: its candidate, folder, whether this call made it, and the seconds it took."""
    from tqdm import tqdm

    from mobilekd.search.study import TrialFailed, make_start

    records = []
    for c in tqdm(sorted({c.start_dir: c for c in found}.values(), key=lambda c: c.estimate["ms"]), desc="starts",
                  unit="start"):
        made, begun = not c.start_dir.is_dir(), time.time()
        try:
            make_start(c)
        except TrialFailed as err:
            raise UserError(str(err)) from None
        records.append({"candidate": c.name, "start": str(c.start_dir), "made": made,
                        "seconds": round(time.time() - begun, 1) if made else 0.0})
        tqdm.write(f"  {c.name}: {'made' if made else 'already made'}, {c.start_dir}")
    return records


def require_labelled_dev(task_name: str, data: Path, regression: bool) -> None:
    """Dev, read once every choice is made (not before: nothing of it may reach a choice), refused in one line
    naming the file when it holds no label: there would be nothing to score the chosen student by. A file whose
    rows differ in having one is refused where it is read (`read_custom`); the search stays, to resume."""
    from mobilekd.data.tasks import load_task

    examples = next(iter(load_task(task_name, data, eval_only=True, regression=regression).dev.values()))
    if examples[0].label is None:
        raise located(source_file(examples[0].source), "no labels: ship scores the student it chose on dev, once; "
                                                         "label the file and run the same command again")


FINAL_SECONDS = "final_seconds.json"  # OUT's record of the last stages' seconds (`finish`)


def finish(args, study, out: Path, data: Path, teacher: Path, b: dict, flags: list[str], seconds: float,
           wall_limit: dict) -> None:
    """The chosen trial's model into OUT/student, dev scored once, exported with parity, card and summary;
    `wall_limit`: the budget flags and the search's limit as this process found it (ship.json's `wall_limit`)."""
    from mobilekd.search import study as search
    from mobilekd.search.frontier import plot

    chosen = search.chosen_trial(study)
    rows = search.trial_rows(study, chosen.number)
    student = out / "student"
    kept = student / "trial.json"
    timed = out / FINAL_SECONDS  # each last stage's seconds as it ran: a resume's idle time is not counted
    if not (scored(student) and kept.is_file() and read_json(kept)["trial"] == chosen.number):
        if student.exists():  # half made, or another trial's (a search extended by --trials)
            shutil.rmtree(student)
        if timed.is_file():  # the teacher's scoring stands; the student's stages are to run again
            write_json(timed, {k: v for k, v in read_json(timed).items() if k.startswith("teacher")})
        take_chosen(Path(chosen.user_attrs["dir"]), student)
        write_json(kept, {"trial": chosen.number, "dir": chosen.user_attrs["dir"]})
    if not (scored(out / "teacher") and scored(student)):
        require_labelled_dev(args.task, data, args.regression)

    def timed_stage(name: str, stage: list[str]) -> None:
        begun = time.time()
        run_stage(name, stage, out)
        write_json(timed, {**(read_json(timed) if timed.is_file() else {}), name: round(time.time() - begun, 1)})

    for name, model in (("teacher", out / "teacher"), ("student", student)):  # every choice is made: dev, once
        if not scored(model):
            timed_stage(f"{name} on dev, once", ["finetune", *flags, "--model", str(model), "--eval-only",
                                                "--out", str(model / "dev")])
    bilstm = chosen.user_attrs.get("verb") == "bilstm"  # its app's file: TFLite's fused LSTM kernel
    export = ["export", "--model", str(student), "--quantize", *args.quantize, "--max-len", str(b["max_len"]),
              *(["--fused-lstm", "--fused-only"] if bilstm else []), "--parity-examples", "1000000",
              "--min-agreement", str(args.min_agreement), "--out", str(student / "tflite")]
    if not completed(student / "tflite", export[1:]):
        timed_stage("export", export)
    stages = read_json(timed) if timed.is_file() else {}
    # the scorings and the export, as each ran; a run whose stages ran before they were timed: from the search's
    # last trial to the export's end (any invocation's, so an idle time between them counts)
    final = round(sum(stages.values()), 1) if len(stages) == 3 else round(
        (student / "tflite" / COMPLETE).stat().st_mtime - search.ended(study), 1)
    summing = time.time()
    s = summary(out, args.task, data, args.regression, teacher, b, chosen, rows, seconds, final, args.seed)
    s["wall_limit"] = wall_limit
    if not args.keep_teacher_features:
        freed = drop_teacher_features(out / "teacher")
        if freed:
            print(f"removed the search's teacher-feature stores ({freed:.1f} GB) from {out / 'teacher' / 'outputs'}: "
                  "they served the trials' layer matching (--keep-teacher-features keeps them)")
    plot(rows, b["latency_ms"], s["chosen"]["selection_metric"], out / "frontier.png", title=f"ship: {data.name}",
         constant=s.get("constant"))
    recorded = s["wall_seconds"]
    s["wall_seconds"] = wall_parts(recorded, wall_limit["before_search_seconds"] - recorded["teacher"],
                                   time.time() - summing)
    with atomic_path(student / "README.md") as tmp:
        tmp.write_text(model_card(s))
    write_json(out / "ship.json", s)
    print(report(s))
    print(f"summary: {out / 'ship.json'}; the app's file: {student / 'tflite'}; the search: {out / 'frontier.png'}")


RECORDED_STAGES = ("teacher", "search", "final")  # the stages ship.json times from their own records


def stages_seconds(wall: dict) -> float:
    """A run's recorded stages summed (`RECORDED_STAGES`: the teacher's runs, the search, the last stages): the wall
    time every benchmark row holds, whether its ship.json's `total` has `wall_parts`' start-up and summary or not."""
    return round(sum(wall[k] for k in RECORDED_STAGES), 1)


def wall_parts(recorded: dict, start: float, summarised: float) -> dict:
    """ship.json's `wall_seconds`: the recorded stages (the teacher's runs, the search, the last stages) with the
    rest of the last process's own time beside them: `start`, its start-up, the budget's measurement and the teacher
    stage's overhead beyond its runs' records (`before_search` less the teacher's runs; a resumed run's earlier
    processes' start-ups are not kept), and `summary`, the baselines, intervals, store removal and plot after the
    export; `total` their sum, the command's own time but for the interpreter's start and exit and the short gaps
    between stages (the workers' start, taking the chosen trial, the model card)."""
    parts = {k: recorded[k] for k in RECORDED_STAGES} | {"start": round(max(start, 0.0), 1),
                                                          "summary": round(summarised, 1)}
    return parts | {"total": round(sum(parts.values()), 1)}


def drop_teacher_features(teacher: Path) -> float:
    """Remove the fine-tuned teacher's layer-feature stores (`<teacher>/outputs/*-features`,
    mobilekd/finetune/teacher_features.py) once the student is chosen and exported: they serve the trials' layer
    matching alone and reach tens of GB (14 GB a seed on MRPC's augmented set); its logits stay. Returns the GB
    freed."""
    freed = 0
    for store in sorted((teacher / "outputs").glob("*-features")):
        freed += sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        shutil.rmtree(store)
        Path(f"{store}.lock").unlink(missing_ok=True)
    return freed / 1e9


def dev_intervals(out: Path, task_name: str, metric: str, majority: str | None = None) -> dict:
    """The student's dev score against the teacher's, the bag-of-words baseline's and (given its label) the majority
    class's, each difference in `metric` with its 95% paired bootstrap interval over the dev examples
    (mobilekd/finetune/intervals.py: Koehn 2004's paired bootstrap; one run of each, so the interval counts dev's
    sampling noise, not another seed's)."""
    from mobilekd.finetune.intervals import metric_function, paired_bootstrap, read_predictions

    try:
        score = metric_function(task_name, metric)
    except ValueError:  # a metric the bootstrap has no function for: no intervals
        return {}
    labels, student = read_predictions(out / "student" / "dev" / "dev_predictions.tsv")
    others = {"teacher": out / "teacher" / "dev" / "dev_predictions.tsv",
              "baseline": out / "baseline_dev_predictions.tsv"}
    found = {f"student-{name}": paired_bootstrap(labels, student, read_predictions(path)[1], metric=score)
             for name, path in others.items() if path.is_file()}
    if majority is not None:
        found["student-majority"] = paired_bootstrap(labels, student, np.full(len(labels), majority), metric=score)
    return found


def summary(out: Path, task_name: str, data: Path, regression: bool, teacher: Path, b: dict, chosen,
            rows: list[dict], seconds: float, final: float, seed: int) -> dict:
    """OUT/ship.json: the budget, what was chosen and why, every trial, the dev scores, the files; the best
    constant answer on the trials' validation split (`constant`) and whether the chosen student's validation score
    is above it (`chosen.above_constant`)."""
    from mobilekd.data.tasks import load_task
    from mobilekd.finetune.baseline import bag_of_words_baseline, constant_on_validation, majority_baseline

    t, picked = (read_json(out / "teacher" / name) for name in ("results.json", "chosen.json"))
    t_dev, dev = (read_json(out / m / "dev" / "results.json") for m in ("teacher", "student"))
    task = load_task(task_name, data, regression=regression)
    # the dev figures in the task's own metric; the search chose on its selection score (MRPC: F1 and accuracy's mean)
    metric, selected = task.metrics[0], chosen.user_attrs["metric"]
    row = next(r for r in rows if r["chosen"])
    dev_examples = next(iter(task.dev.values()))
    baseline = (bag_of_words_baseline(task, task.train, dev_examples, 0, keep_predictions=True)
                if task.head == "classification" else None)
    if baseline:  # beside the models' dev predictions, for paired comparisons (benchmarks.ship)
        names = task.labels or []
        with atomic_path(out / "baseline_dev_predictions.tsv") as tmp:
            tmp.write_text("label\tprediction\n" + "".join(
                f"{e.label}\t{names[int(p)] if names and not task.is_regression else p}\n"
                for e, p in zip(dev_examples, baseline.pop("predictions"))))
    parity = read_json(out / "student" / "tflite" / "parity.json")
    wall = {"teacher": picked["wall_seconds"], "search": round(seconds, 1), "final": final}
    always = majority_baseline(task, task.train, dev_examples)
    compared = dev_intervals(out, task_name, metric, always and always["label"])
    constant = constant_on_validation(task, seed, metric=selected)  # the trials' split, in the score they chose on
    above = {"above_constant": row["val_value"] > constant["value"]} if constant else {}
    return {"data": str(data), "budget": b, "metric": metric, "search_seconds": round(seconds, 1),
            "wall_seconds": wall,  # the recorded stages; `finish` adds the rest and the total (`wall_parts`)
            "host": identity(),
            "chosen": {**row, **above, "metric": metric, "selection_metric": selected,
                       "start": chosen.user_attrs["start"],
                       "verb": chosen.user_attrs.get("verb", "finetune"),
                       "why": f"the best validation {selected} of the {sum(r['state'] == 'complete' for r in rows)} "
                              f"complete trials within {b['latency_ms']:.1f} ms (est.)"},
            "teacher": {"model": str(teacher), "dev": t_dev["metrics"]["dev"], "train_seconds": picked["wall_seconds"],
                        "host": training_host(t), "chosen": picked},
            "student": {"dev": dev["metrics"]["dev"], "dev_scored": "once, after the search chose it",
                        "dev_examples": len(dev_examples)},
            "baseline": baseline, "majority": always, "constant": constant, "intervals": compared, "trials": rows,
            "tflite": {name: {k: r[k] for k in ("size_bytes", "agreement", "accuracy_exported") if k in r}
                       for name, r in parity.items()}}


if __name__ == "__main__":
    main()
