"""Training strategies as data (MobileBERT paper, Section 4.3 and Figure 2): each returns a list of `Stage`s
that the one training loop runs.

  AKT  auxiliary knowledge transfer: layer-wise transfer losses beside pre-training distillation, one stage.
  JKT  joint knowledge transfer: all layer-wise losses together, then pre-training distillation.
  PKT  progressive knowledge transfer: stage l trains layer l on its own transfer losses with every layer
       below frozen, then pre-training distillation over the whole student.

In stage l of PKT nothing above layer l runs, in teacher or student: both run `num_layers=l+1`. The teacher
runs in eval mode under no_grad; a frozen student prefix has no parameter that needs a gradient, so autograd
records nothing for it either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mobilekd.errors import UserError
from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import mlm_loss
from mobilekd.train.loop import Stage
from mobilekd.transfer.losses import (attention_transfer, feature_map_transfer, logit_distillation, mean_transfer,
                                      variance_transfer)


@dataclass
class TransferWeights:
    """Loss weights of the official MobileBERT config; mean/variance transfer are off by default."""

    fmt: float = 100.0
    at: float = 1.0
    mean: float = 0.0  # official: 5000 when enabled
    var: float = 0.0  # official: 5 when enabled
    alpha: float = 0.5  # PD: alpha * MLM + (1 - alpha) * MLM-KD (eq. 4)
    temperature: float = 1.0


@dataclass
class PlanSettings:
    layer_steps: int = 100  # steps per layer-wise stage (PKT), or per layer for JKT's joint stage
    pd_steps: int = 500  # pre-training distillation steps
    lr: float = 1e-3
    layer_lr: float | None = None  # learning rate of the layer-wise stages (default: lr)
    warmup: float = 0.1
    freeze: str = "hard"  # PKT: hard = lower layers frozen; soft = lower x0.3, current x3 (official TF1)
    weights: TransferWeights = field(default_factory=TransferWeights)
    teacher_bf16: bool = False

    def total_steps(self, n_layers: int) -> int:
        """Steps of every strategy's plan (equal by construction, so strategies compare at equal cost in steps)."""
        return n_layers * self.layer_steps + self.pd_steps


def check_pair(teacher: ModelConfig, student: ModelConfig, layer_map: list[int] | None) -> list[int]:
    """Refuse a teacher/student that cannot be paired; return the teacher layer for each student layer."""
    problems = []
    if teacher.hidden_size != student.hidden_size:
        problems.append(f"feature-map widths differ (teacher hidden_size {teacher.hidden_size}, student "
                        f"{student.hidden_size})")
    if teacher.num_attention_heads != student.num_attention_heads:
        problems.append(f"head counts differ (teacher {teacher.num_attention_heads}, student "
                        f"{student.num_attention_heads})")
    if teacher.vocab_size != student.vocab_size:
        problems.append(f"vocabularies differ (teacher {teacher.vocab_size}, student {student.vocab_size})")
    if layer_map is None:
        if teacher.num_hidden_layers != student.num_hidden_layers:
            problems.append(f"depths differ (teacher {teacher.num_hidden_layers}, student "
                            f"{student.num_hidden_layers}) and no --layer-map was given")
        layer_map = list(range(student.num_hidden_layers))
    elif len(layer_map) != student.num_hidden_layers or not all(0 <= t < teacher.num_hidden_layers
                                                                 for t in layer_map):
        problems.append(f"--layer-map needs {student.num_hidden_layers} teacher layers in "
                        f"0..{teacher.num_hidden_layers - 1}, got {layer_map}")
    if problems:
        raise UserError("teacher and student cannot be paired: " + "; ".join(problems))
    return layer_map


def copy_shared_weights(teacher: torch.nn.Module, student: torch.nn.Module) -> list[str]:
    """Start the student's embeddings and pre-training heads from the teacher's where shapes match (the paper
    shares them between the two)."""
    t_state, copied = teacher.state_dict(), []
    with torch.no_grad():
        for name, p in student.state_dict().items():
            shared = name.startswith(("mobilebert.embeddings.", "cls."))
            if shared and name in t_state and t_state[name].shape == p.shape:
                p.copy_(t_state[name])
                copied.append(name)
    return copied


def layer_index(name: str) -> int | None:
    """The block a parameter belongs to; -1 for embeddings, None for heads and pooler."""
    if name.startswith("mobilebert.embeddings."):
        return -1
    if name.startswith("mobilebert.encoder.layer."):
        return int(name.split(".")[3])
    return None


