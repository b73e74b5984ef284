"""`mobilekd train-teacher`'s own settings, one dataclass (the training loop's are `TrainConfig`'s): each field with
a help is a flag (`mobilekd.flags.add_flags`), its default written here and nowhere else; a field left None is filled
once, by `fill_defaults`, from the teacher's recipe defaults (`configs/<preset>.json`, or `adaptation.json` with
--init-from), which also give the loop's optimizer and sequence length where those flags were left unset."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from mobilekd.data.tokenizer import DEFAULT_VOCAB
from mobilekd.errors import UserError
from mobilekd.flags import fill_unset
from mobilekd.models.pretrained import PACKAGED
from mobilekd.train.common import EVAL_EXAMPLES, SHIPPED_CORPORA, WARMUP
from mobilekd.train.loop import Stage
from teacher_ib_bert import TEACHER_PRESETS, adaptation_defaults, pretraining_defaults


@dataclass
class TeacherConfig:
    preset: str = field(default="demo_teacher", metadata={
        "choices": TEACHER_PRESETS, "default_help": "demo_teacher; ignored with --init-from",
        "help": "teacher model preset; its recipe defaults are teacher_ib_bert/configs/PRESET.json"})
    init_from: str | None = field(default=None, metadata={
        "default_help": "none",
        "help": "adapt this pre-trained checkpoint instead of training a preset from scratch: a model directory "
                "(ours, or a transformers BERT/MobileBERT one, with or without the bert. prefix) or a packaged name "
                f"({', '.join(PACKAGED)}); defaults from teacher_ib_bert/adaptation.json; its own tokenizer is used"})
    freeze_encoder: bool = field(default=False, metadata={
        "help": "with --init-from: train only the pre-training heads, keeping the encoder as it is"})
    train_word_embeddings: bool = field(default=False, metadata={
        "help": "with --init-from: train the word-embedding table too; by default it stays as pre-trained, since on a "
                "small corpus Adam moves every row of the tied MLM decoder (words the corpus never shows included) the "
                "same way each step"})
    update_unseen_rows: bool = field(default=False, metadata={
        "help": "from scratch: also update the word-embedding rows of tokens the corpus never shows (by default they "
                "get no gradient: with the decoder tied to them, Adam would move them all the same way; "
                "mobilekd/train/vocab.py)"})
    head_lr_scale: float | None = field(default=None, metadata={
        "type": float, "min": 0, "help": "with --init-from: the heads' learning rate as a multiple of --lr",
        "default_help": "from adaptation.json: the new heads start from scratch, the encoder is already trained"})
    corpus: list[str] = field(default_factory=lambda: list(SHIPPED_CORPORA), metadata={
        "nargs": "+", "default_help": "the shipped Brown and Austen corpora",
        "help": "text files: one sentence or paragraph a line, blank lines between documents"})
    vocab: str = field(default=str(DEFAULT_VOCAB), metadata={
        "help": "WordPiece vocab.txt", "default_help": "bert-base-uncased; with --init-from, the checkpoint's"})
    steps: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "optimizer steps", "default_help": "the preset's config"})
    lr: float | None = field(default=None, metadata={
        "type": float, "help": "peak learning rate", "default_help": "the preset's config"})
    warmup: float = field(default=WARMUP, metadata={"help": "warm-up fraction of the steps"})
    weight_decay: float = field(default=Stage.weight_decay, metadata={
        "help": "AdamW/LAMB weight decay, not on biases and LayerNorms"})
    dropout: float | None = field(default=None, metadata={
        "type": float, "help": "override the preset's hidden and attention dropout", "default_help": "the preset's"})
    eval_examples: int = field(default=EVAL_EXAMPLES, metadata={"min": 1, "help": "held-out examples to evaluate"})


def check(c: TeacherConfig) -> TeacherConfig:
    """Refuse, in one line, flags that do not go together, before any work."""
    if c.update_unseen_rows and c.init_from:
        raise UserError("--update-unseen-rows is for a teacher trained from scratch (with --init-from the word table "
                        "stays as pre-trained unless --train-word-embeddings)")
    if (c.freeze_encoder or c.train_word_embeddings or c.head_lr_scale is not None) and not c.init_from:
        raise UserError("--freeze-encoder, --train-word-embeddings and --head-lr-scale need --init-from (they adapt "
                        "a trained encoder)")
    return c


def fill_defaults(c: TeacherConfig, loop: argparse.Namespace) -> TeacherConfig:
    """The recipe defaults (the preset's, or adaptation's with --init-from) for every setting left unset (None): this
    recipe's fields in the returned config, the loop's flags (optimizer, sequence length) on `loop`."""
    found = adaptation_defaults() if c.init_from else pretraining_defaults(c.preset)
    mine = {f.name for f in dataclasses.fields(c)}
    fill_unset(loop, {k: v for k, v in found.items() if k not in mine})
    return dataclasses.replace(c, **{k: v for k, v in found.items() if k in mine and getattr(c, k) is None})
