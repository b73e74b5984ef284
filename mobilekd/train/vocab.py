"""Word-embedding rows of tokens the training corpus never shows get no update.

With the MLM decoder tied to the word embeddings, every row of the table gets a gradient at every step (the
softmax pushes down every word it does not predict), and Adam-type optimisers normalise that gradient: on a small
or domain-specific corpus the rows of words it never shows all move the same way, leaving a block of inflated,
aligned rows that every later stage inherits (issue 14 measured it on the demo teacher: after 640 steps those
rows had pairwise cosine 0.935 and norm 0.70, from 0.16). A row of a token absent from the corpus therefore gets
a zero gradient, so Adam's moments stay zero and the row stays as initialised (up to weight decay).
"""

from __future__ import annotations

import numpy as np
import torch

from mobilekd.models.heads import WORD_EMBEDDINGS


def seen_tokens(split) -> np.ndarray:
    """The token ids of a pre-training split's corpus, with the special tokens its examples are built from."""
    specials = [split.cls_id, split.sep_id, split.mask_id, split.pad_id]
    return np.union1d(np.unique(np.asarray(split.tokens)), specials)


def freeze_unseen_rows(model: torch.nn.Module, seen: np.ndarray):
    """Zero the word-embedding table's gradient outside the `seen` rows; returns the hook's handle."""
    weight = dict(model.named_parameters())[WORD_EMBEDDINGS]
    keep = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
    keep[torch.as_tensor(seen, dtype=torch.long)] = 1.0
    return weight.register_hook(lambda grad: grad * keep.to(grad.device, grad.dtype))  # the model may move after
