"""Seconds and tokens/s of a teacher pre-training step (forward, backward, optimizer), measured in one run and
read as ratios: fp32 against bf16 autocast, masked-position logits against logits on every token, and (with
several --threads) one thread count against another.

    python -m benchmarks.teacher_step --threads 1 --presets demo_teacher --batch 32 --seq-len 64
    python -m benchmarks.teacher_step --threads 1 --presets ib_bert_large --batch 2 --steps 2
    python -m benchmarks.teacher_step --threads 1 2 --presets demo_teacher --batch 32 --seq-len 128 --only-fp32-masked
    python -m benchmarks.teacher_step --table [--write]   # its step-time table (--write: into its pages)

Every variant (precision x logits x thread count) of a preset takes one step in turn, the order rotated every
round, for --steps rounds after one warm-up round; the median is its time. Absolute times on a shared machine
drift between runs; the ratios within one run are what to read. Rows (seconds_per_step, tokens_per_s, and the
ratios) are merged into docs/results/step_time.json: a re-run of one configuration (preset, batch, sequence
length, thread counts) replaces its rows. Each row names the CPU, threads and OMP_WAIT_POLICY (PASSIVE unless set
otherwise).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.transfer_step import finish, host, interleaved, ratio_row, shared_flags
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.presets import get_preset
from mobilekd.errors import cli_entry
from teacher_ib_bert import TEACHER_PRESETS


def _batch(config, batch: int, seq_len: int, generator):
    ids = torch.randint(1000, config.vocab_size, (batch, seq_len), generator=generator)
    n_masked = round(seq_len * 0.15)
    positions = torch.stack([torch.randperm(seq_len - 1, generator=generator)[:n_masked] + 1 for _ in range(batch)])
    labels = torch.gather(ids, 1, positions)
    return ids, positions, labels


def train_step(model, optimizer, batch, *, bf16: bool, full_logits: bool):
    """One step of the teacher's MLM objective (forward, backward, AdamW): a callable for `interleaved`."""
    ids, positions, labels = batch

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if full_logits:
                out = model(ids, masked_positions=torch.arange(ids.shape[1]).expand_as(ids))
                logits = out.mlm_logits.view(ids.shape[0], ids.shape[1], -1)
                logits = torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1]))
                logits = logits.reshape(-1, logits.shape[-1])
            else:
                out = model(ids, masked_positions=positions)
                logits = out.mlm_logits
            loss = F.cross_entropy(logits.float(), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def name(threads: int, bf16: bool, full: bool) -> str:
    return f"{'bf16' if bf16 else 'fp32'} {'all-token' if full else 'masked'} logits, {threads} thr"


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.teacher_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", choices=TEACHER_PRESETS, default=TEACHER_PRESETS)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=3, help="timed rounds (after one warm-up round; default 3)")
    p.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()],
                   help="thread counts, each variant timed at each, interleaved (default: torch's)")
    p.add_argument("--only-fp32-masked", action="store_true",
                   help="time only fp32 with masked-position logits (e.g. to compare thread counts alone)")
    shared_flags(p)
    args = p.parse_args(argv)
    if args.table:
        return finish(args, [])
    start = time.time()
    tokens = args.batch * args.seq_len
    forms = [(False, False)] if args.only_fp32_masked else [(b, f) for b in (False, True) for f in (False, True)]
    print(f"threads {' '.join(map(str, args.threads))}, batch {args.batch} x {args.seq_len} tokens, median of "
          f"{args.steps} steps, {host()['cpu']}")
    found = []
    for size in args.presets:
        torch.manual_seed(0)
        config = get_preset(size).config
        model = MobileBertForPreTraining(config.replace(hidden_dropout_prob=0.0)).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        batch = _batch(config, args.batch, args.seq_len, torch.Generator().manual_seed(0))
        variants = {name(t, b, f): (t, b, f) for t in args.threads for b, f in forms}
        measured = interleaved({n: train_step(model, optimizer, batch, bf16=b, full_logits=f)
                                for n, (t, b, f) in variants.items()}, args.steps,
                               threads={n: v[0] for n, v in variants.items()})
        times = {n: s for n, (s, _) in measured.items()}
        identity = {"benchmark": "teacher_step", "model": size, "batch": args.batch, "seq_len": args.seq_len,
                    "thread_counts": args.threads, "steps": args.steps, **host()}
        path = f"{size} training step"
        for n, (t, b, f) in variants.items():
            shared = {**identity, "path": path, "variant": n.rsplit(",", 1)[0], "threads": t,
                      "precision": "bf16" if b else "fp32", "logits": "all-token" if f else "masked"}
            found += [{**shared, "metric": "seconds_per_step", "value": round(times[n], 4)},
                      {**shared, "metric": "tokens_per_s", "value": round(tokens / times[n], 1)}]
            print(f"{size:<14} {n:<32} {times[n] * 1000:8.0f} ms/step {tokens / times[n]:9.0f} tokens/s")
        for t in args.threads:
            if len(forms) > 1:
                for reading, a, b in (("bf16 autocast {:.2f}x as fast as fp32 (masked logits)",
                                       name(t, False, False), name(t, True, False)),
                                      ("masked-position logits {:.2f}x as fast as logits on every token (fp32)",
                                       name(t, False, True), name(t, False, False))):
                    found.append(ratio_row(identity, times, path, a, b, reading, t))
                    print(f"{size:<14} {t} thr: {found[-1]['reading']}")
        for t in args.threads[1:]:
            one = name(args.threads[0], False, False)
            found.append(ratio_row(identity, times, path, one, name(t, False, False),
                                   f"{t} threads {{:.2f}}x as fast as {args.threads[0]} (fp32, masked logits)", t))
            print(f"{size:<14} {found[-1]['reading']}")
    return finish(args, found, started=start)


if __name__ == "__main__":
    sys.exit(main())
