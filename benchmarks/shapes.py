"""Student shapes for a 384-wide teacher, priced before any training (issue 78, item 3): each preset's parameters,
FLOPs and Pixel 4 ESTIMATE (android_bench.budget.estimate_shape: the cost model calibrated on the paper's
MobileBERT, as `mobilekd ship` prices its candidates) at the lengths the benchmarks run, beside the teacher's shape
(all-MiniLM-L6-v2: BERT, 6 x 384), TinyBERT's and the paper's MobileBERT and MobileBERT_TINY.

    python -m benchmarks.shapes                    # a few minutes (one conversion a shape and length)
    python -m benchmarks.shapes --table --write    # the table into docs/latency.md

Rows (docs/results/shapes.json): task "any" (the shape's cost does not depend on it), method the shape, seed 0,
metric `pixel4_ms_est`, `gflops` or `params_m`, value, `seq_len`. Estimates, not measurements: they name no host.
"""

from __future__ import annotations

import sys

from benchmarks.command import measured_here
from mobilekd.models.presets import PRESETS

TEACHER = "minilm_l6"  # all-MiniLM-L6-v2's shape, the demo's teacher
SHAPES = (TEACHER, "tinybert4_h156", "mobilebert_h384", "mobilebert_h384_l4", "mobilebert_tiny_h384",
          "mobilebert_tiny_h384_l4", "mobilebert", "mobilebert_tiny")
LENGTHS = (64, 128)
METRICS = ("pixel4_ms_est", "gflops", "params_m")


def config(name: str):
    if name == TEACHER:
        return PRESETS["bert_base"].config.replace(hidden_size=384, embedding_size=384, intra_bottleneck_size=384,
                                                   intermediate_size=1536, num_hidden_layers=6)
    return PRESETS[name].config


def measure() -> list[dict]:
    from android_bench.budget import estimate_shape

    rows = []
    for seq_len in LENGTHS:
        for name in SHAPES:
            got = estimate_shape(config(name), seq_len)
            values = {"pixel4_ms_est": got["ms"], "gflops": got["gflops"], "params_m": got["params_m"]}
            rows += [{"task": "any", "method": name, "seed": 0, "metric": m, "value": values[m], "seq_len": seq_len,
                      "kind": "estimate"} for m in METRICS]
            print(f"{name} at {seq_len}: {got['ms']:.2f} ms (est.), {got['gflops']:.2f} GFLOPs, "
                  f"{got['params_m']:.1f}M")
    return rows


def table(results: list[dict]) -> str:
    def value(name, metric, seq_len):
        return next((r["value"] for r in results if (r["method"], r["metric"], r["seq_len"]) == (name, metric,
                                                                                              seq_len)), None)
    teacher = {n: value(TEACHER, "pixel4_ms_est", n) for n in LENGTHS}
    lines = ["| shape | what | params | " + " | ".join(f"GFLOPs at {n} | Pixel 4 at {n} (est.) | share of the "
                                                       f"teacher's" for n in LENGTHS) + " |",
             "|---|---|---|" + "---|---|---|" * len(LENGTHS)]
    for name in SHAPES:
        if value(name, "params_m", LENGTHS[0]) is None:
            continue
        what = "all-MiniLM-L6-v2's shape (BERT, 6 x 384)" if name == TEACHER else PRESETS[name].description
        cells = []
        for n in LENGTHS:
            ms = value(name, "pixel4_ms_est", n)
            cells += [f"{value(name, 'gflops', n):.2f}", f"{ms:.2f} ms",
                      f"{ms / teacher[n]:.2f}" if teacher[n] else "-"]
        lines.append(f"| `{name}` | {what} | {value(name, 'params_m', LENGTHS[0]):.1f}M | " + " | ".join(cells) + " |")
    return "\n".join(lines) + ("\n\nPixel 4 figures are ESTIMATES of the cost model (4 threads, fp32), not "
                               "measurements; GFLOPs as the cost model counts them from the converted graph. "
                               "`mobilekd ship`'s default budget is a third of the teacher's estimate.\n")


def main(argv=None):
    return measured_here("python -m benchmarks.shapes", __doc__, "docs/results/shapes.json", measure,
                         lambda r: (r["seq_len"], SHAPES.index(r["method"]), METRICS.index(r["metric"])),
                         ("task", "method", "metric", "seq_len"), table, argv)


if __name__ == "__main__":
    sys.exit(main())
