"""The source documents' distillation family on one teacher, one budget and one latency axis (issue 16): DistilBERT,
BERT-PKD (Skip and Last) and TinyBERT (with and without data augmentation) beside plain fine-tuning (FT) and logit
KD of the same student and the MobileBERT (PKT) student, over seeds and GLUE tasks; one row per run and dev metric
to docs/results/methods.json, with each student's .tflite size, host latency and Pixel 4 estimate; a Markdown
table, the source documents' orderings as measured (each judged against the seeds' noise), and (--plot) a plot of
dev score against estimated Pixel 4 latency, docs/methods.png.

    python -m benchmarks.methods                           # everything (over 7 hours on 2 cores, README), resumable
    python -m benchmarks.methods --seeds 0 --tasks sst2 mrpc
    python -m benchmarks.methods --collect                 # write the finished runs' rows now, run nothing
    python -m benchmarks.methods --table                   # print the table from the file
    python -m benchmarks.methods --table --write --plot    # and put it into its page, draw docs/methods.png

The teacher is issue 13's: all-MiniLM-L6-v2 adapted by `train-teacher --init-from` (its run, its PKT student and
its fine-tuned SST-2, STS-B and MRPC teachers are reused from `--stages`, runs/teacher_value, and made there if
missing); one fine-tuned teacher per task (seed 0) serves every method and seed, its outputs over the training
set cached once. Every student fine-tunes on the same 1,000 training examples per task (drawn once, seed 0), for
3 epochs (94 steps of 32), at the same learning rate, and is scored on the full dev set after its last step (the
budget: at 2,000 examples and 4 augmented copies the plan measured well over 3 hours on 2 cores). Task-agnostic
distillations run once, each for 500 steps of 32 sequences of 64 tokens on the shipped corpora, as issue 13's PKT
student was (6 x 50 layer steps + 200 PD steps):

    bert3        the teacher's first 3 of 6 layers (BERT-PKD's initialisation): FT, KD, PKD-Skip, PKD-Last
    distilbert   the teacher's layers 0, 3, 5 (DistilBERT's spread), distilled by DistilBERT's triple loss, then FT
    tinybert4    TinyBERT_4's shape scaled to the teacher (`tinybert4_h156`), general distillation, then TinyBERT's
                 two-step task distillation, without and with augmentation (N = 2 new copies per example, not the
                 official 20-30: the budget; candidates from the adapted teacher's MLM, as `data.augment` says)
    mobilebert   issue 13's PKT student (`mobilebert_h384`), FT

The 4-layer students of the teacher's width that issue 16 also names are not run: PKD-Skip has no every-other
layer map from 6 teacher layers onto 4, and the budget holds one shape per method.

At the full training sets (issue 34's budgets), `python -m benchmarks.quality --methods family` runs BERT-PKD's and
DistilBERT's students beside that benchmark's TinyBERT and MobileBERT runs, and its report judges ORDERINGS over
them (`quality.family_orderings`, docs/quality.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from benchmarks import teacher_value
from benchmarks.command import comparison, comparison_flags
from benchmarks.pages import method_table
from benchmarks.rows import finetune_rows
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import VERDICTS, columns, judged_cell, metric_rank, paired_differences, row_order, values
from mobilekd.fileio import REPO_ROOT, read_json, save_png

TASKS = {"sst2": "64", "mrpc": "128", "rte": "128", "stsb": "64", "cola": "64"}  # --max-len per task
STUDENT_FT = ["--max-train-examples", "1000", "--subset-seed", "0", "--epochs", "3", "--eval-every", "0"]
STUDENT_LR = teacher_value.STUDENT_LR
# the fine-tuned teachers: issue 13's for the tasks it ran, new ones for the others (CoLA: 3 epochs on 4,000
# examples, since one epoch left it at Matthews correlation 0)
NEW_TEACHERS = {"cola": ["--max-train-examples", "4000", "--epochs", "3", "--max-len", "64"],
                "rte": ["--epochs", "3", "--max-len", "128"]}
AUGMENT = "2"
GENERAL = {"distilbert": ["--layer-steps", "100", "--pd-steps", "200"],  # 3 x 100 + 200 = 500 steps
           "tinybert": ["--layer-steps", "75", "--pd-steps", "200"]}  # 4 x 75 + 200 = 500 steps
# method -> (student, finetune flags beyond the shared ones, whether it learns from the fine-tuned teacher)
METHODS = {
    "teacher": ("teacher", [], False),
    "ft": ("bert3", ["--method", "ft"], False),
    "kd": ("bert3", ["--method", "kd"], True),
    "pkd-skip": ("bert3", ["--method", "pkd-skip"], True),
    "pkd-last": ("bert3", ["--method", "pkd-last"], True),
    "distilbert": ("distilbert", ["--method", "ft"], False),
    "tinybert": ("tinybert4", ["--method", "tinybert"], True),
    "tinybert-aug": ("tinybert4", ["--method", "tinybert", "--augment", AUGMENT], True),
    "mobilebert": ("mobilebert", ["--method", "ft"], False),
}
STUDENTS = {"teacher": "all-MiniLM-L6-v2 (adapted)", "bert3": "3 x 384 (teacher's first layers)",
            "distilbert": "3 x 384 (DistilBERT)", "tinybert4": "tinybert4_h156", "mobilebert": "mobilebert_h384"}
EXPORTED = {"teacher": "teacher", "bert3": "ft", "distilbert": "distilbert", "tinybert4": "tinybert",
            "mobilebert": "mobilebert"}  # student -> the method whose SST-2 seed-0 model is exported and timed


def teacher_dir(out: Path, stages: Path, task: str, seed: int = 0) -> Path:
    if task in NEW_TEACHERS:
        return out / "teachers" / (task if seed == 0 else f"{task}_seed{seed}")
    return teacher_value.finetune_dir(stages, task, "teacher", seed)


def teacher_job(out: Path, stages: Path, task: str, seed: int = 0) -> Job:
    """The teacher of `task` fine-tuned from the adapted teacher with `seed`: issue 13's run (and flags) for the
    tasks it has, NEW_TEACHERS' flags for the others. Seed 0's serves every student here; the retired
    benchmarks.multitask made ensembles of seeds 0-2 (docs/retired.md)."""
    name = f"{task}/teacher" + (f"/{seed}" if seed else "")
    if task not in NEW_TEACHERS:  # teacher_value's own job, in its directory under `stages`
        job = next(j for j in teacher_value.jobs(stages, [task], [seed]) if j.name == f"{task}/teacher/{seed}")
        return dataclasses.replace(job, name=name)
    t = teacher_dir(out, stages, task, seed)
    return Job(name, ["finetune", "--task", task, *NEW_TEACHERS[task], "--model", str(stages / "teacher"), "--lr",
                      teacher_value.TEACHER_LR, "--seed", str(seed), "--eval-every", "0", "--out", str(t),
                      *RESUMABLE], t, ["adapt"])


def run_dir(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "finetune" / task / method / f"seed{seed}"


def family_stages(teacher: Path, bert3: Path, spread3: Path, distilbert: Path, steps: list[str]) -> list[Job]:
    """BERT-PKD's and DistilBERT's starts from the adapted `teacher`: its first 3 layers (`init/bert3`), its layers
    0, 3 and 5 (`init/spread3`), and those distilled by DistilBERT's triple loss for `steps` (`distill/distilbert`).
    Shared with benchmarks.quality, which runs them at its own steps."""
    return [Job("init/bert3", ["init", str(teacher), str(bert3), "--layers", "first:3"], bert3, ["adapt"]),
            Job("init/spread3", ["init", str(teacher), str(spread3), "--layers", "spread:3"], spread3, ["adapt"]),
            Job("distill/distilbert", ["distill", "--teacher", str(teacher), "--student", str(spread3), "--strategy",
                                       "distilbert", *steps, "--out", str(distilbert), *RESUMABLE], distilbert,
                ["adapt", "init/spread3"])]


def jobs(out: Path, stages: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    """Every run in the order it should start: the shared stages, then seed by seed (partial results are whole
    seeds), then the exports and the latency report."""
    base = stages / "teacher"
    plan = [j for j in teacher_value.jobs(stages, [], [], stages) if j.name in ("adapt", "distill/pkt")]
    s = out / "students"
    students = {"teacher": None, "bert3": s / "bert3", "distilbert": s / "distilbert", "tinybert4": s / "tinybert4",
                "mobilebert": stages / "students" / "pkt"}
    plan += [*family_stages(base, s / "bert3", s / "spread3", students["distilbert"], GENERAL["distilbert"]),
             Job("distill/tinybert", ["distill", "--teacher", str(base), "--student", "tinybert4_h156", "--strategy",
                                      "tinybert", "--layer-map", "uniform", *GENERAL["tinybert"], "--out",
                                      str(students["tinybert4"]), *RESUMABLE], students["tinybert4"], ["adapt"])]
    needs = {"bert3": ["init/bert3"], "distilbert": ["distill/distilbert"], "tinybert4": ["distill/tinybert"],
             "mobilebert": ["distill/pkt"]}
    for seed in seeds:
        for task in tasks:
            if seed == seeds[0]:  # each task's teacher just before its first runs, so that others start meanwhile
                plan.append(teacher_job(out, stages, task))
            for method, (student, flags, taught) in METHODS.items():
                if method == "teacher":
                    continue
                d = run_dir(out, task, method, seed)
                extra = ["--teacher", str(teacher_dir(out, stages, task))] if taught else []
                extra += ["--augment-model", str(base)] if "--augment" in flags else []
                plan.append(Job(f"{task}/{method}/{seed}", [
                    "finetune", "--task", task, "--model", str(students[student]), *STUDENT_FT, "--max-len",
                    TASKS[task], "--lr", STUDENT_LR, "--seed", str(seed), *flags, *extra, "--out", str(d),
                    *RESUMABLE], d, needs[student] + ([f"{task}/teacher"] if taught else [])))
            if seed == 0 and task == "sst2":  # the exports and the latency report as soon as their models exist
                plan += measurements(out, stages)
    return plan


def measurements(out: Path, stages: Path) -> list[Job]:
    """Each student's SST-2 seed-0 model exported (fp32, parity on the whole dev set), then all timed in one run."""
    tflite, plan = {}, []
    for student, method in EXPORTED.items():
        model = teacher_dir(out, stages, "sst2") if method == "teacher" else run_dir(out, "sst2", method, 0)
        tflite[student] = out / "tflite" / student
        plan.append(Job(f"export/{student}", ["export", "--model", str(model), "--quantize", "none",
                                              "--parity-examples", "872", "--out", str(tflite[student])],
                        tflite[student], [f"sst2/{method}" if method == "teacher" else f"sst2/{method}/0"]))
    plan.append(Job("latency", ["latency", "--models", "--quantize", "none", "--threads", "1", "2", "--devices",
                                "pixel4", "--out", str(out / "latency"), "--tflite",
                                *(f"{k}={v / 'model_none.tflite'}" for k, v in tflite.items())],
                    out / "latency", [f"export/{k}" for k in tflite]))
    return plan


