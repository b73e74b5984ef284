"""Knowledge transfer: each loss against a hand computation, strategy plans, PKT freezing bit for bit, and
distillation measured against training from scratch."""

import json

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from helpers import kill_after_checkpoint, max_weight_difference, one_line_error, run_module
from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.errors import UserError
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.presets import PRESETS
from mobilekd.train.loop import TrainConfig, run_plan
from mobilekd.transfer.losses import (attention_transfer, cosine_hidden, feature_map_transfer, logit_distillation,
                                      mean_transfer, variance_transfer)
from mobilekd.transfer.strategies import (Distiller, PlanSettings, TransferWeights, check_pair, copy_shared_weights,
                                          plan)

T = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]]])
S = torch.tensor([[[2.0, 2.0, 2.0], [1.0, -1.0, 3.0]]])


def test_feature_map_transfer_by_hand():
    def ln(x):
        x = x.numpy()
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)

    expected = ((ln(T) - ln(S)) ** 2).mean()
    assert feature_map_transfer(T, S).item() == pytest.approx(expected, rel=1e-5)
    assert feature_map_transfer(T, T).item() == 0.0


def test_attention_transfer_by_hand():
    t = torch.tensor([[[[0.5, 0.5], [0.9, 0.1]]]])
    s = torch.tensor([[[[0.25, 0.75], [0.5, 0.5]]]])
    kl_rows = [0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75), 0.9 * np.log(0.9 / 0.5) + 0.1 * np.log(0.1 / 0.5)]
    assert attention_transfer(t, s).item() == pytest.approx(np.mean(kl_rows), rel=1e-5)
    assert attention_transfer(t, t).item() == pytest.approx(0.0, abs=1e-7)


def test_mean_and_variance_transfer_by_hand():
    # token means: T (2, 1), S (2, 1) -> 0; variances: T (2/3, 2), S (0, 8/3)
    assert mean_transfer(T, S).item() == pytest.approx(0.0, abs=1e-7)
    assert variance_transfer(T, S).item() == pytest.approx((2 / 3 + 2 / 3) / 2, rel=1e-5)
    assert mean_transfer(T, T + 1).item() == pytest.approx(1.0)
    assert variance_transfer(T, T).item() == 0.0


def test_logit_distillation_by_hand():
    t, s = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[0.0, 1.0, 0.0]])
    for temperature in (1.0, 2.0):
        p = torch.softmax(t / temperature, -1).numpy()
        q = torch.softmax(s / temperature, -1).numpy()
        expected = (p * np.log(p / q)).sum() * temperature**2
        assert logit_distillation(t, s, temperature).item() == pytest.approx(expected, rel=1e-5)
    assert logit_distillation(t, t).item() == pytest.approx(0.0, abs=1e-7)


def test_distilbert_cosine_loss_by_hand():
    t, s = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]]), torch.tensor([[[0.0, 1.0], [2.0, 2.0]]])
    assert cosine_hidden(t, s).item() == pytest.approx(((1 - 0.0) + (1 - 1.0)) / 2)
    assert cosine_hidden(t, t).item() == pytest.approx(0.0, abs=1e-7)


def test_pairs_that_cannot_be_distilled_are_refused():
    teacher, student = PRESETS["demo_teacher"].config, PRESETS["demo_student"].config
    assert check_pair(teacher, student, None) == [0, 1, 2, 3]
    # another width pairs through projections; another depth needs a layer map
    with pytest.raises(UserError, match="depths differ"):
        check_pair(teacher, PRESETS["mobilebert"].config, None)
    with pytest.raises(UserError, match="attention heads cannot be grouped"):
        check_pair(teacher, student.replace(num_attention_heads=3, intra_bottleneck_size=33), None)
    with pytest.raises(UserError, match="no --layer-map"):
        check_pair(teacher.replace(num_hidden_layers=8), student, None)
    assert check_pair(teacher.replace(num_hidden_layers=8), student, [1, 3, 5, 7]) == [1, 3, 5, 7]


