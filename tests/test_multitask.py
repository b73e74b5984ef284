"""MT-DNN and its ensemble distillation (issue 19): the task sampler's proportions, the KD loss by hand, the
soft-target cache reused and invalidated, the one-file export against PyTorch per task, the recipe at micro scale."""

import json
from collections import Counter

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from helpers import BERT, one_line_error, run_module
from mobilekd.data.multitask import MultiTaskSplit
from mobilekd.data.tasks import EncodedSplit, default_data, encode_classification, load_task
from mobilekd.errors import UserError
from mobilekd.export.multitask import convert_multitask, multitask_parity
from mobilekd.finetune.ensemble import check_teacher, member_outputs, soft_targets
from mobilekd.finetune.multitask import multitask_loss
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.models.multitask import MultiTaskModel, TaskHead, load_multitask, save_multitask, single_task
from mobilekd.rundir import training_cpu, training_gpu
from mobilekd.train.loop import Batches

HEADS = {"sst2": TaskHead(("negative", "positive"), ("accuracy",)), "stsb": TaskHead(None, ("pearson", "spearman")),
         "rte": TaskHead(("entailment", "not_entailment"), ("accuracy",))}


def _split(n: int, tag: int) -> EncodedSplit:
    ids = np.full((n, 6), tag, dtype=np.int64)
    ids[:, 1] = np.arange(n)  # each example tells its own index
    return EncodedSplit({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids),
                         "labels": np.zeros(n, dtype=np.int64),
                         "soft_targets": np.arange(n, dtype=np.float32)[:, None]})


def test_sampler_draws_each_task_by_its_share_of_mini_batches_and_every_example_once_per_epoch():
    sizes = {"a": 100, "b": 37, "c": 64}
    split = MultiTaskSplit({t: _split(n, i) for i, (t, n) in enumerate(sizes.items())}, batch_size=8, seed=3)
    assert len(split) == 13 + 5 + 8
    assert split.proportions() == pytest.approx({"a": 13 / 26, "b": 5 / 26, "c": 8 / 26})
    batches = Batches(split, 1, Accelerator(cpu=True), 1, seed=3)
    epochs = []
    for epoch in range(2):
        drawn = [next(batches.micro_batches(epoch * len(split) + s)) for s in range(len(split))]
        tasks = [split.names[int(b["task"])] for b in drawn]
        assert Counter(tasks) == {"a": 13, "b": 5, "c": 8}  # MT-DNN: a task's share is its share of batches
        for i, (t, n) in enumerate(sizes.items()):
            seen = np.concatenate([b["input_ids"][:, 1].numpy() for b in drawn if int(b["task"]) == i])
            assert sorted(seen) == list(range(n))  # each example exactly once per epoch
            assert all(int(b["input_ids"][0, 0]) == i for b in drawn if int(b["task"]) == i)  # one task per batch
        assert all(torch.equal(b["soft_targets"][:, 0].long(), b["input_ids"][:, 1]) for b in drawn)  # aligned
        epochs.append(tasks)
    assert epochs[0] != epochs[1]  # reshuffled each epoch, and a pure function of (seed, step):
    again = Batches(MultiTaskSplit({t: _split(n, i) for i, (t, n) in enumerate(sizes.items())}, 8, 3), 1,
                    Accelerator(cpu=True), 1, seed=3)
    for s in (0, 7, 30):
        a, b = next(batches.micro_batches(s)), next(again.micro_batches(s))
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_kd_loss_against_a_hand_computation():
    torch.manual_seed(0)
    model = MultiTaskModel(BERT, HEADS).eval()  # eval: no dropout, so the outputs below are the loss's
    ids = torch.randint(5, 1000, (4, 7))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    names, regression = list(HEADS), {t: h.labels is None for t, h in HEADS.items()}
    logits = model(ids, batch["attention_mask"], batch["token_type_ids"], task="sst2").double().detach().numpy()
    labels, q = np.array([0, 1, 1, 0]), np.array([[0.9, 0.1], [0.3, 0.7], [0.5, 0.5], [0.2, 0.8]])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    ce = -np.mean(np.log(p[np.arange(4), labels]))
    kl = np.sum(q * (np.log(q) - np.log(p))) / 4
    cls = {**batch, "task": torch.tensor(0), "labels": torch.from_numpy(labels),
           "soft_targets": torch.from_numpy(q).float()}
    terms = multitask_loss(names, regression, "sum")(model, cls)
    assert terms["hard"].item() == pytest.approx(ce, rel=1e-5) and terms["soft"].item() == pytest.approx(kl, rel=1e-4)
    assert terms["loss"].item() == pytest.approx(ce + kl, rel=1e-5)  # the official code: added
    assert multitask_loss(names, regression, "mean")(model, cls)["loss"].item() == pytest.approx((ce + kl) / 2,
                                                                                                 rel=1e-5)  # the paper
    no_teacher = {k: v for k, v in cls.items() if k != "soft_targets"}
    assert multitask_loss(names, regression)(model, no_teacher)["loss"].item() == pytest.approx(ce, rel=1e-5)

    score = model(ids, batch["attention_mask"], batch["token_type_ids"], task="stsb")[:, 0].double().detach().numpy()
    y, mean = np.array([1.0, 4.5, 3.0, 0.0]), np.array([[1.5], [4.0], [2.0], [0.5]])
    reg = {**batch, "task": torch.tensor(1), "labels": torch.from_numpy(y).float(),
           "soft_targets": torch.from_numpy(mean).float()}
    mse_y, mse_t = np.mean((score - y) ** 2), np.mean((score - mean[:, 0]) ** 2)
    assert multitask_loss(names, regression)(model, reg)["loss"].item() == pytest.approx(mse_y + mse_t, rel=1e-5)
    off = multitask_loss(names, regression, regression_kd=False)(model, reg)
    assert off["loss"].item() == pytest.approx(mse_y, rel=1e-5) and "soft" not in off


