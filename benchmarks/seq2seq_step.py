"""Seconds and target tokens/s of a seq2seq student's C-MLM training step (forward, backward, fused AdamW), its
loss's log-partition taken in blocks of rows (`mobilekd.transfer.losses.ROWS_PER_PASS`, what training runs) against
in one block over the whole (N, V) logits, in fp32 and under bf16 autocast, timed interleaved in one run.

    python -m benchmarks.seq2seq_step --threads 1                  # rows to docs/results/step_time.json
    python -m benchmarks.seq2seq_step --table [--write]            # its step-time table (--write: into its pages)

A batch is `mobilekd seq2seq`'s: 32 pairs, here of random word pieces at the correction task's dev median lengths
(20 source and 20 target word pieces, plus [SEP] and the decoder's [CLS]), with 8 random teacher ids and logits a
position, alpha 0.2 (the correction task's choice); weights and tokens do not change a step's cost. The rows go to
docs/results/step_time.json (a re-run of one configuration replaces its rows), each naming the CPU, its host id,
threads and OMP_WAIT_POLICY.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import sys
import time

import torch

from benchmarks.transfer_step import finish, host, interleaved, ratio_row, shared_flags
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import cli_entry
from mobilekd.finetune.objective import CMLMDistillation, LABEL_SMOOTHING, seq2seq_loss
from mobilekd.models.seq2seq import SEQ2SEQ_PRESETS, new_seq2seq
from mobilekd.models.pretrained import model_dir
from mobilekd.transfer import losses

PAIRS, SOURCE, TARGET, TOPK = 32, 21, 21, 8


def _batch(vocab: int, generator) -> dict:
    def ids(*shape):
        return torch.randint(1000, vocab, shape, generator=generator)
    return {"input_ids": ids(PAIRS, SOURCE), "attention_mask": torch.ones(PAIRS, SOURCE, dtype=torch.long),
            "decoder_input_ids": ids(PAIRS, TARGET), "labels": ids(PAIRS, TARGET),
            "teacher_topk_ids": ids(PAIRS, TARGET, TOPK), "teacher_topk_logits": torch.randn(PAIRS, TARGET, TOPK,
                                                                                          generator=generator)}


def train_step(model, optimizer, batch: dict, *, bf16: bool, rows: int):
    """One C-MLM step with the log-partition in blocks of `rows` rows: a callable for `interleaved`."""
    loss_fn = seq2seq_loss(CMLMDistillation(alpha=0.2), LABEL_SMOOTHING)

    def step():
        kept, losses.ROWS_PER_PASS = losses.ROWS_PER_PASS, rows
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model, batch)["loss"]
            loss.backward()
        finally:
            losses.ROWS_PER_PASS = kept
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def name(bf16: bool, rows: int) -> str:
    form = f"blocks of {rows} rows" if rows < PAIRS * TARGET else "one block"
    return f"{'bf16' if bf16 else 'fp32'}, log-partition in {form}"


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.seq2seq_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", choices=[k for k in SEQ2SEQ_PRESETS if k != "seq2seq_micro"],
                   default=["seq2seq_tiny", "seq2seq_small"])
    p.add_argument("--steps", type=int, default=7, help="timed rounds (after one warm-up round; default 7)")
    p.add_argument("--threads", type=int, default=1)
    shared_flags(p)
    args = p.parse_args(argv)
    if args.table:
        return finish(args, [])
    torch.set_num_threads(args.threads)
    start = time.time()
    tokenizer = load_tokenizer(model_dir("all-minilm-l6-v2"))
    tokens = PAIRS * TARGET
    variants = [(b, r) for b in (False, True) for r in (losses.ROWS_PER_PASS, PAIRS * TARGET)]
    print(f"{args.threads} thread(s), {PAIRS} pairs of {SOURCE} + {TARGET} word pieces, median of {args.steps} "
          f"steps, {host()['cpu']}")
    found = []
    for preset in args.presets:
        torch.manual_seed(0)
        model = new_seq2seq(preset, tokenizer).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        batch = _batch(model.config.vocab_size, torch.Generator().manual_seed(0))
        measured = interleaved({name(b, r): train_step(model, optimizer, batch, bf16=b, rows=r) for b, r in variants},
                               args.steps)
        times = {n: s for n, (s, _) in measured.items()}
        identity = {"benchmark": "seq2seq_step", "model": preset, "batch": PAIRS, "seq_len": SOURCE + TARGET,
                    "source_len": SOURCE, "target_len": TARGET, "thread_counts": [args.threads],
                    "steps": args.steps, **host()}
        path = f"{preset} C-MLM training step"
        for b, r in variants:
            n = name(b, r)
            shared = {**identity, "path": path, "variant": n, "threads": args.threads,
                      "precision": "bf16" if b else "fp32", "rows_per_pass": r}
            found += [{**shared, "metric": "seconds_per_step", "value": round(times[n], 4)},
                      {**shared, "metric": "target_tokens_per_s", "value": round(tokens / times[n], 1)}]
            print(f"{preset:<14} {n:<44} {times[n] * 1000:8.0f} ms/step {tokens / times[n]:9.0f} target tokens/s")
        for b in (False, True):
            found.append(ratio_row(identity, times, path, name(b, PAIRS * TARGET), name(b, losses.ROWS_PER_PASS),
                                   f"the log-partition in blocks of {losses.ROWS_PER_PASS} rows: a step "
                                   f"{{:.2f}}x as fast as in one block ({'bf16' if b else 'fp32'})", args.threads))
            print(f"{preset:<14} {found[-1]['reading']}")
    return finish(args, found, started=start)


if __name__ == "__main__":
    sys.exit(main())
