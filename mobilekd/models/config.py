"""The model configuration: the official MobileBERT config fields, as plain data.

Field names follow the official `bert_config.json` of google-research/mobilebert (and so transformers'
`MobileBertConfig`): `hidden_size` is the inter-block width (the width of the feature maps that are
transferred), `intra_bottleneck_size` the width inside a block, `embedding_size` the raw token-embedding width
that the trigram convolution lifts to `hidden_size` (paper, Section 3.1 and Table 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mobilekd.errors import located

NORMALIZATIONS = ("no_norm", "layer_norm")
ACTIVATIONS = ("relu", "gelu")


@dataclass
class ModelConfig:
    vocab_size: int = 30522
    hidden_size: int = 512
    num_hidden_layers: int = 24
    num_attention_heads: int = 4
    intermediate_size: int = 512
    hidden_act: str = "relu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    embedding_size: int = 128
    trigram_input: bool = True
    # A dense lift of the token embeddings to hidden_size (BERT has none). Needed whenever the trigram or a
    # narrower embedding changes the width; the official code (TF1 modeling.py, `BertModel.__init__`) and
    # transformers (modeling_mobilebert.py, `MobileBertEmbeddings.forward`) apply it only then, so a MobileBERT at
    # equal widths without the trigram (mobilebert_h384) has none, as there; a lift there is ours alone (students
    # made before it was dropped have one, started at the identity): see `lift_applies`, `hf_incompatibility`
    embedding_transformation: bool = True
    use_bottleneck: bool = True
    intra_bottleneck_size: int = 128
    use_bottleneck_attention: bool = False
    key_query_shared_bottleneck: bool = True
    num_feedforward_networks: int = 4
    normalization_type: str = "no_norm"
    classifier_activation: bool = True
    classifier_dropout: float | None = None  # transformers' field; None: hidden_dropout_prob
    # None: padding is masked by adding -10000 to its attention scores (transformers, and the 2020 official code);
    # a number m: the official TF1 form since 2021 (modeling.py `attention_layer`): scores * mask + (1 - mask) * m,
    # m = -6 there, whose quantization-aware training then clips the scores to [-6, 60]
    masked_score: float | None = None
    # None: scores unbounded; [lo, hi]: after masking, scores clipped to the range, as the official quantization-aware
    # training does (modeling.py `attention_layer`, under use_quantized_training: tf.clip_by_value(scores, -6, 60))
    score_clip: list[float] | None = None
    # Task heads (fine-tuning); empty for pre-training models.
    id2label: dict = field(default_factory=dict)
    problem_type: str | None = None

    @property
    def true_hidden_size(self) -> int:
        """Width inside a block: the bottleneck width when bottlenecks are used."""
        return self.intra_bottleneck_size if self.use_bottleneck else self.hidden_size

    @property
    def attention_input_size(self) -> int:
        """Width that Q and K are projected from.

        MobileBERT reads Q/K from a (shared) bottleneck; the IB-BERT teacher reads Q/K/V from the
        inter-block feature map itself (512) and projects it to the 1024-wide intra-block width.
        transformers' MobileBERT has no such case, hence our own model class.
        """
        if self.use_bottleneck and (self.use_bottleneck_attention or self.key_query_shared_bottleneck):
            return self.intra_bottleneck_size
        return self.hidden_size

    @property
    def value_input_size(self) -> int:
        return self.intra_bottleneck_size if self.use_bottleneck and self.use_bottleneck_attention else self.hidden_size

    @property
    def lift_applies(self) -> bool:
        """Whether the official code and transformers apply the embeddings' dense lift: only where the trigram or a
        narrower embedding changes the width (transformers' `MobileBertEmbeddings.forward`; TF1 modeling.py
        `BertModel.__init__`)."""
        return self.trigram_input or self.embedding_size != self.hidden_size

    @property
    def hf_incompatibility(self) -> str | None:
        """Why transformers' MobileBERT classes would not compute this model, in one line; None when they compute
        it exactly (the round trip tests/test_hf_roundtrip.py checks, preset by preset and head by head).

        Mirrors transformers' models/mobilebert/modeling_mobilebert.py: `MobileBertSelfAttention` projects Q and K
        from `true_hidden_size`; `MobileBertEmbeddings` always builds the dense `embedding_transformation` but
        applies it (in `forward`) only with `trigram_input` or `embedding_size != hidden_size`, as the official TF1
        code does; `MobileBertEmbeddings.LayerNorm` and `MobileBertOutput.LayerNorm` are built with PyTorch's default
        epsilon (1e-5), not `config.layer_norm_eps` as its other LayerNorms (and all of ours) are; the attention
        mask is additive and the scores unclipped."""
        if self.attention_input_size != self.true_hidden_size:
            return ("Q/K read the inter-block feature map and project it to the intra-block width (IB-BERT); "
                    "transformers' MobileBertSelfAttention projects them from the intra-block width")
        if self.embedding_transformation and not self.lift_applies:
            return ("a dense lift of the embeddings at embedding_size == hidden_size without trigram_input; "
                    "transformers' MobileBertEmbeddings.forward skips it there")
        if self.normalization_type == "layer_norm" and self.layer_norm_eps != 1e-5:
            return (f"LayerNorm epsilon {self.layer_norm_eps:g} everywhere; transformers' MobileBertEmbeddings and "
                    f"MobileBertOutput use 1e-5 whatever layer_norm_eps says")
        if self.masked_score is not None or self.score_clip is not None:
            return ("the official TF1 attention mask (masked_score) or score clip (score_clip); transformers masks "
                    "additively and never clips")
        return None

    @property
    def bert_incompatibility(self) -> str | None:
        """Why transformers' BERT classes would not compute this model, in one line; None for BERT's own layout
        (the teachers a user brings, their layer subsets, FFNs narrowed to one width, TinyBERT's shapes): one
        LayerNorm'd FFN per block, no bottleneck, no lift of the embeddings, every LayerNorm at layer_norm_eps
        (transformers' models/bert/modeling_bert.py builds each with config.layer_norm_eps), an additive mask.
        Such a model is saved as `model_type: "bert"` (`mobilekd.models.hf.config_json`)."""
        if self.use_bottleneck or self.num_feedforward_networks != 1:
            return "MobileBERT's bottlenecks or stacked FFNs"
        if self.normalization_type != "layer_norm":
            return f"{self.normalization_type} instead of LayerNorm"
        if self.embedding_transformation or self.trigram_input or self.embedding_size != self.hidden_size:
            return "a lift of the embeddings"
        if self.masked_score is not None or self.score_clip is not None:
            return "the official TF1 attention mask or score clip"
        if not self.classifier_activation:
            return "a pooler without its tanh"
        return None

    @property
    def hf_compatible(self) -> bool:
        """Whether transformers' MobileBERT classes compute exactly this model (`hf_incompatibility` is None)."""
        return self.hf_incompatibility is None

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    def validate(self, source="model config") -> None:
        def bad(problem):
            return located(source, problem)

        if self.normalization_type not in NORMALIZATIONS:
            raise bad(f"normalization_type must be one of {NORMALIZATIONS}, got {self.normalization_type!r}")
        if self.hidden_act not in ACTIVATIONS:
            raise bad(f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "embedding_size", "intra_bottleneck_size", "num_feedforward_networks"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise bad(f"{name} must be a positive integer, got {value!r}")
        if self.true_hidden_size % self.num_attention_heads:
            raise bad(f"intra-block width {self.true_hidden_size} is not divisible by "
                      f"num_attention_heads {self.num_attention_heads}")
        if self.embedding_size > self.hidden_size:
            raise bad(f"embedding_size {self.embedding_size} exceeds hidden_size {self.hidden_size}")
        if self.score_clip is not None and not (isinstance(self.score_clip, (list, tuple)) and len(self.score_clip) == 2
                                                and self.score_clip[0] < self.score_clip[1]):
            raise bad(f"score_clip must be [low, high] with low < high, got {self.score_clip!r}")
        if not self.embedding_transformation and self.lift_applies:
            raise bad("embedding_transformation: false needs embedding_size == hidden_size and no trigram_input")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict, source="config.json") -> "ModelConfig":
        """Build from a config dict (ours or transformers'); unknown keys of transformers' are ignored."""
        if not isinstance(d, dict):
            raise located(source, "is not a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if "embedding_transformation" not in d:  # configs written before the field: the dense lift existed iff needed
            kwargs["embedding_transformation"] = bool(kwargs.get("trigram_input", cls.trigram_input)) or \
                kwargs.get("embedding_size", cls.embedding_size) != kwargs.get("hidden_size", cls.hidden_size)
        if "id2label" in kwargs and kwargs["id2label"]:
            kwargs["id2label"] = {int(k): v for k, v in kwargs["id2label"].items()}
        if "num_labels" in d and not kwargs.get("id2label"):
            kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(d["num_labels"]))} if d["num_labels"] else {}
        try:
            config = cls(**kwargs)
        except (TypeError, ValueError) as err:
            raise located(source, f"invalid model config ({err})") from None
        config.validate(source)
        return config

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)
