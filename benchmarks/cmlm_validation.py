"""C-MLM's benchmark under the selection protocol (issue 79, item 1): every choice on a validation split carved
from the training pairs, dev scored once per final model; rows to docs/results/cmlm_validation.json, the table into
docs/seq2seq.md (benchmarks.cmlm's, whose teacher learning rate and alpha were picked on the dev set they are scored
on, is in the lab notes, docs/seq2seq_runs.md).

    python -m benchmarks.cmlm_validation                 # everything, resumable: the choices, then the final runs
    python -m benchmarks.cmlm_validation --collect       # rows of the finished runs, run nothing
    python -m benchmarks.cmlm_validation --table --write

1. **Choices**, per task, on seed 0 and a validation split (SPLIT: 10% of the task's training pairs, at most 2,000,
   whole groups of linked pairs, drawn by seed 0: `mobilekd.finetune.selection.carve_pairs`; the teacher and its
   students hold out the same pairs, so no student is scored on pairs its teacher trained on): the C-MLM teacher at
   each learning rate of CHOICES, the one with the best validation token accuracy kept (the score its own run
   reports); then a C-MLM student from it at each alpha, its validation pairs decoded greedy and with beam 5; the
   (alpha, decoding) with the best validation BLEU kept. Dev is scored by these runs too (the recipes always score
   it at the end) and read by nothing here.
2. **Final runs**: benchmarks.cmlm's plan at the chosen recipe and the task's final budget (FINAL, declared: text
   correction on every training pair, the students 2 epochs; else the choices' budget), the validation split back
   in (as a search refits on the whole training set), seeds 0-2: the teacher once, C-MLM and cross-entropy
   students per seed, no evaluation during training (`--eval-every 0`), dev scored once per model (the teacher as
   soon as its learning rate is chosen, beside the candidate students: `plan`, `final_jobs`). Each budget's
   runs have a folder of their own (OUT/final at the choices' budget, OUT/final-all at every pair) and their rows
   stay side by side (keyed by `train_pairs` and `epochs`); the table shows each, the README's summary the largest.
   Where OUT holds no finished choice runs but the results file's rows mark a task's choice (an earlier
   invocation's, on another machine perhaps), the final runs follow that choice rather than making it again.
3. **Wall time**: a `benchmark` row holds the command's wall time where one command ran all of it from nothing (the
   adapted teacher, the choices, the final runs: `benchmarks.runner.whole_plan_wall`), judged against HOURS.

Fixed, not chosen: the pairs and epochs (the choices': benchmarks.cmlm's TASKS; the final runs': FINAL), the
temperature (10) and top-k (8) of the official code, the students' learning rate (the recipe's default); the
cross-entropy student decodes as the chosen C-MLM student does.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks import cmlm
from benchmarks.command import comparison, comparison_flags
from benchmarks.runner import RESUMABLE, Job, whole_plan_wall
from mobilekd.errors import UserError
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.finetune.selection import VALIDATION
from mobilekd.rundir import finished_results

CHOICES = {"teacher_lr": ("5e-5", "2e-4"), "alpha": ("0.2", "0.5"), "beam": ("1", "5")}
# The choice runs' budgets (pairs, the teacher's and students' epochs; the rest is chosen): benchmarks.cmlm's recipes
# as their choices ran, written out so that a later change to benchmarks.cmlm's TASKS moves neither
CHOICE = {"paraphrase": cmlm.Recipe(None, "3", "10", "2e-4", "0.2", "5"),
          "correction": cmlm.Recipe("10000", "1", "4", "2e-4", "0.2", "1")}
# The final runs' training pairs (None: all) and students' epochs where they are not the choices': declared before
# they ran, not chosen. Issue 79's item 2, text correction "at the data it needs: all usable pairs"; 2 epochs, about
# 2.1x the choice runs' steps per student, what the 3 hours leave beside the teacher's pass over every pair. The choices
# stay at CHOICE's budget, a cheaper fidelity of the same recipe; final runs at that budget stay in the rows beside.
FINAL = {"correction": (None, "2")}
SPLIT = ["--validation-fraction", "0.1", "--validation-seed", "0"]
CHOICE_SEED = 0
WIDE = max(CHOICES["beam"], key=int)  # the beam a choice run decodes validation with, beside greedy ("1")
ORDER = ("choice-teacher", "choice-cmlm")
# the whole benchmark run again from nothing in a fresh clone, with a results file of its own (`--results`, a file
# not yet there: one whose rows mark a choice has its final runs follow it): a replication, kept beside this file's
# rows rather than merged over them (the same keys); the table's wall goal reads their wall rows too. cmlm_wall.json:
# 2026-12-06, stopped and resumed (no wall row); cmlm_wall2.json: 2026-12-06, the changed plan in one piece (2.55 h)
REPLICATIONS = ("docs/results/cmlm_wall.json", "docs/results/cmlm_wall2.json")
HOURS = 3  # issue 79's "the whole correction benchmark within 3 hours on 2 cores": the choices and the final runs


def teacher_run(out: Path, task: str, lr: str) -> Path:
    return out / task / "choose" / f"teacher-lr{lr}"


def student_run(out: Path, task: str, alpha: str) -> Path:
    return out / task / "choose" / f"cmlm-alpha{alpha}"


def final(out: Path, recipe: cmlm.Recipe, task: str) -> Path:
    """Where a task's final runs at `recipe` go, in benchmarks.cmlm's layout: OUT/final at the choices' budget,
    OUT/final-PAIRS (final-all: every pair) at another. A FINAL changed in its epochs alone would find its runs
    there under other flags (and be refused in one line when they resume): give it another OUT."""
    if (recipe.pairs, recipe.epochs) == (CHOICE[task].pairs, CHOICE[task].epochs):
        return out / "final"
    return out / f"final-{recipe.pairs or 'all'}"


def final_recipe(recipe: cmlm.Recipe, task: str) -> cmlm.Recipe:
    """The chosen `recipe` at the task's declared final budget (FINAL), else as chosen."""
    if task not in FINAL:
        return recipe
    pairs, epochs = FINAL[task]
    return recipe._replace(pairs=pairs, epochs=epochs)


