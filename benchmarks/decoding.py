"""Per-token decoding time of the seq2seq students with and without the key/value cache (issue 79, item 3): in
PyTorch, one source at a time (as an app decodes), 1 thread, at the correction dev set's median and 95th-percentile
source and target lengths in word pieces; each preset's two ways interleaved, repeat by repeat, in one process, so
that a drift of the shared host touches both alike. The weights are random (the time of a step does not depend on
them); every step runs, as if the end token never came, so both ways decode the same number of positions.

    python -m benchmarks.decoding                  # a minute or two on 2 cores; rows to docs/results/decoding.json
    python -m benchmarks.decoding --table --write  # the table into docs/seq2seq.md

The exported `.tflite` is timed the same way (`GreedyFile`, the app's loop on the LiteRT interpreter, 1 thread):
the file with the cache in its `decode` signature against the earlier format, whose `decode` reruns the decoder
over the whole prefix of the file's target length (64, the correction task's `--max-len`), in each weight format
`mobilekd export` writes for a seq2seq model (`SEQ2SEQ_QUANTIZE`: float32, fp16, dynamic-range int8), all six
files interleaved; each with the Pixel 4 ESTIMATE of a token (the cost model over the operators of the same decode,
encode and one decode step a token, `sentence_graph`, divided by its tokens).

Rows: task, method ("cache" or "no-cache"; PyTorch's also "output-layer", the output layer alone over one state,
`step_logits`, a decode's worth of passes: the part of a token no cache shortens), seed (0), metric "ms_per_token"
(the median over repeats of a whole decode's time over its positions), value, the preset, the lengths, threads,
`runtime` ("pytorch" or "litert"), PyTorch's `output_layer` (OUTPUT_LAYER: which output layer they timed; runs
before it have none), for the files `quantize` and "pixel4_ms_per_token_est"; per preset, length, runtime and file
the ratio ("cache-speedup"); and every row the host, when the command ran (`measured`) and the host's one-minute
load average as it began and as it ended (`load`, `load_end`: what else was running, or had just run: a run right
after another reads some of its load). A run again is kept beside the earlier ones (the key holds `measured`): a
timing on a shared host varies from run to run, and the table gives each way's speed-up over the runs (median,
range, how many reach GOAL), the latest run's milliseconds, and the runs by date and load.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.command import measured_here
from mobilekd.host import identity
from mobilekd.recipes.export import SEQ2SEQ_QUANTIZE

PRESETS = ("seq2seq_tiny", "seq2seq_small")
REPEATS = 7
FILE_LEN = 64  # the exported files' source and target length: the correction task's --max-len (data/pairs.py)


QUANTILES = {"median": 50, "p95": 95}  # the lengths measured: the dev set's median, and its long tail
METHODS = {True: "cache", False: "no-cache", "output": "output-layer"}
# which output layer PyTorch's rows timed: `Seq2SeqTransformer.step_logits`' transposed table at one row (rows
# before it, without the field, timed `logits`' pass over the (V, width) table)
OUTPUT_LAYER = "transposed"


def dev_lengths(tokenizer) -> dict[str, tuple[int, int]]:
    """The correction dev set's source and target (with [SEP]) lengths in word pieces at each of QUANTILES."""
    from mobilekd.data.pairs import load_pairs
    from mobilekd.data.seq2seq import word_pieces

    dev = load_pairs("correction").dev
    sources, targets = (word_pieces(tokenizer, [getattr(p, side) for p in dev]) for side in ("source", "target"))
    return {name: (int(np.percentile([len(s) for s in sources], q)),
                   int(np.percentile([len(t) for t in targets], q)) + 1) for name, q in QUANTILES.items()}


@torch.no_grad()
def decode_seconds(model, source: torch.Tensor, steps: int, cache: bool) -> float:
    """The seconds of one greedy decode of `steps` positions (`decoding.next_states`: the cached step, or the
    whole prefix), the end token ignored."""
    from mobilekd.models.decoding import next_states
    from mobilekd.models.seq2seq import DecoderCache

    start = time.perf_counter()
    mask = torch.ones_like(source)
    memory = model.encode(source, mask)
    prefix = torch.full((1, 1), model.config.bos_token_id)
    kept = DecoderCache(len(model.decoder)) if cache else None
    for _ in range(steps):
        token = model.step_logits(next_states(model, memory, mask, prefix, kept)).argmax(-1)
        prefix = torch.cat([prefix, token[:, None]], 1)
    return time.perf_counter() - start


@torch.no_grad()
def output_layer_seconds(model, steps: int) -> float:
    """The seconds of `steps` passes of the output layer alone over one state (`step_logits`, as a decode's steps
    run it): the part of a token the cache cannot shorten."""
    states = torch.randn(1, model.config.d_model)
    start = time.perf_counter()
    for _ in range(steps):
        model.step_logits(states).argmax(-1)
    return time.perf_counter() - start


