"""FastBERT's early exits measured on the exported file (issue 17): per task, seed and speed threshold, the dev
score, the average layers executed, GFLOPs, and the host latency per sentence of the app's layer-by-layer loop over
the `.tflite`, beside the plain full model timed in the same run; to docs/results/early_exit.json, a Markdown
table, and (--plot) docs/early_exit.png.

    python -m benchmarks.early_exit                 # SST-2 and MRPC, seeds 0-2 (about 40 minutes on 2 cores)
    python -m benchmarks.early_exit --collect       # rows of the finished runs, run nothing
    python -m benchmarks.early_exit --table
    python -m benchmarks.early_exit --table --write --plot  # and put it into its page, draw the figure

Backbones: issue 13's fine-tuned teachers (all-MiniLM-L6-v2 adapted: 6 layers of 384), seed s for seed s, from
`--stages` (python -m benchmarks.teacher_value makes them). Self-distillation: FastBERT's settings (batch 16, lr 2e-4,
warm-up 0.1, width 128, 2 heads) on 2,000 training sentences for 2 epochs (the official 10 epochs over the whole
set do not fit the budget; the branches learn from the model itself, so more text mostly sharpens the thresholds).
Each model is exported at the task's sequence length (SST-2 64, MRPC 128) with parity on the whole dev set, then
timed at 1 thread: every threshold's loop over all dev sentences and the plain `model_none.tflite` over the same
sentences, interleaved round by round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import teacher_value
from benchmarks.command import comparison, comparison_flags
from benchmarks.pages import task_panels
from benchmarks.rows import host_fields, recorded_host
from benchmarks.runner import RESUMABLE, Job, run_all
from benchmarks.stats import VERDICTS, WITHIN, mean_std_cell, metric_rank, verdict, within
from mobilekd.rundir import finished_results
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.fileio import REPO_ROOT, read_json, save_png, write_json
from mobilekd.models.early_exit import scored_thresholds
from mobilekd.models.flops import model_stats
from mobilekd.models.hf import load_config

TASKS = {"sst2": "64", "mrpc": "128"}  # --max-len and export --max-len
TRAIN = ["--max-train-examples", "2000", "--epochs", "2"]
ROUNDS = 2


def run_dir(out: Path, task: str, seed: int) -> Path:
    return out / task / f"seed{seed}"


def jobs(out: Path, stages: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    plan = []
    for seed in seeds:
        for task in tasks:
            d = run_dir(out, task, seed)
            plan.append(Job(f"{task}/fastbert/{seed}", [
                "fastbert", "--model", str(teacher_value.finetune_dir(stages, task, "teacher", seed)), "--task", task,
                "--max-len", TASKS[task], *TRAIN, "--seed", str(seed), "--out", str(d), *RESUMABLE], d))
            plan.append(Job(f"{task}/export/{seed}", ["export", "--model", str(d), "--max-len", TASKS[task],
                                                      "--parity-examples", "100000", "--out", str(d / "tflite")],
                            d / "tflite", [f"{task}/fastbert/{seed}"]))
    return plan


def time_runs(plan: list[Job]) -> None:
    """Each exported model's host latency (latency.json beside it), one at a time in this process."""
    from mobilekd.export.early_exit import time_early_exit

    for job in plan:
        d = job.out.parent  # the model directory; the job's own OUT holds its files
        if job.argv[0] != "export" or not job.done() or (d / "latency.json").is_file():
            continue
        r = read_json(d / "results.json")
        t = load_task(r["task"], default_data(r["task"]), eval_only=True)
        split = encode_classification(t, next(iter(t.dev.values())), load_tokenizer(d), r["max_len"])
        thresholds = scored_thresholds(d)
        print(f"timing {d} ({len(split)} dev sentences x {len(thresholds) + 1} configurations)")
        write_json(d / "latency.json", time_early_exit(job.out / "model_early_exit.tflite",
                                                       job.out / "model_none.tflite", split.arrays, thresholds,
                                                       ROUNDS))


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    """One row per run, threshold and dev metric, once trained, exported and timed."""
    found = []
    for task in tasks:
        for seed in seeds:
            d = run_dir(out, task, seed)
            r, latency = finished_results(d), d / "latency.json"
            if r is None or not latency.is_file():
                continue
            timing, parity = read_json(latency), read_json(d / "tflite" / "parity.json")["model_early_exit.tflite"]
            plain = model_stats(load_config(d)[0], r["max_len"])[f"flops_seq{r['max_len']}"] / 1e9  # no branches
            for x in r["thresholds"]:
                key = str(x["threshold"])
                for metric, value in x["metrics"].items():
                    found.append({"task": task, "method": "fastbert", "seed": seed, "threshold": x["threshold"],
                                  "metric": metric, "value": round(value, 4), "avg_layers": round(x["avg_layers"], 3),
                                  "gflops": round(x["gflops"], 4), "full_gflops": round(plain, 4),
                                  "host_ms": round(timing["ms"][key], 3),
                                  "full_host_ms": round(timing["full_ms"], 3), "threads": timing["threads"],
                                  "same_exit_as_torch": parity["thresholds"][key]["same_exit"],
                                  "same_prediction_as_torch": parity["thresholds"][key]["same_prediction"],
                                  "train_seconds": r["wall_seconds"], "seq_len": r["max_len"], **host_fields(r),
                                  "latency_host": recorded_host(timing)["host"]})
    return found


