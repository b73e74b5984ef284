"""Measured on this host: a `.tflite` through the LiteRT interpreter (XNNPACK) at given thread counts.

    python -m android_bench.host model.tflite --threads 1 2 4 --runs 30

Each model runs in a child process (`measure_in_child`) so its peak memory is its own. Reported per thread
count: p50, p90, mean and standard deviation over `runs` timed invocations after `warmup` untimed ones. The
Python interpreter API gives no per-op profile; `android_bench.adb` collects one from `benchmark_model` on a phone,
and `android_bench.estimate` gives the cost model's per-op-type breakdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mobilekd.errors import UserError, cli_entry, located


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def random_inputs(details, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids drawn from the middle of the vocabulary, a full attention mask, one segment."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, d in details.items():
        shape, dtype = d["shape"], d["dtype"]
        if "mask" in name:
            inputs[name] = np.ones(shape, dtype)
        elif "type" in name or "segment" in name:
            inputs[name] = np.zeros(shape, dtype)
        else:
            inputs[name] = rng.integers(1000, 20000, shape).astype(dtype)
    return inputs


def measure(path, threads: int, runs: int, warmup: int) -> dict:
    """Time `runs` invocations of the model at `threads` threads (in this process)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=threads)
    runner = interpreter.get_signature_runner()
    inputs = random_inputs(runner.get_input_details())
    for _ in range(warmup):
        runner(**inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        runner(**inputs)
        times.append((time.perf_counter() - start) * 1000)
    times = np.asarray(times)
    return {"threads": threads, "runs": runs, "min_ms": float(times.min()), "p50_ms": float(np.percentile(times, 50)),
            "p90_ms": float(np.percentile(times, 90)), "mean_ms": float(times.mean()), "std_ms": float(times.std())}


def measure_all(path, threads: list[int], runs: int, warmup: int) -> dict:
    path = Path(path)
    if not path.is_file():
        raise located(path, "no such model file")
    baseline = _rss_mb()
    results = [measure(path, t, runs, warmup) for t in threads]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"model": str(path), "size_mb": path.stat().st_size / 1e6, "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "peak_rss_mb": round(peak, 1),
            "model_rss_mb": round(peak - baseline, 1), "by_threads": results}


def measure_in_child(path, threads: list[int], runs: int = 30, warmup: int = 5) -> dict:
    """`measure_all` in a fresh process, so peak memory is this model's alone."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([sys.executable, "-m", "android_bench.host", str(path), "--threads", *map(str, threads),
                           "--runs", str(runs), "--warmup", str(warmup), "--json"], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{path}: host benchmark failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="android_bench.host", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help=".tflite file")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    args = p.parse_args(argv)
    result = measure_all(args.model, args.threads, args.runs, args.warmup)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['model']} ({result['size_mb']:.1f} MB) on {result['cpu']} ({result['cpu_count']} CPUs), "
          f"peak RSS {result['peak_rss_mb']} MB")
    for r in result["by_threads"]:
        print(f"  {r['threads']} threads: p50 {r['p50_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, "
              f"mean {r['mean_ms']:.2f} +- {r['std_ms']:.2f} ms over {r['runs']} runs")


if __name__ == "__main__":
    main()
