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
        "scores" with loss "mse"  (`tinybert_matches`)
    BERT-PKD (Sun et al. 2019, eq. 5): "cls" of chosen layers, loss "pkd"  (`pkd_matches`)
    DistilBERT (Sanh et al. 2019, Section 3): "hidden" of the last layer over the real tokens, loss "cosine"
        (`distilbert_matches`)
    MiniLM (Wang et al. 2020, Section 3.1): "attention" and "values" of the last layers only, loss "at" (the KL of
        per-head distributions)  (`minilm_matches`)

Features: `embeddings` (the embedding layer's output), `hidden` (a block's output feature map, B x T x N),
`attention` (a block's attention probabilities, B x A x T x T), `scores` (the pre-softmax scores of those, with
the padded keys' scores zeroed), `values` (MiniLM's value relation: per head, softmax of the scaled dot products
of the value vectors, B x A x T x T, padded keys masked), `cls` (a block's first-token vector, B x N) and
`logits` (the head's output).
Layers are 0-based block indices; `embeddings` and `logits` take none. A match with `real_tokens` compares a
feature map's non-padding tokens only (as rows, N_real x N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from mobilekd.errors import UserError
from mobilekd.models.config import ModelConfig
from mobilekd.models.mobilebert import EncoderOutput
from mobilekd.transfer.losses import (attention_transfer, cosine_hidden, feature_map_transfer, logit_distillation,
                                      mean_transfer, patience_loss, variance_transfer)

FEATURES = ("embeddings", "hidden", "attention", "scores", "values", "cls", "logits")
LAYERED = ("hidden", "attention", "scores", "values", "cls")  # features that belong to a block
DISTRIBUTIONS = ("attention", "values")  # per-head distributions over the keys: head groups average (`group_heads`)
MAPS = ("embeddings", "hidden", "cls")  # feature maps: projectable, and of the model's width


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
    "pkd": patience_loss,
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
    real_tokens: bool = False  # compare a feature map's non-padding tokens only

    @property
    def name(self) -> str:
        """The term's name in logs and summaries: `fmt_L3` for a layer's feature map or attention, `mse_scores_L3`
        for its other features, `mse_embeddings` for the embeddings' and logits'."""
        if self.feature in ("hidden", "attention"):
            return f"{self.loss}_L{self.student_layer}"
        return f"{self.loss}_{self.feature}_L{self.student_layer}" if self.feature in LAYERED else \
            f"{self.loss}_{self.feature}"

    @property
    def site(self) -> str:
        """Where the student's feature is read (`L3`, `embeddings`): matches of one site share its projection."""
        return f"L{self.student_layer}" if self.feature in LAYERED else self.feature


@dataclass
class Features:
    """What one model's forward pass exposes to the matches."""

    encoder: EncoderOutput
    logits: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None  # (B, T), 1 = token, 0 = padding; needed by `scores`, `real_tokens`
    zero_padding: bool = False  # `evaluate` reads either side's padded positions as zero (`padding_zeroed`)

    def select(self, feature: str, layer: int | None, real_tokens: bool = False) -> torch.Tensor:
        if feature == "logits":
            return self.logits
        if feature == "attention":
            return self.encoder.attentions[layer]
        if feature == "scores":
            # TinyBERT zeroes the scores of padded keys on both sides (general_distill.py, `main`:
            # `torch.where(student_att <= -1e2, zeros, student_att)`, the -10000 mask having been added); here by
            # the mask itself, which is the same unless a real score falls below -100, and works for either masking
            return self.encoder.attention_scores[layer].masked_fill(self._mask()[:, None, None, :] == 0, 0.0)
        if feature == "values":
            return value_relation(self.encoder.values[layer], self._mask())
        if feature == "embeddings":
            x = self.encoder.embeddings
        else:
            x = self.encoder.feature_maps[layer]
            if feature == "cls":
                return x[:, 0]
        return x[self._mask().bool()] if real_tokens else x

    def _mask(self) -> torch.Tensor:
        if self.attention_mask is None:
            raise ValueError("this match needs the batch's attention mask (Features.attention_mask)")
        return self.attention_mask


def value_relation(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """MiniLM's value relation (Wang et al. 2020, Section 3.1, "Self-Attention Value-Relation Transfer"):
    VR_a = softmax(V_a V_a^T / sqrt(d_k)) per head a, from the value vectors (B, A, T, d_k) of one block; the
    padded keys are masked out of the softmax as the attention's own are, so that each row is a distribution over
    the real tokens. The paper's distillation code is not released (microsoft/unilm's minilm/ holds checkpoints
    and fine-tuning examples only)."""
    v = values.float()
    scores = v @ v.transpose(-1, -2) / math.sqrt(v.shape[-1])
    return scores.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min).softmax(-1)


def padding_zeroed(x: torch.Tensor, feature: str, mask: torch.Tensor) -> torch.Tensor:
    """A feature with its padded positions (the padded query rows of an attention block) set to zero: what a
    stored teacher's features hold there (`mobilekd.finetune.teacher_features`). A departure from TinyBERT's
    task_distill.py (`main`: `rep_loss` is `loss_mse(student_rep, teacher_rep)` over every position, and
    `att_loss` zeroes only the scores of padded keys, <= -1e2, not the padded query rows), which pads every example
    to max_seq_length; our batches are cut to their longest example and grouped by length, so a padded position's
    output would depend on its batch, no user ever reads it, and a store keeps each example at its own length. The
    denominators stay those of our batches (the zeros still count; task_distill.py divides over max_seq_length);
    the attention KL of a zero teacher row is zero."""
    if feature in ("embeddings", "hidden"):
        return x * mask[:, :, None].to(x.dtype)
    if feature in ("attention", "scores", "values"):
        return x * mask[:, None, :, None].to(x.dtype)
    return x


def deepest(matches: list[Match], side: str) -> int:
    """How many blocks a model must run for these matches (`side`: "teacher" or "student")."""
    layers = [getattr(m, f"{side}_layer") for m in matches if m.feature in LAYERED]
    return max(layers) + 1 if layers else 0


def lowest(matches: list[Match], side: str) -> int:
    """The lowest block whose output these matches read on `side` (0 when one reads the embeddings): a pass may
    start at the input of any block at or below it."""
    if any(m.feature == "embeddings" for m in matches):
        return 0
    layers = [getattr(m, f"{side}_layer") for m in matches if m.feature in LAYERED]
    return min(layers) if layers else 0


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
        s = student.select(m.feature, m.student_layer, m.real_tokens)
        t = teacher.select(m.feature, m.teacher_layer, m.real_tokens)
        if m.projection:
            if not projections or m.site not in projections:
                raise UserError(f"{m.name}: a projected match needs its projection (objectives.projections_for)")
            s = projections[m.site](s)
        if (teacher.zero_padding or student.zero_padding) and not m.real_tokens:
            mask = student.attention_mask
            s, t = padding_zeroed(s, m.feature, mask), padding_zeroed(t, m.feature, mask)
        if m.feature in DISTRIBUTIONS:
            t = group_heads(t, s.shape[1])
        value = LOSSES[m.loss](t, s)
        terms[m.name] = value.detach()
        total = total + m.weight * value / count
    terms["loss"] = total
    return terms


def _width(config: ModelConfig, feature: str) -> int | None:
    return config.hidden_size if feature in MAPS else None


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
        elif m.feature in DISTRIBUTIONS and teacher.num_attention_heads % student.num_attention_heads:
            problems.append(f"the teacher's {teacher.num_attention_heads} attention heads cannot be grouped into the "
                            f"student's {student.num_attention_heads} (the count must divide)")
        elif m.feature == "scores" and teacher.num_attention_heads != student.num_attention_heads:
            problems.append(f"attention scores pair head by head: the teacher has {teacher.num_attention_heads} "
                            f"heads, the student {student.num_attention_heads}")
        elif _width(teacher, m.feature) != _width(student, m.feature) and not m.projection:
            problems.append(f"feature-map widths differ (teacher hidden_size {teacher.hidden_size}, student "
                            f"{student.hidden_size}) and the match has no projection")
        elif m.projection and m.feature not in MAPS:
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


def tinybert_matches(layer_map: list[int], layers: list[int], scores: bool = True) -> list[Match]:
    """TinyBERT's transformer-layer and embedding-layer distillation (Jiao et al. 2020, eq. 7-9; general_distill.py
    and task_distill.py, `main`: `loss = rep_loss + att_loss`, each an unweighted `MSELoss()` per matched pair): the
    embedding outputs and each student layer's output through the learned projection W_h (`fit_dense`), and the
    attention scores of each student layer against its teacher layer (`layer_map`, `layer_maps.uniform` there).
    `evaluate` divides the sum by the number of student layers, a constant factor the official code does not
    have (Adam's steps do not depend on it, up to its epsilon). `scores=False`, for a teacher that gives its
    attention probabilities only (a transformers encoder of another architecture, `models.foreign`): the attention
    term is MobileBERT's attention transfer instead (Sun et al. 2020, eq. 3: KL between the distributions), a
    departure from task_distill.py's `att_loss`."""
    matches = [Match(feature="embeddings", loss="mse", projection=True)]
    for l in layers:
        pair = dict(teacher_layer=layer_map[l], student_layer=l)
        matches += [Match(feature="scores", loss="mse", **pair) if scores else
                    Match(feature="attention", loss="at", **pair),
                    Match(feature="hidden", loss="mse", projection=True, **pair)]
    return matches


def distilbert_matches(teacher_depth: int, student_depth: int, weight: float = 1.0) -> list[Match]:
    """DistilBERT's cosine embedding loss (Sanh et al. 2019, Section 3; distiller.py, `Distiller.step`:
    `CosineEmbeddingLoss(reduction="mean")` between `s_hidden_states[-1]` and `t_hidden_states[-1]` at the
    non-padding tokens, target 1): the last layers' hidden states, real tokens only."""
    return [Match(feature="hidden", loss="cosine", weight=weight, teacher_layer=teacher_depth - 1,
                  student_layer=student_depth - 1, real_tokens=True)]


def pkd_matches(teacher_layers: list[int], weight: float) -> list[Match]:
    """BERT-PKD's patience loss (Sun et al. 2019, eq. 5; src/KD_loss.py, `patience_loss`): student layer l's [CLS]
    against teacher layer `teacher_layers[l]` (`layer_maps.pkd_skip` or `pkd_last`, which leave out the student's
    last layer). `evaluate` averages over these layers, as the official `F.mse_loss` over the stacked (B, L, H)
    vectors does (the paper writes a sum; beta absorbs the difference)."""
    return [Match(feature="cls", loss="pkd", weight=weight, teacher_layer=t, student_layer=l)
            for l, t in enumerate(teacher_layers)]


def minilm_matches(teacher_depth: int, student_depth: int) -> list[Match]:
    """MiniLM's deep self-attention distillation (Wang et al. 2020, Section 3.1, L = L_AT + L_VR): the last
    teacher layer's attention distributions and value relations against the last student layer's, each the KL
    divergence of teacher from student per head, averaged over heads and query positions (our `at`, MobileBERT's
    attention transfer, is that KL). No layer map and no projection: every relation is T x T at any width. Where
    the teacher has more heads, consecutive groups of its distributions are averaged (`group_heads`, our
    departure: MiniLM requires equal head counts)."""
    pair = dict(teacher_layer=teacher_depth - 1, student_layer=student_depth - 1)
    return [Match(feature="attention", loss="at", **pair), Match(feature="values", loss="at", **pair)]