def _cells(results, task, metric, threshold):
    mine = [r for r in results if (r["task"], r["metric"], r["threshold"]) == (task, metric, threshold)]
    full = {r["seed"]: r["value"] for r in results if (r["task"], r["metric"], r["threshold"]) == (task, metric, 0.0)}
    return mine, [r["value"] - full[r["seed"]] for r in mine if r["seed"] in full]


def table(results: list[dict]) -> str:
    """Per task (official metric) and threshold: score, its paired change from threshold 0, layers, GFLOPs,
    host ms per sentence and the speed-up over the plain full model measured in the same run."""
    lines = []
    for task in dict.fromkeys(r["task"] for r in results):
        metric = next(r["metric"] for r in results if r["task"] == task and metric_rank(task, r["metric"]) == 0)
        lines += [f"**{task}** dev {metric}, mean ± std over seeds:", "",
                  f"| threshold | {metric} | change from threshold 0: within ±1 point? | layers | GFLOPs | "
                  "host ms / sentence | "
                  "speed-up, measured | speed-up, FLOPs | same exit as PyTorch |", "|---" * 9 + "|"]
        for threshold in sorted({r["threshold"] for r in results if r["task"] == task}):
            mine, change = _cells(results, task, metric, threshold)
            speed = [r["full_host_ms"] / r["host_ms"] for r in mine]
            flops = [r["full_gflops"] / r["gflops"] for r in mine]
            lines.append(f"| {threshold:g} | {mean_std_cell([r['value'] for r in mine])} | "
                         f"{mean_std_cell(change, signed=True)} {within(change, 0.01)} | "
                         f"{statistics.mean(r['avg_layers'] for r in mine):.2f} | "
                         f"{statistics.mean(r['gflops'] for r in mine):.3f} | "
                         f"{statistics.mean(r['host_ms'] for r in mine):.2f} | {mean_std_cell(speed)} | "
                         f"{statistics.mean(flops):.2f} | {min(r['same_exit_as_torch'] for r in mine):.4f} |")
        mine = [r for r in results if r["task"] == task]
        lines += ["", f"The plain full model (`model_none.tflite`, one signature, no branches): "
                      f"{statistics.mean(r['full_host_ms'] for r in mine):.2f} ms per sentence in the same runs, "
                      f"{mine[0]['full_gflops']:.3f} GFLOPs; both speed-ups are against it. "
                      f"{goal(results, task, metric)}", ""]
    return "\n".join(lines + [f"{VERDICTS} {WITHIN}"])