def file_seconds(runner, source_len: int, steps: int) -> float:
    """One greedy decode of `steps` tokens through the file (`GreedyFile.generate`, not stopping at [SEP])."""
    ids, mask = np.zeros((1, runner.source_len), np.int32), np.zeros((1, runner.source_len), np.int32)
    ids[0, :source_len], mask[0, :source_len] = np.arange(1000, 1000 + source_len), 1
    start = time.perf_counter()
    runner.generate(ids, mask, steps, stop=False)
    return time.perf_counter() - start


def file_rows(model, preset: str, shared: dict, source_len: int, target_len: int, folder) -> list[dict]:
    """Both file formats of `model` in each weight format (SEQ2SEQ_QUANTIZE), timed interleaved per token, with
    their Pixel 4 estimates per token."""
    from android_bench import estimate as cost
    from android_bench.budget import efficiency
    from mobilekd.export.litert import quantized_copy
    from mobilekd.export.seq2seq import GreedyFile, convert_seq2seq, sentence_graph

    paths = {}
    for c in (True, False):  # once a preset, whatever the lengths timed
        for quantize in SEQ2SEQ_QUANTIZE:
            paths[quantize, c] = path = folder / f"{preset}-{'cache' if c else 'prefix'}-{quantize}.tflite"
            if not path.is_file():
                if quantize == "none":
                    convert_seq2seq(model, FILE_LEN, FILE_LEN, path, cache=c)
                else:
                    quantized_copy(paths["none", c], path, quantize)
    runners = {k: GreedyFile(p, model.config.bos_token_id, -1, threads=1) for k, p in paths.items()}
    for runner in runners.values():  # one warm-up each
        file_seconds(runner, source_len, target_len)
    times = {k: [] for k in runners}
    for _ in range(REPEATS):
        for k, runner in runners.items():
            times[k].append(file_seconds(runner, source_len, target_len))
    rows = []
    for quantize in SEQ2SEQ_QUANTIZE:
        mine = []
        for c in (True, False):
            est = cost.estimate(cost.op_costs(sentence_graph(paths[quantize, c], target_len)),
                                cost.load_profile("pixel4"), 4, efficiency())
            mine.append({**shared, "runtime": "litert", "quantize": quantize, "method": "cache" if c else "no-cache",
                         "metric": "ms_per_token", "value": round(statistics.median(times[quantize, c]) / target_len
                                                                  * 1000, 3),
                         "pixel4_ms_per_token_est": round(est["ms"] / target_len, 3), "file_len": FILE_LEN})
        cached, prefix = mine
        mine.append({**shared, "runtime": "litert", "quantize": quantize, "method": "cache-speedup", "metric": "ratio",
                     "file_len": FILE_LEN, "value": round(prefix["value"] / cached["value"], 2),
                     "pixel4_ratio_est": round(prefix["pixel4_ms_per_token_est"] / cached["pixel4_ms_per_token_est"],
                                               2)})
        print(f"{preset} file ({quantize}), {shared['length']} lengths: {cached['value']:.2f} ms a token with the "
              f"cache, {prefix['value']:.2f} without; Pixel 4 est. {cached['pixel4_ms_per_token_est']:.2f} against "
              f"{prefix['pixel4_ms_per_token_est']:.2f}")
        rows += mine
    return rows


def measure() -> list[dict]:
    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.seq2seq import new_seq2seq

    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    host = identity()
    measured, load = time.strftime("%Y-%m-%dT%H:%M:%S"), round(os.getloadavg()[0], 2)
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="decoding-"))  # the files are timed, not kept
    for (length, (source_len, target_len)), preset in ((lq, p) for lq in dev_lengths(tokenizer).items()
                                                       for p in PRESETS):
        torch.manual_seed(0)
        model = new_seq2seq(preset, tokenizer).eval()
        source = torch.randint(1000, 5000, (1, source_len))
        for cache in (True, False):  # one warm-up each
            decode_seconds(model, source, target_len, cache)
        times = {True: [], False: [], "output": []}
        for _ in range(REPEATS):
            for cache in (True, False):
                times[cache].append(decode_seconds(model, source, target_len, cache))
            times["output"].append(output_layer_seconds(model, target_len))
        ms = {c: statistics.median(t) / target_len * 1000 for c, t in times.items()}
        shared = {"task": "correction", "seed": 0, "preset": preset, "length": length, "source_len": source_len,
                  "target_len": target_len, "threads": 1, "repeats": REPEATS, "host": host["id"],
                  "host_fields": host, "measured": measured, "load": load}
        torch_rows = {**shared, "runtime": "pytorch", "output_layer": OUTPUT_LAYER}
        rows += [{**torch_rows, "method": METHODS[c], "metric": "ms_per_token", "value": round(v, 3)}
                 for c, v in ms.items()]
        rows.append({**torch_rows, "method": "cache-speedup", "metric": "ratio",
                     "value": round(ms[False] / ms[True], 2)})
        print(f"{preset}, {length} lengths: {ms[True]:.2f} ms a token with the cache, {ms[False]:.2f} without "
              f"({ms[False] / ms[True]:.2f}x); the output layer alone {ms['output']:.2f}")
        rows += file_rows(model, preset, shared, source_len, target_len, folder)
    shutil.rmtree(folder, ignore_errors=True)
    ended = round(os.getloadavg()[0], 2)  # what ran beside it, as it ended (the start's alone misses a job begun since)
    return [{**r, "load_end": ended} for r in rows]