def _teacher(path, seed: int, tokenizer, labels=("negative", "positive")):
    torch.manual_seed(seed)
    config = BERT.replace(id2label=dict(enumerate(labels)), problem_type="single_label_classification")
    return save_pretrained(MobileBertForSequenceClassification(config), path, tokenizer)


def test_soft_targets_are_the_averaged_probabilities_cached_per_teacher_and_recomputed_when_one_changes(
        tmp_path, tokenizer):
    task = load_task("sst2", default_data("sst2"), eval_only=True)
    split = encode_classification(task, task.dev["dev"][:24], tokenizer, 32)
    dirs = [_teacher(tmp_path / f"t{s}", s, tokenizer) for s in range(3)]
    (logits,), cached = member_outputs(dirs, task, [split])
    assert logits.shape == (3, 24, 2) and cached == 0
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    targets = soft_targets(logits, regression=False)
    assert np.allclose(targets, p.mean(0), atol=1e-6) and np.allclose(targets.sum(-1), 1, atol=1e-6)
    (again,), cached = member_outputs(dirs, task, [split])
    assert cached == 3 and np.array_equal(again, logits)  # reused: every teacher's outputs from its cache
    _teacher(dirs[1], 7, tokenizer)  # one teacher retrained: its outputs are recomputed, the others' reused
    (changed,), cached = member_outputs(dirs, task, [split])
    assert cached == 2 and np.array_equal(changed[0], logits[0]) and not np.allclose(changed[1], logits[1])
    assert np.allclose(soft_targets(np.array([[[1.0]], [[3.0]]]), regression=True), [[2.0]])

    from mobilekd.data.tokenizer import load_tokenizer
    other = load_tokenizer()
    other.add_tokens(["zzzunseen"])
    with pytest.raises(UserError, match="vocabulary differs"):
        check_teacher(dirs[0], task, other, "student")
    check_teacher(dirs[0], task, tokenizer, "student")
    with pytest.raises(UserError, match="do not fit task stsb"):
        check_teacher(dirs[0], load_task("stsb", default_data("stsb"), eval_only=True), tokenizer, "student")


def test_one_file_serves_every_task_as_pytorch_does(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = MultiTaskModel(BERT, HEADS).eval()
    save_multitask(model, tmp_path / "mt", tokenizer)
    loaded = load_multitask(tmp_path / "mt")
    assert loaded.tasks == HEADS and all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                                           loaded.state_dict().values()))
    examples = {}
    for name in HEADS:
        task = load_task(name, default_data(name), eval_only=True)
        examples[name] = encode_classification(task, next(iter(task.dev.values()))[:16], tokenizer, 32).arrays
        one = single_task(model, name)  # the single-task view computes the same outputs
        ids = torch.from_numpy(examples[name]["input_ids"][:4])
        mask, types = (torch.from_numpy(examples[name][k][:4]) for k in ("attention_mask", "token_type_ids"))
        assert torch.allclose(one(ids, mask, types), model(ids, mask, types, task=name))
    path = convert_multitask(model, 32, tmp_path / "mt.tflite")
    report = multitask_parity(model, path, examples)
    assert set(report) == set(HEADS)
    assert all(r["max_abs_diff"] < 1e-4 and r["finite"] and r["examples"] == 16 for r in report.values())
    assert report["sst2"]["agreement"] == 1.0 and report["rte"]["agreement"] == 1.0
    assert report["stsb"]["pearson_exported"] == pytest.approx(report["stsb"]["pearson_torch"], abs=1e-4)


