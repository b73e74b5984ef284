"""What a recipe that trains on a task's training set reads from it and for how long: `TaskTraining`, whose fields
are the flags of every such verb (fastbert, qat, bilstm, cmlm, seq2seq; multitask takes its `Schedule` alone, over
all of its tasks), and `PairValidation`, the split of the training pairs that cmlm and seq2seq hold out. A recipe's
call of `add_task_flags` is the one home of its `epochs` and `lr` defaults (each method's own, credited in its
--help), and of a warm-up other than BERT's; the sequence length, where left unset, is the task's, filled once by
`task_training`."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from mobilekd.data.tasks import DEFAULTS, TASK_NAMES
from mobilekd.errors import UserError
from mobilekd.flags import add_flags, flag_text, take_flags
from mobilekd.train.common import WARMUP

CLASSIFICATION_TASKS = [t for t in TASK_NAMES if not t.startswith("squad")]


@dataclass
class Schedule:
    """How long and how fast a recipe trains, on how much of its training set (`mobilekd multitask`'s, over all of
    its tasks)."""
    epochs: float = field(default=None, metadata={"type": float, "above": 0, "help": "epochs"})
    max_steps: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "stop after this many steps (overrides --epochs)", "default_help": "none"})
    lr: float = field(default=None, metadata={"type": float, "above": 0, "help": "peak learning rate"})
    warmup: float = field(default=WARMUP, metadata={"min": 0, "help": "warm-up fraction"})
    max_len: int | None = field(default=None, metadata={"length": True, "min": 1, "help": "sequence length"})
    max_train_examples: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "a seeded random subset of the training set", "default_help": "all"})
    subset_seed: int = field(default=0, metadata={"min": 0, "help": "the seed that draws that subset"})

    def steps(self, examples: int, batch_size: int) -> int:
        """--max-steps, else --epochs over `examples` in batches of `batch_size` (at least one step)."""
        return self.max_steps or max(1, round(self.epochs * math.ceil(examples / batch_size)))


@dataclass
class TaskTraining(Schedule):
    """A `Schedule` on one task's training set."""
    task: str = field(default=None, metadata={
        "required": True, "choices": CLASSIFICATION_TASKS, "help": "the task (custom: yours, in --data)"})
    data: str | None = field(default=None, metadata={"help": "task directory", "default_help": "the shipped copy"})


def add_task_flags(parser: argparse.ArgumentParser, *, epochs: float, lr: float, warmup: float = WARMUP,
                   what: str = "training", source: str = "", tasks: list[str] | None = None,
                   lengths: str = "per task, 128 for GLUE", cls=TaskTraining, meta: dict | None = None,
                   **defaults) -> None:
    """`TaskTraining`'s flags (or another `Schedule`'s, `cls`) with this recipe's defaults: its tasks (default the
    classification tasks), `epochs` (`what` names them) and `lr`, credited with `source` in --help (e.g.
    ", fastbert.py's"), a `warmup` other than BERT's, and other `defaults`; `lengths` says in --help what an unset
    --max-len means; `meta` overrides fields' metadata (`mobilekd.flags.add_flags`)."""
    choices = tasks or CLASSIFICATION_TASKS
    yours = "pairs" if "pairs" in choices else "custom"
    add_flags(parser, cls, epochs=epochs, lr=lr, warmup=warmup, **defaults,
              shown={"epochs": f"{epochs:g}{source}", "lr": f"{flag_text(lr)}{source}", "max_len": lengths},
              meta={"task": {"choices": choices, "help": f"the task ({yours}: yours, in --data)"},
                    "epochs": {"help": f"{what} epochs"}, **(meta or {})})


def task_training(args: argparse.Namespace, lengths: dict[str, int] | None = None) -> TaskTraining:
    """The recipe's `TaskTraining`, its flags taken off `args` (bad values refused in one line); an unset sequence
    length is the task's (from `lengths`, default the classification tasks' `DEFAULTS`)."""
    t = take_flags(TaskTraining, args)
    t.max_len = t.max_len or (lengths[t.task] if lengths else DEFAULTS[t.task]["max_len"])
    return t


@dataclass
class PairValidation:
    validation_fraction: float = field(default=0.0, metadata={
        "default_help": "0: none", "help": "hold out this share of the training pairs (at most 2,000; pairs linked by "
                                           "a shared sentence on one side) as a validation split"})
    validation_seed: int | None = field(default=None, metadata={
        "type": int, "min": 0, "default_help": "--seed; fix it to hold out the same pairs for every seed, and for the "
                                               "C-MLM teacher the students learn from",
        "help": "the seed that draws the validation split"})


def add_validation_flags(parser: argparse.ArgumentParser, *, reads: str) -> None:
    """`PairValidation`'s flags: a validation split carved from the training pairs
    (`mobilekd.finetune.selection.carve_pairs`) that `reads` (what the recipe scores on it), dev scored once, after
    training. The same fraction and seed over the same training pairs hold out the same pairs in `mobilekd cmlm` and
    `mobilekd seq2seq`, so a C-MLM teacher never trains on its student's validation pairs."""
    help = PairValidation.__dataclass_fields__["validation_fraction"].metadata["help"]
    add_flags(parser, PairValidation, meta={"validation_fraction": {
        "help": f"{help}: {reads} on it, and dev is scored once, after training"}})


def pair_validation(args: argparse.Namespace) -> PairValidation:
    """The recipe's `PairValidation`, its flags taken off `args`: a fraction outside [0, 1) refused in one line; the
    split's seed is --seed where none was given."""
    v = take_flags(PairValidation, args)
    if not 0 <= v.validation_fraction < 1:
        raise UserError(f"--validation-fraction must lie in [0, 1), got {v.validation_fraction}")
    if v.validation_seed is None:
        v.validation_seed = args.seed
    return v
