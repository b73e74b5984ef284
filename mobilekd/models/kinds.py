"""The kinds of model directory the toolkit reads, declared once: how each is recognised, what a refusal calls it,
what writes it, and whether it holds our BERT-family encoder. A recipe asks `kind_of(dir)` and dispatches or
refuses on the answer (`require`), instead of asking each model module in turn.

    seq2seq     seq2seq.json          a small encoder-decoder (mobilekd seq2seq)
    bilstm      bilstm.json           Tang et al.'s BiLSTM classifier (mobilekd bilstm)
    multitask   multitask.json        one encoder, a classifier per task (mobilekd multitask, MT-DNN)
    early_exit  early_exit.json       a classifier with FastBERT's branches (mobilekd fastbert)
    foreign     config.json           a transformers model of another architecture (RoBERTa, ELECTRA, ...)
    bert        config.json           a BERT or MobileBERT-family model (every other verb), ours or transformers'

The first kind whose marker is in the directory is its kind, in this order: the first four add their file to a
directory that may also hold a config.json. Adding a kind: its marker constant in its model module, one `Kind`
here, then the verbs that take it (`export`'s `run`, `finetune.evaluation.build_model`) dispatch on its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mobilekd.errors import located
from mobilekd.models import bilstm, early_exit, foreign, multitask, seq2seq


@dataclass(frozen=True)
class Kind:
    """One kind of model directory: its `name`, the file that marks it, a refusal's words for it (`what`), the verb
    that writes it, and whether it holds our BERT-family encoder (`encoder`: it loads through
    `mobilekd.models.hf.load_pretrained`)."""

    name: str
    marker: str
    what: str
    made_by: str
    encoder: bool

    def holds(self, model_dir: Path) -> bool:
        if not self.marker or not (model_dir / self.marker).is_file():
            return False
        if self.marker == "config.json":  # both remaining kinds: the model_type decides
            return foreign.is_foreign(model_dir) == (self.name == "foreign")
        return True


KINDS = (
    Kind("seq2seq", seq2seq.CONFIG_FILE, "a seq2seq student (an encoder-decoder)", "mobilekd seq2seq", False),
    Kind("bilstm", bilstm.CONFIG_FILE, "a BiLSTM classifier", "mobilekd bilstm", False),
    Kind("multitask", multitask.SETTINGS, "a multi-task model (one encoder, a classifier per task)",
         "mobilekd multitask", True),
    Kind("early_exit", early_exit.SETTINGS, "an early-exit classifier (FastBERT's branches)", "mobilekd fastbert",
         True),
    Kind("foreign", "config.json", "a transformers model of another architecture", "transformers", False),
    Kind("bert", "config.json", "a BERT-family model", "mobilekd init, train-teacher, distill or finetune", True),
)
NONE = Kind("none", "", "no model (no config.json)", "", False)  # a directory of none of them, or no directory


def kind_of(model_dir) -> Kind:
    """The kind of model `model_dir` holds (NONE where it holds none, or is no directory)."""
    model_dir = Path(model_dir)
    return next((k for k in KINDS if k.holds(model_dir)), NONE)


def require(model_dir, needs: str, *kinds: str) -> Kind:
    """`model_dir`'s kind if it is one of `kinds`; else one located line saying what it holds and what the caller
    `needs` (its words, e.g. "the C-MLM teacher starts from a BERT masked LM")."""
    kind = kind_of(model_dir)
    if kind.name not in kinds:
        holds = "no such model directory" if not Path(model_dir).is_dir() else \
            f"holds {kind.what}" + (f" (from {kind.made_by})" if kind.made_by else "")
        raise located(model_dir, f"{holds}; {needs}")
    return kind
