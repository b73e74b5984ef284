"""Named model configurations, with the paper's figures beside them (Sun et al. 2020, Table 1 and Table 4).

`mobilebert` is the released official config (uncased_L-24_H-128_B-512_A-4_F-4_OPT). It counts about 24.6M
parameters against the paper's 25.3M: the released model has no pooler dense layer
(`classifier_activation: false`, -0.26M) and Table 1 rounds the embedding and bottleneck shapes; the 3% bound
of our test covers the rest.

The demo pair (`demo_teacher`, `demo_student`) keeps every architectural feature of the paper pair
(trigram embedding, inverted bottleneck in the teacher, bottleneck + shared Q/K bottleneck + 4 stacked FFNs +
NoNorm + ReLU in the student, 4 heads, equal inter-block width so feature maps line up layer by layer) but
shrinks the widths 4x and the depth 6x: 4 layers, inter-block 128, teacher intra-block 256 / FFN 512, student
intra-block 32 / FFN 128, embedding 64. The teacher's FFN is 2x (not 4x) its intra-block width because FFN
matrix products dominate a CPU step: at this size a teacher step over 32 sequences of 64 tokens takes about
half a second on one core, so teacher pre-training, every PKT stage and fine-tuning each fit in minutes, while
the word-embedding table (30522 x 64, the bert-base-uncased vocab) still dominates the parameter count as it
does at full size.

`mobilebert_h384` is the demo's student of the packaged all-MiniLM-L6-v2 teacher (6 layers, hidden 384, 12 heads):
MobileBERT's shape (bottlenecks 384 -> 96 -> 384, shared Q/K bottleneck, 4 stacked FFNs, NoNorm, ReLU, 4 heads,
no pooler dense) with the teacher's depth and inter-block width, so feature maps line up layer by layer without
a projection as in the paper's pair, and the teacher's 384-wide embedding table is shared (no trigram, and so,
as in the official code and transformers, no dense lift of the embeddings). Attention transfer averages the
teacher's 12 heads in groups of 3. The 30522 x 384 table is 11.7M of its 14.8M parameters; its encoder costs about
0.27x the teacher's per layer. It and its siblings load into transformers as MobileBERT with our logits, as do
`mobilebert`, `mobilebert_tiny` and `demo_student`; `mobilebert_no_opt` (LayerNorm epsilon 1e-12, the official
value; transformers' MobileBERT hard-codes 1e-5 in two of its LayerNorms) and the IB-BERT presets save as models
transformers refuses (`ModelConfig.hf_incompatibility`), and the BERT presets as BERT. Students made before the h384
presets dropped the lift (until commit 4cac531: a lift at equal widths, started at the identity) keep it, and
transformers refuses them by name; their checkpoints load and score as before, but `--resume` of such a run under
the preset's name is refused in one line (its recorded config has the lift), and such a run starts again.

`mobilebert_h384_l4`, `mobilebert_tiny_h384` and `mobilebert_tiny_h384_l4` are its smaller siblings at TinyBERT's
latency and below (issue 78): fewer blocks, MobileBERT_TINY's block (Q, K and V all from the bottleneck, 2 FFNs;
paper, Table 1), or both. `python -m benchmarks.shapes` prices each beside the paper's shapes (docs/latency.md).

`tinybert4_h156` is TinyBERT_4 (Jiao et al. 2020, Section 4.1: 4 layers, 312 wide, FFN 1200, 12 heads, for
BERT_BASE's 768) at the same ratios to all-MiniLM-L6-v2's 384: a narrow BERT that pairs with the teacher through
TinyBERT's learned projection, head by head.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobilekd.errors import UserError
from mobilekd.models.config import ModelConfig

_MOBILEBERT = ModelConfig(classifier_activation=False)
# MobileBERT's shape at all-MiniLM-L6-v2's depth and width (`mobilebert_h384`), the base of its smaller siblings
_H384 = _MOBILEBERT.replace(hidden_size=384, num_hidden_layers=6, intra_bottleneck_size=96, intermediate_size=384,
                            embedding_size=384, trigram_input=False, embedding_transformation=False)
# MobileBERT_TINY's attention (paper, Section 3.1 and Table 1: Q, K and V all from the bottleneck) and 2 FFNs
_TINY = dict(use_bottleneck_attention=True, key_query_shared_bottleneck=False, num_feedforward_networks=2)
_BERT_BASE = ModelConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                         hidden_act="gelu", hidden_dropout_prob=0.1, embedding_size=768, trigram_input=False,
                         embedding_transformation=False, use_bottleneck=False, intra_bottleneck_size=768,
                         key_query_shared_bottleneck=False, num_feedforward_networks=1, normalization_type="layer_norm")


@dataclass(frozen=True, kw_only=True)
class Preset:
    name: str
    config: ModelConfig
    description: str
    paper_params: float | None = None  # Table 1, embeddings + encoder (+ pooler)
    paper_flops_seq128: float | None = None  # Table 4 ("FLOPS" at sequence length 128)


PRESETS = {
    p.name: p
    for p in [
        Preset(
            name="ib_bert_large",
            config=ModelConfig(hidden_size=512, intra_bottleneck_size=1024, intermediate_size=4096,
                               num_feedforward_networks=1, key_query_shared_bottleneck=False,
                               normalization_type="layer_norm", hidden_act="gelu", hidden_dropout_prob=0.1),
            description="IB-BERT_LARGE teacher: 24 layers, inter-block 512, intra-block 1024, Q/K/V from the 512-wide "
                        "input",
            paper_params=293e6,
        ),
        Preset(name="mobilebert", config=_MOBILEBERT,
               description="MobileBERT (released config): intra-block 128, 4 FFNs of 512, shared Q/K bottleneck, "
                           "NoNorm + ReLU",
               paper_params=25.3e6, paper_flops_seq128=5.7e9),
        Preset(name="mobilebert_tiny",
               config=_MOBILEBERT.replace(use_bottleneck_attention=True, key_query_shared_bottleneck=False,
                                          num_feedforward_networks=2),
               description="MobileBERT_TINY: Q/K/V all from the 128-wide bottleneck, 2 FFNs of 512",
               paper_params=15.1e6, paper_flops_seq128=3.1e9),
        Preset(name="mobilebert_no_opt",
               config=_MOBILEBERT.replace(normalization_type="layer_norm", hidden_act="gelu"),
               description="MobileBERT w/o OPT: LayerNorm + GELU instead of NoNorm + ReLU (Table 7)",
               paper_params=25.3e6, paper_flops_seq128=5.7e9),
        Preset(name="bert_base",
               config=_BERT_BASE,
               description="BERT_BASE baseline: 12 layers, 768 wide, 12 heads",
               paper_params=109e6, paper_flops_seq128=22.5e9),
        Preset(name="demo_teacher",
               config=ModelConfig(hidden_size=128, num_hidden_layers=4, intra_bottleneck_size=256,
                                  intermediate_size=512, embedding_size=64, num_feedforward_networks=1,
                                  key_query_shared_bottleneck=False, normalization_type="layer_norm",
                                  hidden_act="gelu", hidden_dropout_prob=0.1),
               description="demo IB-BERT teacher (CPU minutes): 4 layers, inter-block 128, intra-block 256, FFN 512"),
        Preset(name="demo_student",
               config=ModelConfig(hidden_size=128, num_hidden_layers=4, intra_bottleneck_size=32,
                                  intermediate_size=128, embedding_size=64, classifier_activation=False),
               description="demo MobileBERT student: 4 layers, inter-block 128, intra-block 32, 4 FFNs of 128"),
        Preset(name="mobilebert_h384", config=_H384,
               description="the demo student of all-MiniLM-L6-v2: 6 layers, inter-block 384, intra-block 96, "
                           "4 FFNs of 384, the teacher's embedding"),
        Preset(name="mobilebert_h384_l4", config=_H384.replace(num_hidden_layers=4),
               description="mobilebert_h384 at TinyBERT_4's depth: 4 layers (teacher layers by --layer-map uniform)"),
        Preset(name="mobilebert_tiny_h384", config=_H384.replace(**_TINY),
               description="MobileBERT_TINY's block at mobilebert_h384's widths: Q/K/V from the 96-wide bottleneck, "
                           "2 FFNs of 384, 6 layers"),
        Preset(name="mobilebert_tiny_h384_l4", config=_H384.replace(num_hidden_layers=4, **_TINY),
               description="mobilebert_tiny_h384 with 4 layers"),
        Preset(name="tinybert4_h156",
               config=_BERT_BASE.replace(hidden_size=156, num_hidden_layers=4, intermediate_size=600,
                                         embedding_size=156, intra_bottleneck_size=156),
               description="TinyBERT_4's shape (312 wide, FFN 1200, 12 heads, 4 layers for a 768-wide teacher) "
                           "scaled to a 384-wide teacher: 156 wide, FFN 600, 12 heads"),
    ]
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]
