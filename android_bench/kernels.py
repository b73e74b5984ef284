"""Where a `.tflite` file's time goes on this host, kernel by kernel: Linux `perf` samples the LiteRT interpreter
while it runs the file, and each sample is charged to the function it lands in. The runtime keeps its symbol
table, so XNNPACK's micro-kernels (`xnn_qs8_qc8w_gemm_...`) and TFLite's builtin kernels
(`tflite::reference_ops::BatchMatMul<signed char, ...>`) are named as they are in the sources. This is the host's
op profile that the Python interpreter API does not give (`android_bench.adb` collects a phone's per-op profile
from `benchmark_model`).

    mobilekd kernels a.tflite b.tflite --threads 1 --seconds 5 [--out DIR]   # DIR/kernels.json

Each kernel's CPU milliseconds per invocation are its samples times the sampling period over the invocations
made while sampling; over several threads they add up to CPU time, not wall time. Only the invocations are
sampled: perf attaches after loading and a warm-up, and detaches before anything else runs. The samples are
checked against the CPU time the process itself counted over the invocations, so a late attach or lost samples
end in an error, not in a short profile. Every thread of the calling process is sampled: call it from a process
that does nothing else meanwhile (the `mobilekd kernels` program).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from android_bench.host import load_runner, random_inputs
from mobilekd.errors import UserError, last_line, located
from mobilekd.host import identity

FREQUENCY = 1000  # samples per second of CPU time
COVERAGE = (0.8, 1.25)  # the samples' CPU time over the process's own count: outside, the profile is refused
# (pattern on the symbol, the family it counts in): first match wins. XNNPACK names its micro-kernels
# xnn_<datatype>_<operation>_..._ukernel_...; TFLite's builtin kernels are reference_ops (portable, slow) or
# optimized_ops; MultiplyByQuantizedMultiplier is the builtin kernels' integer requantization.
FAMILIES = [
    (r"^xnn_\w*packw", "XNNPACK weight packing"),
    (r"^xnn_qdu?8_f32_\w*gemm", "XNNPACK dynamic-range int8 GEMM (qd8)"),
    (r"^xnn_(qs8|qu8)_\w*gemm", "XNNPACK int8 GEMM"),
    (r"^xnn_f(32|16)_\w*gemm", "XNNPACK float GEMM"),
    (r"^xnn_(qs8|qu8)_v", "XNNPACK int8 elementwise"),
    (r"^xnn_f32_(qs8|qu8)_vcvt|^xnn_(qs8|qu8)_f32_vcvt|pack_lh|^xnn_f32_rminmax",
     "XNNPACK conversions (quantize, dequantize, ranges)"),
    (r"^xnn_f32_(raddstoreexpminusmax|rmax|vscaleexpminusmax)|^compute_reciprocal_f32", "XNNPACK float softmax"),
    (r"^xnn_f32_v", "XNNPACK float elementwise"),
    (r"^xnn_|^pthreadpool", "XNNPACK other (dispatch, thread pool)"),
    (r"^tflite::(reference|optimized)_ops::BatchMatMul", "TFLite builtin BATCH_MATMUL"),
    (r"^tflite::(reference|optimized)_ops::Softmax", "TFLite builtin SOFTMAX"),
    (r"^tflite::MultiplyByQuantizedMultiplier", "TFLite integer requantization"),
    (r"^tflite::reference_ops::", "TFLite other reference kernels"),
    (r"^tflite::optimized_integer_ops::", "TFLite optimized int8 kernels"),
    (r"^tflite::", "TFLite other"),
]
OTHER = "other (Python, system, memory)"


def family(symbol: str) -> str:
    """The family of FAMILIES a sampled function counts in (OTHER when none matches)."""
    return next((name for pattern, name in FAMILIES if re.search(pattern, symbol)), OTHER)


def perf() -> str:
    """The perf program, or a one-line error saying how to install it."""
    path = shutil.which("perf")
    if path is None:
        raise UserError("the kernel profile needs Linux perf (Debian: apt-get install linux-perf)")
    return path


def unavailable() -> str | None:
    """Why this machine cannot sample a process of its own (no perf, or perf events not permitted: a
    perf_event_paranoid above 2, or a container's default seccomp profile), or None."""
    try:
        proc = subprocess.run([perf(), "record", "-N", "-o", "/dev/null", "--", "true"], capture_output=True,
                              text=True)
    except UserError as e:
        return str(e)
    return f"perf record fails here: {last_line(proc.stderr)}" if proc.returncode != 0 else None


def parse_report(text: str) -> dict[str, int]:
    """Samples per symbol from `perf report --stdio -q --sort sym -F sample,sym` (lines `  1234  [.] name`)."""
    counts = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+\[[.k]\]\s+(.*\S)", line)
        if m:
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return counts


def _record(path: Path, run, data: Path) -> float:
    """Run `run()` under `perf record` of this process into `data`; return the process CPU seconds it took."""
    recorder = subprocess.Popen([perf(), "record", "-N", "-F", str(FREQUENCY), "-p", str(os.getpid()),
                                 "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # perf attaches; this process sleeps meanwhile, so no sample falls here
        if recorder.poll() is not None:
            raise located(path, f"perf record could not attach: {last_line(recorder.stderr.read())}")
        cpu = time.process_time()
        run()
        return time.process_time() - cpu
    finally:
        if recorder.poll() is None:
            recorder.send_signal(signal.SIGINT)
            try:
                recorder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                recorder.kill()


def profile(path, threads: int = 1, seconds: float = 5.0, warmup: int = 3) -> dict:
    """Run `path` for about `seconds` (at least once) under perf; per kernel (symbol) and per family, the share
    of the samples and the CPU milliseconds per invocation, largest first."""
    path = Path(path)
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"the profile's duration must be a positive number of seconds, not {seconds}")
    runner = load_runner(path, threads)
    inputs = random_inputs(runner.inputs)
    for _ in range(warmup):
        runner(**inputs)
    invocations, wall = 0, 0.0

    def run():
        nonlocal invocations, wall
        start = time.perf_counter()
        while invocations == 0 or time.perf_counter() - start < seconds:
            runner(**inputs)
            invocations += 1
        wall = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="kernels-") as tmp:
        data = Path(tmp) / "perf.data"
        cpu = _record(path, run, data)
        proc = subprocess.run([perf(), "report", "-i", str(data), "--stdio", "-q", "--no-children", "--sort", "sym",
                               "-F", "sample,sym"], capture_output=True, text=True)
        counts = parse_report(proc.stdout) if proc.returncode == 0 else {}
    total = sum(counts.values())
    if not total:
        raise located(path, f"perf recorded no samples ({last_line(proc.stderr)})")
    coverage = total / FREQUENCY / cpu
    if not COVERAGE[0] <= coverage <= COVERAGE[1]:
        raise located(path, f"perf's samples cover {coverage:.0%} of the {cpu:.2f} CPU seconds the invocations "
                            f"took; the profile is refused (perf attached late, or lost samples)")
    ms = 1000 / FREQUENCY / invocations

    def ranked(by: dict[str, int]) -> list[dict]:
        return [{"name": k, "share": round(v / total, 4), "cpu_ms": round(v * ms, 3)}
                for k, v in sorted(by.items(), key=lambda kv: -kv[1])]

    families = {}
    for symbol, n in counts.items():
        name = family(symbol)
        families[name] = families.get(name, 0) + n
    return {"file": str(path), "threads": threads, "invocations": invocations, "samples": total,
            "sampled_cpu_fraction": round(coverage, 3), "cpu_ms_per_invocation": round(total * ms, 3),
            "process_cpu_ms_per_invocation": round(1000 * cpu / invocations, 3),
            "wall_ms_per_invocation": round(1000 * wall / invocations, 3),
            "families": ranked(families), "kernels": ranked(counts), "host": identity()}


def format_profile(result: dict, top: int = 8) -> str:
    """A profile as text: the families, then the `top` kernels."""
    name = result.get("name") or result["file"]
    lines = [f"{name}: {result['cpu_ms_per_invocation']:.2f} CPU ms per invocation "
             f"({result['invocations']} invocations, {result['threads']} thread(s), {result['samples']} samples)"]
    lines += [f"  {f['share']:6.1%} {f['cpu_ms']:8.2f} ms  {f['name']}" for f in result["families"]]
    lines += ["  top kernels:"] + [f"  {k['share']:6.1%} {k['cpu_ms']:8.2f} ms  {k['name'][:100]}"
                                   for k in result["kernels"][:top]]
    return "\n".join(lines)
