"""Where PKT's compute goes: each layer-wise stage run naively (teacher and student at full depth every step)
against the truncated path (both only up to the stage's layer), on the paper's 24-layer configs, measured in
one run; and the cost of a pre-training-distillation step against a plain student MLM step.

    python -m benchmarks.transfer_step [--teacher ib_bert_large] [--student mobilebert] [--batch 2]

The losses of the two paths must agree (they compute the same layer); the ratio of their wall times is printed.
"""

from __future__ import annotations

import argparse
import time

import torch

from mobilekd.models.heads import MobileBertForPreTraining, pretraining_loss
from mobilekd.models.presets import get_preset
from mobilekd.train.loop import freeze_for_stage
from mobilekd.transfer.strategies import Distiller, PlanSettings, copy_shared_weights, plan


def _batch(config, batch: int, seq_len: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (batch, seq_len), generator=g)
    n = round(seq_len * 0.15)
    positions = torch.stack([torch.randperm(seq_len - 2, generator=g)[:n] + 1 for _ in range(batch)])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
            "masked_positions": positions, "masked_labels": torch.gather(ids, 1, positions),
            "nsp_labels": torch.zeros(batch, dtype=torch.long)}


def timed_step(model, loss_fn, batch, repeats: int) -> tuple[float, float]:
    """Median seconds of forward + backward over `repeats` steps (after one warm-up), and the loss."""
    times, loss = [], None
    for i in range(repeats + 1):
        start = time.perf_counter()
        loss = loss_fn(model, batch)["loss"]
        loss.backward()
        model.zero_grad(set_to_none=True)
        if i:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], loss.item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="ib_bert_large")
    p.add_argument("--student", default="mobilebert")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--every", type=int, default=4, help="time every N-th stage, and the last (default 4)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t_cfg, s_cfg = get_preset(args.teacher).config, get_preset(args.student).config
    teacher = MobileBertForPreTraining(t_cfg.replace(hidden_dropout_prob=0.0))
    student = MobileBertForPreTraining(s_cfg).train()
    copy_shared_weights(teacher, student)
    n = s_cfg.num_hidden_layers
    distiller = Distiller(teacher, list(range(n)), PlanSettings())
    stages = plan("pkt", distiller, n)
    batch = _batch(s_cfg, args.batch, args.seq_len)
    print(f"{args.teacher} -> {args.student}, batch {args.batch} x {args.seq_len}, threads {args.threads}")
    total_naive = total_trunc = 0.0
    for l in sorted(set(range(0, n, args.every)) | {n - 1}):
        freeze_for_stage(student, stages[l])
        matches = distiller.layer_matches([l])
        trunc, loss_t = timed_step(student, lambda m, b: distiller.layer_terms(m, b, matches), batch, args.repeats)
        naive, loss_n = timed_step(student, lambda m, b: distiller.layer_terms(m, b, matches, depth=n), batch,
                                   args.repeats)
        assert abs(loss_t - loss_n) <= 1e-4 * max(1.0, abs(loss_n)), (l, loss_t, loss_n)
        total_naive, total_trunc = total_naive + naive, total_trunc + trunc
        print(f"stage pkt_L{l:<2}  naive {naive * 1000:8.0f} ms  truncated {trunc * 1000:8.0f} ms  "
              f"{naive / trunc:5.2f}x  (loss {loss_t:.5f} = {loss_n:.5f})")
    print(f"PKT layer-wise stages: truncated path {total_naive / total_trunc:.2f}x faster than naive")
    freeze_for_stage(student, stages[-1])
    pd, _ = timed_step(student, distiller.pd_terms, batch, args.repeats)
    mlm, _ = timed_step(student, pretraining_loss, batch, args.repeats)
    print(f"pre-training distillation step {pd * 1000:.0f} ms vs plain student MLM step {mlm * 1000:.0f} ms: "
          f"{pd / mlm:.2f}x (the teacher's forward pass is the difference)")


if __name__ == "__main__":
    main()