def final_jobs(out: Path, task: str, seeds: list[int], recipe: cmlm.Recipe) -> list[Job]:
    """benchmarks.cmlm's plan for `task` at `recipe`, in `final`'s folder, dev scored once per model; outside
    OUT/final its jobs are named after their folder (final-all/correction/teacher), so that one budget's logs never
    stand for another's. In the order the runner starts what is ready (`run_all`): the teacher, its soft targets
    over the training pairs in `cmlm.SOFT_TARGET_SHARES` jobs (the longest serial piece, split so that each worker
    takes a share; neither reads alpha, so all are named as soon as the teacher's learning rate is chosen and run
    beside the candidate students), the C-MLM students (ready once every share is), then the cross-entropy
    students (ready as soon as alpha is chosen and named: what a worker runs while the soft targets are still
    being made)."""
    where, kept = final(out, recipe, task), cmlm.TASKS[task]
    try:
        cmlm.TASKS[task] = recipe
        jobs = [j for j in cmlm.jobs(where, [task], seeds, curves=False) if j.name != "adapt"]
    finally:
        cmlm.TASKS[task] = kept
    jobs = [j for j in jobs if "/ce/" not in j.name] + [j for j in jobs if "/ce/" in j.name]
    if where.name == "final":
        return jobs
    prefix = f"{where.name}/"
    return [replace(j, name=prefix + j.name, needs=[n if n == "adapt" else prefix + n for n in j.needs])
            for j in jobs]


def teacher_scores(out: Path, task: str) -> dict[str, float] | None:
    """Each candidate teacher's validation token accuracy, by learning rate; None until every one has finished."""
    runs = {lr: finished_results(teacher_run(out, task, lr)) for lr in CHOICES["teacher_lr"]}
    if not all(runs.values()):
        return None
    return {lr: r["metrics"][VALIDATION]["token_accuracy"] for lr, r in runs.items()}


def student_scores(out: Path, task: str) -> dict[tuple[str, str], float] | None:
    """Each candidate (alpha, beam)'s validation BLEU (greedy: beam 1; beam search: the largest beam of CHOICES);
    None until every candidate student has finished."""
    runs = {a: finished_results(student_run(out, task, a)) for a in CHOICES["alpha"]}
    if not all(runs.values()):
        return None
    return {(a, beam): r["metrics"][VALIDATION if beam == "1" else f"{VALIDATION}_beam"]["bleu"]
            for a, r in runs.items() for beam in ("1", WIDE)}


