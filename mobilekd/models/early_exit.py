"""FastBERT's early exits (Liu et al. 2020): a small "student" classifier after every layer but the last of a
fine-tuned classifier, trained by self-distillation from the model's own final classifier; at inference an input
leaves at the first layer whose prediction is certain enough. The training objective, `self_distillation_loss`, is
in mobilekd/finetune/self_distillation.py.

Follows autoliuweijie/FastBERT, pypi/fastbert/fastbert.py:
  - `BranchClassifier` is `MiniClassifier`: dense to 128 + tanh, a 2-head self-attention over the sequence (UER's
    `MultiHeadedAttention`, padding masked), the first ([CLS]) position (the default pooling), dense + tanh,
    dense to the labels.
  - branches sit after layers 1 .. L-1; the last layer's classifier is the fine-tuned model's own head (FastBERT's
    "teacher classifier"), so threshold 0 is exactly the fine-tuned model.
  - `uncertainty` is `calc_uncertainty` (pypi/fastbert/utils.py): entropy / log(number of labels), in [0, 1];
    `FastBERT._fast_infer` exits at the first layer with uncertainty < speed (strict: speed 0 never exits early).

A saved early-exit model is an ordinary classifier directory (the fine-tuned model, unchanged, loadable and
exportable as such) plus `branches.safetensors` and `early_exit.json`.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from mobilekd.errors import located
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.hf import load_pretrained, load_state, save_pretrained
from mobilekd.models.mobilebert import additive_mask

BRANCHES, SETTINGS = "branches.safetensors", "early_exit.json"
THRESHOLDS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]  # the speeds scored by default; 0: the full model
MAX_DROP = 1.0  # points a chosen threshold may lose on validation against the full model (`mobilekd fastbert`)
WIDTH, HEADS = 128, 2  # a branch's width and self-attention heads: FastBERT's `MiniClassifier` (fastbert.py)


class BranchClassifier(nn.Module):
    """FastBERT's `MiniClassifier` (fastbert.py): width 128, 2 heads, [CLS] pooling."""

    def __init__(self, hidden_size: int, num_labels: int, width: int = WIDTH, heads: int = HEADS,
                 dropout: float = 0.1):
        super().__init__()
        self.heads, self.head_size = heads, width // heads
        self.dense_in = nn.Linear(hidden_size, width)
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.attention_out = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(width, width)
        self.classifier = nn.Linear(width, num_labels)

    def _heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_size).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`hidden` (B, T, H) after a layer, `mask` additive (B, 1, 1, T); returns logits (B, labels)."""
        x = torch.tanh(self.dense_in(hidden))
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        probs = (q @ k.transpose(-1, -2) / math.sqrt(self.head_size) + mask).softmax(-1)
        context = (self.dropout(probs) @ v).transpose(1, 2).reshape(x.shape)
        first = self.attention_out(context)[:, 0]
        return self.classifier(torch.tanh(self.dense(first)))


def uncertainty(probs: torch.Tensor) -> torch.Tensor:
    """Normalised entropy, FastBERT's `calc_uncertainty`: -sum p log p / log(labels), 0 certain .. 1 uniform."""
    p = probs.float()
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1) / math.log(p.shape[-1])


