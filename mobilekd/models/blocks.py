"""The building blocks of the MobileBERT family (paper, Section 3 and Figure 1).

Module and parameter names follow transformers' MobileBERT so that a student's state dict loads there as is
(see `mobilekd.models.hf`). One difference: Q/K read the inter-block feature map when there is no Q/K
bottleneck, which is what the IB-BERT teacher needs (`ModelConfig.attention_input_size`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from mobilekd.models.config import ModelConfig

# The additive attention mask stays finite so fp16 and int8 exports keep no inf constants (official BERT value).
MASK_VALUE = -10000.0


class NoNorm(nn.Module):
    """NoNorm(h) = gamma * h + beta, elementwise: LayerNorm without the statistics (Section 3.3, eq. 1)."""

    def __init__(self, size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


def norm(config: ModelConfig, size: int) -> nn.Module:
    """The block normalization: NoNorm for the OPT models, LayerNorm with the config's `layer_norm_eps` otherwise.

    The epsilon is the config's everywhere, as in BERT and the official MobileBERT code (TF1 modeling.py,
    `layer_norm`: 1e-12). transformers' MobileBERT builds two of its LayerNorms (embeddings, last FFN output)
    with PyTorch's default 1e-5 instead; that matters only for LayerNorm variants (mobilebert_no_opt), never for
    the NoNorm students, and a transformers BERT checkpoint (1e-12 in its config) needs the config's value to
    give transformers' own outputs (all-MiniLM-L6-v2, one sentence: 5.1e-4 apart with 1e-5, 1.3e-6 with 1e-12).
    A LayerNorm MobileBERT is therefore saved as a transformers model only with `layer_norm_eps` 1e-5
    (`ModelConfig.hf_incompatibility`)."""
    if config.normalization_type == "no_norm":
        return NoNorm(size)
    return nn.LayerNorm(size, eps=config.layer_norm_eps)


def activation(name: str):
    """ReLU for the OPT models (Section 3.3), exact GELU otherwise."""
    return {"relu": F.relu, "gelu": F.gelu}[name]


class Embeddings(nn.Module):
    """Token, position and segment embeddings.

    With `trigram_input`, the `embedding_size`-wide embeddings of tokens t+1, t and t-1 are concatenated and
    projected to the inter-block width: a kernel-3 1-D convolution written as one matrix product (Section 3.1).
    The dense lift (`embedding_transformation`) is applied whenever the config has one, also at equal widths
    without the trigram, where the official code and transformers (`MobileBertEmbeddings.forward`) have none: the
    h384 presets have none there, and a student made with one before (`ModelConfig.lift_applies`) is not saved as a
    transformers model.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.trigram_input = config.trigram_input
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        width = config.embedding_size * (3 if config.trigram_input else 1)
        self.embedding_transformation = (
            nn.Linear(width, config.hidden_size) if config.embedding_transformation else None
        )
        self.LayerNorm = norm(config, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(input_ids)
        if self.trigram_input:
            nxt = F.pad(x[:, 1:], (0, 0, 0, 1))
            prev = F.pad(x[:, :-1], (0, 0, 1, 0))
            x = torch.cat([nxt, x, prev], dim=-1)
        if self.embedding_transformation is not None:
            x = self.embedding_transformation(x)
        positions = self.position_embeddings.weight[: input_ids.shape[1]]
        x = x + positions + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class BottleneckLayer(nn.Module):
    """Linear projection from the inter-block to the intra-block width, then normalization."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intra_bottleneck_size)
        self.LayerNorm = norm(config, config.intra_bottleneck_size)

    def forward(self, x):
        return self.LayerNorm(self.dense(x))


class Bottleneck(nn.Module):
    """The input bottleneck of a block, and MobileBERT's Q/K bottleneck shared between query and key."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.use_bottleneck_attention = config.use_bottleneck_attention
        self.key_query_shared_bottleneck = config.key_query_shared_bottleneck
        self.input = BottleneckLayer(config)
        if self.key_query_shared_bottleneck and not self.use_bottleneck_attention:
            self.attention = BottleneckLayer(config)

    def forward(self, x):
        """Return (query input, key input, value input, residual for the attention output)."""
        bottlenecked = self.input(x)
        if self.use_bottleneck_attention:
            return bottlenecked, bottlenecked, bottlenecked, bottlenecked
        if self.key_query_shared_bottleneck:
            shared = self.attention(x)
            return shared, shared, x, bottlenecked
        return x, x, x, bottlenecked


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention; optionally returns the per-head attention distributions, the
    scores they are the softmax of (masking applied: what TinyBERT's attention loss compares) and the value vectors
    (B, heads, T, head size: whose relations MiniLM transfers).

    `explicit` (not a setting of the model: `explicit_attention` turns it on for an export) computes
    softmax(q k^T / sqrt(d) + mask) v (Vaswani et al. 2017, Section 3.2.1, eq. 1) as written, its products as 3-D batched ones (`_product`), not through torch's
    fused `scaled_dot_product_attention`, whose exported decomposition (a "safe" softmax: eq, any, where,
    logical_not over the mask) XNNPACK's ExecuTorch delegate does not take, while it delegates each operator of the
    written form (bmm, div, add, softmax). The two agree to float rounding."""

    explicit = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.true_hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.attention_input_size, config.true_hidden_size)
        self.key = nn.Linear(config.attention_input_size, config.true_hidden_size)
        self.value = nn.Linear(config.value_input_size, config.true_hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        self.masked_score, self.score_clip = config.masked_score, config.score_clip

    def _heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_size).transpose(1, 2)

    def _product(self, a, b):
        """a @ b over (B, heads, ...): where `explicit`, as one 3-D batched product over B x heads, since a 4-D
        matmul exports as an expand and a bmm, and XNNPACK's ExecuTorch delegate leaves the expand's copy to the
        portable kernels."""
        if not self.explicit:
            return a @ b
        lead = a.shape[:2]
        return torch.bmm(a.reshape(-1, *a.shape[2:]), b.reshape(-1, *b.shape[2:])).view(*lead, a.shape[2], b.shape[3])

    def forward(self, q_in, k_in, v_in, mask, output_attentions: bool):
        """`mask`: (B, 1, 1, T), additive (-10000 at padding) or, with `masked_score`, 1 = token, 0 = padding."""
        q, k, v = self._heads(self.query(q_in)), self._heads(self.key(k_in)), self._heads(self.value(v_in))
        dropout = self.dropout_p if self.training else 0.0
        if output_attentions or self.explicit or self.masked_score is not None or self.score_clip is not None:
            scores = self._product(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
            if self.masked_score is None:
                scores = scores + mask
            else:  # the official TF1 form: a masked score is replaced, not pushed down
                scores = scores * mask + (1.0 - mask) * self.masked_score
            if self.score_clip is not None:  # the official QAT's bounded range (config.score_clip)
                scores = scores.clamp(*self.score_clip)
            probs = scores.softmax(dim=-1)  # returned before dropout: what attention transfer compares
            context = self._product(F.dropout(probs, dropout, self.training), v)
            maps = (probs, scores, v) if output_attentions else None
        else:
            maps = None
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        b, _, t, _ = context.shape
        return context.transpose(1, 2).reshape(b, t, -1), maps


@contextmanager
def explicit_attention(model: nn.Module):
    """Every `SelfAttention` of `model` computes its softmax as written (`SelfAttention.explicit`) inside the block,
    each put back as it was after it: what an ExecuTorch export captures. Yields how many it switched (0: a model
    without attention, e.g. the BiLSTM)."""
    layers = [(m, vars(m).get("explicit")) for m in model.modules() if isinstance(m, SelfAttention)]
    for m, _ in layers:
        m.explicit = True
    try:
        yield len(layers)
    finally:
        for m, before in layers:
            if before is None:
                del m.explicit  # the class's default again
            else:
                m.explicit = before


class DenseResidualNorm(nn.Module):
    """norm(dense(x) + residual): the output projection of attention and of each feed-forward network."""

    def __init__(self, config: ModelConfig, in_size: int, out_size: int, dropout: float = 0.0):
        super().__init__()
        self.dense = nn.Linear(in_size, out_size)
        self.LayerNorm = norm(config, out_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self = SelfAttention(config)
        # Dropout after the attention projection only without bottlenecks, as in the official code.
        dropout = 0.0 if config.use_bottleneck else config.hidden_dropout_prob
        self.output = DenseResidualNorm(config, config.true_hidden_size, config.true_hidden_size, dropout)

    def forward(self, q_in, k_in, v_in, residual, mask, output_attentions):
        context, maps = self.self(q_in, k_in, v_in, mask, output_attentions)
        return self.output(context, residual), maps


class Intermediate(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.true_hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)

    def forward(self, x):
        return self.act(self.dense(x))


class FFNLayer(nn.Module):
    """One of MobileBERT's stacked feed-forward networks (Section 3.2: the extra FFNs that restore the
    parameter ratio between attention and FFN in a narrow block)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.intermediate = Intermediate(config)
        self.output = DenseResidualNorm(config, config.intermediate_size, config.true_hidden_size)

    def forward(self, x):
        return self.output(self.intermediate(x), x)


class Output(nn.Module):
    """The last FFN's output, then (with bottlenecks) the projection back to the inter-block width."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.use_bottleneck = config.use_bottleneck
        self.dense = nn.Linear(config.intermediate_size, config.true_hidden_size)
        self.LayerNorm = norm(config, config.true_hidden_size)
        self.dropout = nn.Dropout(0.0 if config.use_bottleneck else config.hidden_dropout_prob)
        if config.use_bottleneck:
            self.bottleneck = DenseResidualNorm(config, config.true_hidden_size, config.hidden_size,
                                                config.hidden_dropout_prob)

    def forward(self, intermediate, residual, block_input):
        x = self.LayerNorm(self.dropout(self.dense(intermediate)) + residual)
        return self.bottleneck(x, block_input) if self.use_bottleneck else x


class Block(nn.Module):
    """One transformer block: (input bottleneck) -> attention -> FFN x F -> (output bottleneck).

    Its output is the block's inter-block feature map, the tensor feature-map transfer matches (Section 4.1).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.use_bottleneck = config.use_bottleneck
        if config.use_bottleneck:
            self.bottleneck = Bottleneck(config)
        self.attention = Attention(config)
        self.ffn = nn.ModuleList(FFNLayer(config) for _ in range(config.num_feedforward_networks - 1))
        self.intermediate = Intermediate(config)
        self.output = Output(config)

    def forward(self, x, mask, output_attentions: bool = False):
        if self.use_bottleneck:
            q_in, k_in, v_in, residual = self.bottleneck(x)
        else:
            q_in = k_in = v_in = residual = x
        h, maps = self.attention(q_in, k_in, v_in, residual, mask, output_attentions)
        for ffn in self.ffn:
            h = ffn(h)
        return self.output(self.intermediate(h), h, x), maps