def chosen_lr(out: Path, task: str) -> str | None:
    scores = teacher_scores(out, task)
    return max(scores, key=scores.get) if scores else None


def chosen_recipe(out: Path, task: str, recorded: list[dict] = ()) -> cmlm.Recipe | None:
    """The task's final recipe (`final_recipe`) with its teacher learning rate, alpha and decoding chosen on
    validation: from its choice runs in OUT once they have finished (ties go to the earlier candidate of CHOICES),
    else the one `recorded` (the results file's rows) marks chosen, else None."""
    lr, scores = chosen_lr(out, task), student_scores(out, task)
    if lr is None or scores is None:
        return recorded_recipe(recorded, task)
    alpha, beam = max(scores, key=scores.get)
    return final_recipe(CHOICE[task]._replace(teacher_lr=lr, alpha=alpha, beam=beam), task)


def recorded_recipe(rows: list[dict], task: str) -> cmlm.Recipe | None:
    """The final recipe that a task's choice rows mark chosen: choice runs of an earlier invocation whose folders are
    gone (another machine's, a session's that ended), so the final runs go on without choosing again. None without
    them."""
    student = next((r for r in rows if r["task"] == task and r["method"] == "choice-cmlm" and r["chosen"]), None)
    if student is None:
        return None
    def spelled(k):  # as CHOICES spells it, so a run named from the rows has the flags of the one the choice named
        return next((c for c in CHOICES[k] if float(c) == student[k]), f"{student[k]:g}")
    return final_recipe(CHOICE[task]._replace(**{k: spelled(k) for k in ("teacher_lr", "alpha", "beam")}), task)


def choice_jobs(out: Path, task: str) -> list[Job]:
    """The choice runs of `task`: every candidate teacher; once they have finished, a C-MLM student from the chosen
    one at every alpha, decoded on validation with the largest beam too."""
    r = CHOICE[task]
    subset = ["--max-train-examples", r.pairs] if r.pairs else []
    jobs = [Job(f"{task}/choose/teacher-lr{lr}",
                ["cmlm", "--teacher", str(cmlm.adapt_dir()), "--task", task, "--epochs", r.teacher_epochs, "--lr", lr,
                 *subset, *SPLIT, "--out", str(teacher_run(out, task, lr)), *RESUMABLE],
                teacher_run(out, task, lr), ["adapt"]) for lr in CHOICES["teacher_lr"]]
    lr = chosen_lr(out, task)
    if lr is not None:
        jobs += [Job(f"{task}/choose/cmlm-alpha{a}",
                     ["seq2seq", "--task", task, "--method", "cmlm", "--teacher", str(teacher_run(out, task, lr)),
                      "--alpha", a, "--preset", cmlm.PRESET, "--epochs", r.epochs, *subset,
                      "--beam", WIDE, "--seed", str(CHOICE_SEED), *SPLIT,
                      "--out", str(student_run(out, task, a)), *RESUMABLE],
                     student_run(out, task, a), [f"{task}/choose/teacher-lr{lr}"]) for a in CHOICES["alpha"]]
    return jobs


def plan(out: Path, tasks: list[str], seeds: list[int], recorded: list[dict] = ()) -> list[Job]:
    """What can be named now: the choice runs (none for a task whose choice `recorded` holds and OUT does not), and
    benchmarks.cmlm's final plan for the tasks whose recipe is chosen. The final teacher and its soft targets need
    only the teacher's learning rate: named once that is chosen, they run beside the candidate students (and first,
    ahead of them); the command's runner names what a choice makes as soon as it is made (`run_all`'s `grow`)."""
    adapt = cmlm.jobs(out, [], [])  # the adapted teacher's stage alone, shared with benchmarks.quality and cmlm
    early, choosing, later = [], [], []
    for t in tasks:  # each task's recipe chosen in OUT read once: the runner names the plan again at each run's end
        made, marked = chosen_recipe(out, t), recorded_recipe(recorded, t)
        if recipe := made or marked:
            later += final_jobs(out, t, seeds, recipe)
        elif lr := chosen_lr(out, t):  # the final teacher and its soft targets alone
            early += final_jobs(out, t, [], final_recipe(CHOICE[t]._replace(teacher_lr=lr), t))
        if made or not marked:
            choosing += choice_jobs(out, t)
    return [*adapt, *early, *choosing, *later]