def measured(out: Path) -> dict[str, dict]:
    """Per student: its .tflite's size, host latency (1 thread) and Pixel 4 estimate, when measured."""
    report = out / "latency" / "report.json"
    rows = read_json(report)["rows"] if report.is_file() else {}
    found = {}
    for student in EXPORTED:
        parity = out / "tflite" / student / "parity.json"
        if student in rows and parity.is_file():
            r = rows[student]
            found[student] = {"tflite_bytes": read_json(parity)["model_none.tflite"]["size_bytes"],
                              "host_ms": r["host"]["1"]["p50_ms"], "pixel4_ms": r["estimate_ms"]["pixel4"]}
    return found


def rows(out: Path, stages: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    """The finished runs' rows; the teacher's once per task (seed 0, the one every student learns from)."""
    latency = measured(out)
    found = []
    for task in tasks:
        for method, (student, _, _) in METHODS.items():
            for seed in [0] if method == "teacher" else seeds:
                d = teacher_dir(out, stages, task) if method == "teacher" else run_dir(out, task, method, seed)
                found += [{**r, **latency.get(student, {})}
                          for r in finetune_rows(d, task=task, method=method, seed=seed, student=STUDENTS[student])]
    return found


def table(results: list[dict]) -> str:
    """Mean +- std over seeds per task (official metric) and method, with size and latency."""
    return method_table(results, list(METHODS))


ORDERINGS = [("kd", "ft", "KD >= FT"), ("pkd-skip", "kd", "PKD-Skip >= KD"), ("pkd-last", "kd", "PKD-Last >= KD"),
             ("pkd-skip", "pkd-last", "PKD-Skip >= PKD-Last"), ("tinybert-aug", "tinybert", "TinyBERT aug >= no aug"),
             ("mobilebert", "pkd-skip", "MobileBERT (task-agnostic) vs PKD-Skip"),
             ("mobilebert", "tinybert-aug", "MobileBERT (task-agnostic) vs TinyBERT aug"),
             ("distilbert", "ft", "DistilBERT init + distillation >= first-layers FT")]


def orderings(results: list[dict], resolve=lambda task, method: method, title: str = "ordering",
              legend: bool = True) -> str:
    """The source documents' orderings, per task on its official metric: the paired difference (seed by seed) and
    its verdict (`stats.verdict`: above zero by more than two standard errors). `resolve(task, method)`: the method
    of `results` that stands for one of METHODS on a task (benchmarks.quality's names for its full-set runs), or
    None where none does; a task where no ordering has a pair is left out, and with none left, "" (no table).
    `legend`: end with VERDICTS, what the verdicts mean (not where the page gives it already)."""
    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    cells = {}
    for a, b, name in ORDERINGS:
        for task, metric in cols:
            pair = resolve(task, a), resolve(task, b)
            d = paired_differences(results, task, metric, *pair) if None not in pair else []
            cells[name, task] = judged_cell(d) if d else "-"
    cols = [(t, m) for t, m in cols if any(cells[name, t] != "-" for _, _, name in ORDERINGS)]
    if not cols:
        return ""
    lines = [f"| {title} | " + " | ".join(t for t, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    lines += [f"| {name} | " + " | ".join(cells[name, t] for t, _ in cols) + " |" for _, _, name in ORDERINGS]
    return "\n".join(lines) + (f"\n\n{VERDICTS}\n" if legend else "\n")


def plot(results: list[dict], path: Path) -> None:
    """Dev score (official metric) against the estimated Pixel 4 latency, one point per method, one panel per task."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    if not cols:
        return
    fig, axes = plt.subplots(1, len(cols), figsize=(4 * len(cols), 3.6), squeeze=False)
    for ax, (task, metric) in zip(axes[0], cols):
        for method in METHODS:
            v = values(results, task, metric, method)
            r = next((r for r in results if r["method"] == method and r.get("pixel4_ms") is not None), None)
            if not v or r is None:
                continue
            std = statistics.stdev(v) if len(v) > 1 else 0.0
            ax.errorbar(r["pixel4_ms"], statistics.mean(v), yerr=std, fmt="o", capsize=3)
            ax.annotate(method, (r["pixel4_ms"], statistics.mean(v)), fontsize=7, xytext=(4, 2),
                        textcoords="offset points")
        ax.set_xscale("log")
        ax.set_title(f"{task} dev ({metric})")
        ax.set_xlabel("Pixel 4 latency, ms (estimated, seq 128)")
    axes[0][0].set_ylabel("dev score, mean ± std over seeds")
    fig.tight_layout()
    save_png(fig, path)


def report(results: list[dict]) -> str:
    return table(results) + "\n" + orderings(results)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.methods", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/methods", "docs/results/methods.json", list(TASKS), TASKS, plot="docs/methods.png")
    p.add_argument("--stages", default="runs/teacher_value", help="where the adapted teacher, the PKT student and "
                                                                  "issue 13's fine-tuned teachers are (or go)")
    args = p.parse_args(argv)
    out, stages = (REPO_ROOT / args.out).resolve(), (REPO_ROOT / args.stages).resolve()
    return comparison(args, lambda: jobs(out, stages, args.tasks, args.seeds),
                      lambda: rows(out, stages, args.tasks, args.seeds), row_order(list(METHODS), list(TASKS)),
                      report, plot)


if __name__ == "__main__":
    sys.exit(main())
