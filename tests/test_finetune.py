"""Fine-tuning on the shipped GLUE data and on SQuAD fixtures: metrics, heads, task distillation, bad input."""

import json

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file
from sklearn.metrics import accuracy_score

from conftest import ROOT
from helpers import one_line_error, run_module
from mobilekd.data.squad import SquadExample
from mobilekd.finetune.metrics import classification_metrics, normalize_answer, squad_metrics
from mobilekd.finetune.qa import decode_answers
from test_data import _squad


def test_squad_metrics_follow_the_official_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    examples = [SquadExample("a", "q", "c", [{"text": "the cat", "answer_start": 0}]),
                SquadExample("b", "q", "c", [{"text": "big red dog", "answer_start": 0}]),
                SquadExample("c", "q", "c", [], True)]
    m = squad_metrics(examples, {"a": "Cat.", "b": "red dog", "c": ""})
    assert m["exact_match"] == pytest.approx(100 * 2 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 0.8 + 1) / 3)  # "red dog" vs "big red dog": P 1, R 2/3


def test_classification_metrics_by_hand():
    labels, preds = [1, 1, 0, 0], [1, 0, 0, 0]
    m = classification_metrics(("f1", "accuracy", "matthews_corr"), labels, preds)
    assert m["accuracy"] == 0.75 and m["f1"] == pytest.approx(2 / 3)
    assert m["matthews_corr"] == pytest.approx((1 * 2 - 0 * 1) / np.sqrt(1 * 3 * 2 * 2))
    r = classification_metrics(("pearson", "spearman"), [1.0, 2.0, 3.0], [1.0, 2.0, 2.5])
    assert r["spearman"] == pytest.approx(1.0)


def test_span_decoding_and_no_answer():
    context = "MobileBERT was released by Google in 2020."
    ex = SquadExample("q", "who?", context, [{"text": "Google", "answer_start": 27}])
    offsets = np.full((1, 8, 2), -1)
    for t, (s, e) in enumerate([(0, 10), (11, 14), (15, 23), (24, 26), (27, 33), (34, 36)], start=2):
        offsets[0, t] = (s, e)
    start, end = np.zeros((1, 8)), np.zeros((1, 8))
    start[0, 6], end[0, 6] = 5.0, 5.0
    meta = {"example_index": np.array([0]), "offsets": offsets}
    assert decode_answers([ex], meta, start, end, v2=False) == {"q": "Google"}
    start[0, 0], end[0, 0] = 9.0, 9.0  # [CLS] scores higher: no answer under v2 only
    assert decode_answers([ex], meta, start, end, v2=True) == {"q": ""}
    assert decode_answers([ex], meta, start, end, v2=False) == {"q": "Google"}


def finetune(*args, check=True):
    return run_module("mobilekd.recipes.finetune", "--threads", 1, *args, check=check)


def test_sst2_with_task_distillation(student_dir, demo_teacher_dir, tmp_path):
    teacher = tmp_path / "teacher"
    finetune("--model", demo_teacher_dir, "--task", "sst2", "--out", teacher, "--max-train-examples", 256,
             "--max-steps", 16, "--batch-size", 16, "--max-len", 48, "--lr", 5e-4)
    out = tmp_path / "student"
    finetune("--model", student_dir, "--task", "sst2", "--teacher", teacher, "--out", out,
             "--max-train-examples", 256, "--max-steps", 16, "--batch-size", 16, "--max-len", 48, "--eval-every", 8)
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "sst2" and result["teacher"] == str(teacher) and result["best_step"] in (8, 16)
    history = json.loads((out / "history.json").read_text())  # every evaluation, kept best or not: the cost curves
    assert [h["step"] for h in history] == [8, 16] and 0 < history[0]["wall_seconds"] <= history[1]["wall_seconds"]
    # every evaluation is of the validation split; the step it chose is the one whose model dev scored, once
    assert all(list(h["metrics"]) == ["validation"] for h in history) and list(result["metrics"]) == ["dev", "validation"]
    assert next(h for h in history if h["step"] == result["best_step"])["metrics"]["validation"] == \
        result["metrics"]["validation"] == {"accuracy": result["best_score"]}
    rows = [line.split("\t") for line in (out / "dev_predictions.tsv").read_text().splitlines()[1:]]
    assert len(rows) == 872
    assert result["metrics"]["dev"]["accuracy"] == pytest.approx(
        accuracy_score([r[1] for r in rows], [r[2] for r in rows]))
    hf = transformers.MobileBertForSequenceClassification.from_pretrained(out)
    assert hf.config.id2label == {0: "negative", 1: "positive"}  # GLUE's names, not "0"/"1"
    events = list((out / "tensorboard").iterdir())
    assert events, "TensorBoard event files are written"


