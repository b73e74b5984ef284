"""Teacher pre-training: exact resume after SIGKILL, multi-process equivalence (DDP), sharded set-ups and faults
refused cleanly."""

import json
import subprocess
import sys

import pytest
import torch
from accelerate.utils import DistributedType
from transformers import get_polynomial_decay_schedule_with_warmup

from conftest import ROOT
from helpers import env, kill_after_checkpoint, max_weight_difference, one_line_error, run_module
from mobilekd.errors import UserError
from mobilekd.train.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from mobilekd.train.lamb import Lamb
from mobilekd.train.loop import refuse_sharded

# runs compared weight for weight train in one precision (--mixed-precision auto may choose either per run)
FAST = ["--max-len", 48, "--batch-size", 8, "--eval-examples", 32, "--threads", 1, "--mixed-precision", "no"]


def teacher_args(corpus, out, cache, *extra):
    return ["--corpus", corpus, "--out", out, "--cache-dir", cache, *FAST, *extra]


def test_sigkill_and_resume_gives_the_same_weights(small_corpus, tmp_path):
    cache = tmp_path / "cache"
    steps = ["--steps", 60, "--save-every", 5]
    full = run_module("mobilekd.recipes.train_teacher", *teacher_args(small_corpus, tmp_path / "full", cache, *steps))
    summary = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert summary["train"]["end"]["mlm"] < summary["train"]["start"]["mlm"]  # it learns
    assert {"steps", "wall_seconds", "tokens_per_second", "heldout"} <= set(summary)
    assert 0 < summary["train"]["first_step_seconds"] < summary["train"]["seconds"]  # steady step time = the rest
    assert {"mlm_loss", "mlm_accuracy", "unigram_accuracy", "nsp_accuracy", "nsp_majority_accuracy"} <= set(
        summary["heldout"])
    assert "held-out MLM accuracy" in full.stdout

    out = tmp_path / "killed"
    killed_at = kill_after_checkpoint("mobilekd.recipes.train_teacher", teacher_args(small_corpus, out, cache, *steps),
                                      out, 10)
    assert 10 <= killed_at < 60 and not (out / "model.safetensors").exists()
    before = json.loads((find_checkpoint(out) / "trainer.json").read_text())["stage_seconds"]
    run_module("mobilekd.recipes.train_teacher", *teacher_args(small_corpus, out, cache, *steps, "--resume"))
    assert max_weight_difference(tmp_path / "full", out) <= 1e-6
    resumed = json.loads((out / "summary.json").read_text())["train"]
    # the stage's seconds count the killed process's share too (a benchmark row's cost survives a resume)
    assert resumed["resumed_at_step"] == killed_at and resumed["seconds"] > before > 0


def test_two_processes_match_one(small_corpus, tmp_path):
    cache = tmp_path / "cache"
    # Adam turns float-order noise in near-zero gradients into lr-sized steps; a small lr keeps the comparison
    # about data and gradient averaging, not about that noise.
    common = teacher_args(small_corpus, None, cache, "--steps", 4, "--dropout", 0.0, "--lr", 1e-4)
    one = [str(a) if a is not None else str(tmp_path / "one") for a in common]
    run_module("mobilekd.recipes.train_teacher", *one)
    two = [str(a) if a is not None else str(tmp_path / "two") for a in common]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29517", "-m", "mobilekd.recipes.train_teacher", *two],
                          capture_output=True, text=True, env=env(), cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert max_weight_difference(tmp_path / "one", tmp_path / "two") <= 1e-5


def test_sharded_setups_are_refused():
    """FSDP, DeepSpeed and Megatron-LM shard the model, and the loop's checkpoint is the main process's whole model:
    one line, not a wrong checkpoint. Called with the type itself, since no CPU run can reach it: Accelerate 1.15
    turns FSDP on only with an accelerator (on CPU, ACCELERATE_USE_FSDP under torchrun gives plain DDP) and
    DeepSpeed is not installed; one process and DDP (the test above) pass."""
    for sharded in (DistributedType.FSDP, DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM):
        with pytest.raises(UserError, match=f"set up for {sharded.value}; mobilekd trains on one process or with DDP"):
            refuse_sharded(sharded)
    for supported in (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
        refuse_sharded(supported)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(small_corpus, tmp_path):
    out = tmp_path / "nan"
    proc = run_module("mobilekd.recipes.train_teacher", *teacher_args(small_corpus, out, tmp_path / "c", "--steps", 20,
                                                             "--save-every", 1, "--lr", 1e30, "--warmup", 0),
                      check=False)
    line = one_line_error(proc)
    assert "loss became" in line and "last good checkpoint is kept" in line
    state = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert 1 <= state["global_step"] < 20 and not (out / "model.safetensors").exists()


def test_a_checkpoint_from_before_a_setting_existed_resumes(small_corpus, tmp_path):
    """A setting added to mobilekd after a checkpoint was made (absent there, None now) does not block --resume;
    a nested setting that differs is named by its dotted key."""
    out = tmp_path / "run"
    args = teacher_args(small_corpus, out, tmp_path / "c", "--steps", 3)
    run_module("mobilekd.recipes.train_teacher", *args)
    state = out / "checkpoint" / "trainer.json"
    trainer = json.loads(state.read_text())
    assert trainer["run"]["model"].pop("masked_score") is None
    state.write_text(json.dumps(trainer))
    run_module("mobilekd.recipes.train_teacher", *args, "--resume")
    trainer["run"]["model"]["hidden_act"] = "tanh"
    state.write_text(json.dumps(trainer))
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *args, "--resume", check=False))
    assert "trainer.json: checkpoint was made with model.hidden_act='tanh', this run has model.hidden_act=" in line


