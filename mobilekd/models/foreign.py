"""A fine-tuned transformers classifier of another architecture as a teacher: RoBERTa, DeBERTa-v2/v3, ELECTRA,
MPNet, DistilBERT, or any encoder `AutoModelForSequenceClassification` loads.

Logit distillation (Hinton et al. 2015, Section 2) needs nothing from a teacher but its logits on each training
example, so the teacher reads the examples' text through its own tokenizer, and the student through its own: the
two need not share a vocabulary or an architecture. Methods that match layers (BERT-PKD's patience loss,
TinyBERT's intermediate step) compare the two models token by token and layer by layer, which needs one
tokenization and a BERT-family layout; they are refused for such a teacher in one line (`layer_matching_refusal`).

A BERT or MobileBERT directory (`model_type` "bert", "mobilebert", or our "ib_bert") is not foreign: it loads
into our own classes (`mobilekd.models.hf.load_pretrained`) and can teach with every method.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

from mobilekd.errors import located
from mobilekd.fileio import read_json

OURS = ("bert", "mobilebert", "ib_bert")  # model types our own classes compute (mobilekd.models.hf.load_config)


def model_type(model_dir) -> str | None:
    """The `model_type` of a model directory's config.json (None without one)."""
    path = Path(model_dir) / "config.json"
    return read_json(path).get("model_type") if path.is_file() else None


def is_foreign(model_dir) -> bool:
    """Whether `model_dir` is a transformers model of an architecture our classes do not compute."""
    kind = model_type(model_dir)
    return kind is not None and kind not in OURS


def layer_matching_refusal(model_dir, what: str) -> str:
    return (f"{model_dir}: a transformers {model_type(model_dir)} teacher teaches through its logits alone; {what} "
            f"matches layers token by token, which needs a BERT-family teacher sharing the student's tokenizer")


@dataclass
class ForeignTeacher:
    """A transformers sequence classifier and its own tokenizer, in eval mode. `id2label` is the model's own."""

    model: torch.nn.Module
    tokenizer: object
    id2label: dict[int, str]
    model_type: str

    def logits(self, texts_a: list[str], texts_b: list[str] | None, max_len: int) -> torch.Tensor:
        """Its logits (B, C) over a batch of texts (pairs when `texts_b`), truncated to `max_len` of its tokens.
        Only the inputs its `forward` takes are passed (DistilBERT has no token types)."""
        enc = self.tokenizer(texts_a, texts_b, truncation=True, max_length=max_len, padding=True, return_tensors="pt")
        takes = inspect.signature(self.model.forward).parameters
        device = next(self.model.parameters()).device
        return self.model(**{k: v.to(device) for k, v in enc.items() if k in takes}).logits



def labels_problem(id2label: dict[int, str], task) -> str | None:
    """None when a teacher's labels are the task's: by name, or transformers' default names (LABEL_0, ...) in as
    many as the task has, read in the task's order; else why not."""
    if task.fits(id2label):
        return None
    if id2label == {i: f"LABEL_{i}" for i in range(len(id2label))} and len(id2label) == len(task.id2label):
        return None
    return f"teacher's labels {list(id2label.values())} do not fit task {task.name} " \
           f"(labels {list(task.id2label.values())})"


# transformers' RoBERTa-family position ids start after the padding index: two positions fewer for tokens
OFFSET_POSITIONS = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2}


def load_foreign_teacher(model_dir, task, max_len: int) -> ForeignTeacher:
    """Load `model_dir` with `AutoModelForSequenceClassification` (from model.safetensors only: never a pickle) and
    `AutoTokenizer`, its labels checked against `task` and its positions against `max_len` first; refused in one
    located line where transformers cannot read it or where its classifier is not in the file (a checkpoint not
    fine-tuned: transformers would start the head at random, and random logits would be distilled)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    model_dir = Path(model_dir)
    if not (model_dir / "model.safetensors").is_file():
        raise located(model_dir / "model.safetensors", "no such file (a teacher's weights are read from "
                                                       "safetensors only)")
    try:
        config = AutoConfig.from_pretrained(model_dir)
        id2label = {int(k): v for k, v in config.id2label.items()}
        problem = labels_problem(id2label, task)
        if problem:
            raise located(model_dir / "config.json", problem)
        positions = getattr(config, "max_position_embeddings", None)
        if positions is not None and max_len > positions - OFFSET_POSITIONS.get(config.model_type, 0):
            raise located(model_dir / "config.json", f"--max-len {max_len} exceeds the teacher's "
                                                     f"{positions - OFFSET_POSITIONS.get(config.model_type, 0)} "
                                                     f"positions")
        model, info = AutoModelForSequenceClassification.from_pretrained(
            model_dir, config=config, use_safetensors=True, output_loading_info=True)
        if info.get("missing_keys"):
            raise located(model_dir / "model.safetensors", f"lacks {len(info['missing_keys'])} of the classifier's "
                                                           f"weights (e.g. {sorted(info['missing_keys'])[0]}): not a "
                                                           f"fine-tuned classifier; fine-tune it first")
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise located(model_dir, f"transformers cannot load it as a sequence classifier ({first})") from None
    return ForeignTeacher(model, tokenizer, id2label, config.model_type)
