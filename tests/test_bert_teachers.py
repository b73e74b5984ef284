"""Pre-trained BERT checkpoints as teachers: both transformers key layouts load as members of our family and give
transformers' outputs (the packaged all-MiniLM-L6-v2 among them), adaptation fits the heads a `BertModel` lacks,
and teachers of another width and head count pair with a MobileBERT student through learned projections and
grouped heads (a bert-large-shaped pair, shrunk with the same ratios)."""

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from helpers import one_line_error, run_module
from mobilekd.data.tokenizer import save_tokenizer
from mobilekd.errors import UserError
from mobilekd.models.hf import load_pretrained
from mobilekd.models.pretrained import model_dir

IDS = torch.tensor([[101, 1996, 2143, 2003, 1037, 11951, 1998, 2411, 12473, 4990, 102, 0, 0]])
MASK = (IDS != 0).long()


def _bert_config(**kw):
    return transformers.BertConfig(**{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                      "intermediate_size": 128, **kw})


def test_both_bert_key_layouts_load_with_transformers_outputs(tmp_path):
    torch.manual_seed(0)
    pre = transformers.BertForPreTraining(_bert_config()).eval()  # "bert." prefix, with MLM + NSP heads
    pre.save_pretrained(tmp_path / "pre")
    base = transformers.BertModel(_bert_config()).eval()  # no prefix, no heads
    base.save_pretrained(tmp_path / "base")
    assert any(k.startswith("bert.") for k in load_file(str(tmp_path / "pre" / "model.safetensors")))
    assert all(k.split(".")[0] in ("embeddings", "encoder", "pooler")
               for k in load_file(str(tmp_path / "base" / "model.safetensors")))

    ours = load_pretrained(tmp_path / "pre", require_head=True).eval()
    positions = torch.arange(IDS.shape[1])[None]
    with torch.no_grad():
        out = ours(IDS, MASK, masked_positions=positions)
        theirs = pre(input_ids=IDS, attention_mask=MASK)
    assert (out.mlm_logits - theirs.prediction_logits[0]).abs().max() <= 1e-5
    assert (out.nsp_logits - theirs.seq_relationship_logits).abs().max() <= 1e-5

    ours = load_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        enc = ours.mobilebert(IDS, MASK)
        theirs = base(input_ids=IDS, attention_mask=MASK)
    valid = MASK[0].bool()
    assert (enc.last_hidden_state[0, valid] - theirs.last_hidden_state[0, valid]).abs().max() <= 1e-5
    assert (enc.pooled - theirs.pooler_output).abs().max() <= 1e-5
    with pytest.raises(UserError, match="has no trained pretraining head .* --init-from"):
        load_pretrained(tmp_path / "base", require_head=True)

    transformers.BertModel(_bert_config(), add_pooling_layer=False).save_pretrained(tmp_path / "nopool")
    with pytest.raises(UserError, match="model.safetensors: lacks the pooler for this config"):
        load_pretrained(tmp_path / "nopool")


def test_packaged_minilm_gives_transformers_hidden_states():
    """With the config's LayerNorm epsilon (1e-12) the real checkpoint matches transformers to 1e-5 (1e-5 as
    epsilon left it 5.1e-4 apart)."""
    path = model_dir("all-minilm-l6-v2")
    ours = load_pretrained(path).eval()
    assert ours.config.layer_norm_eps == 1e-12 and ours.config.hidden_size == 384
    hf = transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        a = ours.mobilebert(IDS, MASK).last_hidden_state[0, MASK[0].bool()]
        b = hf(input_ids=IDS, attention_mask=MASK).last_hidden_state[0, MASK[0].bool()]
    assert (a - b).abs().max() <= 1e-5


def test_adaptation_fits_the_missing_heads(tmp_path, small_corpus, tokenizer):
    torch.manual_seed(0)
    bert = tmp_path / "bert"
    transformers.BertModel(_bert_config()).save_pretrained(bert)
    save_tokenizer(tokenizer, bert)
    proc = run_module("mobilekd.recipes.distill", "--teacher", bert, "--out", tmp_path / "no", check=False)
    assert "has no trained pretraining head" in one_line_error(proc)  # not distilled from a random MLM head

    out = tmp_path / "adapted"
    run_module("mobilekd.recipes.train_teacher", "--init-from", bert, "--corpus", small_corpus, "--out", out,
               "--cache-dir", tmp_path / "c", "--steps", 4, "--batch-size", 8, "--max-len", 32, "--eval-examples", 16,
               "--threads", 1)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["init_from"] == str(bert) and summary["train"]["stage"] == "adapt"
    before, after = load_pretrained(bert), load_pretrained(out, require_head=True)
    assert not torch.equal(before.mobilebert.encoder.layer[0].output.dense.weight,
                           after.mobilebert.encoder.layer[0].output.dense.weight)  # the encoder trained too
    table = "mobilebert.embeddings.word_embeddings.weight"  # but not the word table (a small corpus would skew it)
    assert torch.equal(before.state_dict()[table], after.state_dict()[table])
    # the adapted BERT is saved as what it is, a transformers BERT with its pre-training heads
    assert json.loads((out / "config.json").read_text())["model_type"] == "bert"
    assert type(transformers.AutoModelForPreTraining.from_pretrained(out)).__name__ == "BertForPreTraining"

    proc = run_module("mobilekd.recipes.train_teacher", "--freeze-encoder", "--out", tmp_path / "x", check=False)
    assert "--freeze-encoder, --train-word-embeddings and --head-lr-scale need --init-from" in one_line_error(proc)
    proc = run_module("mobilekd.recipes.train_teacher", "--init-from", tmp_path / "none", "--out", tmp_path / "y",
                      check=False)
    assert "no such model directory" in one_line_error(proc)


