"""The MobileBERT family against the paper's Table 1 / Table 4, and the model's own contracts."""

import json
import subprocess
import sys

import pytest
import torch

from mobilekd.errors import UserError
from mobilekd.models.blocks import NoNorm, SelfAttention, explicit_attention
from mobilekd.models.flops import model_stats
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.mobilebert import MobileBert
from mobilekd.models.presets import PRESETS

PAPER = [p for p in PRESETS.values() if p.paper_params]


@pytest.mark.parametrize("preset", PAPER, ids=lambda p: p.name)
def test_params_and_flops_match_paper(preset):
    stats = model_stats(preset.config)
    assert abs(stats["params"] / preset.paper_params - 1) <= 0.03, stats
    if preset.paper_flops_seq128:
        assert abs(stats["flops_seq128"] / preset.paper_flops_seq128 - 1) <= 0.06, stats


@pytest.mark.parametrize("name", ["ib_bert_large", "mobilebert", "mobilebert_tiny", "mobilebert_no_opt"])
def test_paper_models_expose_512_wide_feature_maps_and_4_head_attention(name):
    config = PRESETS[name].config
    with torch.device("meta"):
        model = MobileBert(config)
        out = model(torch.ones(2, 16, dtype=torch.long), output_feature_maps=True, output_attentions=True)
    assert len(out.feature_maps) == len(out.attentions) == 24
    assert all(f.shape == (2, 16, 512) for f in out.feature_maps)
    assert all(a.shape == (2, 4, 16, 16) for a in out.attentions)


def test_nonorm_is_elementwise_affine():
    norm = NoNorm(3)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -1.0]))
        norm.bias.copy_(torch.tensor([0.5, 0.0, 1.0]))
    x = torch.tensor([[1.0, 1.0, 1.0], [2.0, -3.0, 0.0]])
    assert torch.equal(norm(x), torch.tensor([[1.5, 2.0, 0.0], [2.5, -6.0, 1.0]]))


def test_trigram_embedding_concatenates_next_current_previous():
    config = PRESETS["demo_student"].config
    model = MobileBert(config).eval()
    emb = model.embeddings
    ids = torch.tensor([[5, 6, 7]])
    e = emb.word_embeddings.weight[ids[0]]
    zero = torch.zeros_like(e[0])
    by_hand = torch.stack([
        torch.cat([e[1], e[0], zero]), torch.cat([e[2], e[1], e[0]]), torch.cat([zero, e[2], e[1]]),
    ])[None]
    expected = emb.LayerNorm(emb.embedding_transformation(by_hand) + emb.position_embeddings.weight[:3]
                             + emb.token_type_embeddings.weight[0])
    assert torch.allclose(emb(ids, torch.zeros_like(ids)), expected, atol=1e-6)


@pytest.mark.parametrize("name", ["demo_teacher", "demo_student"])
def test_attention_paths_agree_and_distributions_are_dropout_free(name):
    torch.manual_seed(0)
    model = MobileBert(PRESETS[name].config.replace(attention_probs_dropout_prob=0.5))
    ids = torch.randint(1000, 2000, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    model.eval()
    fast = model(ids, mask).last_hidden_state
    explicit = model(ids, mask, output_attentions=True)
    assert torch.allclose(fast, explicit.last_hidden_state, atol=1e-5)
    with explicit_attention(model):  # the ExecuTorch export's form: written out, as 3-D batched products
        assert all(m.explicit for m in model.modules() if isinstance(m, SelfAttention))
        written = model(ids, mask, output_attentions=True)
        assert torch.allclose(fast, model(ids, mask).last_hidden_state, atol=1e-5)
    assert len(written.attentions) == len(explicit.attentions) == model.config.num_hidden_layers
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(written.attentions, explicit.attentions))
    assert not any(m.explicit for m in model.modules() if isinstance(m, SelfAttention))  # put back after the block
    model.train()
    probs = model(ids, mask, output_attentions=True).attentions
    for p in probs:
        assert torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5)  # no dropout applied
        assert p[1, :, :, 9:].max() < 1e-3  # padding gets (almost) no attention


