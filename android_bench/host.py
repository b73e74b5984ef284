"""Measured on this host: `.tflite` files through the LiteRT interpreter (XNNPACK) at given thread counts
(the program is `mobilekd host-bench a.tflite b.tflite --threads 1 2 4 --runs 30`).

Several models are timed interleaved (one invocation of each in turn, `runs` rounds), so a slow spell of this
shared machine hits them all alike and their ratios hold; reported per model and thread count: min, p50, p90,
mean and standard deviation after `warmup` untimed rounds. Peak memory is measured per model in a process of
its own (`peak_memory`). The Python interpreter API gives no per-op profile: `android_bench.kernels` samples the
host's kernels with perf, `android_bench.adb` collects a per-op profile from `benchmark_model` on a phone, and
`android_bench.estimate` gives the cost model's per-op-type breakdown.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mobilekd.errors import UserError, cli_entry, last_line, located
from mobilekd.export.parity import TFLiteRunner
from mobilekd.export.seq2seq import SentenceTiming, is_seq2seq_file
from mobilekd.fileio import read_json, write_json
from mobilekd.host import identity


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc (VmRSS now, VmHWM its peak; unlike getrusage's ru_maxrss,
    VmHWM does not carry over the parent's peak into a child started by fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


importlib.import_module("ai_edge_litert.interpreter")  # the runtime's own memory is not the model's
_START_RSS = _status_mb("VmRSS")  # this process with the runtime imported, before any model is loaded


def random_inputs(details, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids drawn from ids 1000-4999 (words, not special tokens, and inside every vocabulary we time: BERT's
    30,522 word pieces and MediaPipe Model Maker's 10,000 words), a full attention mask, one segment."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, d in details.items():
        shape, dtype = d["shape"], d["dtype"]
        if "mask" in name:
            inputs[name] = np.ones(shape, dtype)
        elif "type" in name or "segment" in name:
            inputs[name] = np.zeros(shape, dtype)
        else:
            inputs[name] = rng.integers(1000, 5000, shape).astype(dtype)
    return inputs


SIGNATURE_MARK = "#"  # "FILE#SIGNATURE": one signature of a length-aware file, timed as a model of its own


def split_entry(entry) -> tuple[Path, str | None]:
    """A timed entry's file and signature (None: the file's default)."""
    path, _, signature = str(entry).partition(SIGNATURE_MARK)
    return Path(path), signature or None


def load_runner(entry, threads: int) -> TFLiteRunner:
    """`entry` (a file, or FILE#SIGNATURE) ready to run at `threads` threads (a seq2seq file: one generated sentence
    a call, `SentenceTiming`; a `.pte`: ExecuTorch's runtime, `PteRunner`); a file that is missing or not a model
    LiteRT loads is one line."""
    path, signature = split_entry(entry)
    if not path.is_file():
        raise located(path, "no such model file")
    if path.suffix == ".pte":  # ExecuTorch's (mobilekd export --executorch), timed beside the .tflite files
        from mobilekd.export.executorch import PteRunner

        return PteRunner(path, threads)
    try:
        return SentenceTiming(path, threads) if is_seq2seq_file(path) else TFLiteRunner(path, threads, signature)
    except (ValueError, RuntimeError) as e:
        raise located(path, f"LiteRT cannot load it ({last_line(str(e), type(e).__name__)})") from None


def _stats(times_ms: list[float], threads: int) -> dict:
    times = np.asarray(times_ms)
    return {"threads": threads, "runs": len(times), "min_ms": float(times.min()),
            "p50_ms": float(np.percentile(times, 50)), "p90_ms": float(np.percentile(times, 90)),
            "mean_ms": float(times.mean()), "std_ms": float(times.std())}


def measure(paths: list, threads: list[int], runs: int, warmup: int) -> dict:
    """Time every model at every thread count, interleaved round by round (in this process)."""
    files = {str(p): split_entry(p)[0] for p in paths}
    for path in files.values():
        if not path.is_file():
            raise located(path, "no such model file")
    results = {entry: {"size_mb": path.stat().st_size / 1e6, "by_threads": []} for entry, path in files.items()}
    for t in threads:
        runners = [load_runner(p, t) for p in paths]  # all loaded (a bad file named) before any is timed
        for path, model_times in zip(paths, interleaved(runners, runs, warmup)):
            results[str(path)]["by_threads"].append(_stats(model_times, t))
        del runners
    return {"cpu": identity()["cpu"], "cpu_count": os.cpu_count(), "host": identity(), "models": results,
            "peak_rss_mb": round(_status_mb("VmHWM"), 1),
            "start_rss_mb": round(_START_RSS, 1)}


def measure_signatures(path, signatures: list[str], threads: int = 1, runs: int = 30, warmup: int = 5) -> dict:
    """Time each of a file's `signatures` (a length-aware file's input lengths) interleaved round by round, in this
    process, on inputs of that signature's full length: {signature: stats}."""
    entries = [f"{path}{SIGNATURE_MARK}{signature}" for signature in signatures]
    timed = measure(entries, [threads], runs, warmup)["models"]
    return {signature: timed[entry]["by_threads"][0] for signature, entry in zip(signatures, entries)}


def interleaved(runners: list, runs: int, warmup: int) -> list[list[float]]:
    """Milliseconds of each runner's `runs` calls on its random inputs, round by round, the order rotated every round
    (so drift on a shared machine falls on all alike), after `warmup` rounds."""
    inputs = [random_inputs(r.inputs) for r in runners]
    times = [[] for _ in runners]
    for round_ in range(warmup + runs):
        for i in np.roll(np.arange(len(runners)), round_):  # rotate who goes first
            start = time.perf_counter()
            runners[i](**inputs[i])
            if round_ >= warmup:
                times[i].append((time.perf_counter() - start) * 1000)
    return times


def measure_in_child(paths: list, threads: list[int], runs: int = 30, warmup: int = 5) -> dict:
    """`measure` in a fresh process (this module run as a worker: request and result pass as JSON files)."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    with tempfile.TemporaryDirectory(prefix="host-bench-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        write_json(request, {"paths": [str(p) for p in paths], "threads": threads, "runs": runs, "warmup": warmup,
                             "result": str(result)})
        proc = subprocess.run([sys.executable, "-m", "android_bench.host", str(request)], capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0 or not result.is_file():
            raise UserError(f"host benchmark of {', '.join(map(str, paths))} failed: {last_line(proc.stderr)}")
        return read_json(result)


def peak_memory(path) -> float:
    """Peak resident memory (MB) of a process that loads `path` and runs it once, over its start-up memory."""
    result = measure_in_child([path], [1], runs=1, warmup=0)
    return round(result["peak_rss_mb"] - result["start_rss_mb"], 1)


@cli_entry
def _worker(argv=None):
    """The child of `measure_in_child`: `python -m android_bench.host REQUEST.json`."""
    request = read_json((argv or sys.argv[1:])[0])
    write_json(request["result"], measure(request["paths"], request["threads"], request["runs"], request["warmup"]))


if __name__ == "__main__":
    _worker()
