"""The demo's choices, made again on a validation split (issue 74): configs/demo.json's packaged-teacher mode fixes
three things that were picked on SST-2 dev, the set the demo then reports: the layer-subset student's epochs and
learning rate (finetune-subset), the SST-2 teacher's epochs (teacher-tasks) and which student the demo ships
(ship). This makes each choice again as `ship` makes its own, on a validation split carved from the demo's 10,000
SST-2 training examples (`finetune --select-on validation --eval-every 0 --skip-dev`: the last step's model scored
on validation; dev is never read), and says whether the file's values are the ones validation picks.

    python -m benchmarks.demo_choices                  # seeds 0-2, two runs at a time; resumable
    python -m benchmarks.demo_choices --table --write  # the table into docs/demo.md

Declared before any run, in the order the file's history made them (the recipe and the student to ship under a
one-epoch teacher, then the teacher's epochs), each by the best mean validation accuracy over the seeds:
1. the layer-subset student's (epochs, learning rate), of SUBSET_RECIPES (the grid the file's description
   reports), taught by a one-epoch teacher;
2. the teacher's epochs, of TEACHER_EPOCHS, by the layer-subset student of step 1's recipe that each teaches (the
   file's criterion: "because the student it teaches gained by it");
3. what the demo ships, of every student it trains: that student, the PKT student with and without task
   distillation from that teacher (`student_task_kd`, `student`), and its from-scratch twin (`scratch`).
Ties go to the first option listed. Every run's flags but these are the demo's (benchmarks.teacher_value's, from
configs/demo.json), one thread each. The plan grows as the choices are made (benchmarks.command.comparison runs it
again), and the plan and the table make each choice by one function (`choices`) from the same rows.

Rows (docs/results/demo_choices.json): task sst2, method (teacher, subset_task_kd, student_task_kd, student,
scratch), teacher_epochs (the teacher that taught it; none for the two untaught students), option (the run's
recipe), seed, metric accuracy on split "validation", value, train_seconds, host.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.command import comparison, comparison_flags
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import mean_std_cell
from benchmarks.teacher_value import (ADAPT, FINETUNE, INIT_SUBSET, SETTINGS, STUDENT, STUDENT_LR, TASKS, TEACHER_LR,
                                      TEACHER_TASKS, TRANSFER)
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import flag_text
from mobilekd.run_config import flags
from mobilekd.rundir import finished_results, trained_on

TASK = "sst2"
SUBSET_RECIPES = ((1, 1e-4), (1, 2e-4), (1, 4e-4), (2, 2e-4), (2, 3e-4), (2, 4e-4))  # (epochs, lr)
FIRST_TEACHER = 1  # the teacher's epochs while the recipe and the student to ship were first picked
TEACHER_EPOCHS = (1, 2, 3)
SHIPPABLE = ("subset_task_kd", "student_task_kd", "student", "scratch")  # scripts/demo.sh's names for its students
# every run chooses on validation and never reads dev (after the demo's own fine-tuning flags, --eval-every 0)
HONEST = ["--select-on", "validation", "--eval-every", "0", "--skip-dev"]
# finetune-subset's flags but the two this chooses (its method: logit KD)
SUBSET_FLAGS = flags({k: v for k, v in SETTINGS["finetune-subset"].items() if k not in ("--epochs", "--lr")})
WHAT = {"recipe": "the layer-subset student's recipe (finetune-subset)",
        "teacher": "the teacher's epochs (teacher-tasks)", "ship": "the student the demo ships (ship)"}


def configured() -> dict:
    """The three values configs/demo.json holds today, as the options are named here."""
    recipe = SETTINGS["finetune-subset"]
    epochs = SETTINGS["teacher-tasks"].get(TASK, {}).get("--epochs", SETTINGS["tasks"][TASK].get("--epochs"))
    return {"recipe": recipe_name(float(recipe["--epochs"]), float(recipe["--lr"])), "teacher": str(int(epochs)),
            "ship": SETTINGS["ship"]}


def epochs_text(epochs: float) -> str:
    return f"{epochs:g} epoch{'s' if epochs != 1 else ''}"


def recipe_name(epochs: float, lr: float) -> str:
    return f"{epochs_text(epochs)} at {flag_text(lr)}"


def _slug(recipe: tuple[float, float]) -> str:
    return f"e{recipe[0]:g}-lr{flag_text(recipe[1])}"


RECIPES = {recipe_name(*r): r for r in SUBSET_RECIPES}


def run_dir(out: Path, seed: int, method: str, teacher_epochs: int | None = None, recipe=None) -> Path:
    taught = f"teacher-e{teacher_epochs}" if teacher_epochs else "untaught"
    return out / f"seed{seed}" / taught / (method + (f"-{_slug(recipe)}" if recipe else ""))


def jobs(out: Path, seeds: list[int]) -> list[Job]:
    """The runs of the choices made so far (`choices` over the finished runs' rows): step 1's, with the untaught
    students; then step 2's once step 1 has chosen; then step 3's."""
    teacher, subset, pkt = out / "teacher", out / "students" / "subset", out / "students" / "pkt"
    plan = [Job("adapt", ["train-teacher", *ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("init/subset", ["init", str(teacher), str(subset), *INIT_SUBSET], subset, ["adapt"]),
            Job("distill/pkt", ["distill", *TRANSFER, "--strategy", "pkt", "--teacher", str(teacher), "--out",
                                str(pkt), *RESUMABLE], pkt, ["adapt"])]
    common = ["finetune", "--task", TASK, *TASKS[TASK], *FINETUNE, *HONEST, *RESUMABLE]

    def ft(seed, method, model, needs, *extra, e=None, recipe=None) -> Job:
        d = run_dir(out, seed, method, e, recipe)
        name = "/".join([str(seed), method, *([f"e{e}"] if e else []), *([_slug(recipe)] if recipe else [])])
        return Job(name, [*common, "--model", str(model), *extra, "--seed", str(seed), "--out", str(d)], d, needs)

    def teacher_job(seed, e):
        return ft(seed, "teacher", teacher, ["adapt"], "--lr", TEACHER_LR, *TEACHER_TASKS.get(TASK, []),
                  "--epochs", str(e), e=e)

    def subset_job(seed, e, recipe):
        return ft(seed, "subset_task_kd", subset, ["init/subset", f"{seed}/teacher/e{e}"],
                  "--teacher", str(run_dir(out, seed, "teacher", e)), *SUBSET_FLAGS, "--epochs", f"{recipe[0]:g}",
                  "--lr", flag_text(recipe[1]), e=e, recipe=recipe)

    for seed in seeds:
        scratch = out / "students" / f"scratch_seed{seed}"
        plan += [teacher_job(seed, FIRST_TEACHER), *(subset_job(seed, FIRST_TEACHER, r) for r in SUBSET_RECIPES),
                 ft(seed, "student", pkt, ["distill/pkt"], "--lr", STUDENT_LR),
                 Job(f"init/{seed}", ["init", STUDENT, str(scratch), "--seed", str(seed)], scratch),
                 ft(seed, "scratch", scratch, [f"init/{seed}"], "--lr", STUDENT_LR)]
    made = choices(rows(out, seeds), seeds)
    if "recipe" in made:
        recipe = RECIPES[made["recipe"][0]]
        for seed in seeds:
            for e in TEACHER_EPOCHS:
                if e != FIRST_TEACHER:
                    plan += [teacher_job(seed, e), subset_job(seed, e, recipe)]
    if "teacher" in made:
        e = int(made["teacher"][0])
        plan += [ft(seed, "student_task_kd", pkt, ["distill/pkt", f"{seed}/teacher/e{e}"], "--lr", STUDENT_LR,
                    "--teacher", str(run_dir(out, seed, "teacher", e)), e=e) for seed in seeds]
    return plan


def rows(out: Path, seeds: list[int]) -> list[dict]:
    """A row per finished run: its validation accuracy (the last step's model)."""
    found = []
    for seed in seeds:
        for folder in sorted(p for p in (out / f"seed{seed}").glob("*/*") if p.is_dir()):
            r = finished_results(folder)
            if r is None:
                continue
            method, _, slug = folder.name.partition("-")
            e = int(folder.parent.name.removeprefix("teacher-e")) if folder.parent.name != "untaught" else None
            option = (recipe_name(*_parse(slug)) if slug else epochs_text(e) if method == "teacher"
                      else f"{flag_text(r['lr'])}, the file's")
            found.append({"task": TASK, "method": method, "teacher_epochs": e, "option": option, "seed": seed,
                          "metric": "accuracy", "split": "validation",
                          "value": round(r["metrics"]["validation"]["accuracy"], 4),
                          "train_examples": r["train_examples"], "train_seconds": r["wall_seconds"], **trained_on(r)})
    return found


def _parse(slug: str) -> tuple[float, float]:
    e, lr = slug.split("-lr")
    return float(e[1:]), float(lr)


def choose(options: dict[str, dict[int, float]], seeds: set[int]) -> str | None:
    """The option of the best mean over `seeds` (ties: the first listed); None until every option has them all."""
    if not seeds or any(not seeds <= set(v) for v in options.values()):
        return None
    return max(options, key=lambda k: (round(statistics.mean(options[k][s] for s in seeds), 9),
                                       -list(options).index(k)))


def choices(results: list[dict], seeds: list[int] | None = None) -> dict[str, tuple[str, dict]]:
    """The choices made so far from the rows, in order: {"recipe" | "teacher" | "ship": (validation's pick,
    {option: {seed: validation accuracy}})}; a step is made once every option has a row on every seed (`seeds`, by
    default those of its rows)."""
    def values(method, e, by) -> dict[str, dict[int, float]]:
        found = {}
        for r in results:
            if r["method"] == method and r["teacher_epochs"] == e:
                found.setdefault(by(r), {})[r["seed"]] = r["value"]
        return found

    step1 = values("subset_task_kd", FIRST_TEACHER, lambda r: r["option"])
    step1 = {name: step1.get(name, {}) for name in RECIPES}
    seeds = set(seeds) if seeds is not None else {s for v in step1.values() for s in v}
    made = {}
    pick = choose(step1, seeds)
    if pick is None:
        return made
    def over(options):  # the seeds chosen on, alone
        return {k: {s: v[s] for s in sorted(seeds)} for k, v in options.items()}

    made["recipe"] = pick, over(step1)
    step2 = {str(e): values("subset_task_kd", e, lambda r: r["option"]).get(pick, {}) for e in TEACHER_EPOCHS}
    e = choose(step2, seeds)
    if e is None:
        return made
    made["teacher"] = e, over(step2)
    taught = {"subset_task_kd": step2[e], **{m: values(m, int(e) if m == "student_task_kd" else None,
                                                       lambda r: "").get("", {}) for m in SHIPPABLE[1:]}}
    ship = choose(taught, seeds)
    if ship is not None:
        made["ship"] = ship, over(taught)
    return made


def table(results: list[dict]) -> str:
    made, ours = choices(results), configured()
    lines = ["| choice | option | validation accuracy | picked |", "|---|---|---|---|"]
    for step, (pick, options) in made.items():
        for option, by_seed in options.items():
            lines.append(f"| {WHAT[step]} | {option} | {mean_std_cell(list(by_seed.values()))} | "
                         f"{'**yes**' if option == pick else ''} |")
    teachers = {}
    for r in results:
        if r["method"] == "teacher":
            teachers.setdefault(r["option"], []).append(r["value"])
    hosts = sorted({r["host"] for r in results if r.get("host")})
    verdicts = [f"- {WHAT[step]}: validation picks {pick}, configs/demo.json has {ours[step]}: "
                + ("the same" if pick == ours[step] else "**they differ**") for step, (pick, _) in made.items()]
    if len(made) < len(WHAT):
        verdicts.append("- not every choice is made yet: run `python -m benchmarks.demo_choices` until it has")
    return "\n".join([*lines, "", *verdicts]) + "\n" + (
        "\nThe teachers themselves on validation: " + "; ".join(f"{k} {mean_std_cell(v)}" for k, v in teachers.items())
        + "." if teachers else "") + (
        f"\nSST-2, the demo's {SETTINGS['tasks'][TASK]['--max-train-examples']:,} training examples less a validation "
        f"split of a tenth carved from them (seeded by the run's seed); dev never read; on {', '.join(hosts)}, one "
        f"thread a run, two runs at a time.\n" if hosts else "")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo_choices", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/demo_choices", "docs/results/demo_choices.json")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    methods = ("teacher", *SHIPPABLE)
    return comparison(args, lambda: jobs(out, args.seeds), lambda: rows(out, args.seeds),
                      lambda r: (r["seed"], r["teacher_epochs"] or 0, methods.index(r["method"]), r["option"]), table,
                      key=("task", "method", "teacher_epochs", "option", "seed", "metric"))


if __name__ == "__main__":
    sys.exit(main())