def fastest_within(results: list[dict], task: str, metric: str, bound: float = 0.01):
    """The fastest threshold whose seed-paired change from the full model is within ±`bound` (`stats.within`),
    as (threshold, its measured speed-ups, its changes), or None."""
    best = None
    for threshold in sorted({r["threshold"] for r in results if r["task"] == task}):
        mine, change = _cells(results, task, metric, threshold)
        speed = [r["full_host_ms"] / r["host_ms"] for r in mine]
        if change and within(change, bound) == "holds" and (best is None or statistics.mean(speed) >
                                                             statistics.mean(best[1])):
            best = (threshold, speed, change)
    return best


def goal(results: list[dict], task: str, metric: str) -> str:
    """Issue 17's goal, judged against the seeds' noise: a threshold whose paired change from the full model is
    within ±1 point (`stats.within`: mean ± 2 standard errors inside) and whose measured speed-up is above 2x by
    more than two standard errors (`stats.verdict`); the verdict is the speed-up's at the fastest such threshold."""
    best = fastest_within(results, task, metric)
    name = ("Goal (within ±1 point of the full model and at least 2x faster, measured; each beyond 2 standard errors "
            "over the seeds)")
    if best is None:
        return f"{name}: missed; no threshold is shown within ±1 point (beyond two standard errors)."
    threshold, speed, change = best
    return (f"{name}: {verdict(speed, 2.0)}; the fastest threshold within ±1 point is {threshold:g}, "
            f"{mean_std_cell([100 * c for c in change], signed=True, digits=2)} points, speed-up "
            f"{mean_std_cell(speed, digits=2)}.")


def plot(results: list[dict], path: Path) -> None:
    """Dev score against the measured speed-up over the full model, one curve per task, thresholds annotated."""
    drawn = task_panels(results, 4.5, 3.6)
    if drawn is None:
        return
    fig, panels = drawn
    for ax, task in panels:
        metric = next(r["metric"] for r in results if r["task"] == task and metric_rank(task, r["metric"]) == 0)
        points = []
        for threshold in sorted({r["threshold"] for r in results if r["task"] == task}):
            mine, _ = _cells(results, task, metric, threshold)
            points.append((threshold, statistics.mean(r["full_host_ms"] / r["host_ms"] for r in mine),
                           statistics.mean(r["value"] for r in mine),
                           statistics.stdev([r["value"] for r in mine]) if len(mine) > 1 else 0.0))
        xs, ys, es = [p[1] for p in points], [p[2] for p in points], [p[3] for p in points]
        ax.errorbar(xs, ys, yerr=es, fmt="o-", capsize=3)
        for t, x, y, _ in points:
            ax.annotate(f"{t:g}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axhline(ys[0] - 0.01, color="grey", lw=0.8, ls="--", label="1 point below threshold 0")
        ax.axvline(2.0, color="grey", lw=0.8, ls=":", label="2x faster")
        ax.legend(fontsize=7, loc="lower left")
        ax.set_title(f"{task} dev ({metric}); labels: threshold")
        ax.set_xlabel("measured host speed-up over the full .tflite")
    panels[0][0].set_ylabel("dev score, mean ± std over seeds")
    fig.tight_layout()
    save_png(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.early_exit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/early_exit", "docs/results/early_exit.json", list(TASKS), TASKS,
                     plot="docs/early_exit.png")
    p.add_argument("--stages", default="runs/teacher_value", help="where issue 13's fine-tuned teachers are")
    args = p.parse_args(argv)
    out, stages = (REPO_ROOT / args.out).resolve(), (REPO_ROOT / args.stages).resolve()
    failed = []
    if not (args.table or args.collect):
        plan = jobs(out, stages, args.tasks, args.seeds)
        failed = run_all(plan, args.workers, out / "logs")
        time_runs(plan)
        args.collect = True
    code = comparison(args, lambda: [], lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (list(TASKS).index(r["task"]), metric_rank(r["task"], r["metric"]), r["threshold"],
                                 r["seed"]), table, plot)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else code


if __name__ == "__main__":
    sys.exit(main())