def test_bert_large_shaped_teacher_pairs_with_mobilebert_through_projections(tmp_path, small_corpus, tokenizer):
    """bert-large (1024 wide, 16 heads) -> mobilebert (512 wide, 4 heads), shrunk: 64 wide and 16 heads -> 32 wide
    and 4 heads. Feature maps meet through one learned projection per student layer, trained and checkpointed
    with the student, never saved with it; attention through groups of 4 teacher heads."""
    torch.manual_seed(0)
    teacher = tmp_path / "large"
    transformers.BertForPreTraining(_bert_config(num_attention_heads=16, num_hidden_layers=4)).save_pretrained(teacher)
    save_tokenizer(tokenizer, teacher)
    out = tmp_path / "student"
    run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", "demo_student", "--corpus", small_corpus,
               "--out", out, "--cache-dir", tmp_path / "c", "--max-len", 32, "--batch-size", 8, "--layer-steps", 3,
               "--pd-steps", 2, "--eval-examples", 8, "--threads", 1)
    # demo_student is 128 wide: widths differ (64 vs 128), as do head counts (16 vs 4)
    summary = json.loads((out / "summary.json").read_text())
    for l, stage in enumerate(summary["stages"][:4]):
        assert [m["projection"] for m in stage["matches"] if m["feature"] == "hidden"] == [True]
        assert stage["end"][f"fmt_L{l}"] < stage["start"][f"fmt_L{l}"]
    checkpoint = load_file(str(out / "checkpoint" / "model.safetensors"))
    assert checkpoint["projections.L2.weight"].shape == (64, 128)
    assert not any(k.startswith("projections.") for k in load_file(str(out / "model.safetensors")))
    assert load_pretrained(out).config.hidden_size == 128

    proc = run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", "mobilebert_h384",
                      "--out", tmp_path / "x", "--cache-dir", tmp_path / "c", "--layer-map", "uniform", check=False)
    assert "layer map uniform: a 6-layer student cannot map onto a 4-layer teacher" in one_line_error(proc)


def test_finetune_takes_the_packaged_checkpoint_by_name(tmp_path):
    """`finetune --model all-minilm-l6-v2`, as init, train-teacher and ship take the name: its own folder is read
    (its fine-tuned copy keeps the checkpoint's encoder shape) and the run records where it was."""
    run_module("mobilekd", "finetune", "--model", "all-minilm-l6-v2", "--task", "sst2", "--max-train-examples", 32,
               "--max-steps", 1, "--max-len", 16, "--eval-every", 0, "--skip-dev", "--threads", 1,
               "--out", tmp_path / "ft")
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["hidden_size"] == 384 and config["num_hidden_layers"] == 6
    assert json.loads((tmp_path / "ft" / "results.json").read_text())["model"] == str(model_dir("all-minilm-l6-v2"))


def test_the_shipped_corpora_are_read_from_any_working_directory(tmp_path, tokenizer):
    """Adaptation without --corpus, run from another folder, reads the shipped Brown and Austen corpora (the
    defaults are the repository's files, not paths under the working directory)."""
    import subprocess
    import sys

    from helpers import env

    torch.manual_seed(0)
    bert = tmp_path / "bert"
    transformers.BertModel(_bert_config()).save_pretrained(bert)
    save_tokenizer(tokenizer, bert)
    proc = subprocess.run([sys.executable, "-m", "mobilekd", "train-teacher", "--init-from", str(bert), "--out",
                           str(tmp_path / "adapted"), "--cache-dir", str(tmp_path / "c"), "--steps", "1",
                           "--batch-size", "4", "--max-len", "32", "--eval-examples", "8", "--threads", "1"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "adapted" / "summary.json").read_text())["train"]["stage"] == "adapt"