def test_truncated_depth_gives_the_same_lower_layers():
    torch.manual_seed(0)
    model = MobileBertForPreTraining(PRESETS["demo_teacher"].config).eval()
    ids = torch.randint(1000, 2000, (2, 10))
    full = model(ids, output_feature_maps=True, output_attentions=True)
    part = model(ids, num_layers=2, output_feature_maps=True, output_attentions=True)
    assert part.mlm_logits is None and len(part.encoder.feature_maps) == 2
    for a, b in zip(part.encoder.feature_maps, full.encoder.feature_maps[:2]):
        assert torch.equal(a, b)


def test_models_command_prints_table_and_json():
    out = subprocess.run([sys.executable, "-m", "mobilekd", "models", "--json"], capture_output=True,
                         text=True, check=True).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(PRESETS)
    for key in ("params", "flops_seq128", "paper_params", "paper_flops_seq128"):
        assert key in rows["mobilebert"]
    mb = rows["mobilebert"]
    assert abs(mb["flops_seq128"] / mb["paper_flops_seq128"] - 1) <= 0.06
    table = subprocess.run([sys.executable, "-m", "mobilekd", "models"], capture_output=True, text=True,
                           check=True).stdout
    assert "ib_bert_large" in table and "293.0M" in table


def test_init_writes_a_loadable_random_model(tmp_path):
    from mobilekd.models.hf import load_pretrained

    subprocess.run([sys.executable, "-m", "mobilekd", "init", "demo_student", str(tmp_path)], check=True,
                   capture_output=True)
    model = load_pretrained(tmp_path)
    assert model.config.intra_bottleneck_size == 32 and (tmp_path / "vocab.txt").is_file()
    bad = subprocess.run([sys.executable, "-m", "mobilekd", "init", "nope", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown preset 'nope'")


def test_the_official_masked_score_form(tmp_path, tokenizer):
    """TF1 (modeling.py attention_layer, 2021): scores * mask + (1 - mask) * -6. Without padding it is the additive
    form; with padding a padded key keeps exp(-6)-sized attention; transformers cannot load such a model."""
    from mobilekd.models.hf import load_pretrained, save_pretrained

    config = PRESETS["demo_student"].config
    torch.manual_seed(0)
    additive = MobileBertForPreTraining(config).eval()
    official = MobileBertForPreTraining(config.replace(masked_score=-6.0)).eval()
    official.load_state_dict(additive.state_dict())
    ids = torch.randint(1000, 5000, (2, 10))
    with torch.no_grad():
        assert torch.allclose(additive.mobilebert(ids).last_hidden_state, official.mobilebert(ids).last_hidden_state,
                              atol=1e-5)
        mask = torch.ones_like(ids)
        mask[:, 7:] = 0
        a = additive.mobilebert(ids, mask, output_attentions=True).attentions[0]
        o = official.mobilebert(ids, mask, output_attentions=True).attentions[0]
    assert a[..., 7:].max() == 0.0 < o[..., 7:].min()  # -10000 underflows to 0; -6 keeps a share
    assert torch.allclose(o.sum(-1), torch.ones(1))
    save_pretrained(official, tmp_path, tokenizer)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "ib_bert"
    assert load_pretrained(tmp_path).config.masked_score == -6.0

    # the official QAT also clips the masked scores to [-6, 60]: large scores stop at 60, probabilities renormalise
    clipped = MobileBertForPreTraining(config.replace(masked_score=-6.0, score_clip=[-6.0, 2.0])).eval()
    clipped.load_state_dict(additive.state_dict())
    with torch.no_grad():
        for model in (official, clipped):  # queries and keys scaled up so that some scores pass 2
            model.mobilebert.encoder.layer[0].attention.self.query.weight.mul_(1e4)
            model.mobilebert.encoder.layer[0].attention.self.key.weight.mul_(1e4)
        free = official.mobilebert(ids, mask, output_attentions=True).attention_scores[0]
        bounded = clipped.mobilebert(ids, mask, output_attentions=True).attention_scores[0]
    assert free.max() > 2.0 and bounded.max() == 2.0 and bounded.min() >= -6.0
    assert torch.equal(bounded, free.clamp(-6.0, 2.0))  # the first layer's scores: same input, only the clip differs
    save_pretrained(clipped, tmp_path / "clipped", tokenizer)
    assert load_pretrained(tmp_path / "clipped").config.score_clip == [-6.0, 2.0]
    with pytest.raises(UserError, match="score_clip"):
        config.replace(score_clip=[60.0, -6.0]).validate()
