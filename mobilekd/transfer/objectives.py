"""Distillation objectives as data: a list of `Match`es (teacher layer, student layer, feature, loss name, weight,
optional learned projection) evaluated by one mechanism, `evaluate`, over a registry of named losses.

TextBrewer's `intermediate_matches` (src/textbrewer/distiller_general.py, the loop of
`GeneralDistiller.train_on_batch`: per match, `MATCH_LOSS_MAP[loss](student feature, teacher feature) * weight`,
the student's feature through its projection first) is the public example of the idea; ours is typed and
validated against the two model configs before a step runs (`check_matches`). As there, a projection maps the
student's side only and trains with the student (TextBrewer adds its parameters to the optimizer,
`GeneralDistiller.train`; `projections_for` builds ours, which the distillation recipe trains and checkpoints with
the student and drops before saving it).

Teachers and students of different widths pair through projections (TinyBERT's W_h); of different head counts,
through `group_heads` (the teacher's heads averaged in consecutive groups, one group per student head).

    MobileBERT (paper, Section 4.1): per student layer l, Match(feature="hidden", loss="fmt", weight=100,
        teacher_layer=map[l], student_layer=l) and Match(feature="attention", loss="at", ...)  (`mobilebert_matches`)
    TinyBERT (Jiao et al. 2020, Section 3.1): "embeddings"/"hidden" with loss "mse" and projection=True,
        "attention" with loss "mse"
    BERT-PKD (Sun et al. 2019, eq. 5): "cls" of chosen layers, loss "pkd"
    DistilBERT (Sanh et al. 2019, Section 3): "hidden" of the last layer, loss "cosine"

Features: `embeddings` (the embedding layer's output), `hidden` (a block's output feature map, B x T x N),
`attention` (a block's attention probabilities, B x A x T x T), `cls` (a block's first-token vector, B x N) and
`logits` (the head's output). Layers are 0-based block indices; `embeddings` and `logits` take none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from mobilekd.errors import UserError
from mobilekd.models.config import ModelConfig
from mobilekd.models.mobilebert import EncoderOutput
from mobilekd.transfer.losses import (attention_transfer, cosine_hidden, feature_map_transfer, logit_distillation,
                                      mean_transfer, variance_transfer)

FEATURES = ("embeddings", "hidden", "attention", "cls", "logits")
LAYERED = ("hidden", "attention", "cls")  # features that belong to a block


def mse(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """Plain mean squared error (TinyBERT's embedding, hidden-state and attention losses, Section 3.1)."""
    return F.mse_loss(student.float(), teacher.float())


# name -> loss(teacher, student) -> scalar, zero for identical inputs
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "fmt": feature_map_transfer,
    "at": attention_transfer,
    "mean": mean_transfer,
    "var": variance_transfer,
    "mse": mse,
    "cosine": cosine_hidden,
    "kd": logit_distillation,
}


@dataclass(frozen=True, kw_only=True)
class Match:
    """One term of an objective: `weight * LOSSES[loss](teacher feature, student feature)`."""

    feature: str
    loss: str
    weight: float = 1.0
    teacher_layer: int | None = None
    student_layer: int | None = None
    projection: bool = False  # a learned student-width -> teacher-width linear map on the student's side

    @property
    def name(self) -> str:
        """The term's name in logs and summaries: `fmt_L3` for a layer's term, `mse_embeddings` otherwise."""
        return f"{self.loss}_L{self.student_layer}" if self.feature in LAYERED else f"{self.loss}_{self.feature}"

    @property
    def site(self) -> str:
        """Where the student's feature is read (`L3`, `embeddings`): matches of one site share its projection."""
        return f"L{self.student_layer}" if self.feature in LAYERED else self.feature


@dataclass
class Features:
    """What one model's forward pass exposes to the matches."""

    encoder: EncoderOutput
    logits: torch.Tensor | None = None

    def select(self, feature: str, layer: int | None) -> torch.Tensor:
        if feature == "embeddings":
            return self.encoder.embeddings
        if feature == "logits":
            return self.logits
        if feature == "attention":
            return self.encoder.attentions[layer]
        hidden = self.encoder.feature_maps[layer]
        return hidden[:, 0] if feature == "cls" else hidden


def deepest(matches: list[Match], side: str) -> int:
    """How many blocks a model must run for these matches (`side`: "teacher" or "student")."""
    layers = [getattr(m, f"{side}_layer") for m in matches if m.feature in LAYERED]
    return max(layers) + 1 if layers else 0


