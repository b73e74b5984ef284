"""What a MobileBERT-shaped student gains from a start taken from its teacher's weights (issue 78, item 2): the
same student (`mobilebert_h384_l4`, 4 blocks near TinyBERT_4's Pixel estimate) distilled by the paper's progressive
knowledge transfer for the same 500 steps from random weights (`random`: embeddings and heads copied, as distill
starts a preset) and from `mobilekd init PRESET OUT --from-teacher TEACHER` (`inherited`), and the inherited start
with no transfer at all (`inherited-0`); then each fine-tuned on the task. Seeds 0-2, declared here.

    python -m benchmarks.inherit                          # about 40 minutes on 2 cores; resumable
    python -m benchmarks.inherit --table --write          # the table into docs/methods.md from the rows

The teacher is the demo's: all-MiniLM-L6-v2 adapted (`train-teacher --init-from`), as benchmarks.ship and
benchmarks.minilm use. Transfer: 4 x 100 layer steps + 100 PD steps of 32 sequences of 64 tokens on the shipped
corpora, blocks read the teacher's layers by TinyBERT's uniform map (1, 2, 4, 5). Fine-tuning as benchmarks.minilm:
the same 2,000 training examples (drawn once, seed 0), 3 epochs at the students' learning rate, the step chosen on a
validation split of those examples, dev scored once. Rows (docs/results/inherit.json): each fine-tuned run's dev and
validation scores; each start's held-out masked-LM accuracy and loss after its transfer (distill's and init's
summaries: the same 2,000 held-out examples); each transfer's wall time with its host; and the paired intervals
(mobilekd/finetune/intervals.py) of inherited - random and inherited-0 - random in the task's metric.
"""

from __future__ import annotations

import sys
from pathlib import Path


from benchmarks import teacher_value
from benchmarks.command import task_comparison
from benchmarks.minilm import FINETUNE
from benchmarks.rows import paired_runs, recorded_host
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import values, paired_cells
from mobilekd.data.tasks import GLUE_TASKS
from mobilekd.fileio import read_json

