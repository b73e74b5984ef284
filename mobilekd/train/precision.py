"""`--mixed-precision auto`: train under bf16 autocast where this host runs the step faster in it, else in fp32.

Whether bf16 pays depends on the CPU (issue 33: 1.46-1.52x on an Intel Xeon with AMX-BF16, 0.75x on an AMD EPYC
with avx512_bf16, where the casts cost more than the products save), so it is measured, not guessed. First a
256^3 matrix product in each precision (milliseconds): where bf16's runs at under FASTER of fp32's rate, the step
cannot gain (autocast on a CPU moves the matrix products to bf16 and leaves the rest in fp32) and fp32 is chosen
at once. On an AMD EPYC without avx512_bf16 bf16's product ran at about 1 GFLOP/s against fp32's 60
(docs/results/throughput.json), where a timed step would have cost seconds to a minute. Elsewhere a timed probe of
the run's own step on its first batches decides. A choice is kept per host (`mobilekd.host`'s id: the CPU's model name and its kernel flags, since one
name covers CPUs with and without bf16), thread count, stage and model in a
JSON file (the recipes': `--cache-dir`/precision.json), so a repeated run trains in the same precision and repeats
bit for bit; delete the file to probe again. A pass that only reads a model (a teacher's outputs over a training set,
the augmentation's masked-LM candidates, the C-MLM teacher's soft targets) is decided the same way by a forward
alone (`decide_inference_precision`), its choice kept per host, pass and model size; a run records it in its
settings, so a resumed run reads what its first attempt read (`pass_flag`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from filelock import FileLock

from mobilekd.fileio import read_json, write_json
from mobilekd.host import identity
from mobilekd.train.checkpoint import find_checkpoint

PROBE_BATCHES = 3  # the run's first batches, timed in each precision after a warm-up pass
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


def probe_precision(loss, model, batches: list[dict], accelerator: Accelerator, matmul_first: bool = True) -> dict:
    """`--mixed-precision auto`: on a CPU whose bf16 matrix product runs at under FASTER of its fp32 one's rate,
    fp32 at once; else (or with `matmul_first` off) time a forward and backward pass of `loss` on each of `batches`
    (the run's first steps' batches, so their lengths are the run's) in fp32 and under bf16 autocast, after one
    warm-up pass of each, and choose bf16 where its total is under FASTER x fp32's. Gradients are discarded and the
    RNG restored, so the run after the probe is the run without it; every process takes the mean of all processes'
    times."""
    device = accelerator.device
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return {"precision": "no", "why": "this GPU has no bf16"}
    if device.type == "cpu" and matmul_first:
        fp32, bf16 = (float(accelerator.reduce(torch.tensor(matmul_peak(dtype, 256, 3)), "mean"))
                      for dtype in (torch.float32, torch.bfloat16))  # every process decides alike
        if refused := products_refusal(fp32, bf16):
            return refused
    rng = torch.get_rng_state()
    times = {"no": 0.0, "bf16": 0.0}
    for i, batch in enumerate([batches[0], *batches]):
        for precision in (("no", "bf16") if i % 2 else ("bf16", "no")):
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                terms = loss(model, batch)
            terms["loss"].backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # a GPU's kernels run after their launch returns
            if i:
                times[precision] += time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(rng)
    total = {k: float(accelerator.reduce(torch.tensor(v, device=device), "mean")) for k, v in times.items()}
    chosen = "bf16" if total["bf16"] < FASTER * total["no"] else "no"
    return {"precision": chosen, "batches": len(batches), "fp32_seconds": round(total["no"], 4),
            "bf16_seconds": round(total["bf16"], 4)}


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
    return {"precision": "bf16" if times["bf16"] < FASTER * times["no"] else "no", "batches": 1, "repeats": repeats,
            "backward": False, "fp32_seconds": round(times["no"], 4), "bf16_seconds": round(times["bf16"], 4)}


def describe(found: dict) -> str:
    """The probe's choice in one line, for the run's log."""
    if "why" in found and found["why"].startswith("--mixed-precision"):
        return found["why"]  # a flag's choice, not a probe's
    if "fp32_seconds" in found:
        what = (f"{found.get('repeats', found['batches'])} forwards of one batch" if found.get("backward") is False else
                f"forward and backward of {found['batches']} batches")
        why = f"{what}: fp32 {found['fp32_seconds'] * 1000:.0f} ms, bf16 {found['bf16_seconds'] * 1000:.0f} ms"
    elif "fp32_matmul_gflops" in found:
        why = (f"a matrix product ran at {found['bf16_matmul_gflops']} GFLOP/s in bf16, {found['fp32_matmul_gflops']} "
               f"in fp32")
    else:
        why = found.get("why", "")
    return f"--mixed-precision auto: {'bf16' if found['precision'] == 'bf16' else 'fp32'} ({why}" + \
        (", measured earlier on this host)" if found.get("cached") else ")")


def decide_precision(stage: str, loss, model, batches: list[dict], accelerator: Accelerator,
                     cache: Path | None) -> dict:
    """The precision of a run whose first stage is `stage`: the choice kept in `cache` for this host, thread count,
    stage and model, else `probe_precision` on `batches` (kept there by the main process)."""
    n = parameters(model)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    key = (f"{identity()['id']} | {accelerator.device.type} | {torch.get_num_threads()} threads | "
           f"{accelerator.num_processes} processes | stage {stage} | {n} parameters, {trained} trained")

    def probe():
        device = accelerator.device
        moved = []
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            if "masked_labels" in batch:  # as the loop normalises masked-LM (one process's share is enough here)
                batch["mlm_denominator"] = (batch["masked_labels"] >= 0).sum().float()
            moved.append(batch)
        model.train()
        return probe_precision(loss, model, moved, accelerator)

    return kept_choice(cache, key, probe, accelerator.is_main_process)


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


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def median_window(lengths, n: int) -> np.ndarray:
    """The indices of `n` examples of median length (a probe's typical batch): the middle of the stable order."""
    middle = np.argsort(np.asarray(lengths), kind="stable")
    first = max(0, len(middle) // 2 - n // 2)
    return middle[first:first + n]


def pass_flag(args, setting: str) -> str:
    """The `--mixed-precision` flag of a read-only pass whose choice a run records in its settings as `setting`
    (`pass_setting`): a resumed run takes its checkpoint's, so it reads the same outputs as its first attempt on any
    host (a checkpoint without the setting had the fp32 pass); a new run the flag given. bf16 or fp32 alone: the
    passes have no fp16 branch."""
    checkpoint = find_checkpoint(args.out) if args.resume else None
    if checkpoint is not None:
        saved = read_json(checkpoint / "trainer.json")
        return "bf16" if isinstance(saved, dict) and saved.get("run", {}).get(setting) == "bf16" else "no"
    return read_only_flag(args.mixed_precision)


def read_only_flag(flag: str) -> str:
    """A `--mixed-precision` flag as a read-only pass takes it: auto or bf16, else fp32 (no fp16 branch)."""
    return flag if flag in ("auto", "bf16") else "no"


def pass_setting(found: dict | None) -> str | None:
    """A read-only pass's precision as a run's setting: bf16, or None for fp32 (what a run had before the setting)."""
    return "bf16" if found and found["precision"] == "bf16" else None


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