class Distiller:
    """The loss functions of every stage kind, over one teacher/student pair."""

    def __init__(self, teacher, layer_map: list[int], settings: PlanSettings):
        self.teacher, self.layer_map, self.s = teacher.eval(), layer_map, settings
        for p in self.teacher.parameters():
            p.requires_grad_(False)

    def _teacher(self, batch, **kw):
        with torch.no_grad(), torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16,
                                             enabled=self.s.teacher_bf16):
            return self.teacher(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **kw)

    def layer_terms(self, student, batch, layers: list[int], depth: int | None = None) -> dict[str, torch.Tensor]:
        """FMT + AT (+ mean/variance) for the given student layers, each logged on its own, averaged over them.

        Both models run just deep enough for these layers, unless `depth` asks for more (the benchmark's
        naive baseline runs them at full depth)."""
        depth = depth or max(layers) + 1
        t_out = self._teacher(batch, num_layers=self.layer_map[depth - 1] + 1, output_feature_maps=True,
                              output_attentions=True).encoder
        s_out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], num_layers=depth,
                        output_feature_maps=True, output_attentions=True).encoder
        w, terms, total = self.s.weights, {}, 0.0
        for l in layers:
            t_feat, s_feat = t_out.feature_maps[self.layer_map[l]], s_out.feature_maps[l]
            parts = {"fmt": (w.fmt, feature_map_transfer(t_feat, s_feat)),
                     "at": (w.at, attention_transfer(t_out.attentions[self.layer_map[l]], s_out.attentions[l]))}
            if w.mean:
                parts["mean"] = (w.mean, mean_transfer(t_feat, s_feat))
            if w.var:
                parts["var"] = (w.var, variance_transfer(t_feat, s_feat))
            for key, (weight, value) in parts.items():
                terms[f"{key}_L{l}"] = value.detach()
                total = total + weight * value / len(layers)
        terms["loss"] = total
        return terms

    def pd_terms(self, student, batch) -> dict[str, torch.Tensor]:
        """Pre-training distillation, eq. (4): alpha * MLM + (1 - alpha) * KD on the MLM head, plus NSP."""
        t_logits = self._teacher(batch, masked_positions=batch["masked_positions"]).mlm_logits
        out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
        mlm = mlm_loss(out.mlm_logits, batch)
        kd = logit_distillation(t_logits, out.mlm_logits, self.s.weights.temperature)
        nsp = F.cross_entropy(out.nsp_logits.float(), batch["nsp_labels"])
        alpha = self.s.weights.alpha
        return {"loss": alpha * mlm + (1 - alpha) * kd + nsp, "mlm": mlm.detach(), "mlm_kd": kd.detach(),
                "nsp": nsp.detach()}

    def akt_terms(self, student, batch) -> dict[str, torch.Tensor]:
        layer = self.layer_terms(student, batch, list(range(len(self.layer_map))))
        pd = self.pd_terms(student, batch)
        return {**layer, **pd, "loss": layer["loss"] + pd["loss"], "transfer": layer["loss"].detach()}


def _encoder_only(name: str) -> bool:
    return layer_index(name) is not None


def plan(strategy: str, distiller: Distiller, n_layers: int) -> list[Stage]:
    s = distiller.s
    layer_lr = s.layer_lr or s.lr
    pd = Stage("pd", s.pd_steps, distiller.pd_terms, lr=s.lr, warmup=s.warmup)
    if strategy == "akt":
        return [Stage("akt", s.total_steps(n_layers), distiller.akt_terms, lr=s.lr, warmup=s.warmup)]
    if strategy == "jkt":
        every = list(range(n_layers))
        joint = Stage("jkt", n_layers * s.layer_steps, lambda m, b: distiller.layer_terms(m, b, every),
                      trainable=_encoder_only, lr=layer_lr, warmup=s.warmup)
        return [joint, pd]
    if strategy == "pkt":
        return [_pkt_stage(distiller, l, s, layer_lr) for l in range(n_layers)] + [pd]
    raise UserError(f"unknown strategy {strategy!r}: choose akt, jkt or pkt")


def _pkt_stage(distiller: Distiller, l: int, s: PlanSettings, lr: float) -> Stage:
    # Layer 0's stage also trains the embeddings (their normalization differs from the teacher's).
    def current(name):
        return layer_index(name) == l or (l == 0 and layer_index(name) == -1)

    if s.freeze == "hard":
        trainable, scale = current, lambda name: 1.0
    else:  # the official TF1 layer-wise learning rates: 3x for the current layer, 0.3x for those below
        def trainable(name):
            idx = layer_index(name)
            return idx is not None and idx <= l

        def scale(name):
            return 3.0 if current(name) else 0.3
    return Stage(f"pkt_L{l}", s.layer_steps, lambda m, b: distiller.layer_terms(m, b, [l]), trainable=trainable,
                 lr_scale=scale, lr=lr, warmup=s.warmup)