def test_recipe_at_micro_scale(tmp_path, tokenizer):
    """Two SST-2 teachers and one STS-B teacher distilled into a multi-task student of SST-2, STS-B and RTE; then
    one file for the three tasks, checked per task, beside each task's own file."""
    torch.manual_seed(0)
    save_pretrained(MobileBertForPreTraining(BERT), tmp_path / "base", tokenizer)
    sst2 = [_teacher(tmp_path / f"sst2_{s}", s, tokenizer) for s in range(2)]
    stsb = _teacher(tmp_path / "stsb_0", 5, tokenizer, labels=("score",))
    common = ["--model", tmp_path / "base", "--tasks", "sst2", "stsb", "rte", "--max-train-examples", 40,
              "--batch-size", 8, "--max-len", 32, "--max-steps", 6, "--threads", 1]
    teachers = ["--teachers", f"sst2={sst2[0]},{sst2[1]}", f"stsb={stsb}"]
    out = tmp_path / "mt"
    run_module("mobilekd", "multitask", *common, *teachers, "--out", out)
    result = json.loads((out / "results.json").read_text())
    assert result["method"] == "multi-task-ensemble-kd" and result["steps"] == 6 and result["complete"]
    assert training_cpu(result) and (training_gpu(result) != {}) == torch.cuda.is_available()  # the rows' cpu, gpu
    tasks = result["tasks"]
    assert set(tasks) == {"sst2", "stsb", "rte"} and all(t["train_examples"] == 40 for t in tasks.values())
    assert tasks["sst2"]["share"] == pytest.approx(5 / 15)
    assert 0 <= tasks["sst2"]["metrics"]["dev"]["accuracy"] <= 1 and "pearson" in tasks["stsb"]["metrics"]["dev"]
    assert len(tasks["sst2"]["teachers"]) == 2 and "accuracy" in tasks["sst2"]["ensemble"]
    assert "pearson" in tasks["stsb"]["ensemble"] and "ensemble" not in tasks["rte"]
    assert (out / "sst2_dev_predictions.tsv").read_text().split("\n")[1].split("\t")[2] in ("negative", "positive")

    run_module("mobilekd", "export", "--model", out, "--max-len", 32, "--parity-examples", 24, "--single-task-files",
               "--out", tmp_path / "tflite")
    parity = json.loads((tmp_path / "tflite" / "parity.json").read_text())
    shared = parity["model_multitask_none.tflite"]
    card = (tmp_path / "tflite" / "README.md").read_text()  # the model card: each file timed and estimated
    assert all(f"| {name} |" in card for name in parity) and "Pixel 4 ms (est., 4 threads)" in card
    assert all(r["max_abs_diff"] < 1e-4 and r["examples"] == 24 for r in shared["tasks"].values())
    assert shared["tasks"]["sst2"]["accuracy_exported"] == shared["tasks"]["sst2"]["accuracy_torch"]
    singles = [parity[f"model_{t}.tflite"]["size_bytes"] for t in ("sst2", "stsb", "rte")]
    assert shared["size_bytes"] < 1.05 * max(singles) and shared["size_bytes"] < sum(singles) / 2.5
    score = parity["model_stsb.tflite"]["tasks"]["stsb"]  # a regression file returns the score, not a softmax of it
    assert score["max_abs_diff"] < 1e-4 and score["pearson_exported"] == pytest.approx(score["pearson_torch"], abs=1e-4)
    assert score["pearson_torch"] == pytest.approx(shared["tasks"]["stsb"]["pearson_torch"], abs=1e-6)

    proc = run_module("mobilekd", "multitask", *common, "--teachers", f"sst2={stsb}", "--out", tmp_path / "x",
                      check=False)
    assert "config.json" in one_line_error(proc)  # an STS-B teacher offered for SST-2
    proc = run_module("mobilekd", "multitask", *common, "--teachers", "cola=x", "--out", tmp_path / "x", check=False)
    assert "not among --tasks" in one_line_error(proc)
    proc = run_module("mobilekd", "multitask", *common, "--teachers", f"sst2={sst2[0]},{tmp_path / 'nowhere'}",
                      "--out", tmp_path / "x", check=False)
    assert "nowhere: no such model directory" in one_line_error(proc)
    for bad in ('{"tasks": {"sst2": {"labels": 3}}}', '{"tasks": {"sst2": {"labels": null, "metrics": ["pearson"]}}, '
                '"dropout": 1.5}', '[]'):
        (out / "multitask.json").write_text(bad)
        proc = run_module("mobilekd", "export", "--model", out, "--out", tmp_path / "y", check=False)
        assert "multitask.json" in one_line_error(proc)
