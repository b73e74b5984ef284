"""Tokens/s of a teacher pre-training step (forward, backward, optimizer), measured in one run and printed as
ratios: fp32 against bf16 autocast, and masked-position logits against logits on every token.

    python -m benchmarks.teacher_step [--presets demo_teacher ib_bert_large] [--batch 8] [--seq-len 128] [--steps 3]

Absolute times on a shared machine drift between runs; the ratios within one run are what to read.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.presets import get_preset
from teacher_ib_bert import TEACHER_PRESETS

def _batch(config, batch: int, seq_len: int, generator):
    ids = torch.randint(1000, config.vocab_size, (batch, seq_len), generator=generator)
    n_masked = round(seq_len * 0.15)
    positions = torch.stack([torch.randperm(seq_len - 1, generator=generator)[:n_masked] + 1 for _ in range(batch)])
    labels = torch.gather(ids, 1, positions)
    return ids, positions, labels


def step_time(model, optimizer, batch, *, bf16: bool, full_logits: bool, steps: int) -> float:
    ids, positions, labels = batch
    times = []
    for i in range(steps + 1):  # the first step warms up
        start = time.perf_counter()
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
        if i:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", choices=TEACHER_PRESETS, default=TEACHER_PRESETS)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, batch {args.batch} x {args.seq_len} tokens, median of {args.steps} steps")
    for size in args.presets:
        torch.manual_seed(0)
        config = get_preset(size).config
        model = MobileBertForPreTraining(config.replace(hidden_dropout_prob=0.0)).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        batch = _batch(config, args.batch, args.seq_len, torch.Generator().manual_seed(0))
        tokens = args.batch * args.seq_len
        runs = {(bf16, full): step_time(model, optimizer, batch, bf16=bf16, full_logits=full, steps=args.steps)
                for bf16 in (False, True) for full in (False, True)}
        for (bf16, full), t in runs.items():
            print(f"{size:<14} {'bf16' if bf16 else 'fp32'} {'all-token logits' if full else 'masked logits  '} "
                  f"{t * 1000:8.0f} ms/step {tokens / t:9.0f} tokens/s")
        print(f"{size:<14} bf16 speed-up (masked logits): {runs[(False, False)] / runs[(True, False)]:.2f}x; "
              f"masked-only logits speed-up (fp32): {runs[(False, True)] / runs[(False, False)]:.2f}x")


if __name__ == "__main__":
    main()
