"""FastBERT's training objective (Liu et al. 2020): self-distillation of the early-exit branches
(`mobilekd.models.early_exit`) from the model's own final classifier."""

from __future__ import annotations

import torch

from mobilekd.models.early_exit import EarlyExitClassifier
from mobilekd.transfer.losses import logit_distillation


def self_distillation_loss(model: EarlyExitClassifier, batch: dict) -> dict[str, torch.Tensor]:
    """FastBERT's self-distillation (Section 3.3; fastbert.py `_forward_for_loss` without labels): the sum over
    branches of KL(final || branch), `nn.KLDivLoss(reduction='batchmean')` of the branch's log-probabilities
    against the final classifier's probabilities. Labels are not used."""
    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).unbind(1)  # DDP-safe
    final = logits[-1].detach()
    terms = {f"kl_L{i + 1}": logit_distillation(final, branch) for i, branch in enumerate(logits[:-1])}
    return {"loss": sum(terms.values()), **terms}
