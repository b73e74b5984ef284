"""What longer task-agnostic transfer buys a MobileBERT-shaped student (issue 78, item 4): the same student as
benchmarks.inherit (`mobilebert_h384_l4`, from random weights) distilled by the paper's progressive knowledge transfer
for N steps a stage (each of its 4 blocks' stages and the pre-training distillation stage: 5N steps in all), N in
STEPS (and LONGER, on a GPU), then each fine-tuned on the task as benchmarks.inherit fine-tunes it: the curve of the
task's dev score against the steps of transfer, each with its seconds and host, so that a user sees what more compute
would buy. Seeds 0-2, declared here.

    python -m benchmarks.transfer_curve                     # about 2 hours on 2 cores; resumable
    python -m benchmarks.transfer_curve --table --write --plot    # the table into docs/methods.md, the figure

Transfer: `distill --strategy pkt --layer-map uniform --layer-steps N --pd-steps N` (32 sequences of 64 tokens a
step on the shipped corpora, one thread: on a quiet machine its seconds are its CPU-seconds); N = 100 is
benchmarks.inherit's `random` start, made again here. Rows (docs/results/transfer_curve.json): each transfer's
training seconds (its stages', which carry across a resume) with its host and its held-out masked-LM accuracy and
loss; each fine-tuned run's dev and validation scores; the paired intervals (mobilekd/finetune/intervals.py) of each
longer transfer against the shortest, in the task's metric. Its table and figure: docs/methods.md,
docs/transfer_curve.png.

Longer transfers (LONGER: 3,000 and 10,000 steps a stage) are run where a GPU is, transfer only, and fine-tuned here
like the others:

    python -m benchmarks.device_files shrink runs/transfer_curve/teacher .gpu/teacher     # here, to carry
    python -m benchmarks.device_files restore .gpu/teacher runs/transfer_curve/teacher    # there, then:
    python -m benchmarks.transfer_curve --steps 3000 10000 --transfer-only               # there
    python -m benchmarks.device_files pack runs/transfer_curve/pkt-3000 $OUT/pkt-3000     # there, each finished one
    python -m benchmarks.device_files unpack FILES/pkt-3000 runs/transfer_curve/pkt-3000  # here, from its files
    python -m benchmarks.transfer_curve --steps 100 300 1000 3000 10000                  # here: fine-tunes, rows

The GPU machine runs from a copy of the tree at the same absolute path as here, so that every run's recorded flags
(OUT/complete.json) are the ones this plan asks for and the transfers count as done.

The teacher travels to the GPU machine with its weights rounded to bf16 (the machine takes 64 MiB of files; the
fp32 teacher is 92 MB) and is cast back to fp32 there; the transferred students come back in bf16 likewise
(`benchmarks.device_files`). Their transfer seconds are the GPU's, said so in the table; the figure's axis is the
steps a stage, which mean the same on both machines.
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
from benchmarks.stats import paired_cells, values
from mobilekd.data.tasks import GLUE_TASKS

STEPS = (100, 300, 1000)  # PKT steps a stage, on this machine's CPU
LONGER = (3000, 10000)  # on a GPU
BASE_STEPS = 100  # what each longer transfer is paired against


def method(steps: int) -> str:
    """A transfer's method name (and folder) from its PKT steps a stage."""
    return f"pkt-{steps}"


def steps_of(name: str) -> int:
    """The PKT steps a stage of a transfer's method name (`method`'s inverse)."""
    return int(name.removeprefix("pkt-"))


BASE = method(BASE_STEPS)


def flags(p) -> None:
    p.add_argument("--steps", nargs="+", type=int, default=list(STEPS), metavar="N",
                   help=f"PKT steps a stage of the transfers to run (default {' '.join(map(str, STEPS))}; "
                        f"{' '.join(map(str, LONGER))} where a GPU is)")
    p.add_argument("--transfer-only", action="store_true",
                   help="only the teacher and the transfers (on a GPU machine, whose students are fine-tuned here)")


def transfer(out: Path, steps: int, student: str = STUDENT, name: str | None = None) -> Job:
    """The paper's progressive knowledge transfer of `student` from OUT/teacher, `steps` a stage, into OUT/NAME
    (default `method(steps)`)."""
    name = name or method(steps)
    return Job(f"distill/{name}", ["distill", "--teacher", str(out / "teacher"), "--student", student, "--strategy",
                                   "pkt", "--layer-map", "uniform", "--layer-steps", str(steps), "--pd-steps",
                                   str(steps), "--threads", "1", "--resume", "--out", str(out / name)],
               out / name, needs=["teacher"])


