"""`mobilekd finetune`'s own settings, one dataclass (the training loop's are `TrainConfig`'s): each field with a help
is a flag (`mobilekd.flags.add_flags`), its default written here and nowhere else. A field left None is filled once,
by `fill_defaults`: from the task (`data.tasks.DEFAULTS`) and the method (`finetune.methods`); the learning rate's
default depends on the model's size and is filled once the model is loaded (`data.tasks.default_lr`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mobilekd.data.augment import N_PER_TASK
from mobilekd.data.squad import STRIDE
from mobilekd.data.tasks import DEFAULTS, TASK_NAMES
from mobilekd.errors import UserError
from mobilekd.finetune.methods import DEFAULTS as KD_DEFAULTS
from mobilekd.finetune.methods import METHODS, method_flags
from mobilekd.finetune.selection import CAP, FRACTION
from mobilekd.finetune.teacher_features import BUDGET_GB as STORE_GB
from mobilekd.train.common import CLASSIFIER_DROPOUT, WARMUP

SELECT_ON = ["auto", "validation", "none", "dev", "train-slice"]  # train-slice: validation's former name


@dataclass
class FinetuneConfig:
    model: str = field(default=None, metadata={
        "required": True, "help": "model directory (ours, or a transformers MobileBERT/BERT one), or a packaged "
                                  "checkpoint's name (all-minilm-l6-v2)"})
    task: str = field(default=None, metadata={
        "required": True, "choices": TASK_NAMES,
        "help": "a GLUE task, SQuAD (squad1, squad2), or custom (your --data)"})
    data: str | None = field(default=None, metadata={
        "help": "task directory with train and dev files", "default_help": "the shipped copy for sst2, cola, mrpc, "
                                                                           "stsb, rte"})
    teacher: str | None = field(default=None, metadata={
        "help": "a model directory fine-tuned on the same task: adds logit distillation (its outputs over the "
                "training set are computed once and cached beside it); a transformers classifier of another "
                "architecture (RoBERTa, DeBERTa, ELECTRA, ...) teaches through its logits alone, read with its own "
                "tokenizer", "default_help": "none"})
    method: str | None = field(default=None, metadata={
        "choices": sorted(METHODS),
        "help": "a task-distillation method's settings for the flags left unset (mobilekd.finetune.methods): ft, kd, "
                "pkd-skip, pkd-last (BERT-PKD), tinybert (TinyBERT)",
        "default_help": "logit KD with the flags below when --teacher is given"})
    alpha: float | None = field(default=None, metadata={
        "type": float, "help": "with --teacher: weight of the hard-label loss (the rest goes to distillation)",
        "default_help": f"{KD_DEFAULTS['alpha']:g}, or the method's"})
    temperature: float | None = field(default=None, metadata={
        "type": float, "help": "with --teacher: KD temperature",
        "default_help": f"{KD_DEFAULTS['temperature']:g}, or the method's"})
    kd_reduction: str | None = field(default=None, metadata={
        "choices": ["batchmean", "mean"],
        "help": "KL averaged over examples (batchmean) or over examples and classes (mean: BERT-PKD's and TinyBERT's)",
        "default_help": f"{KD_DEFAULTS['kd_reduction']}, or the method's"})
    patience_weight: float | None = field(default=None, metadata={
        "type": float, "help": "BERT-PKD's beta: weight of the patience loss on normalised [CLS] vectors",
        "default_help": f"{KD_DEFAULTS['patience_weight']:g}: off, or the method's"})
    patience_layers: str | None = field(default=None, metadata={
        "help": "teacher layers for the student's layers but its last: pkd_skip, pkd_last, or comma-separated 0-based "
                "layers", "default_help": f"{KD_DEFAULTS['patience_layers']}, or the method's"})
    intermediate_epochs: float | None = field(default=None, metadata={
        "type": float, "above": 0,
        "help": "--method tinybert or pkt-td: epochs of intermediate-layer distillation before the prediction step "
                "(pkt-td: over all its stages, one a student layer)", "default_help": "--epochs"})
    teacher_store_gb: float = field(default=STORE_GB, metadata={
        "min": 0, "help": "--method tinybert or pkt-td: the disk the teacher's stored layer features may take (they "
                          "are computed once beside the teacher and read by every seed; over this, or over the free "
                          "disk, the teacher runs at every step instead; 0: never stored)"})
    augment: int = field(default=0, metadata={
        "min": 0, "help": "TinyBERT's data augmentation: up to N new copies of each training example (official N: "
                          + ", ".join(f"{k} {v}" for k, v in N_PER_TASK.items()) + ")",
        "default_help": "0: none"})
    augment_seed: int = field(default=0, metadata={
        "help": "the augmentation's seed", "default_help": "0: one augmented set for every --seed"})
    augment_model: str | None = field(default=None, metadata={
        "help": "with --augment: the pre-trained model (with its MLM head) whose predictions give the candidate "
                "words, e.g. the teacher before fine-tuning", "default_help": "none"})
    eval_only: bool = field(default=False, metadata={"help": "evaluate --model on dev, no training"})
    epochs: float | None = field(default=None, metadata={
        "type": float, "above": 0, "help": "training epochs", "default_help": "per task"})
    max_steps: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "stop after this many steps (overrides --epochs)", "default_help": "none"})
    lr: float | None = field(default=None, metadata={
        "type": float, "help": "peak learning rate", "default_help": "by task and model size, see Defaults above"})
    warmup: float = field(default=WARMUP, metadata={"help": "warm-up fraction"})
    max_len: int | None = field(default=None, metadata={
        "length": True, "min": 1, "help": "sequence length", "default_help": "per task, see Defaults above"})
    stride: int = field(default=STRIDE, metadata={
        "help": "SQuAD: tokens shared by consecutive windows", "default_help": f"{STRIDE}, the paper's"})
    regression: bool = field(default=False, metadata={"help": "custom task: numeric labels"})
    max_train_examples: int | None = field(default=None, metadata={
        "type": int, "help": "use a seeded random subset of the training set", "default_help": "all"})
    subset_seed: int | None = field(default=None, metadata={
        "type": int, "help": "the seed that draws that subset (fix it to give every seed the same examples)",
        "default_help": "--seed"})
    eval_every: int | None = field(default=None, metadata={
        "type": int, "min": 0, "help": "evaluate on the selection split every N steps (0: only after the last step, "
                                       "so the model kept is the last)", "default_help": "once per epoch"})
    select_on: str = field(default="auto", metadata={
        "choices": SELECT_ON,
        "help": "which split picks the best checkpoint: a validation split carved from the training data (dev is read "
                "once, after, to score the model chosen); none (the last step's model, all of the training data, dev "
                "scored once); or the dev set itself (its best score is then optimistic). auto: validation, or none "
                "with --eval-every 0, where there is no checkpoint to choose. train-slice is validation's former "
                "name"})
    validation_fraction: float = field(default=FRACTION, metadata={
        "aliases": ["--selection-fraction"],
        "help": f"the share of training examples held out for validation (at most {CAP:,} examples; "
                f"--selection-fraction is its former name)"})
    skip_dev: bool = field(default=False, metadata={
        "help": "never read dev: the run trains and chooses on validation only (a search's trial, scored later, "
                "once, if chosen: --eval-only --model OUT)"})
    dropout: float | None = field(default=None, metadata={
        "type": float, "help": "override the model's hidden dropout", "default_help": "the model's"})
    classifier_dropout: float = field(default=CLASSIFIER_DROPOUT, metadata={
        "help": "dropout before the classifier", "default_help": f"{CLASSIFIER_DROPOUT:g}, the official "
                                                                 f"run_classifier.py's"})
    keep_pooler: bool = field(default=False, metadata={
        "help": "start from the pre-trained pooler dense; by default a model that is not yet a classifier gets a "
                "fresh one (a pooler trained for next-sentence prediction can map every sentence to nearly the same "
                "vector; google-research/google-research issue #287, as issue 14 cites it)"})
    intermediate: str | bool | None = None  # the method's intermediate step (tinybert, pkt), not a flag


def check(c: FinetuneConfig) -> FinetuneConfig:
    """Refuse, in one line, settings that do not go together, before any work; the select-on rule applied."""
    if c.augment and not c.augment_model:
        raise UserError("--augment needs --augment-model (a pre-trained model with its MLM head)")
    if (c.method not in (None, "ft") or c.patience_weight) and not c.teacher:
        raise UserError(f"--method {c.method or 'with --patience-weight'} needs --teacher")
    if c.method == "ft" and c.teacher:
        raise UserError("--method ft fine-tunes on the labels alone: drop --teacher (or choose kd)")
    if not 0 < c.validation_fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1, got {c.validation_fraction}")
    if c.select_on == "train-slice":
        print("--select-on train-slice is now called --select-on validation")
        c.select_on = "validation"
    if c.skip_dev and (c.eval_only or c.select_on == "dev"):
        raise UserError("--skip-dev trains without reading dev: drop --eval-only and --select-on dev")
    if c.select_on == "auto":  # a split to choose on only where there is a choice to make
        c.select_on = "none" if c.eval_every == 0 else "validation"
    return c


def fill_defaults(c: FinetuneConfig) -> FinetuneConfig:
    """The settings the user left unset (None), from the task's defaults (but the learning rate, whose default
    depends on the model's size: `data.tasks.default_lr`, once the model is loaded) and then the method's."""
    unset = {f.name for f in dataclasses.fields(c) if getattr(c, f.name) is None}
    # the task's value first where both give one, as before the dataclass
    found = {**method_flags(c.method), **{k: v for k, v in DEFAULTS[c.task].items() if k != "lr"}}
    return dataclasses.replace(c, **{k: v for k, v in found.items() if k in unset})
