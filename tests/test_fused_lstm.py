"""The BiLSTM's fused-LSTM file (issue 35, item 2): the TensorFlow converter's UNIDIRECTIONAL_SEQUENCE_LSTM in place
of litert-torch's unrolled steps, through `mobilekd export --fused-lstm` on real dev sentences: the same outputs as
PyTorch for single sentences (final states) and pairs (max pooling, siamese), a few dozen operators, every run
starting from zero state, MediaPipe's classifier reading the file as is, length signatures, and one-line errors.
The TensorFlow venv is made on first use (minutes), as a user's first export makes it."""

import json

import numpy as np
import pytest
import torch

from helpers import one_line_error, run_module
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.export.graph import op_histogram, read_graph
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.export.fused_lstm import convert_fused
from mobilekd.export.parity import TFLiteRunner, parity_report, run_tflite
from mobilekd.models.bilstm import BiLSTMClassifier, BiLSTMConfig, load_bilstm, save_bilstm


def bilstm_dir(tmp_path, tokenizer, name: str, pair: bool, pooling: str):
    """A BiLSTM of random weights (the file must compute what PyTorch computes, whatever the weights), saved as
    `mobilekd bilstm` saves it, with results.json naming its task for the parity check."""
    torch.manual_seed(0)
    config = BiLSTMConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=12, classifier_size=10,
                          pair=pair, pooling=pooling, cls_token_id=tokenizer.cls_token_id,
                          sep_token_id=tokenizer.sep_token_id,
                          id2label={0: "not_equivalent", 1: "equivalent"} if pair else {0: "negative", 1: "positive"})
    out = save_bilstm(BiLSTMClassifier(config).eval(), tmp_path / name, tokenizer)
    (out / "results.json").write_text(json.dumps({"task": "mrpc" if pair else "sst2"}))
    return out


def test_fused_file_computes_what_pytorch_does_from_zero_state_every_run(tmp_path, tokenizer):
    single = bilstm_dir(tmp_path, tokenizer, "single", pair=False, pooling="final")
    run_module("mobilekd", "export", "--model", single, "--max-len", 24, "--lengths", 12, "--fused-lstm",
               "--fused-only", "--parity-examples", 100, "--out", tmp_path / "single_tflite", timeout=1500)
    parity = json.loads((tmp_path / "single_tflite" / "parity.json").read_text())
    ops = json.loads((tmp_path / "single_tflite" / "ops.json").read_text())
    assert sorted(parity) == ["model_none_fused.tflite", "model_none_lengths_fused.tflite"]  # no unrolled file
    fused = parity["model_none_fused.tflite"]
    assert fused["examples"] == 100 and fused["max_abs_diff"] < 1e-5 and fused["agreement"] == 1.0
    assert fused["metadata"] and not fused["flex_or_custom_ops"]
    assert ops["model_none_fused.tflite"]["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 2
    assert fused["op_count"] < 100  # litert-torch's unrolled file has over 100 (test_bilstm's export, at 32 steps)
    lengths = parity["model_none_lengths_fused.tflite"]["lengths"]
    assert lengths["parity"]["12"]["examples"] > 0 and lengths["parity"]["12"]["max_abs_diff"] < 1e-5

    # every run starts from zero state: the kernel's state tensors carry the last run's end otherwise
    task = load_task("sst2", default_data("sst2"), eval_only=True)
    arrays = encode_classification(task, next(iter(task.dev.values()))[:2], tokenizer, 24).arrays
    runner = TFLiteRunner(tmp_path / "single_tflite" / "model_none_fused.tflite")
    first, second = ({k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES} for i in (0, 1))
    before = runner(**first)[0]
    runner(**second)
    np.testing.assert_array_equal(runner(**first)[0], before)

    from mediapipe.tasks.python import text

    with text.TextClassifier.create_from_model_path(str(tmp_path / "single_tflite" / "model_none_fused.tflite")) as c:
        categories = c.classify("a gorgeous , witty , seductive movie .").classifications[0].categories
    assert {x.category_name for x in categories} == {"negative", "positive"}
    assert sum(x.score for x in categories) == pytest.approx(1.0, abs=1e-4)

    # a pair model (siamese, max pooling) through the converter alone: the recipe around it is the one above
    pair = load_bilstm(bilstm_dir(tmp_path, tokenizer, "pair", pair=True, pooling="max"))
    path = convert_fused(pair, 48, tmp_path / "pair.tflite")
    task = load_task("mrpc", default_data("mrpc"), eval_only=True)
    arrays = encode_classification(task, next(iter(task.dev.values()))[:100], tokenizer, 48).arrays
    fused = parity_report(pair, "classification", lambda a: run_tflite(path, a), arrays)
    assert fused["max_abs_diff"] < 1e-5 and fused["agreement"] == 1.0
    assert op_histogram(read_graph(path))["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 2  # one encoder for both sentences

    proc = run_module("mobilekd", "export", "--model", single, "--fused-lstm", "--quantize", "int8", "--out",
                      tmp_path / "x", check=False)
    assert "--fused-lstm" in one_line_error(proc) and not (tmp_path / "x").exists()
    proc = run_module("mobilekd", "export", "--model", single, "--fused-only", "--out", tmp_path / "x", check=False)
    assert "--fused-only needs --fused-lstm" in one_line_error(proc) and not (tmp_path / "x").exists()
