"""Layer inputs kept from one distillation stage for the next (issue 33).

Stage l of progressive knowledge transfer (MobileBERT, Section 4.3) matches the student's block l to the teacher's
block map[l], and both models run from their embeddings up to those blocks: over L stages the teacher computes
1 + 2 + ... + L block passes per example and the student's frozen blocks 0 + 1 + ... + (L - 1). Yet the teacher
never changes, and in the paper's PKT (hard freeze) the student's blocks below l never change again once stage l
starts. So when the stages read the same batches (`Stage.rereads`), each can start where the one before stopped:
per batch this keeps the teacher's hidden state at the input of the block after the last one it ran, and the
student's at the input of the block being trained; a stage then runs map[l] - map[l - 1] teacher blocks and one
frozen student block before the trained one. The same holds for pre-training distillation after the layer-wise
stages, which needs only the teacher's last hidden state (for its MLM logits) and so runs no teacher block at all
on a kept batch.

The arithmetic is the same as running from the embeddings (the kept tensors are fp32, computed by the same blocks
with the same weights), but for dropout: the student's frozen blocks run without it, so that what they compute for
an example stays the same (`Distiller._frozen_prefix`). Memory: a batch of B examples of width T keeps B x T x hidden_size floats per model (the demo: 32 x 64 x 384, 3.1 MB each);
past `budget_bytes` nothing more is kept, and later batches run from the embeddings as before.

Departure from the official code, stated: its layer-wise phases read one continuous input stream
(mobilebert/run_pretraining.py, `model_fn_builder`: every phase's loss is gated on the global step by
`distill_util.layer_wise_learning_rate(layer_id, steps_per_phase)` over the one --input_file stream), so each phase
sees other examples; stages that reread see the same ones, and a PKT run reads fewer distinct examples (the
longest stage's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Kept:
    """A batch's hidden state at the input of block `layer` (== the depth: the encoder's output)."""

    layer: int
    hidden: torch.Tensor


class LayerInputs:
    """Per batch (its examples' (index, epoch) pairs, `Batches.micro_batches`) and side ("teacher" or
    "student"), the hidden state kept last."""

    def __init__(self, budget_bytes: int):
        self.budget, self.used = budget_bytes, 0
        self.kept: dict[tuple[str, tuple[int, ...]], Kept] = {}
        self.hits = self.misses = 0

    @staticmethod
    def key(side: str, batch: dict) -> tuple[str, tuple[int, ...]]:
        return side, tuple(batch["example"].flatten().tolist())

    def get(self, side: str, batch: dict, at_most: int) -> Kept | None:
        """The batch's kept state on `side` if it is the input of a block at or below `at_most`, else None."""
        found = self.kept.get(self.key(side, batch)) if "example" in batch else None
        if found is None or found.layer > at_most:
            self.misses += 1
            return None
        self.hits += 1
        return found

    def put(self, side: str, batch: dict, layer: int, hidden: torch.Tensor) -> None:
        """Keep `hidden` as the input of block `layer` (replacing what the batch kept on this side), within the
        budget."""
        if "example" not in batch:
            return
        key = self.key(side, batch)
        old = self.kept.pop(key, None)
        if old is not None:
            self.used -= old.hidden.numel() * old.hidden.element_size()
        kept = hidden.detach().float()  # kept in fp32 whatever the step's precision: count what is kept
        size = kept.numel() * kept.element_size()
        if self.used + size <= self.budget:
            self.kept[key] = Kept(layer, kept)
            self.used += size

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "kept_mb": round(self.used / 2 ** 20, 1),
                "budget_mb": round(self.budget / 2 ** 20, 1)}