def test_eval_only_scores_a_custom_dev_set_that_lacks_a_class(student_dir, tmp_path):
    """A model fine-tuned on three classes, scored on a dev set holding two of them: dev is read against the
    model's labels (as ship's last stage, the teacher on dev once, reads it), not refused for labels of its own."""
    data, scored = tmp_path / "data", tmp_path / "scored"
    data.mkdir()
    rows = [("a quiet film", "film"), ("the match ended", "sport"), ("rain tomorrow", "weather")] * 8
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t} {i},{y}\n" for i, (t, y) in enumerate(rows)))
    (data / "dev.csv").write_text("text,label\na long film,film\nthe final match,sport\n")
    finetune("--model", student_dir, "--task", "custom", "--data", data, "--out", tmp_path / "ft", "--max-steps", 1,
             "--max-len", 16, "--select-on", "none")
    finetune("--model", tmp_path / "ft", "--task", "custom", "--data", data, "--eval-only", "--out", scored,
             "--max-len", 16)
    assert set(json.loads((scored / "results.json").read_text())["metrics"]["dev"]) == {"accuracy"}
    (data / "dev.csv").write_text("text,label\na long film,film\nnews,news\n")
    line = one_line_error(finetune("--model", tmp_path / "ft", "--task", "custom", "--data", data, "--eval-only",
                                   "--out", tmp_path / "again", check=False))
    assert "dev.csv:3: unknown label 'news' (expected one of ['film', 'sport', 'weather'])" in line


def test_a_nan_first_score_does_not_hold_the_first_model_for_good(student_dir, tokenizer, tmp_path):
    """The Pearson of constant predictions is NaN, and no score is above NaN: a run whose first evaluation gave
    one would keep that first model to the end. A later finite score replaces it."""
    from mobilekd.data.tasks import default_data, encode_classification, load_task
    from mobilekd.finetune.evaluation import DevEvaluator, build_model

    task = load_task("stsb", default_data("stsb"), eval_only=True)
    examples = task.dev["dev"][:32]
    evaluator = DevEvaluator(task, {"dev": (examples, encode_classification(task, examples, tokenizer, 32), None)},
                             tmp_path, tokenizer)
    model = build_model(student_dir, task)
    weight = model.classifier.weight.detach().clone()
    with torch.no_grad():
        model.classifier.weight.zero_()  # every prediction the bias: a constant
    assert np.isnan(evaluator(model, 1)["dev"]["pearson"])
    with torch.no_grad():
        model.classifier.weight.copy_(weight)
    assert np.isfinite(evaluator(model, 2)["dev"]["pearson"])
    assert json.loads((tmp_path / "results.json").read_text())["best_step"] == 2


def test_stsb_regression_and_eval_only(student_dir, tmp_path):
    out = tmp_path / "stsb"
    finetune("--model", student_dir, "--task", "stsb", "--out", out, "--max-train-examples", 128, "--max-steps", 6,
             "--batch-size", 16, "--max-len", 48)
    metrics = json.loads((out / "results.json").read_text())["metrics"]["dev"]
    assert set(metrics) == {"pearson", "spearman"}
    proc = finetune("--model", out, "--task", "stsb", "--eval-only", "--out", tmp_path / "eval", "--max-len", 48)
    again = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]["dev"]
    assert again["pearson"] == pytest.approx(metrics["pearson"], abs=1e-6)
    assert "pearson" in proc.stdout


@pytest.mark.parametrize("task, v2", [("squad1", False), ("squad2", True)])
def test_squad_fine_tuning_on_a_fixture(student_dir, tmp_path, task, v2):
    data = tmp_path / "squad"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.json").write_text(json.dumps(_squad(v2)))
    out = tmp_path / "qa"
    finetune("--model", student_dir, "--task", task, "--data", data, "--out", out, "--max-steps", 4,
             "--batch-size", 4, "--max-len", 96, "--stride", 32,
             "--select-on", "dev")  # one or two questions: none to spare for a validation split
    result = json.loads((out / "results.json").read_text())
    assert set(result["metrics"]["dev"]) == {"exact_match", "f1"}
    answers = json.loads((out / "dev_predictions.json").read_text())
    assert set(answers) == ({"q1", "q2"} if v2 else {"q1"})
    assert transformers.MobileBertForQuestionAnswering.from_pretrained(out).config.num_labels == 2
    # prediction runs windows in length order, each batch as wide as its longest: one window a batch (every width
    # its own) gives what one batch of all gives, in the split's order
    from mobilekd.data.squad import read_squad
    from mobilekd.data.tasks import encode_qa
    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.finetune.evaluation import predict
    from mobilekd.models.hf import load_pretrained
    split, _ = encode_qa(read_squad(data / "dev.json")[0], load_tokenizer(out), 96, 32)
    model = load_pretrained(out, "qa")
    assert len(split) > 1 and len(set(split.lengths.tolist())) > 1
    one, together = predict(model, split, batch_size=1), predict(model, split, batch_size=64)
    for a, b in zip(one, together):
        real = split.arrays["attention_mask"].astype(bool)
        assert a.shape == b.shape == real.shape and np.allclose(a[real], b[real], atol=1e-4)


