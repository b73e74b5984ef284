"""A fine-tuned transformers classifier of another architecture as a teacher: RoBERTa, DeBERTa-v2/v3, ELECTRA,
MPNet, DistilBERT, or any encoder `AutoModelForSequenceClassification` loads.

Logit distillation (Hinton et al. 2015, Section 2) needs nothing from a teacher but its logits on each training
example, so the teacher reads the examples' text through its own tokenizer, and the student through its own: the
two need not share a vocabulary or an architecture.

Methods that match layers token by token (TinyBERT's intermediate step, MobileBERT's progressive transfer over the
task) read the teacher's hidden states and attention distributions through transformers' own outputs
(`output_hidden_states`, `output_attentions`: `ForeignEncoder`), which every encoder gives; they need the student
to read the teacher's tokenizer, so that position t is the same token on both sides (`mobilekd init PRESET OUT
--vocab TEACHER` starts such a student; `tokenizer_problem` refuses any other in one line). transformers returns
attention probabilities, not the pre-softmax scores TinyBERT's task_distill.py compares (`att_loss` over
`student_atts`, the scores before softmax), so with such a teacher TinyBERT's attention term is MobileBERT's
attention transfer, the KL divergence between the two distributions (Sun et al. 2020, eq. 3;
`objectives.tinybert_matches(scores=False)`): a departure from TinyBERT's code, made because the scores are not
among the outputs transformers exposes. BERT-PKD's patience loss reads the teacher's cached [CLS] vectors, which
this path does not compute: refused in one line (`layer_matching_refusal`).

A BERT or MobileBERT directory (`model_type` "bert", "mobilebert", or our "ib_bert") is not foreign: it loads
into our own classes (`mobilekd.models.hf.load_pretrained`) and can teach with every method.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from mobilekd.errors import located
from mobilekd.fileio import read_json
from mobilekd.models.mobilebert import EncoderOutput

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
    return (f"{model_dir}: a transformers {model_type(model_dir)} teacher teaches through its logits, hidden states "
            f"and attentions; {what} reads the teacher's cached [CLS] vectors, which need a BERT-family teacher")


def tokenizer_problem(student_dir, student_tokenizer, teacher_dir, teacher_tokenizer) -> str | None:
    """None when the student reads text as the teacher does (the same vocabulary, and the same ids for a probe
    pair of sentences, special tokens included), else why layer matching cannot pair them."""
    probe = ("The film's ending surprised everyone.", "Nobody expected it, 42 minutes in!")
    same = student_tokenizer.get_vocab() == teacher_tokenizer.get_vocab() and \
        student_tokenizer(*probe)["input_ids"] == teacher_tokenizer(*probe)["input_ids"]
    return None if same else (
        f"{student_dir}: does not read the teacher's tokenizer ({teacher_dir}); layer matching compares the two "
        f"models token by token, so the student must (start one with `mobilekd init PRESET OUT --vocab "
        f"{teacher_dir}`)")


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



class ForeignEncoder(torch.nn.Module):
    """A transformers classifier's encoder seen as our encoder by layer matching (`objective.intermediate_loss`,
    `teacher_features.build`): `mobilebert(...)` gives its embedding output and each layer's output
    (`hidden_states[0]` and `[1:]`) as feature maps and its attention probabilities, from transformers' own
    outputs; the model must compute attention eagerly (`load_foreign_teacher(layers=True)`), as fused kernels
    return no probabilities. Its `config` names the widths the matches check: hidden_size, num_hidden_layers,
    num_attention_heads (true_hidden_size: no bottleneck)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model.base_model
        c = model.config
        self.config = SimpleNamespace(hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                                      num_attention_heads=c.num_attention_heads, true_hidden_size=c.hidden_size)
        takes = inspect.signature(self.model.forward).parameters
        # token types only where the model has more than one (RoBERTa's single type reads every id as 0)
        self.token_types = "token_type_ids" in takes and getattr(c, "type_vocab_size", 0) > 1

    def mobilebert(self, input_ids, attention_mask, token_type_ids=None, num_layers=None,
                   output_feature_maps=True, output_attentions=True) -> EncoderOutput:
        """Every layer runs (transformers has no early stop); `num_layers` cuts the features given back."""
        extra = {"token_type_ids": token_type_ids} if self.token_types and token_type_ids is not None else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                         output_attentions=output_attentions, **extra)
        depth = num_layers or self.config.num_hidden_layers
        maps = list(out.hidden_states[1:depth + 1])
        return EncoderOutput(maps[-1], feature_maps=maps if output_feature_maps else [],
                             embeddings=out.hidden_states[0],
                             attentions=list(out.attentions[:depth]) if output_attentions else [])


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


def load_foreign_teacher(model_dir, task, max_len: int, layers: bool = False) -> ForeignTeacher:
    """Load `model_dir` with `AutoModelForSequenceClassification` (from model.safetensors only: never a pickle) and
    `AutoTokenizer`, its labels checked against `task` and its positions against `max_len` first; refused in one
    located line where transformers cannot read it or where its classifier is not in the file (a checkpoint not
    fine-tuned: transformers would start the head at random, and random logits would be distilled). `layers`: its
    attention computed eagerly, so that it gives its attention probabilities (`ForeignEncoder`)."""
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
            model_dir, config=config, use_safetensors=True, output_loading_info=True,
            **({"attn_implementation": "eager"} if layers else {}))
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
