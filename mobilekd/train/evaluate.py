"""Held-out masked-LM and next-sentence metrics, with the unigram baseline beside them."""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate_pretraining(model, split, most_frequent_token: int, max_examples: int = 1024,
                         batch_size: int = 64) -> dict:
    """MLM loss and accuracy over the masked tokens of the first `max_examples` held-out examples (fixed masks,
    epoch 0) beside the accuracy of always predicting the corpus's most frequent token; NSP accuracy beside
    that of always predicting the majority class."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    n = min(max_examples, len(split))
    loss_sum, correct, unigram, total, nsp_correct, nsp_random = 0.0, 0, 0, 0, 0, 0
    for start in range(0, n, batch_size):
        batch = {k: v.to(device) for k, v in split.batch(range(start, min(start + batch_size, n)), 0).items()}
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
        labels = batch["masked_labels"][batch["masked_labels"] >= 0]
        loss_sum += F.cross_entropy(out.mlm_logits.float(), labels, reduction="sum").item()
        correct += (out.mlm_logits.argmax(-1) == labels).sum().item()
        unigram += (labels == most_frequent_token).sum().item()
        total += labels.numel()
        nsp_correct += (out.nsp_logits.argmax(-1) == batch["nsp_labels"]).sum().item()
        nsp_random += batch["nsp_labels"].sum().item()
    model.train(was_training)
    return {"examples": n, "masked_tokens": total, "mlm_loss": loss_sum / total, "mlm_accuracy": correct / total,
            "unigram_accuracy": unigram / total, "nsp_accuracy": nsp_correct / n,
            "nsp_majority_accuracy": max(nsp_random, n - nsp_random) / n}
