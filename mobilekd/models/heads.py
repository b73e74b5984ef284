"""Task heads on the encoder, with transformers' MobileBERT parameter names.

`MobileBertForPreTraining` computes masked-LM logits only at the masked positions it is given: at vocab 30522
the logits of every token dominate a small model's step (`python -m benchmarks.teacher_step` measured a demo
teacher step 2.60x as fast with masked-only logits: docs/results/step_time.json), and only masked positions carry
a loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mobilekd.models.blocks import activation
from mobilekd.models.config import ModelConfig
from mobilekd.models.mobilebert import EncoderOutput, MobileBert, init_weights


# The word-embedding table's parameter name in every head's model (the MLM decoder is tied to it)
WORD_EMBEDDINGS = "mobilebert.embeddings.word_embeddings.weight"


class PredictionHeadTransform(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x):
        return self.LayerNorm(self.act(self.dense(x)))


class LMPredictionHead(nn.Module):
    """Masked-LM decoder tied to the word embeddings.

    The embedding table is only `embedding_size` wide, so the output matrix is [E^T; D] with D an extra
    (hidden_size - embedding_size) x vocab matrix, as in the official code.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        extra = config.hidden_size - config.embedding_size  # none at equal widths (BERT)
        self.dense = nn.Linear(config.vocab_size, extra, bias=False) if extra else None
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, word_embeddings: torch.Tensor):
        x = self.transform(x)
        weight = word_embeddings.t() if self.dense is None else torch.cat([word_embeddings.t(), self.dense.weight])
        return x @ weight + self.bias


class PreTrainingHeads(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.predictions = LMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


@dataclass
class PreTrainingOutput:
    mlm_logits: torch.Tensor | None  # (N masked, vocab)
    nsp_logits: torch.Tensor | None  # (B, 2)
    encoder: EncoderOutput


class MobileBertForPreTraining(nn.Module):
    """Encoder + masked-LM head + next-sentence head (pre-training, Section 4 / Appendix)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.mobilebert = MobileBert(config)
        self.cls = PreTrainingHeads(config)
        init_weights(self, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, masked_positions=None, *,
                num_layers=None, output_feature_maps=False, output_attentions=False, hidden=None,
                start_layer=0, heads=True) -> PreTrainingOutput:
        """`masked_positions`: (B, P) indices into the sequence, padded with -1; logits come back flattened
        over the valid ones (without them, at every position). Below full depth, or with `heads` False (a pass
        that needs only the encoder's features), no head runs. `hidden`, `start_layer`: see `MobileBert.forward`."""
        enc = self.mobilebert(input_ids, attention_mask, token_type_ids, num_layers=num_layers,
                              output_feature_maps=output_feature_maps, output_attentions=output_attentions,
                              hidden=hidden, start_layer=start_layer)
        if enc.pooled is None or not heads:
            return PreTrainingOutput(None, None, enc)
        hidden = enc.last_hidden_state
        if masked_positions is not None:
            rows, cols = (masked_positions >= 0).nonzero(as_tuple=True)
            hidden = hidden[rows, masked_positions[rows, cols]]
        mlm = self.cls.predictions(hidden, self.mobilebert.embeddings.word_embeddings.weight)
        return PreTrainingOutput(mlm, self.cls.seq_relationship(enc.pooled), enc)


class UntiedLMPredictionHead(LMPredictionHead):
    """`LMPredictionHead` with an output matrix of its own (`decoder`, vocab x embedding_size, beside the extra
    `dense` rows): the C-MLM teacher's output layer, which the official code unties from the input embeddings
    (Distill-BERT-Textgen cmlm/model.py, `BertForSeq2seq.update_output_layer`). transformers' MobileBERT names it
    `cls.predictions.decoder` too, and loads it untied with `tie_word_embeddings: false`."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)

    def forward(self, x, word_embeddings: torch.Tensor | None = None):
        return super().forward(x, self.decoder.weight)


class MobileBertForConditionalMLM(nn.Module):
    """The C-MLM teacher (Chen et al. 2020, Section 3.1; cmlm/model.py `BertForSeq2seq`): the encoder, BERT's
    prediction transform (kept, as the official class keeps `cls.predictions.transform`) and an untied output
    layer; logits at the masked positions only, like `MobileBertForPreTraining`. `start_output_layer` starts it from a
    pre-trained model: the official code fills the new output layer's rows from BERT's embedding of each word of
    the student's vocabulary (`convert_embedding`); ours is the teacher's own vocabulary, so its rows are the tied
    decoder's rows themselves, and its bias the pre-trained MLM bias (a departure: the official bias starts at
    zero, there being no pre-trained bias for the new vocabulary)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.mobilebert = MobileBert(config, add_pooling_layer=False)
        self.cls = nn.Module()
        self.cls.predictions = UntiedLMPredictionHead(config)
        init_weights(self, config.initializer_range)

    def start_output_layer(self) -> None:
        """The output layer's rows from the input embeddings (the tied decoder of the masked LM it starts from)."""
        with torch.no_grad():
            self.cls.predictions.decoder.weight.copy_(self.mobilebert.embeddings.word_embeddings.weight)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, masked_positions=None):
        """Logits (N masked, vocab) at the valid `masked_positions` ((B, P), -1-padded)."""
        hidden = self.mobilebert(input_ids, attention_mask, token_type_ids).last_hidden_state
        rows, cols = (masked_positions >= 0).nonzero(as_tuple=True)
        return self.cls.predictions(hidden[rows, masked_positions[rows, cols]])