def jobs(out: Path, tasks: list[str], seeds: list[int], args=None) -> list[Job]:
    """The adapted teacher, a transfer for each --steps (default STEPS) and, but with --transfer-only, each one's
    fine-tunes."""
    steps = args.steps if args else STEPS
    teacher = out / "teacher"
    plan = [Job("teacher", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher)]
    plan += [transfer(out, n) for n in steps]
    if args and args.transfer_only:
        return plan
    plan += [Job(f"{task}/{method(n)}/{seed}",
                 ["finetune", "--model", str(out / method(n)), "--task", task, "--max-len", length, *FINETUNE,
                  "--seed", str(seed), "--out", str(out / task / method(n) / f"seed{seed}")],
                 out / task / method(n) / f"seed{seed}", needs=[f"distill/{method(n)}"])
             for task, length in TASKS.items() if task in tasks for seed in seeds for n in steps]
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int], args=None) -> list[dict]:
    methods = [method(n) for n in sorted(set(args.steps if args else STEPS) | {BASE_STEPS})]
    found = distill_rows(out, methods)  # each transfer's seconds and MLM scores
    for task in tasks:
        found += paired_runs(out, task, seeds, methods, [(m, BASE) for m in methods if m != BASE])
    return found


def _methods(results: list[dict]) -> list[str]:
    """The transfers in the rows, shortest first."""
    return sorted({r["method"] for r in results if r["method"].count("-") == 1}, key=steps_of)


def _agnostic(results: list[dict]) -> dict:
    return {(r["method"], r["metric"]): r for r in results if r["task"] is None}


def _where(row: dict | None) -> str:
    """Where a transfer ran, as its head says it: the GPU's model, or one CPU thread."""
    if row is None:
        return ""
    return f"on an {row['gpu'].split()[-1]}" if row.get("gpu") else "1 thread"


def table(results: list[dict]) -> str:
    agnostic = _agnostic(results)
    methods = _methods(results)
    pairs = [(m, BASE) for m in methods if m != BASE]

    def head(m):
        wall = agnostic.get((m, "transfer_seconds"))
        return f"PKT {steps_of(m)} a stage" + (f" ({wall['value'] / 60:.0f} min, {_where(wall)})" if wall else "")

    lines = ["| task (metric) | " + " | ".join(map(head, methods)) + " | "
             + " | ".join(f"{steps_of(a)} - {steps_of(b)}" for a, b in pairs) + " |",
             "|---" * (1 + len(methods) + len(pairs)) + "|"]
    for task in TASKS:
        metric = GLUE_TASKS[task].metrics[0]
        if not values(results, task, metric, BASE):
            continue
        cells = paired_cells(results, task, metric, methods, pairs)
        lines.append(f"| {task} ({metric}) | " + " | ".join(cells) + " |")
    mlm = "; ".join(f"{steps_of(m)} steps a stage {agnostic[m, 'mlm_accuracy']['value']:.4f}" for m in methods
                    if (m, "mlm_accuracy") in agnostic)
    hosts = sorted({agnostic[m, "transfer_seconds"]["host"] for m in methods if (m, "transfer_seconds") in agnostic})
    return "\n".join(lines) + (
        "\n\nDifferences in points of the task's metric with their paired 95% bootstrap intervals over dev examples "
        f"and seeds (mobilekd/finetune/intervals.py). Held-out masked-LM accuracy after the transfer: {mlm or '-'}. "
        f"Transfers timed on {', '.join(hosts) or '-'}; every fine-tune on this page's CPU host.\n")


def plot(results: list[dict], path: Path) -> None:
    """Each task's dev score (mean and standard deviation over seeds) against the transfer's steps a stage (which
    mean the same on a CPU and a GPU), marked by where the transfer ran."""
    import statistics

    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from mobilekd.fileio import save_png

    agnostic = _agnostic(results)
    methods = _methods(results)
    tasks = [t for t in TASKS if values(results, t, GLUE_TASKS[t].metrics[0], BASE)]
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        metric = GLUE_TASKS[task].metrics[0]
        points = [(steps_of(m), values(results, task, metric, m), _where(agnostic.get((m, "transfer_seconds"))))
                  for m in methods if values(results, task, metric, m)]
        ax.plot([x for x, _, _ in points], [statistics.mean(v) for _, v, _ in points], color="0.6", zorder=1)
        for where, marker in sorted({(w, "s" if w.startswith("on") else "o") for _, _, w in points}):
            mine = [(x, v) for x, v, w in points if w == where]
            ax.errorbar([x for x, _ in mine], [statistics.mean(v) for _, v in mine], fmt=marker, capsize=3,
                        yerr=[statistics.stdev(v) if len(v) > 1 else 0 for _, v in mine],
                        label=f"transfer {where}" if where.startswith("on") else f"transfer at {where}")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.0f"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks([x for x, _, _ in points])
        ax.set(xlabel="PKT steps a stage (5 stages)", ylabel=f"dev {metric}", title=f"{task}: {STUDENT}")
        ax.legend(fontsize="small")
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None):
    return task_comparison(argv, "transfer_curve", __doc__, "runs/transfer_curve",
                           "docs/results/transfer_curve.json", TASKS, jobs, rows, table,
                           plot="docs/transfer_curve.png", draw=plot, flags=flags)


if __name__ == "__main__":
    sys.exit(main())
