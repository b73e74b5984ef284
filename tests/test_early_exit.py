"""FastBERT's early exits (issue 17): the uncertainty and the loss by hand, threshold 0 is the full model, exits are
monotone in the threshold, and the recipe, the layer-by-layer export and its parity at micro scale on SST-2."""

import json
import math

import numpy as np
import pytest
import torch

from helpers import BERT, one_line_error, run_module
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.errors import UserError
from mobilekd.export.early_exit import EarlyExitRunner, convert_early_exit, early_exit_parity, time_early_exit
from mobilekd.finetune.self_distillation import self_distillation_loss
from mobilekd.models.early_exit import EarlyExitClassifier, exit_layers, predictions_at, uncertainty
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.recipes.fastbert import choose_threshold
from mobilekd.models.hf import save_pretrained



@pytest.fixture(scope="module")
def sst2_dev(tokenizer):
    task = load_task("sst2", default_data("sst2"), eval_only=True)
    return encode_classification(task, next(iter(task.dev.values()))[:64], tokenizer, 32)


def early_exit_model(sharpen: float = 10.0) -> EarlyExitClassifier:
    """A random SST-2 classifier with branches sharpened so that some inputs are confident early."""
    torch.manual_seed(0)
    model = EarlyExitClassifier(MobileBertForSequenceClassification(BERT.replace(id2label={0: "neg", 1: "pos"})))
    with torch.no_grad():
        for branch in model.branches:
            branch.classifier.weight.mul_(sharpen)
    return model.eval()


def test_uncertainty_is_normalised_entropy_by_hand():
    p = torch.tensor([[0.7, 0.2, 0.1], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    by_hand = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)) / math.log(3)
    assert torch.allclose(uncertainty(p), torch.tensor([by_hand, 0.0, 1.0]), atol=1e-6)
    assert uncertainty(torch.tensor([[0.5, 0.5]])).item() == pytest.approx(1.0)
    # strict "<": a threshold equal to an uncertainty does not exit there; the last layer always takes the rest
    u = torch.tensor([[0.5, 0.2, 0.9], [0.9, 0.9, 0.9]])
    assert exit_layers(u, 0.2).tolist() == [2, 2] and exit_layers(u, 0.21).tolist() == [1, 2]
    assert exit_layers(u, 0.6).tolist() == [0, 2]


def test_threshold_zero_is_the_full_model_and_exits_are_monotone(sst2_dev):
    model = early_exit_model()
    inputs = [torch.from_numpy(sst2_dev.arrays[k]) for k in ("input_ids", "attention_mask", "token_type_ids")]
    with torch.no_grad():
        logits, full = model(*inputs), model.model(*inputs)
    thresholds = [0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0]
    decided = predictions_at(logits, thresholds)
    pred0, layers0 = decided[0.0]
    assert (layers0 == BERT.num_hidden_layers - 1).all() and torch.equal(pred0, full.argmax(-1))
    for low, high in zip(thresholds, thresholds[1:]):
        assert (decided[high][1] <= decided[low][1]).all()
    assert any(len(set(layers.tolist())) > 1 for _, layers in decided.values())  # a threshold splits the inputs
    assert decided[0.95][1].sum() < decided[0.2][1].sum()