WEIGHTS = {"none": "float32", "fp16": "fp16", "dynamic-int8": "dynamic int8"}
PYTORCH = {None: "PyTorch (output layer over the (V, width) table)",
           OUTPUT_LAYER: "PyTorch (output layer over its transpose, `step_logits`)"}
GOAL = 3  # issue 79: a token at least 3x faster with the cache than without, at the dev set's median length


def table(results: list[dict]) -> str:
    """One line per host, student, runtime, weight format and length, over every run kept there (a run: one
    invocation, its `measured`): the speed-up's median over the runs, its range and how many runs reach GOAL, beside
    the latest run's milliseconds (each run's own two ways, which its speed-up divides); then the runs, each with
    its load."""
    lines = ["| student | runtime | weights | dev lengths: source / target (word pieces) | latest run: with the "
             f"cache | whole prefix | speed-up over the runs: median [lowest, highest] | runs at {GOAL:g}x or more | "
             "Pixel 4 a token, est. (cache / prefix) | host |", "|---|---|---|---|---|---|---|---|---|---|"]

    def group(r):
        return r["host"], r.get("runtime", "pytorch"), r["length"], r["preset"], r.get("quantize"), \
            r.get("output_layer")

    ordered = sorted(results, key=lambda r: (r["host"], order(r)[1:], r["measured"]))
    for host, runtime, length, preset, quantize, output_layer in dict.fromkeys(map(group, ordered)):
        mine = [r for r in ordered if group(r) == (host, runtime, length, preset, quantize, output_layer)]
        runs = {}
        for r in mine:
            runs.setdefault(r["measured"], {})[r["method"]] = r
        runs = [m for m in runs.values() if {"cache", "no-cache", "cache-speedup"} <= set(m)]
        if not runs:
            continue
        c, n = runs[-1]["cache"], runs[-1]["no-cache"]
        ratios = [m["cache-speedup"]["value"] for m in runs]
        pixel = (f"{c['pixel4_ms_per_token_est']:.2f} / {n['pixel4_ms_per_token_est']:.2f} ms "
                 f"({runs[-1]['cache-speedup']['pixel4_ratio_est']:.2f}x)" if "pixel4_ms_per_token_est" in c else "-")
        where = PYTORCH[output_layer] if runtime == "pytorch" else \
            f"LiteRT file ({c['file_len']} / {c['file_len']})"
        alone = runs[-1].get("output-layer")
        alone = f" (its output layer {alone['value']:.2f})" if alone else ""
        lines.append(f"| {preset} | {where} | {WEIGHTS.get(quantize or 'none', quantize)} | "
                     f"{length}: {c['source_len']} / {c['target_len']} | {c['value']:.2f} ms a token{alone} | "
                     f"{n['value']:.2f} ms a token | {statistics.median(ratios):.2f}x [{min(ratios):.2f}, "
                     f"{max(ratios):.2f}] | {sum(x >= GOAL for x in ratios)} of {len(ratios)} | {pixel} | {host} |")
    every = {(r["measured"], r["host"]): (r.get("load"), r.get("load_end")) for r in results}
    said = "; ".join(f"{m} on {h} (load {'not recorded' if load is None else f'{load:.2f}'}"
                     f"{'' if ended is None else f', {ended:.2f} as it ended'})"
                     for (m, h), (load, ended) in sorted(every.items()))
    return "\n".join(lines) + ("\n\nHost-measured, 1 thread, batch 1; in each run the median of "
                               f"{results[0]['repeats'] if results else REPEATS} interleaved repeats (a run's files "
                               "interleaved with each other, its PyTorch ways with each other; where PyTorch's "
                               "output layer was timed alone, its milliseconds a token follow the cached ones in "
                               "brackets: the part of a token no cache shortens). A file's source and target are "
                               "padded to its length, so its times do not depend on the dev lengths but for the "
                               "number of tokens. Pixel 4 figures "
                               "are ESTIMATES of the cost model, not measurements (the same for every run). Every run "
                               f"is kept in the rows, each with the host's one-minute load average as it began (and as "
                               f"it ended, where recorded; 2 "
                               f"cores: about 1 is one other busy process; a run right after another reads some of "
                               f"its load): {said}.\n")


KEY = ("task", "preset", "length", "runtime", "quantize", "method", "metric", "measured")  # a run again: new rows


def order(r: dict):
    return (r["measured"], r.get("runtime", ""), list(QUANTILES).index(r["length"]), PRESETS.index(r["preset"]),
            SEQ2SEQ_QUANTIZE.index(r.get("quantize") or "none"), r["method"])


def main(argv=None):
    return measured_here("python -m benchmarks.decoding", __doc__, "docs/results/decoding.json", measure, order, KEY,
                         table, argv)


if __name__ == "__main__":
    sys.exit(main())
