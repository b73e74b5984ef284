"""Flags and set-up shared by every training recipe (teacher, distillation, fine-tuning)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from mobilekd.data.pretraining import DEFAULT_CACHE
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import add_flags, add_length_flag, from_flags
from mobilekd.rundir import owned
from mobilekd.train.loop import TrainConfig, refuse_sharded

PRECISION_FILE = "precision.json"  # in --cache-dir: --mixed-precision auto's choices, per host
# the shipped corpora, wherever a verb is run from (the cache of their examples is keyed by their contents)
SHIPPED_CORPORA = [str(REPO_ROOT / "data" / "corpus" / name) for name in ("brown.txt.gz", "austen.txt.gz")]
WARMUP = 0.1  # the warm-up share of the steps: BERT's (run_classifier.py and run_pretraining.py, warmup_proportion)
CLASSIFIER_DROPOUT = 0.1  # before a task's output layer: BERT's (run_classifier.py, create_model: keep_prob=0.9)
EVAL_EXAMPLES = 1000  # held-out examples a pre-training or distillation run evaluates on


def add_training_flags(parser: argparse.ArgumentParser, *, out: str, batch_size: int | None = None,
                       seq_len: int | None = 128, optimizer: str | None = None, with_seq_len: bool = True,
                       mixed_precision: str | None = None) -> None:
    """The loop's flags (from `TrainConfig`'s fields, with this recipe's defaults for `out`, batch size and
    optimizer) and the run's: sequence length, threads, resume, pre-training cache."""
    g = parser.add_argument_group("training")
    own = {"out_dir": out, "optimizer": optimizer}  # optimizer None: the recipe chooses (a preset's config)
    if batch_size is not None:
        own["global_batch_size"] = batch_size
    if mixed_precision is not None:
        own["mixed_precision"] = mixed_precision
    add_flags(g, TrainConfig, shown={} if optimizer else {"optimizer": "per preset"}, **own)
    if with_seq_len:
        add_length_flag(g, dest="seq_len", default=seq_len,
                        help=f"sequence length (default {seq_len if seq_len else 'per preset'})")
    g.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process (default: OMP_NUM_THREADS if set; else 1 on a machine of at most "
                        "2 cores, so that two runs share the cores, and torch's choice elsewhere)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint exactly where it stopped")
    g.add_argument("--cache-dir", default=DEFAULT_CACHE,
                   help=f"where tokenized pre-training examples are cached (default {DEFAULT_CACHE})")


def train_config(args, **values) -> TrainConfig:
    """The loop's settings from the parsed flags; `values` sets the others (the run's identity, eval_every).
    --mixed-precision auto keeps its choices in --cache-dir's precision.json."""
    return from_flags(TrainConfig, args, **{"out_dir": Path(args.out),
                                            "precision_cache": Path(args.cache_dir) / PRECISION_FILE, **values})


def run_owned(args, run, argv: list[str] | None) -> None:
    """Set up Accelerate for the parsed flags and call `run(args, accelerator)` while this run owns --out (its
    main process holds the OUT lock, `mobilekd.rundir`, and marks OUT complete for `argv` when `run` returns)."""
    accelerator = make_accelerator(args)
    with owned(args.out, accelerator.is_main_process, argv):
        run(args, accelerator)


def make_accelerator(args) -> Accelerator:
    if args.threads is None and "OMP_NUM_THREADS" not in os.environ and (os.cpu_count() or 1) <= 2:
        args.threads = 1
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    accelerator = Accelerator(mixed_precision="no" if args.mixed_precision == "auto" else args.mixed_precision,
                              cpu=not torch.cuda.is_available())
    refuse_sharded(accelerator.distributed_type)  # before any data or teacher work, not at the loop's first save
    set_seed(args.seed)
    return accelerator
