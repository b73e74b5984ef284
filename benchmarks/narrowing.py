"""Does DynaBERT's importance pick the neurons worth keeping? The quality benchmark's adapted teacher with every FFN
narrowed (mobilekd/models/narrow.py) to its most important neurons, against the same width kept at random, scored
by held-out masked-LM accuracy with no training after the cut; rows to docs/results/narrowing.json.

    python -m benchmarks.narrowing                  # 6 CPU-minutes, one thread, once benchmarks.quality's teacher is
    python -m benchmarks.narrowing --table --write  # and put the table between its markers in docs/quality.md

Rows: task `mlm` (the held-out examples of the shipped corpora, the first EXAMPLES, fixed masks), method `full`
(every neuron), `importance` (the scores summed over the first EXAMPLES training examples, as `mobilekd init
--intermediate-size` computes them) or `random` (a seed's uniform scores), the width kept (`intermediate_size`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.command import comparison, comparison_flags
from benchmarks.stats import mean_std_cell
from mobilekd.fileio import REPO_ROOT, read_json, write_json
from mobilekd.host import identity

SIZES = (1280, 1024, 768)
EXAMPLES = 512
KEY = ("task", "method", "seed", "metric", "intermediate_size")


def measure(teacher: Path, seeds: list[int], out: Path) -> None:
    """Every row, once (OUT/rows.json marks them done: the pass is not resumed part way, and is made again when
    it holds other seeds than those asked)."""
    if (out / "rows.json").is_file() and {r["seed"] for r in read_json(out / "rows.json")
                                          if r["method"] == "random"} == set(seeds):
        return
    import torch

    from mobilekd.data.pretraining import DEFAULT_CACHE, load_pretraining_data
    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.hf import load_pretrained
    from mobilekd.models.narrow import importance_over, narrow_ffns
    from mobilekd.train.common import SHIPPED_CORPORA
    from mobilekd.train.evaluate import evaluate_pretraining

    torch.set_num_threads(1)
    model = load_pretrained(teacher, "pretraining", require_head=True)
    data = load_pretraining_data(SHIPPED_CORPORA, load_tokenizer(teacher), 128, 0, DEFAULT_CACHE)
    start = time.perf_counter()
    scores = importance_over(model, data.train, EXAMPLES)
    seconds = round(time.perf_counter() - start, 1)

    def row(method, seed, size, m):
        acc = evaluate_pretraining(m, data.heldout, data.meta["most_frequent_token"], EXAMPLES)["mlm_accuracy"]
        return {"task": "mlm", "method": method, "seed": seed, "metric": "mlm_accuracy", "value": round(acc, 4),
                "intermediate_size": size, "teacher": str(teacher.relative_to(REPO_ROOT)
                                                           if teacher.is_relative_to(REPO_ROOT) else teacher)}

    found = [row("full", 0, model.config.intermediate_size, model)]
    for size in SIZES:
        found.append({**row("importance", 0, size, narrow_ffns(model, size, scores)), "importance_seconds": seconds,
                      "host": identity()["id"], "host_fields": identity()})
        for seed in seeds:
            g = torch.Generator().manual_seed(seed)
            drawn = [[torch.rand(s.shape, generator=g) for s in layer] for layer in scores]
            found.append(row("random", seed, size, narrow_ffns(model, size, drawn)))
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "rows.json", found)


def table(results: list[dict]) -> str:
    if not results:
        return "no rows yet"
    full = next((r["value"] for r in results if r["method"] == "full"), None)
    lines = [f"| FFN neurons kept (of {max(r['intermediate_size'] for r in results)}) | by importance | at random, "
             "mean ± std over seeds | importance - random |", "|---|---|---|---|"]
    for size in sorted({r["intermediate_size"] for r in results if r["method"] != "full"}, reverse=True):
        mine = [r["value"] for r in results if (r["method"], r["intermediate_size"]) == ("importance", size)]
        rand = [r["value"] for r in results if (r["method"], r["intermediate_size"]) == ("random", size)]
        diff = f"{mine[0] - statistics.mean(rand):+.4f}" if mine and rand else "-"
        lines.append(f"| {size} | {f'{mine[0]:.4f}' if mine else '-'} | {mean_std_cell(rand) if rand else '-'} | "
                     f"{diff} |")
    every = f"; every neuron: {full:.4f}" if full is not None else ""
    return "\n".join(lines) + f"\n\nHeld-out masked-LM accuracy, no training after the cut{every}.\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.narrowing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="runs/quality/teacher", help="the model narrowed (default: benchmarks."
                                                                     "quality's adapted teacher)")
    comparison_flags(p, "runs/narrowing", "docs/results/narrowing.json")
    args = p.parse_args(argv)
    teacher, out = (REPO_ROOT / args.teacher).resolve(), (REPO_ROOT / args.out).resolve()
    if not (args.table or args.collect) and not (teacher / "model.safetensors").is_file():
        print(f"error: {teacher}: no model here (run python -m benchmarks.quality first, or pass --teacher)",
              file=sys.stderr)
        return 2

    def plan():
        measure(teacher, args.seeds, out)
        return []

    def found():
        return read_json(out / "rows.json") if (out / "rows.json").is_file() else []

    return comparison(args, plan, found, lambda r: (SIZES.index(r["intermediate_size"])
                                                     if r["intermediate_size"] in SIZES else -1, r["method"],
                                                     r["seed"]), table, key=KEY)


if __name__ == "__main__":
    sys.exit(main())
