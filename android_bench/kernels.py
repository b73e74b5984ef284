"""Where a `.tflite` file's time goes on this host, kernel by kernel: Linux `perf` samples the LiteRT interpreter
while it runs the file, and each sample is charged to the function it lands in. The runtime keeps its symbol
table, so XNNPACK's micro-kernels (`xnn_qs8_qc8w_gemm_...`) and TFLite's builtin kernels
(`tflite::reference_ops::BatchMatMul<signed char, ...>`) are named as they are in the sources. This is the host's
op profile that the Python interpreter API does not give (`android_bench.adb` collects a phone's per-op profile
from `benchmark_model`).

    mobilekd kernels a.tflite b.tflite --threads 1 --seconds 5 [--out profiles.json]

Each kernel's CPU milliseconds per invocation are its samples times the sampling period over the invocations
made while sampling; over several threads they add up to CPU time, not wall time. Only the invocations are
sampled: perf attaches after loading and a warm-up, and detaches before anything else runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from android_bench.host import random_inputs
from mobilekd.errors import UserError, located
from mobilekd.export.parity import TFLiteRunner

FREQUENCY = 1000  # samples per second of CPU time
# (pattern on the symbol, the family it counts in): first match wins. XNNPACK names its micro-kernels
# xnn_<datatype>_<operation>_..._ukernel_...; TFLite's builtin kernels are reference_ops (portable, slow) or
# optimized_ops; MultiplyByQuantizedMultiplier is the builtin kernels' integer requantization.
FAMILIES = [
    (r"^xnn_qd8_f32_\w*gemm", "XNNPACK dynamic-range int8 GEMM (qd8)"),
    (r"^xnn_qs8_\w*gemm|^xnn_qu8_\w*gemm", "XNNPACK int8 GEMM"),
    (r"^xnn_f32_qc8w_gemm|^xnn_f32_gemm|^xnn_f16_\w*gemm", "XNNPACK float GEMM"),
    (r"^xnn_(qs8|qu8)_v", "XNNPACK int8 elementwise"),
    (r"^xnn_f32_qu8_vcvt|^xnn_f32_qs8_vcvt|^xnn_qs8_f32_vcvt|^xnn_qu8_f32_vcvt|pack_lh|xnn_f32_rminmax",
     "XNNPACK conversions (quantize, dequantize, ranges)"),
    (r"^xnn_f32_(raddstoreexpminusmax|rmax|vscaleexpminusmax)", "XNNPACK float softmax"),
    (r"^xnn_f32_v", "XNNPACK float elementwise"),
    (r"^xnn_", "XNNPACK other"),
    (r"^tflite::reference_ops::BatchMatMul", "TFLite reference BATCH_MATMUL"),
    (r"^tflite::optimized_ops::Softmax|^tflite::reference_ops::Softmax", "TFLite builtin SOFTMAX"),
    (r"^tflite::MultiplyByQuantizedMultiplier", "TFLite integer requantization"),
    (r"^tflite::reference_ops::", "TFLite other reference kernels"),
    (r"^tflite::optimized_integer_ops::", "TFLite builtin int8 elementwise"),
    (r"^tflite::", "TFLite other"),
]


OTHER = "other (Python, system, memory)"


def family(symbol: str) -> str:
    return next((name for pattern, name in FAMILIES if re.search(pattern, symbol)), OTHER)


def perf() -> str:
    path = shutil.which("perf")
    if path is None:
        raise UserError("the kernel profile needs Linux perf (Debian: apt-get install linux-perf)")
    return path


def unavailable() -> str | None:
    """Why this machine cannot sample a process of its own (no perf, or perf events not permitted, as under a
    container's default seccomp profile), or None."""
    try:
        proc = subprocess.run([perf(), "record", "-o", "/dev/null", "--", "true"], capture_output=True, text=True)
    except UserError as e:
        return str(e)
    if proc.returncode != 0:
        return f"perf record fails here: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"
    return None


def _samples(data: Path) -> dict[str, int]:
    """Samples per symbol in a perf.data file."""
    proc = subprocess.run([perf(), "report", "-i", str(data), "--stdio", "-q", "--no-children", "--sort", "sym",
                           "-F", "sample,sym"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"perf report of {data} failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    counts = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+\[[.k]\]\s+(.*\S)", line)
        if m:
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return counts


def profile(path, threads: int = 1, seconds: float = 5.0, warmup: int = 3) -> dict:
    """Run `path` for about `seconds` under perf; per kernel (symbol) and per family, the share of the samples and
    the CPU milliseconds per invocation, largest first."""
    path = Path(path)
    if not path.is_file():
        raise located(path, "no such model file")
    try:
        runner = TFLiteRunner(path, threads)
    except (ValueError, RuntimeError) as e:
        raise located(path, f"LiteRT cannot load it ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    inputs = random_inputs(runner.inputs)
    for _ in range(warmup):
        runner(**inputs)
    with tempfile.TemporaryDirectory(prefix="kernels-") as tmp:
        data = Path(tmp) / "perf.data"
        recorder = subprocess.Popen([perf(), "record", "-F", str(FREQUENCY), "-p", str(os.getpid()), "-o", str(data)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)  # perf attaches; this process sleeps meanwhile, so no sample falls here
            if recorder.poll() is not None:
                last = (recorder.stderr.read().strip().splitlines() or ["no output"])[-1]
                raise UserError(f"perf record could not attach to this process: {last}")
            invocations, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                runner(**inputs)
                invocations += 1
            wall = time.perf_counter() - start
        finally:
            if recorder.poll() is None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait()
        counts = _samples(data)
    total = sum(counts.values()) or 1
    ms = 1000 / FREQUENCY / invocations

    def ranked(by: dict[str, int]) -> list[dict]:
        return [{"name": k, "share": round(v / total, 4), "cpu_ms": round(v * ms, 3)}
                for k, v in sorted(by.items(), key=lambda kv: -kv[1])]

    families = {}
    for symbol, n in counts.items():
        families[family(symbol)] = families.get(family(symbol), 0) + n
    return {"file": str(path), "threads": threads, "invocations": invocations, "samples": total,
            "cpu_ms_per_invocation": round(total * ms, 3),
            "wall_ms_per_invocation": round(1000 * wall / invocations, 3), "families": ranked(families),
            "kernels": ranked(counts)}


def format_profile(result: dict, top: int = 8) -> str:
    lines = [f"{result['file']}: {result['cpu_ms_per_invocation']:.2f} CPU ms per invocation "
             f"({result['invocations']} invocations, {result['threads']} thread(s), {result['samples']} samples)"]
    lines += [f"  {f['share']:6.1%} {f['cpu_ms']:8.2f} ms  {f['name']}" for f in result["families"]]
    lines += ["  top kernels:"] + [f"  {k['share']:6.1%} {k['cpu_ms']:8.2f} ms  {k['name'][:100]}"
                                   for k in result["kernels"][:top]]
    return "\n".join(lines)
