"""Parameter and FLOP counts as the paper reports them (Table 1, Table 4).

FLOPs are 2 x the multiply-accumulates of the matrix products in one forward pass of the encoder (embeddings,
blocks, pooler; no task head) at batch 1, counted by torch's own FlopCounterMode on the real module.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import LMPredictionHead
from mobilekd.models.mobilebert import MobileBert


def count_params(encoder: MobileBert) -> int:
    """Embeddings + encoder + pooler parameters."""
    return sum(p.numel() for p in encoder.parameters())


@torch.no_grad()
def flops_of(module: torch.nn.Module, *args, **kwargs) -> int:
    """FLOPs of one call `module(*args, **kwargs)`, as torch's FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as counter:
        module(*args, **kwargs)
    return counter.get_total_flops()


def count_flops(encoder: MobileBert, seq_len: int = 128) -> int:
    """Counted on the explicit attention path, so QK^T and AV are matrix products the counter sees."""
    device = next(encoder.parameters()).device
    return flops_of(encoder, torch.ones(1, seq_len, dtype=torch.long, device=device), output_attentions=True)


def model_stats(config: ModelConfig, seq_len: int = 128) -> dict:
    """Parameters and FLOPs of a config, on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        encoder = MobileBert(config).eval()
    return {"params": count_params(encoder), f"flops_seq{seq_len}": count_flops(encoder, seq_len)}


def mlm_head_flops(config: ModelConfig) -> tuple[int, int]:
    """FLOPs of the masked-LM head for one masked token: its transform (dense + norm) and its output layer over
    the vocabulary (the tied word-embedding table, with MobileBERT's extra rows where the table is narrower)."""
    with torch.device("meta"):
        head = LMPredictionHead(config)
        x, table = torch.zeros(1, config.hidden_size), torch.zeros(config.vocab_size, config.embedding_size)
        total = flops_of(head, x, table)
        return flops_of(head.transform, x), total - flops_of(head.transform, x)
