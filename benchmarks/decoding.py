"""Per-token decoding time of the seq2seq students with and without the key/value cache (issue 79, item 3): in
PyTorch, one source at a time (as an app decodes), 1 thread, at the correction dev set's median and 95th-percentile
source and target lengths in word pieces; each preset's two ways interleaved, repeat by repeat, in one process, so
that a drift of the shared host touches both alike. The weights are random (the time of a step does not depend on
them); every step runs, as if the end token never came, so both ways decode the same number of positions.

    python -m benchmarks.decoding                  # a minute or two on 2 cores; rows to docs/results/decoding.json
    python -m benchmarks.decoding --table --write  # the table into docs/seq2seq.md

The exported `.tflite` is timed the same way (`GreedyFile`, the app's loop on the LiteRT interpreter, 1 thread):
the file with the cache in its `decode` signature against the earlier format, whose `decode` reruns the decoder
over the whole prefix of the file's target length (64, the correction task's `--max-len`), each with the Pixel 4
ESTIMATE of a token (the cost model over the operators of the same decode, encode and one decode step a token,
`sentence_graph`, divided by its tokens).

Rows: task, method ("cache" or "no-cache"), seed (0), metric "ms_per_token" (the median over repeats of a whole
decode's time over its positions), value, the preset, the lengths, threads, `runtime` ("pytorch" or "litert") and
host; for the files also "pixel4_ms_per_token_est"; and per preset, length and runtime the ratio
("cache-speedup").
"""

from __future__ import annotations

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

PRESETS = ("seq2seq_tiny", "seq2seq_small")
REPEATS = 7
FILE_LEN = 64  # the exported files' source and target length: the correction task's --max-len (data/pairs.py)


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


def file_seconds(runner, source_len: int, steps: int) -> float:
    """One greedy decode of `steps` tokens through the file (`GreedyFile.generate`, not stopping at [SEP])."""
    ids, mask = np.zeros((1, runner.source_len), np.int32), np.zeros((1, runner.source_len), np.int32)
    ids[0, :source_len], mask[0, :source_len] = np.arange(1000, 1000 + source_len), 1
    start = time.perf_counter()
    runner.generate(ids, mask, steps, stop=False)
    return time.perf_counter() - start


def file_rows(model, preset: str, shared: dict, source_len: int, target_len: int, folder) -> list[dict]:
    """Both file formats of `model`, timed interleaved per token, with their Pixel 4 estimates per token."""
    from android_bench import estimate as cost
    from android_bench.budget import efficiency
    from mobilekd.export.seq2seq import GreedyFile, convert_seq2seq, sentence_graph

    paths = {c: folder / f"{preset}-{'cache' if c else 'prefix'}.tflite" for c in (True, False)}
    for c, path in paths.items():  # once a preset, whatever the lengths timed
        if not path.is_file():
            convert_seq2seq(model, FILE_LEN, FILE_LEN, path, cache=c)
    runners = {c: GreedyFile(p, model.config.bos_token_id, -1, threads=1) for c, p in paths.items()}
    for c in runners:  # one warm-up each
        file_seconds(runners[c], source_len, target_len)
    times = {True: [], False: []}
    for _ in range(REPEATS):
        for c in runners:
            times[c].append(file_seconds(runners[c], source_len, target_len))
    rows = []
    for c, path in paths.items():
        est = cost.estimate(cost.op_costs(sentence_graph(path, target_len)), cost.load_profile("pixel4"), 4,
                            efficiency())
        rows.append({**shared, "runtime": "litert", "method": "cache" if c else "no-cache", "metric": "ms_per_token",
                     "value": round(statistics.median(times[c]) / target_len * 1000, 3),
                     "pixel4_ms_per_token_est": round(est["ms"] / target_len, 3), "file_len": FILE_LEN})
    rows.append({**shared, "runtime": "litert", "method": "cache-speedup", "metric": "ratio", "file_len": FILE_LEN,
                 "value": round(rows[1]["value"] / rows[0]["value"], 2),
                 "pixel4_ratio_est": round(rows[1]["pixel4_ms_per_token_est"] / rows[0]["pixel4_ms_per_token_est"],
                                           2)})
    print(f"{preset} file, {shared['length']} lengths: {rows[0]['value']:.2f} ms a token with the cache, "
          f"{rows[1]['value']:.2f} without; Pixel 4 est. {rows[0]['pixel4_ms_per_token_est']:.2f} against "
          f"{rows[1]['pixel4_ms_per_token_est']:.2f}")
    return rows


def measure() -> list[dict]:
    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.seq2seq import new_seq2seq

    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    host = identity()
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="decoding-"))  # the files are timed, not kept
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
        rows += [{**shared, "runtime": "pytorch", "method": "cache" if c else "no-cache", "metric": "ms_per_token",
                  "value": round(v, 3)} for c, v in ms.items()]
        rows.append({**shared, "runtime": "pytorch", "method": "cache-speedup", "metric": "ratio",
                     "value": round(ms[False] / ms[True], 2)})
        print(f"{preset}, {length} lengths: {ms[True]:.2f} ms a token with the cache, {ms[False]:.2f} without "
              f"({ms[False] / ms[True]:.2f}x)")
        rows += file_rows(model, preset, shared, source_len, target_len, folder)
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def table(results: list[dict]) -> str:
    lines = ["| student | runtime | dev lengths: source / target (word pieces) | with the cache | whole prefix | "
             "speed-up | Pixel 4 a token, est. (cache / prefix) | host |", "|---|---|---|---|---|---|---|---|"]
    def group(r):
        return r["preset"], r.get("runtime", "pytorch"), r["length"], r["host"]

    for preset, runtime, length, host in dict.fromkeys(map(group, results)):
        mine = {r["method"]: r for r in results if group(r) == (preset, runtime, length, host)}
        if {"cache", "no-cache", "cache-speedup"} <= set(mine):
            c, n = mine["cache"], mine["no-cache"]
            pixel = (f"{c['pixel4_ms_per_token_est']:.2f} / {n['pixel4_ms_per_token_est']:.2f} ms "
                     f"({mine['cache-speedup']['pixel4_ratio_est']:.2f}x)" if "pixel4_ms_per_token_est" in c else "-")
            where = "PyTorch" if runtime == "pytorch" else f"LiteRT file ({c['file_len']} / {c['file_len']})"
            lines.append(f"| {preset} | {where} | {length}: {c['source_len']} / {c['target_len']} | "
                         f"{c['value']:.2f} ms a token | {n['value']:.2f} ms a token | "
                         f"{mine['cache-speedup']['value']:.2f}x | {pixel} | {host} |")
    return "\n".join(lines) + ("\n\nHost-measured, 1 thread, batch 1, the median of "
                               f"{results[0]['repeats'] if results else REPEATS} interleaved repeats; a file's "
                               "source and target are padded to its length, so its times do not depend on the "
                               "dev lengths but for the number of tokens. Pixel 4 figures are ESTIMATES of the "
                               "cost model, not measurements.\n")


def main(argv=None):
    return measured_here("python -m benchmarks.decoding", __doc__, "docs/results/decoding.json", measure,
                         lambda r: (r.get("runtime", ""), list(QUANTILES).index(r["length"]),
                                    PRESETS.index(r["preset"]), r["method"]),
                         ("task", "preset", "length", "runtime", "method", "metric"), table, argv)


if __name__ == "__main__":
    sys.exit(main())