def test_plans_have_the_papers_shapes():
    distiller = Distiller(MobileBertForPreTraining(PRESETS["demo_teacher"].config), [0, 1, 2, 3],
                          PlanSettings(layer_steps=5, pd_steps=7), PRESETS["demo_student"].config)
    assert [(s.name, s.steps) for s in plan("akt", distiller, 4)] == [("akt", 27)]
    assert [(s.name, s.steps) for s in plan("jkt", distiller, 4)] == [("jkt", 20), ("pd", 7)]
    assert [(s.name, s.steps) for s in plan("pkt", distiller, 4)] == [
        ("pkt_L0", 5), ("pkt_L1", 5), ("pkt_L2", 5), ("pkt_L3", 5), ("pd", 7)]


def _layer_params(state, layer):
    prefix = f"mobilebert.encoder.layer.{layer}." if layer >= 0 else "mobilebert.embeddings."
    return {k: v for k, v in state.items() if k.startswith(prefix)}


@pytest.mark.parametrize("freeze", ["hard", "soft"])
def test_pkt_freezes_exactly_the_layers_below(small_corpus, tokenizer, tmp_path, freeze):
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    student = MobileBertForPreTraining(PRESETS["demo_student"].config)
    copy_shared_weights(teacher, student)
    data = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache")
    stages = plan("pkt", Distiller(teacher, [0, 1, 2, 3], PlanSettings(layer_steps=2, pd_steps=1, freeze=freeze),
                                   student.config), 4)
    accelerator = Accelerator(cpu=True)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    for l, stage in enumerate(stages[:4]):
        run_plan([stage], student, data.train, TrainConfig(out_dir=tmp_path / f"s{l}", global_batch_size=4, save_every=100), accelerator)
        after = {k: v.clone() for k, v in student.state_dict().items()}
        for layer in range(-1, 4):
            changed = any(not torch.equal(before[k], after[k]) for k in _layer_params(after, layer))
            # hard (the paper): the current layer, and the embeddings in stage 0; soft (official TF1): the current
            # layer and those below, never the embeddings
            trains = (layer == l or (l == 0 and layer == -1)) if freeze == "hard" else 0 <= layer <= l
            assert changed == trains, (freeze, l, layer)
        heads = [k for k in after if k.startswith("cls.")]
        assert all(torch.equal(before[k], after[k]) for k in heads)
        before = after


def test_distillation_beats_scratch_and_every_layer_learns(demo_teacher_dir, small_corpus, tmp_path):
    out = tmp_path / "cmp"
    run_module("mobilekd.recipes.distill", "--teacher", demo_teacher_dir, "--student", "demo_student", "--corpus",
               small_corpus, "--out", out, "--cache-dir", tmp_path / "c", "--max-len", 48, "--batch-size", 8,
               "--layer-steps", 10,
               "--pd-steps", 40, "--eval-examples", 64, "--threads", 1, "--compare", "pkt,scratch",
               "--mixed-precision", "no")  # the counts below are the plan's: a host where bf16 pays would add the
    # precision probe's passes over three of stage 0's batches to them
    rows = {r["strategy"]: r for r in json.loads((out / "compare.json").read_text())}
    assert rows["pkt"]["steps"] == rows["scratch"]["steps"] == 4 * 10 + 40
    assert rows["pkt"]["mlm_loss"] < rows["scratch"]["mlm_loss"]
    summary = json.loads((out / "pkt" / "summary.json").read_text())
    for l, stage in enumerate(summary["stages"][:4]):
        assert stage["stage"] == f"pkt_L{l}"
        assert stage["end"][f"fmt_L{l}"] < stage["start"][f"fmt_L{l}"]
    assert "| pkt_L0 |" in (out / "pkt" / "summary.md").read_text()
    # every stage rereads batches 0..9 (PD 0..39): the teacher starts from kept inputs in stages 1-3 and PD's first
    # 10 steps, the student's frozen prefix in stages 2-3
    assert (summary["layer_inputs"]["hits"], summary["layer_inputs"]["misses"]) == (3 * 10 + 2 * 10 + 10, 10 + 10 + 30)
    # The distilled student is a Hugging Face MobileBERT directory.
    import transformers
    assert transformers.MobileBertForMaskedLM.from_pretrained(out / "pkt").config.intra_bottleneck_size == 32