def test_bad_resume_and_bad_input_are_one_line(small_corpus, tmp_path):
    out = tmp_path / "run"
    run_module("mobilekd.recipes.train_teacher", *teacher_args(small_corpus, out, tmp_path / "c", "--steps", 3))
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3, "--lr", 5e-4, "--resume"), check=False))
    assert "trainer.json: checkpoint was made with lr=" in line
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3), check=False))
    assert "pass --resume" in line
    state = out / "checkpoint" / "training_state.json"
    state.write_text(state.read_text()[:-10])
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3, "--resume"), check=False))
    assert "training_state.json: unreadable training state" in line and "to start over, remove" in line
    state.unlink()  # as an older mobilekd left it: its state pickled in training_state.pt, which is never read
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3, "--resume"), check=False))
    assert "training_state.json: missing" in line
    state.write_text("{}")  # back, so that the tensors file is read next
    (out / "checkpoint" / "training_state.safetensors").write_bytes(b"not tensors")
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3, "--resume"), check=False))
    assert "training_state.safetensors: not a readable safetensors file" in line and "to start over" in line
    (out / "checkpoint" / "trainer.json").write_text("{garbage")
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        small_corpus, out, tmp_path / "c", "--steps", 3, "--resume"), check=False))
    assert "trainer.json: not a mobilekd checkpoint" in line
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", *teacher_args(
        tmp_path / "missing.txt", tmp_path / "x", tmp_path / "c", "--steps", 3), check=False))
    assert "missing.txt: no such corpus file" in line


@pytest.mark.parametrize("flag", [["--preset", "ib_bert_large"]])
def test_paper_size_smoke_run(small_corpus, tmp_path, flag):
    """Two steps of the full IB-BERT_LARGE at batch 1: the paper preset works end to end here."""
    out = tmp_path / "large"
    run_module("mobilekd.recipes.train_teacher", "--corpus", small_corpus, "--out", out, "--cache-dir", tmp_path / "c",
               *flag, "--steps", 2, "--batch-size", 1, "--max-len", 32, "--eval-examples", 2, "--threads", 2)
    config = json.loads((out / "config.json").read_text())
    assert config["intra_bottleneck_size"] == 1024 and config["model_type"] == "ib_bert"
    # the run's last checkpoint is a stage boundary: weights and RNG, no Adam state (2.3 GB at this size)
    assert (out / "checkpoint" / "training_state.safetensors").stat().st_size < 1e6


def test_rows_of_words_the_corpus_never_shows_stay_as_initialised(small_corpus, tokenizer, tmp_path):
    """With the decoder tied to the table, Adam would move every unseen row each step; frozen, they do not move,
    while the rows of the corpus' words train (mobilekd/train/vocab.py)."""
    import torch

    from mobilekd.data.pretraining import load_pretraining_data
    from mobilekd.models.heads import MobileBertForPreTraining, pretraining_loss
    from mobilekd.models.presets import PRESETS
    from mobilekd.train.vocab import freeze_unseen_rows, seen_tokens

    data = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "cache")
    seen = seen_tokens(data.train)
    unseen = torch.ones(len(tokenizer), dtype=torch.bool)
    unseen[torch.as_tensor(seen)] = False
    assert 0 < len(seen) < len(tokenizer) and unseen.sum() > 15000  # 40 Brown documents show a third of 30522 tokens
    for frozen in (True, False):
        torch.manual_seed(0)
        model = MobileBertForPreTraining(PRESETS["demo_teacher"].config)
        if frozen:
            freeze_unseen_rows(model, seen)
        table = model.mobilebert.embeddings.word_embeddings.weight
        before = table.detach().clone()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)  # decay alone shrinks rows
        for step in range(3):
            pretraining_loss(model, data.train.batch(range(8 * step, 8 * step + 8)))["loss"].backward()
            optimizer.step()
            optimizer.zero_grad()
        moved = (table.detach() - before).abs().amax(1)
        assert (moved[unseen].max() == 0) == frozen  # unfrozen, Adam moves even the rows no batch showed
        assert moved[torch.as_tensor(seen)].max() > 0


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, Lamb])
def test_training_state_is_stored_without_pickle_and_resumes_exactly(tmp_path, optimizer):
    """Optimizer (state keyed by parameter index, Adam's betas a tuple), schedule and RNG round-trip through
    safetensors and JSON: the next step after loading is the step the uninterrupted run takes."""
    def setup():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        opt = optimizer([{"params": model[0].parameters(), "weight_decay": 0.01},
                         {"params": model[2].parameters(), "weight_decay": 0.0}], lr=1e-2)
        return model, opt, get_polynomial_decay_schedule_with_warmup(opt, 2, 10, lr_end=1e-4)

    def step(model, opt, sched):
        model(torch.randn(4, 8) + torch.rand(1)).square().mean().backward()  # draws from the RNG, as dropout does
        opt.step(), sched.step(), opt.zero_grad()

    model, opt, sched = setup()
    for _ in range(3):
        step(model, opt, sched)
    path = save_checkpoint(tmp_path, model, opt, sched, {"run": {}})
    assert sorted(p.name for p in path.iterdir()) == ["model.safetensors", "trainer.json",
                                                      "training_state.json", "training_state.safetensors"]
    step(model, opt, sched)
    resumed, opt2, sched2 = setup()
    load_checkpoint(path, resumed, opt2, sched2)
    assert opt2.param_groups[0]["betas"] == opt.param_groups[0]["betas"] and sched2.last_epoch == 3
    step(resumed, opt2, sched2)
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
