"""Flags and set-up shared by every training recipe (teacher, distillation, fine-tuning)."""

from __future__ import annotations

import argparse
import os

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

SHIPPED_CORPORA = ["data/corpus/brown.txt.gz", "data/corpus/austen.txt.gz"]


def add_training_flags(parser: argparse.ArgumentParser, *, out: str, batch_size: int, seq_len: int | None = 128) -> None:
    g = parser.add_argument_group("training")
    g.add_argument("--out", default=out, help=f"output directory (default {out})")
    g.add_argument("--batch-size", type=int, default=batch_size,
                   help=f"global batch size, over all processes and accumulation steps (default {batch_size})")
    g.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps (default 1)")
    g.add_argument("--seq-len", type=int, default=seq_len,
                   help=f"sequence length (default {seq_len if seq_len else 'per preset: 64 demo, 128 paper size'})")
    g.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no",
                   help="autocast precision (bf16 is 1.5-3x faster for teacher-sized models on recent CPUs)")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process (default: OMP_NUM_THREADS if set; else 1 on a machine of at most "
                        "2 cores, where one thread measured faster than two, and torch's choice elsewhere)")
    g.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps (default 100)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint exactly where it stopped")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--cache-dir", default=".cache/mobilekd/pretraining",
                   help="where tokenized pre-training examples are cached (default .cache/mobilekd/pretraining)")


def make_accelerator(args) -> Accelerator:
    if args.threads is None and "OMP_NUM_THREADS" not in os.environ and (os.cpu_count() or 1) <= 2:
        args.threads = 1
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    accelerator = Accelerator(mixed_precision=args.mixed_precision, cpu=not torch.cuda.is_available())
    set_seed(args.seed)
    return accelerator