def exit_layers(uncertainties: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, L) uncertainties of each layer's classifier -> the 0-based layer each input leaves at: the first with
    uncertainty < threshold, else the last (fastbert.py `_fast_infer`: `if uncertainty < speed: break`)."""
    below = uncertainties < threshold
    below[:, -1] = True
    return below.float().argmax(-1)


class EarlyExitClassifier(nn.Module):
    """A fine-tuned classifier (`model`, frozen while the branches learn) with one branch after each layer but the
    last. `train()` leaves `model` in eval mode: the final classifier's targets are its inference-time predictions
    (fastbert.py runs the frozen backbone in train mode, dropout on, under no_grad; we keep it deterministic)."""

    def __init__(self, model: MobileBertForSequenceClassification, width: int = WIDTH, heads: int = HEADS):
        super().__init__()
        self.model, self.config = model, model.config
        labels = max(model.config.num_labels, 1)
        self.settings = {"width": width, "heads": heads}
        self.branches = nn.ModuleList(BranchClassifier(model.config.hidden_size, labels, width, heads,
                                                       model.config.hidden_dropout_prob)
                                      for _ in range(model.config.num_hidden_layers - 1))

    def train(self, mode: bool = True):
        super().train(mode)
        self.model.eval()
        return self

    def layer_logits(self, input_ids, attention_mask=None, token_type_ids=None) -> list[torch.Tensor]:
        """The logits of every layer's classifier: the branches', then the model's own head."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        final, enc = self.model.logits_and_encoder(input_ids, attention_mask, token_type_ids, output_feature_maps=True)
        mask = additive_mask(attention_mask, enc.last_hidden_state.dtype)
        return [branch(h, mask) for branch, h in zip(self.branches, enc.feature_maps)] + [final]

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """(B, L, labels) logits of every layer's classifier."""
        return torch.stack(self.layer_logits(input_ids, attention_mask, token_type_ids), dim=1)


def save_early_exit(model: EarlyExitClassifier, out_dir, tokenizer=None, threshold: float | None = None) -> Path:
    """The fine-tuned model as an ordinary classifier directory, plus the branches and their settings (with the
    speed threshold chosen for it, where one was)."""
    out_dir = save_pretrained(model.model, out_dir, tokenizer)
    state = {k: v.detach().contiguous().cpu() for k, v in model.branches.state_dict().items()}
    with atomic_path(out_dir / BRANCHES) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    write_json(out_dir / SETTINGS, {**model.settings, "branches": len(model.branches),
                                    **({"threshold": threshold} if threshold is not None else {})})
    return out_dir


def scored_thresholds(model_dir) -> list[float]:
    """The thresholds `mobilekd fastbert` scored the model at (its results.json), else the default ones."""
    scored = Path(model_dir) / "results.json"
    rows = read_json(scored).get("thresholds") if scored.is_file() else None
    return [r["threshold"] for r in rows] if rows else THRESHOLDS


def load_early_exit(model_dir) -> EarlyExitClassifier:
    """A saved early-exit model; a missing, malformed or mismatched branches file is one clear error."""
    model_dir = Path(model_dir)
    settings = read_json(model_dir / SETTINGS)
    try:
        width, heads = int(settings["width"]), int(settings["heads"])
    except (KeyError, TypeError, ValueError) as err:
        raise located(model_dir / SETTINGS, f"not an early-exit settings file ({err})") from None
    if width < 1 or heads < 1 or width % heads:
        raise located(model_dir / SETTINGS, f"width {width} is not a positive multiple of heads {heads}")
    classifier = load_pretrained(model_dir, "classification")
    if classifier.config.num_labels < 2:
        raise located(model_dir / "config.json", "not a classifier: early exits need a prediction's uncertainty")
    model = EarlyExitClassifier(classifier, width, heads)
    state, own = load_state(model_dir / BRANCHES), model.branches.state_dict()
    if state.keys() != own.keys() or any(state[k].shape != own[k].shape for k in own):
        raise located(model_dir / BRANCHES, f"does not hold {len(model.branches)} branches of width {width} for this "
                                            f"{model.config.num_hidden_layers}-layer model")
    model.branches.load_state_dict(state)
    return model.eval()


def predictions_at(logits: torch.Tensor, thresholds) -> dict[float, tuple[torch.Tensor, torch.Tensor]]:
    """(N, L, labels) logits of every layer -> per threshold, (predicted label, 0-based exit layer) of each input."""
    probs = F.softmax(logits.float(), dim=-1)
    u = uncertainty(probs)
    found = {}
    for threshold in thresholds:
        layers = exit_layers(u, threshold)
        found[threshold] = (probs[torch.arange(len(probs)), layers].argmax(-1), layers)
    return found
