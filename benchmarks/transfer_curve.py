"""What longer task-agnostic transfer buys a MobileBERT-shaped student (issue 78, item 4): the same student as
benchmarks.inherit (`mobilebert_h384_l4`, from random weights) distilled by the paper's progressive knowledge transfer
for N steps a stage (each of its 4 blocks' stages and the pre-training distillation stage: 5N steps in all), N in
STEPS, then each fine-tuned on the task as benchmarks.inherit fine-tunes it: the curve of the task's dev score against
the seconds of transfer at one thread, so that a user sees what more compute would buy. Seeds 0-2, declared here.

    python -m benchmarks.transfer_curve                     # about 2 hours on 2 cores; resumable
    python -m benchmarks.transfer_curve --table --write --plot    # the table into docs/methods.md, the figure

Transfer: `distill --strategy pkt --layer-map uniform --layer-steps N --pd-steps N` (32 sequences of 64 tokens a
step on the shipped corpora, one thread: on a quiet machine its seconds are its CPU-seconds); N = 100 is
benchmarks.inherit's `random` start, made again here. Rows (docs/results/transfer_curve.json): each transfer's
training seconds (its stages', which carry across a resume) with its host and its held-out masked-LM accuracy and
loss; each fine-tuned run's dev and validation scores; the paired intervals (mobilekd/finetune/intervals.py) of each
longer transfer against the shortest, in the task's metric. Its table and figure: docs/methods.md,
docs/transfer_curve.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks import teacher_value
from benchmarks.command import task_comparison
from benchmarks.inherit import STUDENT, TASKS, distill_rows
from benchmarks.minilm import FINETUNE
from benchmarks.rows import paired_runs
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import values, paired_cells
from mobilekd.data.tasks import GLUE_TASKS

STEPS = (100, 300, 1000)  # PKT steps a stage
METHODS = tuple(f"pkt-{n}" for n in STEPS)
PAIRS = tuple((m, METHODS[0]) for m in METHODS[1:])


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    teacher = out / "teacher"
    plan = [Job("teacher", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher)]
    plan += [Job(f"distill/{m}", ["distill", "--teacher", str(teacher), "--student", STUDENT, "--strategy", "pkt",
                                  "--layer-map", "uniform", "--layer-steps", str(n), "--pd-steps", str(n),
                                  "--threads", "1", "--resume", "--out", str(out / m)], out / m, needs=["teacher"])
             for n, m in zip(STEPS, METHODS)]
    plan += [Job(f"{task}/{m}/{seed}", ["finetune", "--model", str(out / m), "--task", task, "--max-len", length,
                                        *FINETUNE, "--seed", str(seed), "--out", str(out / task / m / f"seed{seed}")],
                 out / task / m / f"seed{seed}", needs=[f"distill/{m}"])
             for task, length in TASKS.items() if task in tasks for seed in seeds for m in METHODS]
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = distill_rows(out, METHODS)  # each transfer's seconds (one thread) and MLM scores
    for task in tasks:
        found += paired_runs(out, task, seeds, METHODS, PAIRS)
    return found


def _agnostic(results: list[dict]) -> dict:
    return {(r["method"], r["metric"]): r for r in results if r["task"] is None}


def table(results: list[dict]) -> str:
    agnostic = _agnostic(results)

    def head(m):
        wall = agnostic.get((m, "transfer_seconds"))
        return f"PKT {m[4:]} a stage" + (f" ({wall['value'] / 60:.0f} min, 1 thread)" if wall else "")

    lines = ["| task (metric) | " + " | ".join(map(head, METHODS)) + " | "
             + " | ".join(f"{a[4:]} - {b[4:]}" for a, b in PAIRS) + " |", "|---" * (1 + len(METHODS) + len(PAIRS))
             + "|"]
    for task in TASKS:
        metric = GLUE_TASKS[task].metrics[0]
        if not values(results, task, metric, METHODS[0]):
            continue
        cells = paired_cells(results, task, metric, METHODS, PAIRS)
        lines.append(f"| {task} ({metric}) | " + " | ".join(cells) + " |")
    mlm = "; ".join(f"{m[4:]} steps a stage {agnostic[m, 'mlm_accuracy']['value']:.4f}" for m in METHODS
                    if (m, "mlm_accuracy") in agnostic)
    hosts = sorted({agnostic[m, "transfer_seconds"]["host"] for m in METHODS if (m, "transfer_seconds") in agnostic})
    return "\n".join(lines) + (
        "\n\nDifferences in points of the task's metric with their paired 95% bootstrap intervals over dev examples "
        f"and seeds (mobilekd/finetune/intervals.py). Held-out masked-LM accuracy after the transfer: {mlm or '-'}. "
        f"Transfers timed at 1 thread on {', '.join(hosts) or '-'}.\n")


def plot(results: list[dict], path: Path) -> None:
    """Each task's dev score (mean and standard deviation over seeds) against the transfer's minutes at 1 thread."""
    import statistics

    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from mobilekd.fileio import save_png

    agnostic = _agnostic(results)
    tasks = [t for t in TASKS if values(results, t, GLUE_TASKS[t].metrics[0], METHODS[0])]
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        metric = GLUE_TASKS[task].metrics[0]
        points = [(agnostic[m, "transfer_seconds"]["value"] / 60, values(results, task, metric, m)) for m in METHODS
                  if (m, "transfer_seconds") in agnostic and values(results, task, metric, m)]
        ax.errorbar([x for x, _ in points], [statistics.mean(v) for _, v in points],
                    yerr=[statistics.stdev(v) if len(v) > 1 else 0 for _, v in points], marker="o", capsize=3)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.0f"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks([x for x, _ in points])
        ax.set(xlabel="PKT transfer, minutes at 1 thread", ylabel=f"dev {metric}", title=f"{task}: {STUDENT}")
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None):
    return task_comparison(argv, "transfer_curve", __doc__, "runs/transfer_curve",
                           "docs/results/transfer_curve.json", TASKS, jobs, rows, table,
                           plot="docs/transfer_curve.png", draw=plot)


if __name__ == "__main__":
    sys.exit(main())