class MobileBertForSequenceClassification(nn.Module):
    """Pooled [CLS] -> dropout -> linear; one output for regression (STS-B), else one per label."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.mobilebert = MobileBert(config)
        dropout = config.classifier_dropout
        self.dropout = nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout)
        self.classifier = nn.Linear(config.hidden_size, max(config.num_labels, 1))
        init_weights(self, config.initializer_range)

    def sparse_embeddings(self) -> list[nn.Embedding]:
        """Tables that no other layer reads (no tied decoder here), so their gradient may be sparse and their
        update lazy (`mobilekd.train.lazy_adamw`)."""
        return [self.mobilebert.embeddings.word_embeddings]

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kw):
        return self.logits_and_encoder(input_ids, attention_mask, token_type_ids, **kw)[0]

    def logits_and_encoder(self, input_ids, attention_mask=None, token_type_ids=None, **kw):
        """The logits and the encoder's output (its feature maps and attentions, when `kw` asks for them)."""
        enc = self.mobilebert(input_ids, attention_mask, token_type_ids, **kw)
        return self.classifier(self.dropout(enc.pooled)), enc


class MobileBertForQuestionAnswering(nn.Module):
    """Per-token start and end logits (SQuAD)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.mobilebert = MobileBert(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_weights(self, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kw):
        enc = self.mobilebert(input_ids, attention_mask, token_type_ids, **kw)
        start, end = self.qa_outputs(enc.last_hidden_state).unbind(dim=-1)
        return start, end


def _probabilities(model, *inputs):
    """A classifier's probabilities; a regression model's (one output, e.g. STS-B) score, (B,)."""
    logits = model(*inputs)
    return (logits[:, 0] if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1),)


def _mlm_everywhere(model, *inputs):
    positions = torch.arange(inputs[0].shape[1])[None].expand(inputs[0].shape[0], -1)
    return (model(*inputs, masked_positions=positions).mlm_logits.view(*inputs[0].shape, -1),)


@dataclass(frozen=True)
class Head:
    """Everything the toolkit knows about one kind of head, in one place: the model class, the class name
    transformers loads it as, what an exported file returns (names and the function computing them from the
    model's outputs) and which TFLite metadata layout an app reads it with (None: no metadata)."""

    name: str
    model_class: type
    hf_architecture: str
    outputs: tuple[str, ...]
    app_outputs: Callable[..., tuple[torch.Tensor, ...]]  # (model, input_ids, attention_mask, token_type_ids)
    metadata: str | None
    tied: bool = True  # the MLM decoder, where there is one, is the word-embedding table
    # whether a transformers config's `architectures` alone picks this head (`head_of_architectures`): not the
    # C-MLM teacher's, whose class name is transformers' masked LM's (a BertForMaskedLM is a pre-trained teacher)
    by_architecture: bool = True

    @property
    def hf_suffix(self) -> str:
        """What transformers' class names of this head end with, for any architecture (BertFor..., MobileBertFor...)."""
        return self.hf_architecture.removeprefix("MobileBert")


HEADS = {h.name: h for h in [
    Head("pretraining", MobileBertForPreTraining, "MobileBertForPreTraining", ("logits",), _mlm_everywhere, None),
    Head("classification", MobileBertForSequenceClassification, "MobileBertForSequenceClassification",
         ("probabilities",), _probabilities, "text_classifier"),
    Head("cmlm", MobileBertForConditionalMLM, "MobileBertForMaskedLM", ("logits",),
         lambda model, ids, mask, types: (model(ids, mask, types, torch.arange(ids.shape[1])[None].expand(
             ids.shape[0], -1)).view(*ids.shape, -1),), None, tied=False, by_architecture=False),
    Head("qa", MobileBertForQuestionAnswering, "MobileBertForQuestionAnswering", ("start_logits", "end_logits"),
         lambda model, *inputs: tuple(model(*inputs)), "bert_question_answerer"),
]}


def head_of(model: nn.Module) -> str:
    """The registry name of a model's head."""
    return next(name for name, head in HEADS.items() if isinstance(model, head.model_class))


def head_of_architectures(architectures, default: str = "pretraining") -> str:
    """The head a transformers config's `architectures` names (e.g. BertForSequenceClassification)."""
    names = [str(a) for a in architectures or []]
    return next((h.name for h in HEADS.values() if h.by_architecture and any(a.endswith(h.hf_suffix) for a in names)),
                default)


def mlm_loss(mlm_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Masked-LM cross-entropy, averaged over the masked tokens (BERT, Section 3.1).

    With `batch["mlm_denominator"]` (set by the training loop) the sum is divided by the masked-token count of
    the whole global batch per process, so that N processes average to exactly the one-process loss.
    """
    labels = batch["masked_labels"][batch["masked_labels"] >= 0]
    if "mlm_denominator" not in batch:
        return F.cross_entropy(mlm_logits.float(), labels)
    return F.cross_entropy(mlm_logits.float(), labels, reduction="sum") / batch["mlm_denominator"]


def pretraining_loss(model, batch: dict) -> dict[str, torch.Tensor]:
    """MLM + NSP, the teacher's pre-training objective (BERT; MobileBERT Section 4)."""
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
    mlm = mlm_loss(out.mlm_logits, batch)
    nsp = F.cross_entropy(out.nsp_logits.float(), batch["nsp_labels"])
    return {"loss": mlm + nsp, "mlm": mlm, "nsp": nsp}
