"""The BiLSTM student of Tang et al. 2019 ("Distilling Task-Specific Knowledge from BERT into Simple Neural
Networks", Section 3.1; castorini/d-bert, dbert/distill/model/bi_rnn.py `BiRNNModel` and siamese_rnn.py).

One bidirectional LSTM layer over word embeddings; a sentence is the concatenation of the final forward and final
backward states (`bi_rnn.py`; `pooling="max"` max-pools the LSTM outputs over time instead, which the official
option meant to do but, as published, applies to the input embeddings), then `fc1`, ReLU, dropout and `fc2`. For
sentence pairs the encoder is shared (siamese) and the classifier reads f(h1, h2) = [h1, h2, h1 * h2, |h1 - h2|]
(Section 3.1, eq. 2; `siamese_rnn.py` orders the last two the other way round, which changes nothing).

Departures, each stated: the vocabulary and the embedding table are the teacher's WordPiece ones (word2vec cannot
be downloaded here, and an app then tokenizes for the BiLSTM exactly as for the teacher); the input is what a BERT
model takes, `[CLS] a [SEP] (b [SEP])` with `token_type_ids`, and sentence k is the word pieces of segment k
([CLS] and [SEP] left out, so the LSTM reads the words alone, as the official model does), so one `.tflite`
signature serves single sentences and pairs alike.

Two executions of one set of weights: training and evaluation run `nn.LSTM` over packed sequences (each sentence's
tokens gathered to the front); under `torch.export` (the `.tflite` conversion) the same LSTM is unrolled over the
static length, a padding position leaving the state unchanged. Both read each sentence's tokens alone, so they
agree; `mobilekd export` checks the file against the packed model on dev sentences.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mobilekd.models.own_format import load_own, load_own_config, save_own
from mobilekd.models.word_table import teacher_table

CONFIG_FILE = "bilstm.json"


@dataclass
class BiLSTMConfig:
    vocab_size: int
    embedding_size: int
    # the fields with a help are `mobilekd bilstm`'s flags (mobilekd.flags.add_flags): their one home
    hidden_size: int = field(default=150, metadata={  # confs/birnn_sst2.json (MRPC's is 300)
        "min": 1, "help": "LSTM units per direction"})
    classifier_size: int = field(default=200, metadata={"min": 1, "help": "ReLU classifier layer"})
    pair: bool = False
    pooling: str = field(default="final", metadata={
        "choices": ["final", "max"],
        "help": "sentence vector: the final states of both directions (bi_rnn.py's) or max over time"})
    dropout: float = field(default=0.1, metadata={"help": "dropout before the output layer"})
    id2label: dict[int, str] = field(default_factory=dict)
    cls_token_id: int = 101  # left out of every sentence (bert-base-uncased's ids by default)
    sep_token_id: int = 102
    max_position_embeddings: int = 4096  # an LSTM has no position table; the export's length check reads this

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "id2label": {str(k): v for k, v in self.id2label.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "BiLSTMConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown keys {unknown}")
        config = cls(**{**d, "id2label": {int(k): v for k, v in d.get("id2label", {}).items()}})
        if config.pooling not in ("final", "max"):
            raise ValueError(f"pooling {config.pooling!r} is not 'final' or 'max'")
        sizes = (config.vocab_size, config.embedding_size, config.hidden_size, config.classifier_size,
                 config.cls_token_id + 1, config.sep_token_id + 1, config.max_position_embeddings)
        if not all(type(v) is int and v >= 1 for v in sizes):
            raise ValueError("sizes and token ids must be non-negative integers (sizes positive)")
        if type(config.pair) is not bool or not 0 <= config.dropout <= 1:
            raise ValueError("pair must be true or false and dropout lie in [0, 1]")
        if sorted(config.id2label) != list(range(max(1, config.num_labels))):
            raise ValueError("id2label must name the labels 0 .. n-1")
        return config


def siamese_features(h1: torch.Tensor, h2: torch.Tensor) -> torch.Tensor:
    """f(h1, h2) = [h1, h2, h1 * h2, |h1 - h2|] (Tang et al. 2019, eq. 2)."""
    return torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=-1)


def segment_masks(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                  special: tuple[int, ...]) -> list[torch.Tensor]:
    """Sentence a's and sentence b's positions: the attended word pieces of segment 0 and of segment 1, the
    `special` tokens ([CLS], [SEP]) left out."""
    words = attention_mask * torch.stack([input_ids != i for i in special]).all(0).to(attention_mask.dtype)
    return [words * (token_type_ids == k).to(attention_mask.dtype) for k in (0, 1)]


class BiLSTMClassifier(nn.Module):
    def __init__(self, config: BiLSTMConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_size)
        self.lstm = nn.LSTM(config.embedding_size, config.hidden_size, batch_first=True, bidirectional=True)
        features = 2 * config.hidden_size * (4 if config.pair else 1)
        self.fc1 = nn.Linear(features, config.classifier_size)
        self.dropout = nn.Dropout(config.dropout)
        self.fc2 = nn.Linear(config.classifier_size, config.num_labels)

    def sparse_embeddings(self) -> list[nn.Embedding]:
        """The word table: read by nothing else, so its gradient may be sparse (`mobilekd.train.lazy_adamw`)."""
        return [self.embeddings]

    def encode(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids and 0/1 mask -> (B, 2H): each row's masked tokens read in order; zeros for none."""
        x = self.embeddings(input_ids)
        pooled = self._unrolled(x, mask) if torch.compiler.is_exporting() else self._packed(x, mask)
        return torch.where(mask.sum(1, keepdim=True) > 0, pooled, torch.zeros_like(pooled))

    def _packed(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        order = torch.sort(mask, dim=1, descending=True, stable=True).indices  # the sentence's tokens first
        x = x.gather(1, order[..., None].expand_as(x))
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        if self.config.pooling == "final":
            return torch.cat([h[0], h[1]], dim=-1)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, padding_value=-1.0)
        return out.max(1).values  # h = o * tanh(c) lies in (-1, 1): padding at -1 never wins

    def _unrolled(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The LSTM step by step over the static length (nn.LSTM's gate order i, f, g, o); a position outside
        the sentence leaves (h, c) as they were, so each direction reads the sentence's tokens alone."""
        m = mask.to(x.dtype)[..., None]
        states, maxima = [], []
        for suffix, steps in (("", range(x.shape[1])), ("_reverse", reversed(range(x.shape[1])))):
            w_ih, w_hh = getattr(self.lstm, f"weight_ih_l0{suffix}"), getattr(self.lstm, f"weight_hh_l0{suffix}")
            bias = getattr(self.lstm, f"bias_ih_l0{suffix}") + getattr(self.lstm, f"bias_hh_l0{suffix}")
            projected = F.linear(x, w_ih, bias)
            h = c = x.new_zeros(x.shape[0], self.config.hidden_size)
            best = x.new_full((x.shape[0], self.config.hidden_size), -1.0)  # below any h: finite for int8
            for t in steps:
                i, f, g, o = (projected[:, t] + F.linear(h, w_hh)).chunk(4, dim=-1)
                c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h_new = torch.sigmoid(o) * torch.tanh(c_new)
                keep = m[:, t]
                c, h = keep * c_new + (1 - keep) * c, keep * h_new + (1 - keep) * h
                if self.config.pooling == "max":
                    best = torch.maximum(best, torch.where(keep > 0, h_new, best))
            states.append(h)
            maxima.append(best)
        return torch.cat(states if self.config.pooling == "final" else maxima, dim=-1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """Logits (B, labels) from a BERT-style batch."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        a, b = segment_masks(input_ids, attention_mask, token_type_ids,
                             (self.config.cls_token_id, self.config.sep_token_id))
        if self.config.pair:  # one pass over both sentences, the encoder shared
            h1, h2 = self.encode(torch.cat([input_ids, input_ids]), torch.cat([a, b])).chunk(2)
            features = siamese_features(h1, h2)
        else:
            features = self.encode(input_ids, a)
        return self.fc2(self.dropout(F.relu(self.fc1(features))))


def from_teacher(teacher, tokenizer, pair: bool, id2label: dict[int, str], embedding_size: int | None = None,
                 **sizes) -> BiLSTMClassifier:
    """A BiLSTM whose vocabulary is the teacher's and whose embedding table starts as the teacher's word embeddings
    (they train). With `embedding_size` below the teacher's width, the table is first projected onto its
    `embedding_size` principal components (centred, by SVD): a smaller table keeping most of its variance."""
    table = teacher_table(teacher, embedding_size)
    config = BiLSTMConfig(vocab_size=table.shape[0], embedding_size=table.shape[1], pair=pair, id2label=id2label,
                          cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id, **sizes)
    model = BiLSTMClassifier(config)
    model.embeddings.weight.data.copy_(table)
    return model


def save_bilstm(model: BiLSTMClassifier, out_dir, tokenizer=None) -> Path:
    return save_own(model, out_dir, CONFIG_FILE, tokenizer)


def load_bilstm_config(model_dir) -> BiLSTMConfig:
    return load_own_config(model_dir, CONFIG_FILE, BiLSTMConfig, "BiLSTM")


def load_bilstm(model_dir) -> BiLSTMClassifier:
    return load_own(model_dir, CONFIG_FILE, BiLSTMConfig, BiLSTMClassifier, "BiLSTM")