def test_resume_mid_stage_after_sigkill(demo_teacher_dir, small_corpus, tmp_path):
    def args(out, *extra):
        return ["--teacher", demo_teacher_dir, "--student", "demo_student", "--corpus", small_corpus, "--out", out,
                "--cache-dir", tmp_path / "c",
                "--max-len", 48, "--batch-size", 8, "--layer-steps", 12, "--pd-steps", 30, "--save-every", 4,
                "--eval-examples", 16, "--threads", 1, "--mixed-precision", "no", *extra]

    run_module("mobilekd.recipes.distill", *args(tmp_path / "full"))
    out = tmp_path / "killed"
    kill_after_checkpoint("mobilekd.recipes.distill", args(out), out, 16)
    run_module("mobilekd.recipes.distill", *args(out, "--resume"))
    assert max_weight_difference(tmp_path / "full", out) <= 1e-6


def test_mismatched_teacher_is_one_line(demo_teacher_dir, tmp_path):
    proc = run_module("mobilekd.recipes.distill", "--teacher", demo_teacher_dir, "--student", "mobilebert",
                      "--out", tmp_path / "x", "--cache-dir", tmp_path / "c", check=False)
    assert "cannot be paired: depths differ (teacher 4, student 24) and no --layer-map was given" in \
        one_line_error(proc)
    proc = run_module("mobilekd.recipes.distill", "--teacher", tmp_path / "nothing", "--out", tmp_path / "y",
                      check=False)
    assert "no teacher here" in one_line_error(proc)


def test_student_starts_from_the_teacher_by_name_as_the_official_code():
    """Embeddings and MLM head copy where shapes match; a NoNorm keeps its initial values (TF1 names it apart from
    LayerNorm); the NSP classifier of a tanh-pooler teacher is not copied onto a pooler-less student."""
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.5)
    student = MobileBertForPreTraining(PRESETS["demo_student"].config)
    copied = copy_shared_weights(teacher, student)
    t, s = teacher.state_dict(), student.state_dict()
    for name in ("mobilebert.embeddings.word_embeddings.weight", "mobilebert.embeddings.embedding_transformation.weight",
                 "cls.predictions.transform.dense.weight", "cls.predictions.bias"):
        assert name in copied and torch.equal(s[name], t[name])
    assert torch.equal(s["mobilebert.embeddings.LayerNorm.weight"], torch.ones(128))  # NoNorm as initialised
    assert not any(n.startswith("cls.seq_relationship.") for n in copied)
    assert not any(n.startswith("mobilebert.encoder.") for n in copied)


def test_soft_freeze_follows_the_official_layer_wise_learning_rates():
    """TF1 distill_util.py: current layer 3x, layers below 0.3x, embeddings and heads 0; each phase warms up over
    10% and then decays polynomially (power 0.5) to 0.9 of its peak."""
    from mobilekd.train.loop import _param_groups, make_schedule

    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    settings = PlanSettings(layer_steps=20, pd_steps=1, freeze="soft", lr=1e-3)
    stage = plan("pkt", Distiller(teacher, [0, 1, 2, 3], settings, PRESETS["demo_student"].config), 4)[2]
    assert stage.lr_scale("mobilebert.encoder.layer.2.attention.self.query.weight") == 3.0
    assert stage.lr_scale("mobilebert.encoder.layer.1.attention.self.query.weight") == 0.3
    assert not stage.trainable("mobilebert.embeddings.word_embeddings.weight")
    assert not stage.trainable("cls.predictions.bias") and not stage.trainable("mobilebert.encoder.layer.3.output.dense.weight")
    student = MobileBertForPreTraining(PRESETS["demo_student"].config)
    for name, p in student.named_parameters():
        p.requires_grad_(stage.trainable(name))
    optimizer = torch.optim.AdamW(_param_groups(student, stage), lr=stage.lr)
    scheduler = make_schedule(optimizer, stage)
    factors = [scheduler.lr_lambdas[0](step) for step in range(20)]
    assert factors[0] == 0.0 and factors[2] == pytest.approx(1.0)  # warm-up over the first 2 of 20 steps
    assert factors[-1] == pytest.approx(0.9 + 0.1 * (1 / 18) ** 0.5, rel=1e-6)  # near the peak, not at 0
    assert scheduler.lr_lambdas[0](20) == pytest.approx(0.9)


