"""Flags and set-up shared by every training recipe (teacher, distillation, fine-tuning)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from mobilekd.data.pretraining import DEFAULT_CACHE
from mobilekd.data.tasks import DEFAULTS, TASK_NAMES
from mobilekd.errors import UserError
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import add_flags, add_length_flag, at_least, from_flags
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


def add_task_flags(parser: argparse.ArgumentParser, *, epochs: float, lr: float, warmup: float = WARMUP,
                   what: str = "training", source: str = "", tasks: list[str] | None = None,
                   lengths: str = "per task, 128 for GLUE") -> None:
    """The flags of a recipe that trains on a task's (subset of its) training set: the task (of `tasks`, default the
    classification tasks), its data, how long (`what` names the epochs), the learning rate, the sequence length
    (default per task: `lengths` says it in --help, `check_task_flags` sets it) and the subset; `source` credits the
    defaults (e.g. ", fastbert.py's"); the recipe's call is the one home of its `epochs` and `lr` defaults, and of
    a `warmup` other than BERT's (`WARMUP`)."""
    parser.add_argument("--task", required=True, choices=tasks or [t for t in TASK_NAMES if not t.startswith("squad")])
    parser.add_argument("--data", help="task directory (default: the shipped copy)")
    parser.add_argument("--epochs", type=float, default=epochs, help=f"{what} epochs (default {epochs:g}{source})")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (overrides --epochs)")
    parser.add_argument("--lr", type=float, default=lr, help=f"peak learning rate (default {lr:g}{source})")
    parser.add_argument("--warmup", type=float, default=warmup, help=f"warm-up fraction (default {warmup:g})")
    add_length_flag(parser, help=f"sequence length (default {lengths})")
    parser.add_argument("--max-train-examples", type=int, help="a seeded random subset of the training set")
    parser.add_argument("--subset-seed", type=int, default=0, help="the seed that draws that subset (default 0)")


def add_validation_flags(parser: argparse.ArgumentParser, *, reads: str) -> None:
    """--validation-fraction and --validation-seed of a recipe on (source, target) pairs: a validation split carved
    from the training pairs (`mobilekd.finetune.selection.carve_pairs`) that `reads` (what the recipe scores on it),
    dev scored once, after training. The same fraction and seed over the same training pairs hold out the same
    pairs in `mobilekd cmlm` and `mobilekd seq2seq`, so a C-MLM teacher never trains on its student's validation
    pairs."""
    parser.add_argument("--validation-fraction", type=float, default=0.0,
                        help="hold out this share of the training pairs (at most 2,000; pairs linked by a shared "
                             f"sentence on one side) as a validation split: {reads} on it, and dev is scored once, "
                             "after training (default 0: none)")
    parser.add_argument("--validation-seed", type=int,
                        help="the seed that draws the validation split (default: --seed; fix it to hold out the same "
                             "pairs for every seed, and for the C-MLM teacher the students learn from)")


def check_validation_flags(args) -> None:
    """Refuse a fraction outside [0, 1) in one line; the split's seed is --seed where none was given."""
    if not 0 <= args.validation_fraction < 1:
        raise UserError(f"--validation-fraction must lie in [0, 1), got {args.validation_fraction}")
    at_least("--validation-seed", args.validation_seed, 0)
    if args.validation_seed is None:
        args.validation_seed = args.seed


def check_task_flags(args, lengths: dict[str, int] | None = None) -> None:
    """Refuse bad values of `add_task_flags`'s flags; the task's sequence length (from `lengths`, default the
    classification tasks' `DEFAULTS`) where none was given."""
    at_least("--epochs", args.epochs, 0, strictly=True)
    at_least("--max-steps", args.max_steps, 1)
    at_least("--max-len", args.max_len, 1)
    at_least("--max-train-examples", args.max_train_examples, 1)
    at_least("--subset-seed", args.subset_seed, 0)
    args.max_len = args.max_len or (lengths[args.task] if lengths else DEFAULTS[args.task]["max_len"])


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
