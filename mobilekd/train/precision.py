"""`--mixed-precision auto`: train under bf16 autocast where this host runs the step faster in it, else in fp32.

Whether bf16 pays depends on the CPU (issue 33: 1.46-1.52x on an Intel Xeon with AMX-BF16, 0.75x on an AMD EPYC
with avx512_bf16, where the casts cost more than the products save), so it is measured, not guessed. First a
256^3 matrix product in each precision (milliseconds): where bf16's runs at under FASTER of fp32's rate, the step
cannot gain (autocast on a CPU moves the matrix products to bf16 and leaves the rest in fp32) and fp32 is chosen
at once. On an AMD EPYC without avx512_bf16 bf16's product ran at about 1 GFLOP/s against fp32's 60
(docs/results/throughput.json), where a timed step would have cost seconds to a minute. Elsewhere a timed probe of
the run's own step decides, on three of its next batches at the sixths of their sizes (`probe_sample`). A choice is
kept per host (`mobilekd.host`'s id: the CPU's model name and its kernel flags, since one name covers CPUs with and
without bf16), thread count, stage and model in a JSON file (the recipes': `--cache-dir`/precision.json), so a
repeated run trains in the same precision and repeats bit for bit; delete the file to probe again. A pass that only
reads a model (a teacher's outputs over a training set, the augmentation's masked-LM candidates, the C-MLM teacher's
soft targets) is decided the same way by a forward alone (`mobilekd.bf16.decide_inference_precision`), its choice
kept per host, pass and model size; a run records it in its settings, so a resumed run reads what its first attempt
read (`pass_flag`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator

from mobilekd.bf16 import FASTER, kept_choice, matmul_peak, products_refusal, read_only_flag
from mobilekd.fileio import read_json
from mobilekd.host import identity
from mobilekd.train.checkpoint import find_checkpoint

PROBE_BATCHES = 3  # the batches timed in each precision, after a warm-up pass of each (`probe_sample`)
PROBE_WINDOW = 24  # the run's next batches they are chosen from
PROBE_SECONDS = 1.0  # the timed rounds are repeated until each precision's last about this long ...
PROBE_ROUNDS = 8  # ... but at most this many: each batch's time is its best round's


def probe_sample(window: list[dict], n: int = PROBE_BATCHES) -> list[dict]:
    """`n` of `window` (the run's next PROBE_WINDOW batches) at evenly spaced quantiles of their size (the tokens of
    their `*input_ids`, padding included), so that the probe times the run's mix of lengths rather than whatever
    its first batches hold. bf16's gain grows with a batch's length (on an Intel Xeon with AMX, fine-tuning SST-2:
    0.72 of fp32's time on its longest batches, 1.0 on its shortest), and a length-grouped order makes neighbouring
    batches differ several-fold: the run's first three batches, timed six times on successive windows, put bf16 at
    0.49 to 1.81 of fp32's time where 40 steps put it at 0.92."""
    sizes = [sum(v.numel() for k, v in b.items() if k.endswith("input_ids")) for b in window]
    order = np.argsort(sizes, kind="stable")
    return [window[order[(2 * k + 1) * len(window) // (2 * n)]] for k in range(min(n, len(window)))]


def probe_precision(loss, model, batches: list[dict], accelerator: Accelerator, matmul_first: bool = True) -> dict:
    """`--mixed-precision auto`: on a CPU whose bf16 matrix product runs at under FASTER of its fp32 one's rate,
    fp32 at once; else (or with `matmul_first` off) time a forward and backward pass of `loss` on each of `batches`
    (`probe_sample`'s, so their lengths are the run's) in fp32 and under bf16 autocast, after a warm-up pass of each
    batch in each (a shape's first pass builds its kernels: timed, it weighed on one precision more than the other),
    in rounds until each precision's passes take about PROBE_SECONDS (a round estimated by the warm-up's time, which
    builds kernels too, so rather fewer; at most PROBE_ROUNDS: a fine-tuning pass of 30-100 ms timed once moved with
    the host's jitter), each batch's time its best round's (as `timeit` advises),
    and choose bf16 where its total is under FASTER x fp32's. Gradients are discarded and the RNG restored, so the
    run after the probe is the run without it; every process takes the mean of all processes' times (the warm-up's
    too, so every process runs as many rounds)."""
    device = accelerator.device
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return {"precision": "no", "why": "this GPU has no bf16"}
    if device.type == "cpu" and matmul_first:
        fp32, bf16 = (float(accelerator.reduce(torch.tensor(matmul_peak(dtype, 256, 3)), "mean"))
                      for dtype in (torch.float32, torch.bfloat16))  # every process decides alike
        if refused := products_refusal(fp32, bf16):
            return refused
    rng = torch.get_rng_state()

    def one_round(r: int) -> dict:
        seconds = {"no": [], "bf16": []}
        for i, batch in enumerate(batches):
            for precision in (("no", "bf16") if (i + r) % 2 else ("bf16", "no")):
                start = time.perf_counter()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    terms = loss(model, batch)
                terms["loss"].backward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # a GPU's kernels run after their launch returns
                seconds[precision].append(time.perf_counter() - start)
        return seconds

    warm = one_round(0)
    warm_seconds = float(accelerator.reduce(torch.tensor(sum(map(sum, warm.values())) / 2, device=device), "mean"))
    rounds = min(PROBE_ROUNDS, max(1, math.ceil(PROBE_SECONDS / max(warm_seconds, 1e-6))))
    best = {k: [math.inf] * len(batches) for k in warm}
    for r in range(1, rounds + 1):
        for k, timed in one_round(r).items():
            best[k] = [min(a, b) for a, b in zip(best[k], timed)]
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(rng)
    # rounded before the choice, so the record shows the very figures it was made on
    total = {k: round(float(accelerator.reduce(torch.tensor(sum(v), device=device), "mean")), 6)
             for k, v in best.items()}
    chosen = "bf16" if total["bf16"] < FASTER * total["no"] else "no"
    return {"precision": chosen, "batches": len(batches), "rounds": rounds, "fp32_seconds": total["no"],
            "bf16_seconds": total["bf16"]}


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


def pass_setting(found: dict | None) -> str | None:
    """A read-only pass's precision as a run's setting: bf16, or None for fp32 (what a run had before the setting)."""
    return "bf16" if found and found["precision"] == "bf16" else None