def test_self_distillation_loss_is_the_sum_of_kl_final_to_branch(sst2_dev):
    model = early_exit_model()
    batch = {k: torch.from_numpy(v[:8]) for k, v in sst2_dev.arrays.items()}
    terms = self_distillation_loss(model, batch)
    logits = model.layer_logits(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    p_final = torch.softmax(logits[-1], -1)
    by_hand = sum((p_final * (p_final.log() - torch.log_softmax(b, -1))).sum(-1).mean() for b in logits[:-1])
    assert terms["loss"].item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert len(terms) == 1 + BERT.num_hidden_layers - 1
    terms["loss"].backward()  # the final classifier is the target: nothing flows into it
    final_grad = model.model.classifier.weight.grad
    assert (final_grad is None or not final_grad.any()) and model.branches[0].dense_in.weight.grad.any()
    model.train()  # the branches train (dropout on); the frozen model keeps its inference behaviour
    assert model.branches[0].training and not model.model.training and not model.model.mobilebert.training


def test_the_layer_by_layer_file_exits_where_pytorch_does(tmp_path, sst2_dev):
    """Run as an app runs it, the file sends every sentence out at PyTorch's layer with PyTorch's prediction, at
    thresholds where the sentences split between layers."""
    model = early_exit_model(sharpen=20.0)
    path = convert_early_exit(model, 32, tmp_path / "model_early_exit.tflite")
    report = early_exit_parity(model, path, sst2_dev.arrays, [0.0, 0.2, 0.4])
    assert all(r["same_exit"] == 1.0 and r["same_prediction"] == 1.0 for r in report.values())
    assert report["0.0"]["avg_layers"] == 4 and report["0.4"]["avg_layers"] < 2 < report["0.2"]["avg_layers"] < 4


def test_recipe_export_and_parity_at_micro_scale(tmp_path, tokenizer):
    """Fine-tune a small BERT on SST-2, self-distil its branches, export one signature per layer, run the file as an
    app does: same exits and predictions as PyTorch; threshold 0 scores exactly what the fine-tuned model scores."""
    torch.manual_seed(0)
    base = tmp_path / "base"
    save_pretrained(MobileBertForPreTraining(BERT), base, tokenizer)
    common = ["--task", "sst2", "--max-train-examples", 64, "--batch-size", 16, "--max-len", 32, "--threads", 1]
    run_module("mobilekd.recipes.finetune", "--model", base, *common, "--epochs", 1, "--eval-every", 0,
               "--out", tmp_path / "ft")
    run_module("mobilekd", "fastbert", "--model", tmp_path / "ft", *common, "--max-steps", 6,
               "--thresholds", 0, 0.5, 0.9, "--out", tmp_path / "fb")
    fine_tuned = json.loads((tmp_path / "ft" / "results.json").read_text())["metrics"]["dev"]["accuracy"]
    result = json.loads((tmp_path / "fb" / "results.json").read_text())
    rows = {r["threshold"]: r for r in result["thresholds"]}
    assert result["dev_examples"] == 872 and rows[0.0]["metrics"]["accuracy"] == fine_tuned
    assert rows[0.0]["avg_layers"] == 4 and rows[0.9]["avg_layers"] <= rows[0.5]["avg_layers"] <= 4
    assert rows[0.0]["gflops"] == pytest.approx(result["layers"][-1]["gflops"])
    # the threshold to ship, chosen on a validation split of the training examples, never on dev
    assert result["chosen_on"] == "validation" and result["chosen_threshold"] in rows
    assert result["chosen_threshold"] == choose_threshold(result["validation"], "accuracy", result["max_drop"])
    assert result["validation_split"]["size"] == sum(result["validation"][0]["exits"]) and \
        result["validation_split"]["size"] + result["train_examples"] == 64
    assert json.loads((tmp_path / "fb" / "early_exit.json").read_text())["threshold"] == result["chosen_threshold"]
    run_module("mobilekd", "export", "--model", tmp_path / "fb", "--max-len", 32, "--parity-examples", 48,
               "--out", tmp_path / "tflite")
    parity = json.loads((tmp_path / "tflite" / "parity.json").read_text())
    early = parity["model_early_exit.tflite"]["thresholds"]
    assert set(early) == {"0.0", "0.5", "0.9"} and early["0.0"]["avg_layers"] == 4
    assert all(x["same_exit"] == 1.0 and x["same_prediction"] == 1.0 for x in early.values())
    assert parity["model_none.tflite"]["agreement"] == 1.0
    assert "| model_early_exit.tflite |" in (tmp_path / "tflite" / "README.md").read_text()

    task = load_task("sst2", default_data("sst2"), eval_only=True)
    dev = encode_classification(task, next(iter(task.dev.values()))[:8], tokenizer, 32)
    timing = time_early_exit(tmp_path / "tflite" / "model_early_exit.tflite", tmp_path / "tflite" / "model_none.tflite",
                             dev.arrays, [0.0, 0.9], rounds=1)
    assert timing["examples"] == 8 and set(timing["ms"]) == {"0.0", "0.9"} and timing["full_ms"] > 0

    with pytest.raises(UserError, match="not an early-exit file"):
        EarlyExitRunner(tmp_path / "tflite" / "model_none.tflite")

    settings = tmp_path / "fb" / "early_exit.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "heads": 0}))
    proc = run_module("mobilekd", "export", "--model", tmp_path / "fb", "--out", tmp_path / "x", check=False)
    assert "early_exit.json" in one_line_error(proc)
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "heads": 2}))
    (tmp_path / "fb" / "branches.safetensors").write_bytes(b"not safetensors")
    proc = run_module("mobilekd", "export", "--model", tmp_path / "fb", "--max-len", 32, "--out", tmp_path / "x",
                      check=False)
    assert "branches.safetensors" in one_line_error(proc)
    proc = run_module("mobilekd", "fastbert", "--model", base, *common, "--out", tmp_path / "y", check=False)
    assert "not a fine-tuned classifier" in one_line_error(proc)
    assert not (tmp_path / "y" / "branches.safetensors").exists()
    np.testing.assert_equal(sorted(p.name for p in (tmp_path / "x").glob("*.tflite")), [])


def test_the_threshold_chosen_is_the_fastest_within_the_drop_allowed():
    def row(threshold, accuracy, layers):
        return {"threshold": threshold, "metrics": {"accuracy": accuracy}, "avg_layers": layers}

    rows = [row(0.0, 0.90, 6), row(0.3, 0.895, 4.1), row(0.5, 0.889, 3.0), row(0.8, 0.85, 1.5)]
    assert choose_threshold(rows, "accuracy", 1.0) == 0.3  # 0.5 loses 1.1 points, 0.8 five
    assert choose_threshold(rows, "accuracy", 1.5) == 0.5
    assert choose_threshold(rows, "accuracy", 0.0) == 0.0  # nothing may be lost: the full model
    assert choose_threshold(rows[1:], "accuracy", 1.0) == 0.0  # no full model scored: no basis to choose
    # MRPC chooses on F1 and accuracy's mean: an exit that answers "equivalent" more often keeps F1 and loses accuracy
    pairs = [{"threshold": 0.0, "metrics": {"f1": 0.85, "accuracy": 0.80}, "avg_layers": 6},
             {"threshold": 0.6, "metrics": {"f1": 0.845, "accuracy": 0.74}, "avg_layers": 2}]
    assert choose_threshold(pairs, "f1", 1.0) == 0.6 and choose_threshold(pairs, "acc_and_f1", 1.0) == 0.0