def choice_rows(out: Path, tasks: list[str]) -> list[dict]:
    """One row per candidate: the teachers' validation token accuracy, the students' validation BLEU per decoding;
    the chosen ones marked."""
    found = []
    for task in tasks:
        if (scores := teacher_scores(out, task)) is not None:
            best = max(scores, key=scores.get)  # `chosen_lr`'s choice, from the scores read once
            found += [{"task": task, "method": "choice-teacher", "seed": CHOICE_SEED, "metric": "token_accuracy",
                       "split": VALIDATION, "teacher_lr": float(lr), "value": round(v, 4),
                       "chosen": lr == best} for lr, v in scores.items()]
        if (scores := student_scores(out, task)) is not None:
            recipe = chosen_recipe(out, task)
            found += [{"task": task, "method": "choice-cmlm", "seed": CHOICE_SEED, "metric": "bleu",
                       "split": VALIDATION, "teacher_lr": float(recipe.teacher_lr), "alpha": float(a),
                       "beam": int(beam), "value": round(v, 2),
                       "chosen": (a, beam) == (recipe.alpha, recipe.beam)} for (a, beam), v in scores.items()]
    return found


def recipe_of(rows: list[dict], task: str) -> cmlm.Recipe | None:
    """A task's chosen recipe as its final rows record it (`cmlm.budget`'s fields), for a table printed from the
    results file alone."""
    r = next((r for r in rows if r["task"] == task and r["method"] in cmlm.METHODS), None)
    if r is None:
        return None

    def text(x):
        return f"{x:g}"
    return cmlm.Recipe(None if r["train_pairs"] is None else str(r["train_pairs"]), text(r["teacher_epochs"]),
                       text(r["epochs"]), text(r["teacher_lr"]), text(r["alpha"]), str(r["beam"]))


def table(results: list[dict]) -> str:
    """The choices (every candidate's validation score, the chosen marked), then benchmarks.cmlm's table of the
    final runs at the chosen recipes."""
    lines = ["| task | choice | candidate | validation score | chosen |", "|---|---|---|---|---|"]
    for r in (r for r in results if r["method"] in ORDER):
        what, candidate = (("teacher learning rate", f"{r['teacher_lr']:g}") if r["method"] == "choice-teacher" else
                           ("alpha and decoding", f"alpha {r['alpha']:g}, " +
                            ("greedy" if r["beam"] == 1 else f"beam {r['beam']}")))
        score = f"token accuracy {r['value']:.4f}" if r["metric"] == "token_accuracy" else f"BLEU {r['value']:.2f}"
        lines.append(f"| {r['task']} | {what} | {candidate} | {score} | {'yes' if r['chosen'] else ''} |")
    finals = [r for r in results if r["method"] not in ORDER]
    finals = [r for r in finals if r["method"] != "benchmark"] + replicated_walls(finals)
    sections = [table_at(finals, b) for b in budgets(finals)] or ["The final runs have not finished.\n"]
    return "\n".join(lines) + "\n\nThe final runs at the chosen recipes, dev scored once per model, budget by budget " \
                             "(declared before they ran):\n\n" + "\n".join(sections)


def replicated_walls(finals: list[dict]) -> list[dict]:
    """The wall rows of `finals` and of REPLICATIONS' files (each of these naming its file, `results`; one already
    among `finals` counted once), in the order they started: the last is the goal's measurement."""
    walls = [r for r in finals if r["method"] == "benchmark"]
    seen = {r["started"] for r in walls}
    for name in REPLICATIONS:
        path = REPO_ROOT / name
        walls += [{**r, "results": name} for r in (read_json(path) if path.is_file() else [])
                  if r["method"] == "benchmark" and r["started"] not in seen]
    return sorted(walls, key=lambda r: r["started"])


def budgets(finals: list[dict]) -> list[tuple]:
    """The final runs' budgets, (training pairs, students' epochs), as their rows record them: a budget of pairs
    first, every pair (None) last."""
    found = {(r["train_pairs"], r["epochs"]) for r in finals if r["method"] in cmlm.METHODS}
    return sorted(found, key=lambda b: (b[0] is None, b[0] or 0, b[1]))