STUDENT = "mobilebert_h384_l4"
TASKS = {"sst2": "64", "mrpc": "128"}  # --max-len per task
TRANSFER = ["--strategy", "pkt", "--layer-map", "uniform", "--layer-steps", "100", "--pd-steps", "100"]
METHODS = ("random", "inherited", "inherited-0")
PAIRS = (("inherited", "random"), ("inherited-0", "random"))
MLM = ("mlm_accuracy", "mlm_loss")


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    teacher = out / "teacher"
    start = out / "start"
    plan = [Job("teacher", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("start", ["init", STUDENT, str(start), "--from-teacher", str(teacher)], start, needs=["teacher"]),
            Job("distill/random", ["distill", "--teacher", str(teacher), "--student", STUDENT, *TRANSFER,
                                   "--threads", "1", "--resume", "--out", str(out / "random")], out / "random",
                needs=["teacher"]),
            Job("distill/inherited", ["distill", "--teacher", str(teacher), "--student", str(start), *TRANSFER,
                                      "--threads", "1", "--resume", "--out", str(out / "inherited")],
                out / "inherited", needs=["start"])]
    model = {"random": out / "random", "inherited": out / "inherited", "inherited-0": start}
    needs = {"random": "distill/random", "inherited": "distill/inherited", "inherited-0": "start"}
    plan += [Job(f"{task}/{m}/{seed}", ["finetune", "--model", str(model[m]), "--task", task, "--max-len", length,
                                        *FINETUNE, "--seed", str(seed), "--out", str(out / task / m / f"seed{seed}")],
                 out / task / m / f"seed{seed}", needs=[needs[m]])
             for task, length in TASKS.items() if task in tasks for seed in seeds for m in METHODS]
    return plan


def distill_rows(out: Path, methods) -> list[dict]:
    """Each distill run OUT/METHOD's wall time (of its last process) and its stages' training seconds (summed: they
    carry across a resume, the wall time does not), with the host of its first stage (where the seconds were
    measured; its GPU and precision where it records them), and its held-out masked-LM scores, as rows of task
    None."""
    found = []
    for m in methods:
        if not (out / m / "summary.json").is_file():
            continue
        s = read_json(out / m / "summary.json")
        host = recorded_host(s["stages"][0])
        found.append({"task": None, "method": m, "seed": 0, "metric": "wall_seconds", "value": s["wall_seconds"],
                      "steps": s["total_steps"], **host})
        found.append({"task": None, "method": m, "seed": 0, "metric": "transfer_seconds", "steps": s["total_steps"],
                      "value": round(sum(st["seconds"] for st in s["stages"]), 1), **host,
                      **{k: s["stages"][0][k] for k in ("gpu", "precision") if k in s["stages"][0]}})
        found += [{"task": None, "method": m, "seed": 0, "metric": k, "value": round(s["heldout"][k], 4),
                   "steps": s["total_steps"]} for k in MLM]
    return found


def transfer_rows(out: Path) -> list[dict]:
    """Each start's held-out masked-LM scores after its transfer, and each transfer's wall time (task None)."""
    found = distill_rows(out, ("random", "inherited"))
    if (out / "start" / "summary.json").is_file():
        s = read_json(out / "start" / "summary.json")
        found.append({"task": None, "method": "inherited-0", "seed": 0, "metric": "fit_relative_error",
                      "value": s["relative_error"], "examples": s["examples"], "wall_seconds": s["wall_seconds"]})
    return found


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = transfer_rows(out)
    for task in tasks:
        found += paired_runs(out, task, seeds, METHODS, PAIRS)
    return found


def table(results: list[dict]) -> str:
    lines = ["| task (metric) | random start, PKT 500 steps | inherited start, PKT 500 steps | inherited start, no "
             "transfer | inherited - random | inherited, no transfer - random |", "|---|---|---|---|---|---|"]
    for task in TASKS:
        metric = GLUE_TASKS[task].metrics[0]  # the task's official metric, as the intervals are
        if not values(results, task, metric, "random"):
            continue
        cells = paired_cells(results, task, metric, METHODS, PAIRS)
        lines.append(f"| {task} ({metric}) | " + " | ".join(cells) + " |")
    agnostic = {(r["method"], r["metric"]): r for r in results if r["task"] is None}
    mlm = "; ".join(f"{m} {agnostic[m, 'mlm_accuracy']['value']:.4f} (loss {agnostic[m, 'mlm_loss']['value']:.3f})"
                    for m in ("random", "inherited") if (m, "mlm_accuracy") in agnostic and (m, "mlm_loss") in agnostic)
    wall = {m: agnostic[m, "wall_seconds"] for m in ("random", "inherited") if (m, "wall_seconds") in agnostic}
    walls = "; ".join(f"{m} {r['value'] / 60:.1f} min on {r['host']}" for m, r in wall.items())
    fit = agnostic.get(("inherited-0", "fit_relative_error"))
    start = (f" The start's fit, each block's output against its teacher layer's (squared error over the teacher's "
             f"variance, on its {fit['examples']} examples): {', '.join(map(str, fit['value']))}, in "
             f"{fit['wall_seconds']:.0f} s." if fit else "")
    return "\n".join(lines) + (
        "\n\nDifferences in points of the task's metric with their paired 95% bootstrap intervals over dev examples "
        f"and seeds (mobilekd/finetune/intervals.py). Held-out masked-LM accuracy after the transfer: {mlm or '-'}. "
        f"Transfer wall time, 1 thread: {walls or '-'}.{start}\n")


def main(argv=None):
    return task_comparison(argv, "inherit", __doc__, "runs/inherit",
                           "docs/results/inherit.json", TASKS, jobs, rows, table)


if __name__ == "__main__":
    sys.exit(main())
