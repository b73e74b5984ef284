"""MiniLM's deep self-attention distillation (Wang et al. 2020, Section 3.1), added through the strategy registry
(`mobilekd.transfer.strategies.STRATEGIES`): its value relation, what its loss trains, and the recipe end to end."""

import json

import pytest
import torch

from helpers import BERT, one_line_error, run_module
from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.errors import UserError
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.hf import save_pretrained
from mobilekd.models.presets import PRESETS
from mobilekd.transfer.objectives import value_relation
from mobilekd.transfer.strategies import STRATEGIES, Distiller, PlanSettings, TransferWeights, check_pair, plan

# a student narrower than the teacher (96), with fewer heads (12 -> 4, grouped) and its own depth (4 -> 2)
STUDENT = BERT.replace(hidden_size=48, embedding_size=48, intra_bottleneck_size=48, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=96)


def test_the_value_relation_is_a_distribution_over_the_real_tokens():
    torch.manual_seed(0)
    v = torch.randn(2, 3, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    vr = value_relation(v, mask)
    assert vr.shape == (2, 3, 5, 5) and torch.allclose(vr.sum(-1), torch.ones(2, 3, 5))
    assert vr[1, :, :, 3:].abs().max() == 0  # padded keys get nothing
    by_hand = torch.softmax(v[0, 1] @ v[0, 1].T / 8 ** 0.5, -1)  # softmax(V V^T / sqrt(d_k)), one head
    assert torch.allclose(vr[0, 1], by_hand, atol=1e-6)


def test_minilm_matches_the_last_layers_and_trains_what_its_loss_reaches(small_corpus, tokenizer, tmp_path):
    torch.manual_seed(0)
    teacher, student = MobileBertForPreTraining(BERT), MobileBertForPreTraining(STUDENT)
    assert check_pair(BERT, STUDENT, None, "minilm") == []  # widths, heads and depths all differ: no map needed
    batch = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache").train.batch(range(4))
    d = Distiller(teacher, [], PlanSettings(layer_steps=2, pd_steps=2), STUDENT, "minilm")
    assert len(d.projections()) == 0  # every relation is T x T, at any width
    (stage,) = plan("minilm", d, STUDENT.num_hidden_layers)
    assert stage.steps == 2 * 2 + 2
    terms = stage.loss(student, batch)
    assert set(terms) == {"at_L1", "at_values_L1", "loss"} and terms["loss"] > 0
    assert torch.isclose(terms["loss"], terms["at_L1"] + terms["at_values_L1"])  # L = L_AT + L_VR
    assert any(".layer.1.attention.self.value." in n for n in trained_and_reached(stage, student, batch))

    # a student that is its teacher's copy has nothing to learn
    copy = MobileBertForPreTraining(BERT)
    copy.load_state_dict(teacher.state_dict())
    same = plan("minilm", Distiller(teacher, [], PlanSettings(), BERT, "minilm"), 4)[0].loss(copy.eval(), batch)
    assert same["loss"].abs() < 1e-5


def trained_and_reached(stage, student, batch) -> set[str]:
    """The parameters the stage trains, checked to be exactly those its loss reaches (a distributed run stops on a
    trained parameter without a gradient; one that gets a gradient and is not trained is a wasted backward)."""
    student.zero_grad()
    stage.loss(student, batch)["loss"].backward()
    reached = {n for n, p in student.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    trained = {n for n, _ in student.named_parameters() if stage.trainable(n)}
    assert reached == trained, (sorted(reached - trained), sorted(trained - reached))
    last = student.config.num_hidden_layers - 1
    assert not any(f".layer.{last}.intermediate." in n or f".layer.{last}.output." in n for n in trained)
    return trained


@pytest.mark.parametrize("block", ["shared-qk-bottleneck", "tiny"])
def test_minilm_trains_what_reaches_a_mobilebert_blocks_attention(small_corpus, tokenizer, tmp_path, block):
    """MobileBERT's block (Q and K from a shared bottleneck, V from the block's input) and MobileBERT_TINY's (Q, K
    and V all from the input bottleneck): the last block's bottleneck that feeds its attention trains, the rest of
    that block does not."""
    torch.manual_seed(0)
    config = PRESETS["demo_student"].config
    if block == "tiny":
        config = config.replace(use_bottleneck_attention=True, key_query_shared_bottleneck=False)
    teacher, student = MobileBertForPreTraining(BERT), MobileBertForPreTraining(config)
    batch = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache").train.batch(range(4))
    (stage,) = plan("minilm", Distiller(teacher, [], PlanSettings(), config, "minilm"), config.num_hidden_layers)
    trained = trained_and_reached(stage, student, batch)
    feeds = ".bottleneck.input." if block == "tiny" else ".bottleneck.attention."
    assert any(f".layer.3{feeds}" in n for n in trained) and not any(".layer.3.output.bottleneck." in n
                                                                      for n in trained)


def test_minilm_through_the_recipe_and_its_refusals(small_corpus, tokenizer, tmp_path):
    torch.manual_seed(0)
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    save_pretrained(MobileBertForPreTraining(BERT), teacher, tokenizer)
    save_pretrained(MobileBertForPreTraining(STUDENT), student, tokenizer)
    steps = ["--teacher", teacher, "--student", student, "--strategy", "minilm", "--layer-steps", 2, "--pd-steps", 2,
             "--batch-size", 4, "--max-len", 32, "--eval-examples", 8, "--corpus", small_corpus,
             "--cache-dir", tmp_path / "c"]
    run_module("mobilekd.recipes.distill", *steps, "--out", tmp_path / "minilm")
    summary = json.loads((tmp_path / "minilm" / "summary.json").read_text())
    assert summary["strategy"] == "minilm" and summary["total_steps"] == 6
    assert {"at_L1", "at_values_L1"} <= set(summary["stages"][0]["end"])
    assert (tmp_path / "minilm" / "model.safetensors").is_file()
    for extra, problem in ((["--layer-map", "1,3"], "--layer-map does not apply to minilm"),
                           (["--alpha", "0.3"], "--alpha is not used by --strategy minilm")):
        proc = run_module("mobilekd.recipes.distill", *steps, *extra, "--out", tmp_path / "no", check=False)
        assert problem in one_line_error(proc) and not (tmp_path / "no" / "model.safetensors").exists()
    with pytest.raises(UserError, match="attention heads cannot be grouped"):
        check_pair(BERT, STUDENT.replace(num_attention_heads=5, hidden_size=50, intra_bottleneck_size=50,
                                         embedding_size=50), None, "minilm")
    assert STRATEGIES["minilm"].no_layer_map and TransferWeights().for_strategy("minilm").alpha is None
    tiny = TransferWeights().for_strategy("tinybert")  # PD's defaults, as TinyBERT's runs have always recorded
    assert (tiny.alpha, tiny.temperature) == (0.5, 1.0)
    with pytest.raises(UserError, match="unknown strategy .nope."):
        check_pair(BERT, STUDENT, None, "nope")
