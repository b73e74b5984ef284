"""A small Transformer encoder-decoder (Vaswani et al. 2017), the C-MLM paper's student (Chen et al. 2020, Section
4: OpenNMT-py's Transformer, config/config-transformer-base-mt-deen.yml in ChenRocks/Distill-BERT-Textgen), in the
layout OpenNMT-py builds it: pre-norm layers (LayerNorm before each sub-layer, one after the last layer), sinusoidal
positions added to the embeddings scaled by sqrt(d_model), one word-embedding table shared by the encoder, the
decoder and the output layer's weight (`-share_embeddings -share_decoder_embeddings`; the output layer keeps a bias
of its own, as OpenNMT-py's generator, an `nn.Linear`, does), ReLU feed-forward layers.

One departure, for the phone: the shared table may be narrower than the model (`embedding_size` below `d_model`,
as MobileBERT's 128-wide table under 512-wide layers, paper Section 3.1), a linear map lifting it on the way in
(`embedding_lift`) and one bringing the decoder's states down to it on the way out (`output_drop`). At the
teacher's 30,522 word pieces the output layer is most of a small student's work and of its file; at 128 of 256
both halve.

Its vocabulary is the teacher's WordPiece one (so the teacher's soft targets need no mapping): [CLS] starts a
target, [SEP] ends it, [PAD] pads. Sizes are presets (`SEQ2SEQ_PRESETS`), far below the paper's Transformer base
(6 + 6 layers of 512): the students of an app's keyboard, not of WMT. Two entry points serve training, decoding
(`mobilekd.models.decoding`) and the exported file alike: `encode` (source -> memory) and `decode` (memory and a
target prefix -> logits). A third, `decode_step`, serves decoding in PyTorch: one new position at a time, the
keys and values of those before read from a cache (`DecoderCache`) instead of computed again.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mobilekd.models.own_format import load_own, save_own

CONFIG_FILE = "seq2seq.json"
NEG = -1e9  # a masked attention score


@dataclass
class Seq2SeqConfig:
    vocab_size: int
    d_model: int = 256
    encoder_layers: int = 2
    decoder_layers: int = 2
    heads: int = 4
    ffn_size: int = 1024
    dropout: float = 0.1
    max_positions: int = 256
    embedding_size: int | None = None  # the shared table's width (None: d_model, OpenNMT-py's layout)
    pad_token_id: int = 0
    bos_token_id: int = 101  # [CLS] in bert-base-uncased's vocabulary
    eos_token_id: int = 102  # [SEP]

    @property
    def width(self) -> int:
        """The word-embedding table's width."""
        return self.embedding_size or self.d_model

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Seq2SeqConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown keys {unknown}")
        config = cls(**d)
        sizes = (config.vocab_size, config.d_model, config.encoder_layers, config.decoder_layers, config.heads,
                 config.ffn_size, config.max_positions, config.width)
        if not all(type(v) is int and v >= 1 for v in sizes):
            raise ValueError("sizes must be positive integers")
        if config.d_model % config.heads:
            raise ValueError(f"d_model {config.d_model} is not divisible by heads {config.heads}")
        if not 0 <= config.dropout < 1:
            raise ValueError("dropout must lie in [0, 1)")
        return config


# name -> shape; vocab_size comes from the tokenizer
SEQ2SEQ_PRESETS = {
    "seq2seq_micro": dict(d_model=32, encoder_layers=1, decoder_layers=1, heads=2, ffn_size=64),  # tests
    "seq2seq_tiny": dict(d_model=256, encoder_layers=2, decoder_layers=2, heads=4, ffn_size=1024, embedding_size=128),
    "seq2seq_small": dict(d_model=384, encoder_layers=3, decoder_layers=3, heads=6, ffn_size=1536, embedding_size=128),
}


