"""The demo's choices, made again on a validation split (issue 74): configs/demo.json's packaged-teacher mode fixes
three things that were picked on SST-2 dev, the set the demo then reports: the SST-2 teacher's epochs
(teacher-tasks), the layer-subset student's epochs and learning rate (finetune-subset) and which student the demo
ships (ship). This makes each choice again as `ship` makes its own, on a validation split carved from the demo's
10,000 SST-2 training examples (`finetune --select-on validation --eval-every 0 --skip-dev`: the last step's model
scored on validation; dev is never read), and says whether the file's values are the ones validation picks.

    python -m benchmarks.demo_choices                  # seeds 0-2, two runs at a time; resumable
    python -m benchmarks.demo_choices --table --write  # the table into docs/demo.md

Declared before any run, in the order the file's description says they were made:
1. the teacher's epochs, of TEACHER_EPOCHS: each teacher teaches the layer-subset student with the file's own
   finetune-subset recipe; the choice is the epochs whose student has the best mean validation accuracy over the
   seeds (the file's criterion: "because the student it teaches gained by it");
2. with that teacher, the layer-subset student's (epochs, learning rate), of SUBSET_RECIPES (the grid the file's
   description reports), by the same rule;
3. what the demo ships: that student, or the PKT student with task distillation (`student_task_kd`, the file's
   student_lr) taught by the same teacher, whichever has the better mean validation accuracy.
Ties (equal means) go to the fewer epochs, the first recipe listed, the subset student. Every run's flags but these
are the demo's (benchmarks.teacher_value's, from configs/demo.json), one thread each.

Rows (docs/results/demo_choices.json): task sst2, method (teacher, subset_task_kd, student_task_kd), step (1 or 2),
teacher_epochs, option (the run's recipe), seed, metric accuracy on split "validation", value, train_seconds, host.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.command import comparison, comparison_flags
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import mean_std_cell
from benchmarks.teacher_value import ADAPT, INIT_SUBSET, SETTINGS, STUDENT_LR, TASKS, TEACHER_LR, TRANSFER
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import flag_text
from mobilekd.run_config import flags
from mobilekd.rundir import finished_results, trained_on

TASK = "sst2"
TEACHER_EPOCHS = (1, 2, 3)
SUBSET_RECIPES = ((1, 1e-4), (1, 2e-4), (1, 4e-4), (2, 2e-4), (2, 3e-4), (2, 4e-4))  # (epochs, lr)
# every run chooses on validation and never reads dev, in place of the demo's --eval-every 0 alone
HONEST = ["--select-on", "validation", "--eval-every", "0", "--skip-dev"]
# finetune-subset's flags but the two this chooses (its method: logit KD)
SUBSET_FLAGS = flags({k: v for k, v in SETTINGS["finetune-subset"].items() if k not in ("--epochs", "--lr")})


def configured() -> dict:
    """The three values configs/demo.json holds today."""
    recipe = SETTINGS["finetune-subset"]
    epochs = SETTINGS["teacher-tasks"].get(TASK, {}).get("--epochs", SETTINGS["tasks"][TASK].get("--epochs"))
    return {"teacher_epochs": int(epochs), "subset": (float(recipe["--epochs"]), float(recipe["--lr"])),
            "ship": SETTINGS["ship"]}


def recipe_name(epochs: float, lr: float) -> str:
    return f"{epochs:g} epochs at {flag_text(lr)}"


def run_dir(out: Path, seed: int, method: str, teacher_epochs: int, option: str = "") -> Path:
    return out / f"seed{seed}" / f"teacher-e{teacher_epochs}" / (method + (f"-{option}" if option else ""))


def _slug(recipe: tuple[float, float]) -> str:
    return f"e{recipe[0]:g}-lr{flag_text(recipe[1])}"


def jobs(out: Path, seeds: list[int]) -> list[Job]:
    """Step 1's runs; once they are done (`chosen_teacher`), step 2's: the plan grows as its choice is made
    (benchmarks.command.comparison runs it again)."""
    teacher, subset, pkt = out / "teacher", out / "students" / "subset", out / "students" / "pkt"
    plan = [Job("adapt", ["train-teacher", *ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("init/subset", ["init", str(teacher), str(subset), *INIT_SUBSET], subset, ["adapt"])]
    common = ["finetune", "--task", TASK, *TASKS[TASK], *HONEST, *RESUMABLE]

    def teacher_job(seed: int, e: int) -> Job:
        d = run_dir(out, seed, "teacher", e)
        return Job(f"{seed}/teacher/e{e}", [*common, "--model", str(teacher), "--lr", TEACHER_LR, "--epochs", str(e),
                                            "--seed", str(seed), "--out", str(d)], d, ["adapt"])

    def subset_job(seed: int, e: int, recipe: tuple[float, float]) -> Job:
        d = run_dir(out, seed, "subset_task_kd", e, _slug(recipe))
        return Job(f"{seed}/subset/e{e}/{_slug(recipe)}",
                   [*common, "--model", str(subset), "--teacher", str(run_dir(out, seed, "teacher", e)),
                    *SUBSET_FLAGS, "--epochs", f"{recipe[0]:g}", "--lr", flag_text(recipe[1]), "--seed", str(seed),
                    "--out", str(d)], d, ["init/subset", f"{seed}/teacher/e{e}"])

    mine = configured()["subset"]
    for seed in seeds:
        for e in TEACHER_EPOCHS:
            plan += [teacher_job(seed, e), subset_job(seed, e, mine)]
    e = chosen_teacher(out, seeds)
    if e is None:
        return plan
    plan.append(Job("distill/pkt", ["distill", *TRANSFER, "--strategy", "pkt", "--teacher", str(teacher), "--out",
                                    str(pkt), *RESUMABLE], pkt, ["adapt"]))
    for seed in seeds:
        plan += [subset_job(seed, e, recipe) for recipe in SUBSET_RECIPES if recipe != mine]
        d = run_dir(out, seed, "student_task_kd", e)
        plan.append(Job(f"{seed}/student_task_kd/e{e}", [*common, "--model", str(pkt), "--lr", STUDENT_LR, "--teacher",
                                                         str(run_dir(out, seed, "teacher", e)), "--seed", str(seed),
                                                         "--out", str(d)], d, ["distill/pkt", f"{seed}/teacher/e{e}"]))
    return plan


def validation(run: Path) -> tuple[float, dict] | None:
    """A finished run's validation accuracy (the last step's model: --eval-every 0) and its results."""
    r = finished_results(run)
    return (r["metrics"]["validation"]["accuracy"], r) if r else None


def chosen_teacher(out: Path, seeds: list[int]) -> int | None:
    """Step 1's choice once all its runs are done: the teacher epochs whose student (the file's recipe) has the best
    mean validation accuracy; None before."""
    mine = _slug(configured()["subset"])
    means = {}
    for e in TEACHER_EPOCHS:
        got = [validation(run_dir(out, s, "subset_task_kd", e, mine)) for s in seeds]
        if any(g is None for g in got):
            return None
        means[e] = statistics.mean(g[0] for g in got)
    return max(TEACHER_EPOCHS, key=lambda e: (means[e], -e))


def rows(out: Path, seeds: list[int]) -> list[dict]:
    found = []
    for seed in seeds:
        for folder in sorted((out / f"seed{seed}").glob("teacher-e*/*")):
            got = validation(folder)
            if got is None:
                continue
            value, r = got
            method, _, option = folder.name.partition("-")
            e = int(folder.parent.name.removeprefix("teacher-e"))
            step = 1 if method == "teacher" or (method == "subset_task_kd" and
                                                 option == _slug(configured()["subset"])) else 2
            found.append({"task": TASK, "method": method, "step": step, "teacher_epochs": e,
                          "option": recipe_name(*_parse(option)) if option else (
                              f"{e} epochs at {flag_text(r['lr'])}" if method == "teacher" else
                              f"the file's: {flag_text(r['lr'])}"),
                          "seed": seed, "metric": "accuracy", "split": "validation", "value": round(value, 4),
                          "train_examples": r["train_examples"], "train_seconds": r["wall_seconds"],
                          **trained_on(r)})
    return found


def _parse(slug: str) -> tuple[float, float]:
    e, lr = slug.split("-lr")
    return float(e[1:]), float(lr)


def choices(results: list[dict]) -> list[tuple[str, str, str, dict]]:
    """Each step's choice from the rows: (what, validation's pick, the file's value, {option: mean})."""
    ours = configured()
    students = [r for r in results if r["method"] == "subset_task_kd"]
    mine = recipe_name(*ours["subset"])

    def means(rows, by):
        seeds = {}
        for r in rows:
            seeds.setdefault(by(r), []).append(r["value"])
        return seeds

    step1 = means([r for r in students if r["option"] == mine], lambda r: r["teacher_epochs"])
    if len(step1) < len(TEACHER_EPOCHS) or len({len(v) for v in step1.values()}) != 1:
        return []
    e = max(TEACHER_EPOCHS, key=lambda k: (statistics.mean(step1[k]), -k))
    found = [("the teacher's epochs (teacher-tasks)", str(e), str(ours["teacher_epochs"]), step1)]
    order = [recipe_name(*x) for x in SUBSET_RECIPES]
    step2 = means([r for r in students if r["teacher_epochs"] == e], lambda r: r["option"])
    ship = means([r for r in results if r["method"] == "student_task_kd" and r["teacher_epochs"] == e],
                 lambda r: "student_task_kd")
    if len(step2) < len(order) or not ship or len({len(v) for v in [*step2.values(), *ship.values()]}) != 1:
        return found
    best = max(order, key=lambda k: (statistics.mean(step2[k]), -order.index(k)))
    found.append(("the layer-subset student's recipe (finetune-subset)", best, mine, step2))
    pick = "subset_task_kd" if statistics.mean(step2[best]) >= statistics.mean(ship["student_task_kd"]) \
        else "student_task_kd"
    found.append(("the student the demo ships (ship)", pick, ours["ship"], {"subset_task_kd": step2[best], **ship}))
    return found


