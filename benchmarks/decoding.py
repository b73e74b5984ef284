"""Per-token decoding time of the seq2seq students with and without the key/value cache (issue 79, item 3): in
PyTorch, one source at a time (as an app decodes), 1 thread, at the correction dev set's median and 95th-percentile
source and target lengths in word pieces; each preset's two ways interleaved, repeat by repeat, in one process, so
that a drift of the shared host touches both alike. The weights are random (the time of a step does not depend on
them); every step runs, as if the end token never came, so both ways decode the same number of positions.

    python -m benchmarks.decoding                  # a minute or two on 2 cores; rows to docs/results/decoding.json
    python -m benchmarks.decoding --table --write  # the table into docs/seq2seq.md

Rows: task, method ("cache" or "no-cache"), seed (0), metric "ms_per_token" (the median over repeats of a whole
decode's time over its positions), value, the preset, the lengths, threads and host; and per preset and length
the ratio ("cache-speedup").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from benchmarks.runner import merge_rows, show_table, table_flags
from mobilekd.fileio import REPO_ROOT
from mobilekd.host import identity

PRESETS = ("seq2seq_tiny", "seq2seq_small")
REPEATS = 7


QUANTILES = {"median": 50, "p95": 95}  # the lengths measured: the dev set's median, and its long tail


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
        token = model.logits(next_states(model, memory, mask, prefix, kept)).argmax(-1)
        prefix = torch.cat([prefix, token[:, None]], 1)
    return time.perf_counter() - start


def measure() -> list[dict]:
    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.seq2seq import new_seq2seq

    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    host = identity()
    rows = []
    for (length, (source_len, target_len)), preset in ((lq, p) for lq in dev_lengths(tokenizer).items()
                                                       for p in PRESETS):
        torch.manual_seed(0)
        model = new_seq2seq(preset, tokenizer).eval()
        source = torch.randint(1000, 5000, (1, source_len))
        for cache in (True, False):  # one warm-up each
            decode_seconds(model, source, target_len, cache)
        times = {True: [], False: []}
        for _ in range(REPEATS):
            for cache in (True, False):
                times[cache].append(decode_seconds(model, source, target_len, cache))
        ms = {c: statistics.median(t) / target_len * 1000 for c, t in times.items()}
        shared = {"task": "correction", "seed": 0, "preset": preset, "length": length, "source_len": source_len,
                  "target_len": target_len, "threads": 1, "repeats": REPEATS, "host": host["id"],
                  "host_fields": host}
        rows += [{**shared, "method": "cache" if c else "no-cache", "metric": "ms_per_token", "value": round(v, 3)}
                 for c, v in ms.items()]
        rows.append({**shared, "method": "cache-speedup", "metric": "ratio",
                     "value": round(ms[False] / ms[True], 2)})
        print(f"{preset}, {length} lengths: {ms[True]:.2f} ms a token with the cache, {ms[False]:.2f} without "
              f"({ms[False] / ms[True]:.2f}x)")
    return rows


def table(results: list[dict]) -> str:
    lines = ["| student | dev lengths: source / target (word pieces) | with the cache | whole prefix | speed-up | "
             "host |", "|---|---|---|---|---|---|"]
    for preset, length, host in dict.fromkeys((r["preset"], r["length"], r["host"]) for r in results):
        mine = {r["method"]: r for r in results if (r["preset"], r["length"], r["host"]) == (preset, length, host)}
        if {"cache", "no-cache", "cache-speedup"} <= set(mine):
            c = mine["cache"]
            lines.append(f"| {preset} | {length}: {c['source_len']} / {c['target_len']} | "
                         f"{c['value']:.2f} ms a token | "
                         f"{mine['no-cache']['value']:.2f} ms a token | {mine['cache-speedup']['value']:.2f}x | "
                         f"{host} |")
    return "\n".join(lines) + ("\n\nHost-measured in PyTorch, 1 thread, batch 1, the median of "
                               f"{results[0]['repeats'] if results else REPEATS} interleaved repeats; not a phone "
                               "figure.\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.decoding", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, "docs/results/decoding.json")
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        merge_rows(path, measure(), lambda r: (list(QUANTILES).index(r["length"]), PRESETS.index(r["preset"]),
                                               r["method"]), key=("task", "preset", "length", "method", "metric"))
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
