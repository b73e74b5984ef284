"""A shallower model made of some of another's layers: how DistilBERT and BERT-PKD initialise their students.

DistilBERT (scripts/extract_distilbert.py) copies the embeddings, the chosen teacher layers in order (teacher
layers [0, 2, 4, 7, 9, 11] become student layers 0..5) and the MLM head's decoder; BERT-PKD (`load_model(...,
mode='student')` in src/utils.py, loading the pre-trained checkpoint into a k-layer student) keeps the
embeddings, the first k layers and the pooler. Here every weight outside the encoder's blocks is kept (embeddings,
pooler, heads) and block `layers[i]` becomes block i. One departure from DistilBERT: the token-type embeddings
stay (DistilBERT has none; our architecture, and sentence-pair tasks, use them).
"""

from __future__ import annotations

import torch

from mobilekd.errors import UserError

PREFIX = "mobilebert.encoder.layer."


def take_layers(model: torch.nn.Module, layers: list[int]) -> torch.nn.Module:
    """A new model of `model`'s class with `len(layers)` blocks, block i a copy of `model`'s block `layers[i]`."""
    depth = model.config.num_hidden_layers
    if not layers or any(not 0 <= l < depth for l in layers):
        raise UserError(f"layers must be in 0..{depth - 1}, got {layers}")
    config = model.config.replace(num_hidden_layers=len(layers))
    student = type(model)(config)
    state, new = model.state_dict(), {}
    for name, value in state.items():
        if not name.startswith(PREFIX):
            new[name] = value
            continue
        block, rest = name[len(PREFIX):].split(".", 1)
        for i, l in enumerate(layers):
            if int(block) == l:
                new[f"{PREFIX}{i}.{rest}"] = value.clone()
    student.load_state_dict(new, strict=True)
    return student