def test_bad_input_is_one_line(student_dir, tmp_path):
    cola = ROOT / "data" / "glue" / "CoLA"
    line = one_line_error(finetune("--model", student_dir, "--task", "sst2", "--data", cola, "--out", tmp_path / "a",
                                   check=False))
    assert "not a sst2 file" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    (empty / "dev.tsv").write_text("sentence\tlabel\n")
    line = one_line_error(finetune("--model", student_dir, "--task", "sst2", "--data", empty, "--out", tmp_path / "b",
                                   check=False))
    assert "1 training examples leave none to train on once 1 are held out for validation" in line
    (empty / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\nfine\t1\nawful\t0\n")
    line = one_line_error(finetune("--model", student_dir, "--task", "sst2", "--data", empty, "--out", tmp_path / "b",
                                   "--max-steps", 1, check=False))  # dev is read once, after every choice
    assert "dev.tsv: no examples" in line and f"the model chosen on validation is complete in {tmp_path / 'b'}" in line
    line = one_line_error(finetune("--model", student_dir, "--task", "sst2", "--max-len", 1024, "--out",
                                   tmp_path / "c", "--eval-only", check=False))
    assert "--max-len 1024 exceeds the model's 512 positions" in line
    stsb = tmp_path / "stsb"
    finetune("--model", student_dir, "--task", "stsb", "--out", stsb, "--max-steps", 1, "--max-train-examples", 16,
             "--max-len", 32)
    line = one_line_error(finetune("--model", stsb, "--task", "sst2", "--eval-only", "--out", tmp_path / "d",
                                   check=False))
    assert "labels ['score'] do not fit task sst2" in line
    assert not (tmp_path / "d" / "model.safetensors").exists()
    # a teacher that was never fine-tuned (a pre-training checkpoint) would be distilled through an untrained head
    line = one_line_error(finetune("--model", student_dir, "--task", "sst2", "--teacher", student_dir, "--out",
                                   tmp_path / "e", "--max-steps", 1, "--max-train-examples", 16, check=False))
    assert f"{student_dir / 'config.json'}: teacher is not a fine-tuned classifier" in line
    assert not (tmp_path / "e" / "model.safetensors").exists()


def test_fine_tuning_starts_from_a_fresh_pooler_and_the_official_classifier_dropout(demo_teacher_dir, tmp_path):
    """The NSP-trained pooler is replaced unless --keep-pooler (google-research/bert issue #287); the classifier's
    dropout is 0.1 as in the official run_classifier.py. At learning rate 0 the saved model is the starting one."""
    from safetensors.torch import load_file

    source = load_file(str(demo_teacher_dir / "model.safetensors"))["mobilebert.pooler.dense.weight"]
    for name, flags in (("fresh", []), ("kept", ["--keep-pooler"])):
        finetune("--model", demo_teacher_dir, "--task", "sst2", "--out", tmp_path / name, "--max-train-examples", 32,
                 "--max-steps", 1, "--batch-size", 16, "--max-len", 32, "--lr", 0, *flags)
        pooler = load_file(str(tmp_path / name / "model.safetensors"))["mobilebert.pooler.dense.weight"]
        assert torch.equal(pooler, source) == (name == "kept")
        assert json.loads((tmp_path / name / "config.json").read_text())["classifier_dropout"] == 0.1


def test_eval_every_0_scores_only_the_last_model(student_dir, tmp_path):
    proc = finetune("--model", student_dir, "--task", "sst2", "--out", tmp_path / "last", "--max-train-examples", 64,
                    "--max-steps", 3, "--batch-size", 16, "--max-len", 32, "--eval-every", 0)
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("step ")] == ["step 3"]
    assert json.loads((tmp_path / "last" / "results.json").read_text())["best_step"] == 3
    assert "--eval-every must be at least 0" in one_line_error(finetune(
        "--model", student_dir, "--task", "sst2", "--out", tmp_path / "bad", "--eval-every", -1, check=False))


def test_same_machine_and_seed_is_bit_reproducible(student_dir, tmp_path):
    """What the README promises: on one machine a run repeated with the same seed gives the same weights bit for
    bit and the same dev scores; another seed (data order, classifier, dropout) gives others."""
    def run(name, seed):
        out = tmp_path / name
        finetune("--model", student_dir, "--task", "sst2", "--out", out, "--seed", seed, "--max-train-examples", 128,
                 "--max-steps", 6, "--batch-size", 16, "--max-len", 32, "--eval-every", 0)
        return load_file(str(out / "model.safetensors")), json.loads((out / "results.json").read_text())["metrics"]

    (first, first_dev), (again, again_dev), (other, _) = run("a", 0), run("b", 0), run("c", 1)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert first_dev == again_dev
    assert not all(torch.equal(first[k], other[k]) for k in first)