def group_heads(attention: torch.Tensor, heads: int) -> torch.Tensor:
    """A teacher's attention distributions (B, A, T, T) as `heads` distributions: consecutive groups of A / heads
    heads averaged (still distributions over the attended positions). Our choice for teachers with more heads than
    the student (all-MiniLM-L6-v2: 12 over MobileBERT's 4; BERT-large: 16 over 4): MobileBERT pairs equal head
    counts (paper, Section 4.1) and TinyBERT equal ones too (Section 3.1); TinyBERT's later MiniLM averages
    nothing but transfers one relation per head, which needs equal counts as well."""
    b, a, t, _ = attention.shape
    return attention if a == heads else attention.view(b, heads, a // heads, t, t).mean(2)


def evaluate(matches: list[Match], teacher: Features, student: Features,
             projections: dict[str, torch.nn.Module] | None = None) -> dict[str, torch.Tensor]:
    """Every match's term (detached, under its `name`) and `loss`, their weighted sum averaged over the student
    layers the matches touch, so that a joint stage over every layer (JKT) weighs each layer as one PKT stage
    does. Terms are added in the matches' order."""
    layers = {m.student_layer for m in matches if m.feature in LAYERED}
    count = max(len(layers), 1)
    terms, total = {}, 0.0
    for m in matches:
        s = student.select(m.feature, m.student_layer)
        t = teacher.select(m.feature, m.teacher_layer)
        if m.projection:
            if not projections or m.site not in projections:
                raise UserError(f"{m.name}: a projected match needs its projection (objectives.projections_for)")
            s = projections[m.site](s)
        if m.feature == "attention":
            t = group_heads(t, s.shape[1])
        value = LOSSES[m.loss](t, s)
        terms[m.name] = value.detach()
        total = total + m.weight * value / count
    terms["loss"] = total
    return terms


def _width(config: ModelConfig, feature: str) -> int | None:
    return config.hidden_size if feature in ("hidden", "cls", "embeddings") else None


def check_matches(matches: list[Match], teacher: ModelConfig, student: ModelConfig) -> list[str]:
    """Problems that make these matches impossible for this pair (empty when they can run)."""
    problems = []
    for m in matches:
        if m.feature not in FEATURES:
            problems.append(f"unknown feature {m.feature!r} (choose from {', '.join(FEATURES)})")
        elif m.loss not in LOSSES:
            problems.append(f"unknown loss {m.loss!r} (choose from {', '.join(LOSSES)})")
        elif m.feature in LAYERED and not (isinstance(m.teacher_layer, int) and isinstance(m.student_layer, int)
                                           and 0 <= m.teacher_layer < teacher.num_hidden_layers
                                           and 0 <= m.student_layer < student.num_hidden_layers):
            problems.append(f"{m.name}: layers must be teacher 0..{teacher.num_hidden_layers - 1} and student "
                            f"0..{student.num_hidden_layers - 1}, got {m.teacher_layer} and {m.student_layer}")
        elif m.feature == "attention" and teacher.num_attention_heads % student.num_attention_heads:
            problems.append(f"the teacher's {teacher.num_attention_heads} attention heads cannot be grouped into the "
                            f"student's {student.num_attention_heads} (the count must divide)")
        elif _width(teacher, m.feature) != _width(student, m.feature) and not m.projection:
            problems.append(f"feature-map widths differ (teacher hidden_size {teacher.hidden_size}, student "
                            f"{student.hidden_size}) and the match has no projection")
        elif m.projection and m.feature not in ("hidden", "cls", "embeddings"):
            problems.append(f"{m.name}: only feature maps (hidden, cls, embeddings) can be projected")
    return list(dict.fromkeys(problems))


def refuse(problems: list[str]) -> None:
    if problems:
        raise UserError("teacher and student cannot be paired: " + "; ".join(problems))


def projections_for(matches: list[Match], teacher: ModelConfig, student: ModelConfig) -> torch.nn.ModuleDict:
    """One linear map per site of projected matches (TinyBERT's W_h, Section 3.1: student width -> teacher
    width), trained beside the student and dropped after distillation, never part of a saved or exported student.

    TinyBERT shares one W_h across layers (`fit_dense` in TinyBERT/transformer/modeling.py); ours is one per
    student layer, so that each stage of progressive transfer trains its own layer's map and a frozen lower layer
    keeps a map fitted to it."""
    return torch.nn.ModuleDict({m.site: torch.nn.Linear(_width(student, m.feature), _width(teacher, m.feature))
                                for m in matches if m.projection})


def mobilebert_matches(layer_map: list[int], layers: list[int], *, fmt: float = 100.0, at: float = 1.0,
                       mean: float = 0.0, var: float = 0.0, projection: bool = False) -> list[Match]:
    """MobileBERT's layer-wise objective for the given student layers (Section 4.1, eq. 2-3, and the official
    code's mean and variance terms, see `transfer.losses`): feature-map transfer and attention transfer per
    layer, then mean and variance transfer where their weights are set. `projection`: the feature-map terms read
    the student's map through its layer's learned projection (teachers of another width)."""
    matches = []
    for l in layers:
        pair = dict(teacher_layer=layer_map[l], student_layer=l)
        hidden = dict(pair, projection=projection)
        matches += [Match(feature="hidden", loss="fmt", weight=fmt, **hidden),
                    Match(feature="attention", loss="at", weight=at, **pair)]
        matches += [Match(feature="hidden", loss="mean", weight=mean, **hidden)] if mean else []
        matches += [Match(feature="hidden", loss="var", weight=var, **hidden)] if var else []
    return matches