def table(results: list[dict]) -> str:
    lines = ["| choice | option | validation accuracy, mean over seeds | picked |", "|---|---|---|---|"]
    made = choices(results)
    for what, pick, _, options in made:
        for option, values in options.items():
            picked = "**yes**" if str(option) == pick else ""
            lines.append(f"| {what} | {option} | {mean_std_cell(values)} | {picked} |")
    teachers = {}
    for r in results:
        if r["method"] == "teacher":
            teachers.setdefault(r["teacher_epochs"], []).append(r["value"])
    verdicts = [f"{what}: validation picks {pick}, configs/demo.json has {ours}: "
                + ("the same" if pick == ours else "**they differ**") for what, pick, ours, _ in made]
    hosts = sorted({r["host"] for r in results if r.get("host")})
    return "\n".join(lines) + (
        "\n\nThe teachers themselves on validation: "
        + "; ".join(f"{e} epochs {mean_std_cell(v)}" for e, v in sorted(teachers.items())) + ".\n\n"
        + "".join(f"- {v}\n" for v in verdicts)
        + ("- not every choice is made yet: run `python -m benchmarks.demo_choices` until it has\n"
           if len(made) < 3 else "")
        + f"\nSST-2, the demo's {SETTINGS['tasks'][TASK]['--max-train-examples']:,} training examples less a "
          f"validation split of a tenth carved from them (seeded by the run's seed); dev never read; on "
          f"{', '.join(hosts)}, one thread a run.\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo_choices", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/demo_choices", "docs/results/demo_choices.json")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    methods = ("teacher", "subset_task_kd", "student_task_kd")
    return comparison(args, lambda: jobs(out, args.seeds), lambda: rows(out, args.seeds),
                      lambda r: (r["seed"], r["teacher_epochs"], methods.index(r["method"]), r["option"]), table,
                      key=("task", "method", "teacher_epochs", "option", "seed", "metric"))


if __name__ == "__main__":
    sys.exit(main())
