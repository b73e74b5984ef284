"""The on-device runtimes side by side (issue 75, item 5): each student `benchmarks.ship` shipped (one per task and
seed) exported by `mobilekd export --quantize none dynamic-int8 --executorch` at the sequence length its search
priced, each file checked on the task's whole dev set against PyTorch and all three timed in one interleaved run
on this host (1 thread): LiteRT fp32, LiteRT dynamic-range int8, ExecuTorch fp32 with its XNNPACK delegate.

    python -m benchmarks.runtimes --ship runs/ship --tasks stsb-genre --seeds 0    # resumable
    python -m benchmarks.runtimes --table --write

Rows (docs/results/runtimes.json), one per file and metric: task, method (litert-fp32, litert-dynamic-int8,
executorch-fp32), seed, metric and value: agreement (the share of dev examples whose label equals PyTorch's),
accuracy (the file's dev accuracy), max_abs_diff (of its outputs, probabilities, from PyTorch's), size_mb, host_ms
(the median of 30 runs at 1 thread, files interleaved; its host named) and, for a `.tflite`, pixel4_ms_est (the
cost model's ESTIMATE; it reads `.tflite` graphs only); an ExecuTorch row names the operators XNNPACK left to
ExecuTorch's portable kernels (`fallback`). Every row of a run carries how its `.pte` captured attention
(`attention`, part of the row's key): "sdpa" (torch's fused op, whose decomposition XNNPACK does not take whole:
every run before the change), "explicit" (softmax as written, `mobilekd.models.blocks.explicit_attention`, with
4-D products) or "explicit-bmm" (the same with 3-D batched products: today's), so runs of each on the same students
stand side by side, each file's time read against LiteRT fp32's of its own run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import ROW_KEY, recorded_host
from benchmarks.runner import Job
from benchmarks.stats import mean_std_cell
from benchmarks.ship import TASKS, run_dir
from mobilekd.export.executorch import PTE_ATTENTION, PTE_FILE
from mobilekd.fileio import REPO_ROOT, read_json

FILES = {"litert-fp32": "model_none.tflite", "litert-dynamic-int8": "model_dynamic_int8.tflite",
         "executorch-fp32": PTE_FILE}
METRICS = ("agreement", "accuracy", "max_abs_diff", "size_mb", "host_ms", "pixel4_ms_est")
ATTENTIONS = ("sdpa", "explicit", PTE_ATTENTION)  # how a run's .pte captured attention, oldest first (its report's)
KEY = (*ROW_KEY, "attention")


def attention_of(row: dict) -> str:
    """How the row's run captured attention (a row collected before the field: "sdpa", as every run then)."""
    return row.get("attention") or "sdpa"


def rank(attention: str) -> int:
    """Its place among ATTENTIONS, oldest first; a form this code does not know, last."""
    return ATTENTIONS.index(attention) if attention in ATTENTIONS else len(ATTENTIONS)


def shipped(ship: Path, task: str, seed: int) -> Path | None:
    """A finished ship run's folder, or None."""
    folder = run_dir(ship, task, seed)
    return folder if (folder / "ship.json").is_file() else None


