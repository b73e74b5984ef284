"""The MobileBERT family's encoder: IB-BERT teacher, MobileBERT, MobileBERT_TINY and BERT_BASE are all this
one class with different configs (paper, Figure 1 and Table 1).

`forward(..., num_layers=l)` runs only the first l blocks: progressive knowledge transfer needs nothing above
the layer it trains (Section 4.3), so nothing above it is computed. `forward(..., hidden=h, start_layer=k)` starts
from h, the input of block k kept from an earlier pass (`mobilekd.transfer.layer_inputs`), so nothing below it is
computed either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mobilekd.models.blocks import MASK_VALUE, Block, Embeddings
from mobilekd.models.config import ModelConfig


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor | None = None
    feature_maps: list[torch.Tensor] = field(default_factory=list)  # per block, (B, T, hidden_size)
    embeddings: torch.Tensor | None = None  # the embedding layer's output (B, T, hidden_size), with feature maps
    attentions: list[torch.Tensor] = field(default_factory=list)  # per block, (B, heads, T, T)
    attention_scores: list[torch.Tensor] = field(default_factory=list)  # their pre-softmax scores, masked
    values: list[torch.Tensor] = field(default_factory=list)  # per block, its value vectors (B, heads, T, head size)


class Encoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layer = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))


class Pooler(nn.Module):
    """The [CLS] vector, through dense + tanh when `classifier_activation` (the released MobileBERT has none)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.std = config.initializer_range
        self.dense = nn.Linear(config.hidden_size, config.hidden_size) if config.classifier_activation else None

    def reset(self, std: float | None = None) -> None:
        """A fresh pooler dense (BERT's initialisation), e.g. before fine-tuning from an NSP-trained one."""
        if self.dense is not None:
            torch.nn.init.normal_(self.dense.weight, std=self.std if std is None else std)
            torch.nn.init.zeros_(self.dense.bias)

    def forward(self, hidden):
        first = hidden[:, 0]
        return first if self.dense is None else torch.tanh(self.dense(first))


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) 1/0 mask -> (B, 1, 1, T) additive mask with a finite large negative for padding."""
    return ((1.0 - attention_mask[:, None, None, :].to(dtype)) * MASK_VALUE).to(dtype)


class MobileBert(nn.Module):
    def __init__(self, config: ModelConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if add_pooling_layer else None

    def block_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The (B, T) 1/0 mask as the blocks take it: additive, or 1/0 with the official `masked_score` form."""
        if self.config.masked_score is None:
            return additive_mask(attention_mask, dtype)
        return attention_mask[:, None, None, :].to(dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        num_layers: int | None = None,
        output_feature_maps: bool = False,
        output_attentions: bool = False,
        hidden: torch.Tensor | None = None,
        start_layer: int = 0,
    ) -> EncoderOutput:
        """`hidden` (B, T, hidden_size): the input of block `start_layer`, instead of the embeddings of `input_ids`;
        the feature maps and attentions of the blocks below it are then None in the output's lists, so that
        index l is still block l."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if hidden is None:
            if start_layer:
                raise ValueError("start_layer needs the hidden state at that block's input")
            hidden = self.embeddings(input_ids, token_type_ids)
        mask = self.block_mask(attention_mask, hidden.dtype)
        depth = self.config.num_hidden_layers if num_layers is None else num_layers
        out = EncoderOutput(hidden, embeddings=hidden if output_feature_maps and not start_layer else None,
                            feature_maps=[None] * start_layer if output_feature_maps else [],
                            attentions=[None] * start_layer if output_attentions else [],
                            attention_scores=[None] * start_layer if output_attentions else [],
                            values=[None] * start_layer if output_attentions else [])
        for block in self.encoder.layer[start_layer:depth]:
            hidden, maps = block(hidden, mask, output_attentions)
            if output_feature_maps:
                out.feature_maps.append(hidden)
            if output_attentions:
                out.attentions.append(maps[0])
                out.attention_scores.append(maps[1])
                out.values.append(maps[2])
        out.last_hidden_state = hidden
        if self.pooler is not None and depth == self.config.num_hidden_layers:
            out.pooled = self.pooler(hidden)
        return out


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: normal(0, std) for matrices and embeddings, zeros for biases, ones for norms."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, (nn.LayerNorm,)) or type(m).__name__ == "NoNorm":
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for name, p in module.named_parameters():  # the MLM output bias
        if name.endswith("predictions.bias"):
            nn.init.zeros_(p)
