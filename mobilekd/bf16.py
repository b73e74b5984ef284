"""Whether bf16 pays on this host: its matrix products timed in each precision, a read-only pass (a teacher's
outputs, the augmentation's masked-LM candidates, the C-MLM teacher's soft targets) probed in each, and the choice
kept per host (`mobilekd.host`'s id), thread count, pass and model size in a JSON file, so that every run of the
pass on this host computes the same outputs. The training step's own probe, which needs the run's Accelerator, is
`mobilekd.train.precision`'s; both share FASTER and the matrix-product check. A ground-floor module: the data
layer's augmentation reads it as the training loop does.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from filelock import FileLock

from mobilekd.fileio import read_json, write_json
from mobilekd.host import identity

FASTER = 0.9  # bf16 must take under this share of fp32's time (and its matrix product run at least this share of
# fp32's rate before the step is timed at all): a gain within timing noise is not worth rounding


def matmul_peak(dtype: torch.dtype, n: int = 1024, repeats: int = 12) -> float:
    """GFLOP/s of an n x n x n matrix product in `dtype` on this host at torch's current thread count (the best
    of `repeats` timings after two warm-ups)."""
    g = torch.Generator().manual_seed(0)  # not the global generator: a probe leaves the run's random state alone
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    best = float("inf")
    for i in range(repeats + 2):
        start = time.perf_counter()
        torch.mm(a, b)
        if i >= 2:
            best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def bf16_products_pay(fp32_gflops: float, bf16_gflops: float) -> bool:
    """Whether this host's bf16 matrix product runs at least FASTER of its fp32 one's rate: where it does not, no step
    can gain from bf16 autocast and `probe_precision` chooses fp32 without timing one."""
    return bf16_gflops >= FASTER * fp32_gflops


def products_refusal(fp32_gflops: float, bf16_gflops: float) -> dict | None:
    """fp32's choice, with the two rates, where `bf16_products_pay` says no; None where a timed probe decides."""
    if bf16_products_pay(fp32_gflops, bf16_gflops):
        return None
    return {"precision": "no", "why": "bf16 matrix products are slower than fp32's on this host",
            "fp32_matmul_gflops": round(fp32_gflops, 1), "bf16_matmul_gflops": round(bf16_gflops, 1)}


def probe_inference(forward, device: torch.device, flag: str = "auto", repeats: int = 2,
                    products_first: bool = True) -> dict:
    """The precision of a pass that only reads a model (a teacher's outputs over a training set, no backward), by
    `--mixed-precision` `flag`: another flag than `auto` as given; `auto` as `probe_precision` decides a training
    step: on a CPU whose bf16 matrix product runs at under FASTER of its fp32 one's rate (unless `products_first` is
    off), fp32 at once; else `forward()` (one batch of the pass, its output discarded) timed `repeats` times in fp32
    and under bf16 autocast, interleaved after one warm-up of each, and bf16 chosen where its total is under FASTER x
    fp32's. With no backward pass there are no gradients to cast, so it can pay where a training step does not: on
    an Intel Xeon with AMX this probe timed the C-MLM teacher's copies pass 2.3x as fast in bf16 (docs/seq2seq.md)."""
    if flag != "auto":
        return {"precision": flag, "why": f"--mixed-precision {flag}"}
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return {"precision": "no", "why": "this GPU has no bf16"}
    if device.type == "cpu" and products_first:
        if refused := products_refusal(matmul_peak(torch.float32, 256, 3), matmul_peak(torch.bfloat16, 256, 3)):
            return refused
    times = {"no": 0.0, "bf16": 0.0}
    with torch.no_grad():
        for i in range(repeats + 1):
            for precision in (("no", "bf16") if i % 2 else ("bf16", "no")):
                start = time.perf_counter()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    forward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if i:
                    times[precision] += time.perf_counter() - start
    times = {k: round(v, 6) for k, v in times.items()}  # the record shows the very figures the choice was made on
    return {"precision": "bf16" if times["bf16"] < FASTER * times["no"] else "no", "batches": 1, "repeats": repeats,
            "backward": False, "fp32_seconds": times["no"], "bf16_seconds": times["bf16"]}


def decide_inference_precision(what: str, size: int, forward, device: torch.device, flag: str,
                               cache: Path | None) -> dict:
    """The precision of a pass `what` that only reads a model of `size` parameters (`probe_inference` with `flag`):
    with `auto`, the choice kept in `cache` for this host, thread count, pass and model size (whatever the data: one
    choice serves every task's pass), else the probe's, kept there under a lock, so that runs started together (a
    benchmark's workers, or the processes of one run) probe once and every run of the pass on this host computes
    the same outputs."""
    if flag != "auto":
        return probe_inference(forward, device, flag)
    if cache is None:
        return probe_inference(forward, device)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{cache}.lock"):
        key = f"{identity()['id']} | {device.type} | {torch.get_num_threads()} threads | pass {what} | {size} parameters"
        return kept_choice(cache, key, lambda: probe_inference(forward, device))


def read_only_flag(flag: str) -> str:
    """A `--mixed-precision` flag as a read-only pass takes it: auto or bf16, else fp32 (no fp16 branch)."""
    return flag if flag in ("auto", "bf16") else "no"


def kept_choice(cache: Path | None, key: str, probe, main_process: bool = True) -> dict:
    """The choice kept under `key` in the JSON file `cache`, else `probe()`'s, kept there (by the main process)."""
    kept = read_json(cache) if cache is not None and cache.is_file() else {}
    if isinstance(kept, dict) and isinstance(kept.get(key), dict) and kept[key].get("precision") in ("no", "bf16"):
        return {**kept[key], "cached": True}
    found = probe()
    if cache is not None and main_process:
        kept = read_json(cache) if cache.is_file() else {}  # again: another run may have kept a choice meanwhile
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json(cache, {**(kept if isinstance(kept, dict) else {}), key: found})
    return found
