"""What task distillation adds to a MobileBERT-shaped student (issue 78, item 1): benchmarks.transfer_curve's
student after 100 PKT steps a stage (`mobilebert_h384_l4` from random weights, its `pkt-100`), fine-tuned on the
task three ways: on the labels alone (`pkt-100`, transfer_curve's own runs), with logit KD from a teacher fine-tuned
on the same examples (`pkt-100-kd`: `finetune --method kd`), and with the paper's progressive knowledge transfer
run again against that teacher over the task's examples before the prediction step (`pkt-100-td`: `finetune
--method pkt-td`, TinyBERT's two steps with MobileBERT's objectives; MobileBERT paper, Section 4.3; TinyBERT,
Section 3.3). Seeds 0-2, declared here.

    python -m benchmarks.task_transfer                       # after (or with) benchmarks.transfer_curve; resumable
    python -m benchmarks.task_transfer --table --write       # the table into docs/methods.md from the rows

It shares transfer_curve's run folder (default runs/transfer_curve): the adapted teacher, the pkt-100 start and its
plain fine-tuning runs are found there made, or made here by the same commands. The task's teacher: the adapted
teacher fine-tuned on the same 2,000 training examples (seed 0, at the teacher's learning rate, its step chosen on
the validation split), one teacher for every student seed. Every student: benchmarks.minilm's fine-tuning (those
2,000 examples, 3 epochs, step chosen on validation, dev scored once); pkt-td's transfer step, split over the
student's stages, takes about as many steps as its prediction step (finetune's default). Rows
(docs/results/task_transfer.json): each run's dev and validation scores, the teacher's, and the paired intervals
(mobilekd/finetune/intervals.py) of KD - labels, PKT-TD - labels, PKT-TD - KD and PKT-TD - TinyBERT_4's student
(TinyBERT's general distillation for the same 500 steps from the same adapted teacher, then `--method tinybert`
against the same task teacher: issue 78's SST-2 goal at this budget) in the task's metric, and TinyBERT_4's transfer
seconds and held-out masked-LM scores.

Whether the two levers add up: PKT-TD from transfer_curve's 3,000-step transfer (`pkt-3000-td`, the start made on a
GPU machine there; made here by its command if absent, about 1.5 hours at one thread) against PKT-TD from the
100-step one.

Which MobileBERT shape, at 3,000 steps a stage (SHAPES: `ship`'s configs/ship_gpu.json starts, made on a GPU machine
by the same command from the same teacher, OUT/pkt-3000-PRESET): MobileBERT_TINY's 4 blocks (under TinyBERT_4's Pixel
estimate) and MobileBERT's 6, each by PKT-TD against the 4-block student's and TinyBERT_4's, in a table of their own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import teacher_value, transfer_curve
from benchmarks.command import task_comparison
from benchmarks.inherit import TASKS, distill_rows
from benchmarks.minilm import FINETUNE
from benchmarks.rows import finetune_rows, paired_runs
from benchmarks.runner import Job
from benchmarks.stats import values, paired_cells
from mobilekd.data.tasks import GLUE_TASKS

START_STEPS, LONG_STEPS = 100, 3000  # transfer_curve's shortest transfer and its 3,000-step one
START, LONG = transfer_curve.method(START_STEPS), transfer_curve.method(LONG_STEPS)  # their method names, folders
TINYBERT = "tinybert-100"  # TinyBERT_4's general distillation at the same 500 steps (4 x 100 + 100)
METHODS = (START, f"{START}-kd", f"{START}-td", f"{TINYBERT}-td", f"{LONG}-td")
FLAGS = {f"{START}-kd": ["--method", "kd"], f"{START}-td": ["--method", "pkt-td"],
         f"{TINYBERT}-td": ["--method", "tinybert"], f"{LONG}-td": ["--method", "pkt-td"]}
START_OF = {m: next((s for s in (TINYBERT, LONG) if m.startswith(f"{s}-")), START) for m in METHODS}
PAIRS = ((METHODS[1], METHODS[0]), (METHODS[2], METHODS[0]), (METHODS[2], METHODS[1]), (METHODS[2], METHODS[3]),
         (METHODS[4], METHODS[2]))
NAMES = {METHODS[0]: "labels", METHODS[1]: "logit KD", METHODS[2]: "PKT-TD", METHODS[3]: "TinyBERT_4, TinyBERT-TD",
         METHODS[4]: "PKT-TD after 3,000 steps a stage"}
SHAPES = ("mobilebert_tiny_h384_l4", "mobilebert_h384")  # other shapes after the 3,000-step transfer
SHAPE_STARTS = {f"{LONG}-{preset}": preset for preset in SHAPES}  # their start folders, by preset
SHAPE_METHODS = tuple(f"{start}-td" for start in SHAPE_STARTS)
START_OF |= {m: m.removesuffix("-td") for m in SHAPE_METHODS}
FLAGS |= {m: ["--method", "pkt-td"] for m in SHAPE_METHODS}
SHAPE_PAIRS = ((SHAPE_METHODS[0], METHODS[3]), (SHAPE_METHODS[0], METHODS[4]), (SHAPE_METHODS[1], METHODS[4]))
NAMES |= {SHAPE_METHODS[0]: "MobileBERT_TINY, 4 blocks", SHAPE_METHODS[1]: "MobileBERT, 6 blocks"}
SHORT = {**NAMES, METHODS[3]: "TinyBERT_4 (500 steps)", METHODS[4]: "MobileBERT, 4 blocks"}  # the shapes' table


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    starts = argparse.Namespace(steps=[START_STEPS, LONG_STEPS], transfer_only=False)
    plan = [j for j in transfer_curve.jobs(out, tasks, seeds, starts)  # the adapted teacher, the starts, plain runs
            if j.name in ("teacher", f"distill/{START}", f"distill/{LONG}") or j.name.split("/")[1:2] == [START]]
    plan.append(Job(f"distill/{TINYBERT}", ["distill", "--teacher", str(out / "teacher"), "--student", "tinybert4_h156",
                                            "--strategy", "tinybert", "--layer-map", "uniform", "--layer-steps", "100",
                                            "--pd-steps", "100", "--threads", "1", "--resume", "--out",
                                            str(out / TINYBERT)], out / TINYBERT, needs=["teacher"]))
    plan += [transfer_curve.transfer(out, LONG_STEPS, preset, start) for start, preset in SHAPE_STARTS.items()]
    for task, length in TASKS.items():
        if task not in tasks:
            continue
        teacher = out / task / "teacher"
        plan.append(Job(f"{task}/teacher", ["finetune", "--model", str(out / "teacher"), "--task", task, "--max-len",
                                            length, *FINETUNE, "--lr", teacher_value.TEACHER_LR, "--seed", "0",
                                            "--out", str(teacher)], teacher, needs=["teacher"]))
        plan += [Job(f"{task}/{m}/{seed}", ["finetune", "--model", str(out / START_OF[m]), "--task", task,
                                            "--max-len", length, *FINETUNE, "--teacher", str(teacher), *FLAGS[m],
                                            "--seed", str(seed), "--out", str(out / task / m / f"seed{seed}")],
                     out / task / m / f"seed{seed}", needs=[f"distill/{START_OF[m]}", f"{task}/teacher"])
                 for seed in seeds for m in (*METHODS[1:], *SHAPE_METHODS)]
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = distill_rows(out, (TINYBERT, *SHAPE_STARTS))  # each transfer's seconds, host, held-out MLM scores
    for task in tasks:
        found += finetune_rows(out / task / "teacher", task=task, method="teacher", seed=0)
        found += paired_runs(out, task, seeds, METHODS, PAIRS)
        found += [r for r in paired_runs(out, task, seeds, (*SHAPE_METHODS, METHODS[3], METHODS[4]), SHAPE_PAIRS)
                  if r["method"] not in METHODS]  # the shapes' runs and pairs; the others' rows are above
    return found


def table(results: list[dict]) -> str:
    lines = ["| task (metric) | teacher | " + " | ".join(f"student, {NAMES[m]}" for m in METHODS) + " | "
             + " | ".join(f"{NAMES[a]} - {NAMES[b]}" for a, b in PAIRS) + " |",
             "|---" * (2 + len(METHODS) + len(PAIRS)) + "|"]
    for task in TASKS:
        metric = GLUE_TASKS[task].metrics[0]
        if not values(results, task, metric, METHODS[0]):
            continue
        cells = paired_cells(results, task, metric, ("teacher", *METHODS), PAIRS)
        lines.append(f"| {task} ({metric}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        "\n\nThe student: mobilebert_h384_l4 after 100 PKT steps a stage (3,000 where the column says so), or "
        "TinyBERT_4 (tinybert4_h156) after TinyBERT's general distillation for the same 500 steps; every run on the "
        "same 2,000 training examples, its step chosen on validation, dev scored once. Differences in points of the "
        "task's metric with their paired 95% bootstrap intervals over dev examples and seeds "
        "(mobilekd/finetune/intervals.py).\n") + shapes_table(results)


def shapes_table(results: list[dict]) -> str:
    """PKT-TD from each MobileBERT shape after the 3,000-step transfer, against the 4-block one's and TinyBERT_4's."""
    methods = (METHODS[4], *SHAPE_METHODS, METHODS[3])
    lines = ["\nThe shapes after 3,000 PKT steps a stage (each start made on a GPU machine), PKT-TD:\n",
             "| task (metric) | " + " | ".join(SHORT[m] for m in methods) + " | "
             + " | ".join(f"{SHORT[a]} - {SHORT[b]}" for a, b in SHAPE_PAIRS) + " |",
             "|---" * (1 + len(methods) + len(SHAPE_PAIRS)) + "|"]
    for task in TASKS:
        metric = GLUE_TASKS[task].metrics[0]
        if values(results, task, metric, SHAPE_METHODS[0]):
            lines.append(f"| {task} ({metric}) | " + " | ".join(paired_cells(results, task, metric, methods,
                                                                             SHAPE_PAIRS)) + " |")
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


def main(argv=None):
    return task_comparison(argv, "task_transfer", __doc__, "runs/transfer_curve",
                           "docs/results/task_transfer.json", TASKS, jobs, rows, table)


if __name__ == "__main__":
    sys.exit(main())