def jobs(out: Path, ship: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    found = []
    for task in tasks:
        for seed in seeds:
            folder = shipped(ship, task, seed)
            if folder is None:
                print(f"{task} seed {seed}: no finished ship run in {run_dir(ship, task, seed)}; skipped",
                      file=sys.stderr)
                continue
            max_len = read_json(folder / "ship.json")["budget"]["max_len"]
            found.append(Job(f"{task}/runtimes/{seed}", [
                "export", "--model", str(folder / "student"), "--quantize", "none", "dynamic-int8", "--executorch",
                "--max-len", str(max_len), "--parity-examples", "1000000", "--out", str(run_dir(out, task, seed))],
                run_dir(out, task, seed)))
    return found


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        for seed in seeds:
            path = run_dir(out, task, seed) / "parity.json"
            if not path.is_file():
                continue
            reports = read_json(path)
            attention = attention_of(reports.get(PTE_FILE, {}))  # a report without it: before the change
            for method, name in FILES.items():
                r = reports.get(name)
                if r is None or "timing" not in r:
                    continue
                timing = r["timing"]
                values = {"agreement": r.get("agreement"), "accuracy": r.get("accuracy_exported"),
                          "max_abs_diff": r["max_abs_diff"], "size_mb": round(r["size_bytes"] / 1e6, 2),
                          "host_ms": timing["host_ms_p50"], "pixel4_ms_est": timing.get("pixel4_ms_est")}
                base = {"task": task, "method": method, "seed": seed, "dev_examples": r["examples"],
                        "seq_len": r["seq_len"], "attention": attention, **({"fallback": r["xnnpack_undelegated"]}
                                                    if method == "executorch-fp32" else {})}
                found += [{**base, "metric": metric, "value": value,
                           **(recorded_host(timing) if metric == "host_ms" else {})}
                          for metric, value in values.items() if value is not None]
    return found


def table(results: list[dict]) -> str:
    lines = ["| task | run (its .pte's attention) | file | dev examples | same label as PyTorch | dev accuracy | "
             "max abs diff | MB | host ms (1 thread) | host time / LiteRT fp32's, same run | Pixel 4 ms (est.) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    host = {(r["task"], attention_of(r), r["method"], r["seed"]): r["value"] for r in results
            if r["metric"] == "host_ms"}
    groups = sorted({(r["task"], attention_of(r)) for r in results}, key=lambda g: (TASKS.index(g[0]), rank(g[1])))
    for task, attention in groups:
        for method in FILES:
            mine = [r for r in results if r["task"] == task and attention_of(r) == attention and r["method"] == method]
            if not mine:
                continue

            def cell(metric, digits=4):
                values = [r["value"] for r in mine if r["metric"] == metric]
                return mean_std_cell(values, digits=digits) if values else "-"
            diffs = [r["value"] for r in mine if r["metric"] == "max_abs_diff"]
            ratios = [host[(task, attention, method, seed)] / host[(task, attention, "litert-fp32", seed)]
                      for (t, a, m, seed) in host if (t, a, m) == (task, attention, method)
                      and (task, attention, "litert-fp32", seed) in host]
            lines.append(f"| {task} | {attention} | {method} | {mine[0]['dev_examples']:,} | {cell('agreement')} | "
                         f"{cell('accuracy')} | {max(diffs):.1e} | {cell('size_mb', 1)} | {cell('host_ms', 2)} | "
                         f"{mean_std_cell(ratios, digits=2) if ratios else '-'} | {cell('pixel4_ms_est', 1)} |")
    hosts = sorted({r["host"] for r in results if r["metric"] == "host_ms" and r.get("host")})
    fallback = {a: sorted({op for r in results if attention_of(r) == a and r.get("fallback") for op in r["fallback"]})
                for a in sorted({a for _, a in groups}, key=rank)}
    return "\n".join(lines) + (
        f"\n\nHost latency: medians of 30 runs at 1 thread, the three files of a run interleaved, on "
        f"{', '.join(f'`{h}`' for h in hosts)}; the seeds' mean ± std where several (each seed ships its own student "
        f"shape: the ratio to LiteRT fp32 in the same run is the figure to compare). Pixel figures are ESTIMATES of a "
        f"cost model. ExecuTorch left to its portable kernels, by how the `.pte` captured attention: " +
        "; ".join(f"{a}: {', '.join(ops) or 'nothing'}" for a, ops in fallback.items()) + ".\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.runtimes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/runtimes", "docs/results/runtimes.json", list(TASKS), TASKS)
    p.add_argument("--ship", default="runs/ship", help="where benchmarks.ship's runs are (default runs/ship)")
    p.set_defaults(workers=1)  # each export times its files: one at a time, so that no run slows another's
    args = p.parse_args(argv)
    out, ship = (REPO_ROOT / args.out).resolve(), (REPO_ROOT / args.ship).resolve()
    return comparison(args, lambda: jobs(out, ship, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (TASKS.index(r["task"]), rank(attention_of(r)),
                                 list(FILES).index(r["method"]), r["seed"], METRICS.index(r["metric"])), table, key=KEY)


if __name__ == "__main__":
    sys.exit(main())