def at_largest_budget(rows: list[dict]) -> list[dict]:
    """The final rows at the largest budget (every pair before any subset) among those whose C-MLM students have
    finished as many seeds as any budget's: what the task ships (a budget half run does not hide a finished one)."""
    finals = [r for r in rows if r["method"] not in ORDER]
    seeds = {b: len({r["seed"] for r in finals if r["method"] == "cmlm" and at_budget(r, b)}) for b in budgets(finals)}
    whole = [b for b in budgets(finals) if seeds[b] == max(seeds.values())]
    return [r for r in finals if at_budget(r, whole[-1])] if whole else []


def at_budget(r: dict, budget: tuple) -> bool:
    """Whether a final row belongs to a budget's runs: copying's (no budget) to every one, the wall row by its
    recipes."""
    if r["method"] == "benchmark":  # its tasks' budget (rows from before the field: its recipes')
        return ((r["train_pairs"], r["epochs"]) == budget if "epochs" in r else
                all((b["train_pairs"], b["epochs"]) == budget for b in r["recipes"].values()))
    return r["method"] == "copy" or (r.get("train_pairs"), r.get("epochs")) == budget


def budget_of(tasks: list[str]) -> dict:
    """A wall row's budget fields (in the rows' key, so that one budget's wall never replaces another's): the
    tasks' final budget where they share one (TASKS set to their recipes), else None."""
    found = {(b["train_pairs"], b["epochs"]) for b in map(cmlm.budget, tasks)}
    pairs, epochs = found.pop() if len(found) == 1 else (None, None)
    return {"train_pairs": pairs, "epochs": epochs}


def table_at(finals: list[dict], budget: tuple) -> str:
    """benchmarks.cmlm's table of the final runs at one budget, headed by it: the tasks whose students ran at it
    (copying's rows, which go with every budget, only for those)."""
    mine = [r for r in finals if at_budget(r, budget)]
    trained = {r["task"] for r in mine if r["method"] in cmlm.METHODS}
    mine = [r for r in mine if r["task"] is None or r["task"] in trained]
    pairs, epochs = budget
    kept = dict(cmlm.TASKS)
    try:
        cmlm.TASKS.update({t: recipe for t in cmlm.TASKS if (recipe := recipe_of(mine, t))})
        return (f"**{'Every training pair' if pairs is None else f'{pairs:,} training pairs'}, the students' "
                f"{epochs:g} epochs:**\n\n" + cmlm.table(mine, HOURS))
    finally:
        cmlm.TASKS.update(kept)


def order(r: dict):
    if r["method"] in ORDER:
        return (list(cmlm.TASKS).index(r["task"]), -1, ORDER.index(r["method"]), r.get("teacher_lr", 0),
                r.get("alpha", 0), r.get("beam", 0))
    return (len(cmlm.TASKS) if r["task"] is None else list(cmlm.TASKS).index(r["task"]), *cmlm.order(r)[1:])


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.cmlm_validation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/cmlm_validation", "docs/results/cmlm_validation.json", list(cmlm.TASKS), cmlm.TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    kept = dict(cmlm.TASKS)
    recorded = read_json(REPO_ROOT / args.results) if (REPO_ROOT / args.results).is_file() else []

    def planned():
        return plan(out, args.tasks, args.seeds, recorded)

    def found():  # TASKS at each task's chosen recipe, for the helpers of benchmarks.cmlm that read it
        ready = {t: recipe for t in args.tasks if (recipe := chosen_recipe(out, t, recorded))}
        cmlm.TASKS.update(kept)
        cmlm.TASKS.update(ready)
        # the choices made in OUT and the final runs, from nothing (not a run that followed recorded choices)
        wall = whole_plan_wall(out / "logs", plan(out, args.tasks, args.seeds))
        return choice_rows(out, args.tasks) + [
            {**r, "selected_on": VALIDATION} for t in ready
            for r in cmlm.rows(final(out, cmlm.TASKS[t], t), [t], args.seeds) if r["method"] != "benchmark"
        ] + ([{**cmlm.wall_row(wall, args.tasks), **budget_of(args.tasks), "selected_on": VALIDATION}]
             if wall else [])

    try:
        return comparison(args, planned, found, order, table,
                          key=("task", "method", "seed", "metric", "teacher_lr", "alpha", "beam", "train_pairs",
                               "epochs"), grows=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        cmlm.TASKS.update(kept)


if __name__ == "__main__":
    sys.exit(main())