def sinusoids(positions: int, d: int) -> torch.Tensor:
    """OpenNMT-py's `PositionalEncoding`: sin on even, cos on odd dimensions, wavelengths up to 10000 x 2 pi."""
    position = torch.arange(positions, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    table = torch.zeros(positions, d)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: d // 2])
    return table


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def keys_values(self, memory):
        """The keys and values (B, heads, Tk, d / heads) of what is attended: what a decoding cache keeps."""
        return self._split(self.key(memory)), self._split(self.value(memory))

    def forward(self, x, memory, bias, keys_values=None):
        """`bias`: additive, broadcastable to (B, heads, Tq, Tk); `keys_values`: `keys_values(memory)` computed
        before (a decoding cache's), in place of computing them from `memory`."""
        k, v = keys_values if keys_values is not None else self.keys_values(memory)
        q = self._split(self.query(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        context = self.dropout(scores.softmax(-1)) @ v
        return self.out(context.transpose(1, 2).reshape(x.shape))


class FeedForward(nn.Module):
    def __init__(self, d: int, ffn: int, dropout: float):
        super().__init__()
        self.w_1, self.w_2, self.dropout = nn.Linear(d, ffn), nn.Linear(ffn, d), nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, c: Seq2SeqConfig):
        super().__init__()
        self.self_attn = Attention(c.d_model, c.heads, c.dropout)
        self.ffn = FeedForward(c.d_model, c.ffn_size, c.dropout)
        self.norm_1, self.norm_2 = nn.LayerNorm(c.d_model, eps=1e-6), nn.LayerNorm(c.d_model, eps=1e-6)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x, bias):
        h = self.norm_1(x)
        x = x + self.dropout(self.self_attn(h, h, bias))
        return x + self.dropout(self.ffn(self.norm_2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, c: Seq2SeqConfig):
        super().__init__()
        self.self_attn, self.cross_attn = (Attention(c.d_model, c.heads, c.dropout) for _ in range(2))
        self.ffn = FeedForward(c.d_model, c.ffn_size, c.dropout)
        self.norm_1, self.norm_2, self.norm_3 = (nn.LayerNorm(c.d_model, eps=1e-6) for _ in range(3))
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, y, memory, self_bias, memory_bias):
        h = self.norm_1(y)
        y = y + self.dropout(self.self_attn(h, h, self_bias))
        y = y + self.dropout(self.cross_attn(self.norm_2(y), memory, memory_bias))
        return y + self.dropout(self.ffn(self.norm_3(y)))

    def step(self, y, write, memory_keys_values, memory_bias, self_bias=0.0):
        """`forward` for the newest position alone (y: B x 1 x d): `write(k, v)` puts its self-attention keys and
        values (B, heads, 1, d / heads) into the cache of the positions so far and returns the cache's keys and
        values, which it attends (`self_bias`: where a fixed-size cache holds later, empty slots); its
        cross-attention reads the memory's keys and values (`Attention.keys_values`, computed once). Without a
        later position no causal mask is needed."""
        h = self.norm_1(y)
        y = y + self.dropout(self.self_attn(h, None, self_bias, keys_values=write(*self.self_attn.keys_values(h))))
        y = y + self.dropout(self.cross_attn(self.norm_2(y), None, memory_bias, keys_values=memory_keys_values))
        return y + self.dropout(self.ffn(self.norm_3(y)))


class DecoderCache:
    """What `Seq2SeqTransformer.decode_step` keeps between steps: per decoder layer, the self-attention's keys and
    values of every position so far (`self`) and the cross-attention's of the memory (`memory`, computed at the
    first step): the incremental decoding of fairseq's `incremental_state` and OpenNMT-py's `layer_cache`;
    `position`, the next position's index. The exported file keeps the same in fixed-size tensors
    (`mobilekd.export.seq2seq.Decode`)."""

    def __init__(self, layers: int):
        self.layers: list[dict] = [{} for _ in range(layers)]
        self.position = 0

    def writer(self, layer: int):
        """`DecoderLayer.step`'s `write` for one layer: the new position's keys and values appended."""
        kept = self.layers[layer]

        def write(k, v):
            if "self" in kept:
                k, v = torch.cat([kept["self"][0], k], 2), torch.cat([kept["self"][1], v], 2)
            kept["self"] = (k, v)
            return k, v
        return write

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows` of every self-attention cache, in that order (beam search's surviving
        hypotheses). The memory's rows are left: a beam's rows all come from one source, whose memory they share."""
        for layer in self.layers:
            if "self" in layer:
                layer["self"] = tuple(t[rows] for t in layer["self"])


class Seq2SeqTransformer(nn.Module):
    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = c = config
        self.embeddings = nn.Embedding(c.vocab_size, c.width, padding_idx=c.pad_token_id)
        narrow = c.width != c.d_model
        self.embedding_lift = nn.Linear(c.width, c.d_model, bias=False) if narrow else None
        self.output_drop = nn.Linear(c.d_model, c.width, bias=False) if narrow else None
        self.output_bias = nn.Parameter(torch.zeros(c.vocab_size))  # OpenNMT-py's generator is a Linear: its bias
        self.register_buffer("positions", sinusoids(c.max_positions, c.d_model), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(c.d_model, eps=1e-6), nn.LayerNorm(c.d_model, eps=1e-6)
        self.dropout = nn.Dropout(c.dropout)
        self._table, self._table_key = None, None  # `step_logits`' transposed copy of the table, and what it copied
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform matrices, as the official config's `param_init_glorot`; the embedding N(0, d^-1/2), the
        scale at which sqrt(d) makes it unit-variance (fairseq's `Embedding`; OpenNMT-py draws it Glorot too), d
        the table's width."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and name != "embeddings.weight":
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        nn.init.normal_(self.embeddings.weight, 0.0, self.config.width ** -0.5)
        with torch.no_grad():
            self.embeddings.weight[self.config.pad_token_id].zero_()

    def _embed(self, ids, start: int | torch.Tensor = 0):
        """The scaled (and lifted) word embeddings of `ids` (B, T) plus the positions start..start + T - 1 (a
        tensor `start`, (1,), as an exported graph has it: one position, T = 1)."""
        x = self.embeddings(ids) * math.sqrt(self.config.width)
        if self.embedding_lift is not None:
            x = self.embedding_lift(x)
        at = self.positions.index_select(0, start) if torch.is_tensor(start) else \
            self.positions[start:start + ids.shape[1]]
        return self.dropout(x + at)

    @staticmethod
    def padding_bias(attention_mask):
        """(B, 1, 1, S): 0 where attended, NEG at padding."""
        return ((1.0 - attention_mask[:, None, None, :].float()) * NEG)

    def encode(self, input_ids, attention_mask):
        """The memory (B, S, d) of a source."""
        x, bias = self._embed(input_ids), self.padding_bias(attention_mask)
        for layer in self.encoder:
            x = layer(x, bias)
        return self.encoder_norm(x)

    def decode(self, memory, attention_mask, decoder_input_ids):
        """The decoder's states (B, T, d) for a target prefix: position t sees the prefix up to t and the memory."""
        t = decoder_input_ids.shape[1]
        causal = torch.triu(torch.full((t, t), NEG, device=memory.device), diagonal=1)
        y, memory_bias = self._embed(decoder_input_ids), self.padding_bias(attention_mask)
        for layer in self.decoder:
            y = layer(y, memory, causal, memory_bias)
        return self.decoder_norm(y)

    def decode_step(self, memory, attention_mask, tokens, cache: DecoderCache):
        """The decoder's state (B, d) at the next position of `cache`, for its input tokens (B,): what `decode`
        gives at that position for the whole prefix (the same sums, in another order: equal up to rounding), at
        the cost of one position instead of all of them."""
        if cache.position >= self.config.max_positions:
            raise ValueError(f"position {cache.position} is past the model's {self.config.max_positions} positions")
        y, memory_bias = self._embed(tokens[:, None], cache.position), self.padding_bias(attention_mask)
        for i, (layer, kept) in enumerate(zip(self.decoder, cache.layers)):
            if "memory" not in kept:
                kept["memory"] = layer.cross_attn.keys_values(memory)
            y = layer.step(y, cache.writer(i), kept["memory"], memory_bias)
        cache.position += 1
        return self.decoder_norm(y)[:, 0]

    def logits(self, states):
        """The shared output layer: states (brought down to the table's width) @ embeddings^T + a bias."""
        if self.output_drop is not None:
            states = self.output_drop(states)
        return F.linear(states, self.embeddings.weight, self.output_bias)

    def step_logits(self, states):
        """`logits` as decoding in PyTorch needs them (no gradient), the same values up to rounding. For one row
        (one source, greedy: an app's decoding) the product runs against a transposed, contiguous copy of the table,
        (width, V), made once and made again when the table changes (its storage, device, dtype or in-place
        version; a write through `.data` or `set_` bumps no version and is not seen): PyTorch's matrix-vector
        product over the (V, width) table reads it about 5x slower than over its transpose (30,522 x 128, 1 thread,
        timed side by side on `epyc-avx512bf16-2c-08167c`: 2.3-2.8 ms against 0.4-0.7 ms; docs/seq2seq.md's
        decoding table times the output layer alone), and it was most of a cached step.
        Several rows (batches, beams) take `logits`, as training and the exported graph do: a matrix product there
        runs as fast either way; so does a table made under `torch.inference_mode` (it keeps no version)."""
        table = self.embeddings.weight
        if states.dim() != 2 or len(states) != 1 or torch.is_grad_enabled() or table.is_inference():
            return self.logits(states)
        if self.output_drop is not None:
            states = self.output_drop(states)
        key = (table.data_ptr(), table._version, table.device, table.dtype)
        if self._table_key != key:
            self._table, self._table_key = table.detach().t().contiguous(), key
        return torch.addmm(self.output_bias, states, self._table)

    def forward(self, input_ids, attention_mask, decoder_input_ids, target_mask=None):
        """The logits (B, T, V) of every target position, or with `target_mask` (B, T) of the masked ones alone,
        flattened (N, V): the output layer is most of the work, and padding needs none."""
        states = self.decode(self.encode(input_ids, attention_mask), attention_mask, decoder_input_ids)
        return self.logits(states if target_mask is None else states[target_mask])


def new_seq2seq(preset: str, tokenizer, max_positions: int = 256) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(Seq2SeqConfig(
        vocab_size=len(tokenizer), max_positions=max_positions, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id, **SEQ2SEQ_PRESETS[preset]))


def save_seq2seq(model: Seq2SeqTransformer, out_dir, tokenizer=None) -> Path:
    return save_own(model, out_dir, CONFIG_FILE, tokenizer)


def load_seq2seq(model_dir) -> Seq2SeqTransformer:
    return load_own(model_dir, CONFIG_FILE, Seq2SeqConfig, Seq2SeqTransformer, "seq2seq")