def test_akt_terms_are_the_layer_wise_and_pd_terms_of_one_pass(small_corpus, tokenizer, tmp_path):
    """AKT reads the layer-wise features and the MLM/NSP logits from one forward pass of each model: the same
    terms as computing them apart (dropout off)."""
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    student = MobileBertForPreTraining(PRESETS["demo_student"].config).eval()
    distiller = Distiller(teacher, [0, 1, 2, 3], PlanSettings(), student.config)
    batch = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache").train.batch(range(4))
    matches = distiller.layer_matches([0, 1, 2, 3])
    together = distiller.akt_terms(student, batch, matches)
    apart = {**distiller.layer_terms(student, batch, matches), **distiller.pd_terms(student, batch)}
    for name in ("fmt_L2", "at_L3", "mlm", "mlm_kd", "nsp"):
        assert together[name].item() == pytest.approx(apart[name].item(), rel=1e-5), name


def test_kept_layer_inputs_give_the_terms_of_passes_from_the_embeddings(small_corpus, tokenizer, tmp_path):
    """Hard PKT stage by stage and then PD on one batch, the student's trained block changed after each stage as
    training would: every term computed from the layer inputs an earlier stage kept equals the one from passes
    that start at the embeddings (dropout off: kept, the frozen blocks run without it), and every stage after the
    first starts from kept inputs."""
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    student = MobileBertForPreTraining(PRESETS["demo_student"].config).eval()
    kept = Distiller(teacher, [0, 1, 2, 3], PlanSettings(), student.config)
    fresh = Distiller(teacher, [0, 1, 2, 3], PlanSettings(keep_layer_inputs=False), student.config)
    assert fresh.inputs is None and kept.inputs is not None
    batch = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache").train.batch(range(4))
    batch["example"] = torch.tensor([[i, 0] for i in range(4)])
    for l in range(4):
        matches = kept.layer_matches([l])
        a = kept.layer_terms(student, batch, matches, frozen_below=l)
        b = fresh.layer_terms(student, batch, matches, frozen_below=l)
        for name in (f"fmt_L{l}", f"at_L{l}", "loss"):
            assert a[name].item() == pytest.approx(b[name].item(), rel=1e-5), (l, name)
        with torch.no_grad():  # what stage l's training does: block l (and in stage 0 the embeddings) move
            trained = [student.mobilebert.encoder.layer[l]] + ([student.mobilebert.embeddings] if l == 0 else [])
            for p in (p for m in trained for p in m.parameters()):
                p.add_(0.05 * torch.randn_like(p))
    # teacher: kept from stage 0 on; student: its frozen prefix kept from stage 1 (stage 0 trains the embeddings)
    assert (kept.inputs.hits, kept.inputs.misses) == (3 + 2, 1 + 1)
    a, b = kept.pd_terms(student, batch), fresh.pd_terms(student, batch)
    assert kept.inputs.hits == 6  # PD's teacher runs no block: the last stage kept its output
    for name in ("mlm", "mlm_kd", "nsp", "loss"):
        assert a[name].item() == pytest.approx(b[name].item(), rel=1e-5), name


def test_distilbert_strategy_trains_at_the_temperature_asked_and_refuses_alpha(small_corpus, tokenizer, tmp_path):
    """`--temperature` under --strategy distilbert is the one its soft targets use (DistilBERT's 2.0 by default);
    `--alpha`, which its triple loss has no use for, is refused in one line before any work."""
    weights = TransferWeights()
    assert (weights.for_strategy("pkt").alpha, weights.for_strategy("pkt").temperature) == (0.5, 1.0)
    assert weights.for_strategy("distilbert").temperature == 2.0
    assert TransferWeights(temperature=4.0).for_strategy("distilbert").temperature == 4.0
    with pytest.raises(UserError, match="--alpha"):
        TransferWeights(alpha=0.3).for_strategy("distilbert")
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
    student = MobileBertForPreTraining(PRESETS["demo_student"].config).eval()
    batch = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache").train.batch(range(4))
    ce = {}
    for t in (None, 2.0, 4.0):
        settings = PlanSettings(weights=TransferWeights(temperature=t))
        distiller = Distiller(teacher, [0, 1, 2, 3], settings, student.config, "distilbert")
        ce[t] = distiller.distilbert_terms(student, batch)["kd_ce"].item()
    assert ce[None] == ce[2.0] != ce[4.0]
    proc = run_module("mobilekd.recipes.distill", "--strategy", "distilbert", "--alpha", "0.3", "--teacher",
                      tmp_path / "none", "--out", tmp_path / "out", check=False)
    assert proc.returncode != 0 and "drop --alpha" in one_line_error(proc) and not (tmp_path / "out").exists()
