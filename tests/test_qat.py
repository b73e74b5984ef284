"""Quantization-aware training (mobilekd/export/qat.py) on a micro classifier and shipped SST-2 sentences: with
quantization off the prepared graph is the float model; trained with it on, its full-integer .tflite computes what
its PyTorch fake-quantized twin computes."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from android_bench import kernels
from android_bench.models import trained_like
from helpers import one_line_error, run_module
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.export.graph import float_islands, op_histogram, read_graph
from mobilekd.export.litert import ExportWrapper
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.export.parity import run_tflite, xnnpack_undelegated
from mobilekd.export.qat import convert_qat, freeze_ranges, int8_rows, prepare_qat, quantization
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.models.presets import PRESETS

SEQ = 32


@pytest.fixture(scope="module")
def sst2(tokenizer):
    task = load_task("sst2", default_data("sst2"))
    train = encode_classification(task, task.train[:32], tokenizer, SEQ).arrays
    dev = encode_classification(task, next(iter(task.dev.values()))[:64], tokenizer, SEQ).arrays
    return train, dev


def inputs(arrays, rows=slice(None)):
    return {k: torch.as_tensor(arrays[k][rows], dtype=torch.int32)
            for k in ("input_ids", "attention_mask", "token_type_ids")}


def classifier():
    """A 2-layer micro classifier with trained-like norms, the official masked attention (as `mobilekd qat` sets it)
    and a head that spreads its scores (so that quantization noise shows in the probabilities)."""
    torch.manual_seed(0)
    config = PRESETS["demo_student"].config.replace(num_hidden_layers=2, id2label={0: "negative", 1: "positive"},
                                                    masked_score=-6.0)
    model = trained_like(MobileBertForSequenceClassification(config).eval())
    torch.nn.init.normal_(model.classifier.weight, std=1.0)
    return model


def test_quantization_off_is_the_float_model(sst2):
    _, dev = sst2
    model = classifier()
    prepared = prepare_qat(model, "classification", SEQ)
    with torch.no_grad():
        float_probs = ExportWrapper(model, "classification")(**inputs(dev))
        off = quantization(prepared, False)(**inputs(dev))
        on = quantization(prepared, True)(**inputs(dev))
    torch.testing.assert_close(off, float_probs, atol=1e-6, rtol=0)
    assert (on - float_probs).abs().max() > 1e-3  # fake quantization really acts when on


def test_qat_trained_int8_file_matches_its_fake_quantized_twin(sst2, tmp_path):
    train, dev = sst2
    prepared = quantization(prepare_qat(classifier(), "classification", SEQ), True)
    optimizer = torch.optim.AdamW([p for p in prepared.parameters() if p.requires_grad], lr=2e-4)
    labels = torch.as_tensor(train["labels"])
    losses = []
    rows = slice(0, 32)  # one batch, fitted: the loss must fall through the fake quantization
    for _ in range(40):
        probs = prepared(**inputs(train, rows))
        loss = torch.nn.functional.nll_loss(probs.clamp_min(1e-9).log(), labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])

    with torch.no_grad():
        twin = freeze_ranges(prepared)(**inputs(dev)).numpy()
    path = convert_qat(prepared, SEQ, tmp_path / "model_qat_int8.tflite")
    exported = run_tflite(path, dev)[0]
    # 0.012 measured; the float model is further away: the file computes the fake-quantized twin, not the float model
    assert np.abs(exported - twin).max() < 0.025
    assert (exported.argmax(-1) == twin.argmax(-1)).mean() >= 0.95
    ops = read_graph(path)
    products = [op for op in ops if op.name == "FULLY_CONNECTED"]
    assert products and all(op.inputs[0].dtype == "INT8" and op.inputs[1].dtype == "INT8" for op in products)
    islands = float_islands(ops)  # integer activations, with what is left in float reported
    # every product, residual add, NoNorm and attention softmax in int8: only the embedding lookups, the mask and
    # the classifier's softmax (apps read float probabilities) stay float
    assert not {"FULLY_CONNECTED", "BATCH_MATMUL", "ADD", "MUL"} & set(islands["ops_in_float"])
    assert islands["ops_in_float"].get("SOFTMAX", 0) <= 1 and islands["islands"] <= 4
    # XNNPACK takes neither int8 product of two activations nor int8 softmax: they run outside it
    assert xnnpack_undelegated(path).get("BATCH_MATMUL", 0) >= 2


def test_float_attention_keeps_every_product_and_softmax_in_xnnpack(sst2, tmp_path):
    """With the attention cores left float (QK^T, scaling, mask, softmax, PV), XNNPACK takes every matrix product
    and softmax; the dense layers stay int8; the file computes its fake-quantized twin."""
    _, dev = sst2
    prepared = quantization(prepare_qat(classifier(), "classification", SEQ, attention="float"), True)
    with torch.no_grad():
        prepared(**inputs(dev))  # ranges observed once, then frozen: the twin the file computes
        twin = freeze_ranges(prepared)(**inputs(dev)).numpy()
    path = convert_qat(prepared, SEQ, tmp_path / "float_attention.tflite")
    assert np.abs(run_tflite(path, dev)[0] - twin).max() < 0.025
    ops = read_graph(path)
    assert all(op.inputs[0].dtype == "INT8" for op in ops if op.name == "FULLY_CONNECTED")
    assert {op.inputs[0].dtype for op in ops if op.name == "BATCH_MATMUL"} == {"FLOAT32"}
    layers = 2
    # the masking products stay with the float scores (none requantized inside a core): Q, K and V are dequantized
    # once each per layer, the context quantized once
    assert sum(op.name == "MUL" and op.inputs[0].dtype == "FLOAT32" for op in ops) >= 2 * layers
    assert op_histogram(ops)["DEQUANTIZE"] <= 3 * layers + 3
    assert not {"BATCH_MATMUL", "SOFTMAX", "FULLY_CONNECTED"} & set(xnnpack_undelegated(path))


def test_symmetric_attention_puts_every_attention_product_in_xnnpack(sst2, tmp_path):
    """With the second operand of each attention product (K^T, V) symmetric, zero point 0, XNNPACK takes every int8
    BATCH_MATMUL (its delegate refuses any other); the products stay int8 and the file computes its fake-quantized
    twin."""
    from ai_edge_litert.interpreter import Interpreter

    _, dev = sst2
    prepared = quantization(prepare_qat(classifier(), "classification", SEQ, attention="int8-sym"), True)
    with torch.no_grad():
        prepared(**inputs(dev))
        twin = freeze_ranges(prepared)(**inputs(dev)).numpy()
    path = convert_qat(prepared, SEQ, tmp_path / "symmetric_attention.tflite")
    assert np.abs(run_tflite(path, dev)[0] - twin).max() < 0.025
    zero_points = {t["index"]: t["quantization_parameters"]["zero_points"]
                   for t in Interpreter(model_path=str(path)).get_tensor_details()}
    products = [op for op in read_graph(path) if op.name == "BATCH_MATMUL"]
    assert len(products) == 2 * 2  # Q K^T and P V in each of the 2 layers
    assert all(op.inputs[0].dtype == op.inputs[1].dtype == "INT8" for op in products)
    assert all(list(zero_points[op.inputs[1].index]) == [0] for op in products)
    assert any(list(zero_points[op.inputs[0].index]) != [0] for op in products)  # the first operand stays affine
    assert "BATCH_MATMUL" not in xnnpack_undelegated(path)


def test_symmetric_attention_with_float_softmax_leaves_no_attention_op_outside_xnnpack(sst2, tmp_path):
    """With the products' second operands symmetric and the masking and softmax between them in float, every
    attention op is XNNPACK's: the products stay int8, each softmax is float (its probabilities quantized for P V);
    the file computes its fake-quantized twin."""
    _, dev = sst2
    prepared = quantization(prepare_qat(classifier(), "classification", SEQ, attention="int8-sym-float-softmax"),
                            True)
    with torch.no_grad():
        prepared(**inputs(dev))
        twin = freeze_ranges(prepared)(**inputs(dev)).numpy()
    path = convert_qat(prepared, SEQ, tmp_path / "float_softmax.tflite")
    assert np.abs(run_tflite(path, dev)[0] - twin).max() < 0.025
    ops = read_graph(path)
    products = [op for op in ops if op.name == "BATCH_MATMUL"]
    assert len(products) == 2 * 2 and all(op.inputs[0].dtype == op.inputs[1].dtype == "INT8" for op in products)
    softmaxes = [op for op in ops if op.name == "SOFTMAX"]
    assert len(softmaxes) == 2 + 1  # one per attention layer, and the classifier's
    assert all(op.inputs[0].dtype == op.outputs[0].dtype == "FLOAT32" for op in softmaxes)
    assert not {"BATCH_MATMUL", "SOFTMAX", "FULLY_CONNECTED", "QUANTIZE", "DEQUANTIZE", "MUL", "ADD"} & set(
        xnnpack_undelegated(path))


def test_kernel_profile_finds_the_int8_attention_outside_xnnpack(sst2, tmp_path):
    """perf's samples of the full-integer file, by kernel: XNNPACK's int8 GEMMs run the dense layers, TFLite's
    builtin int8 BATCH_MATMUL the attention products, nothing runs a float product; the samples account for the CPU
    time the process counted over the invocations (`profile` refuses a profile where they do not)."""
    why = kernels.unavailable()
    if why:
        pytest.skip(why)
    _, dev = sst2
    prepared = quantization(prepare_qat(classifier(), "classification", SEQ), True)
    with torch.no_grad():
        prepared(**inputs(dev))
    path = convert_qat(freeze_ranges(prepared), SEQ, tmp_path / "model_qat_int8.tflite")
    result = kernels.profile(path, threads=1, seconds=2.0)
    shares = {f["name"]: f["share"] for f in result["families"]}
    assert shares.get("TFLite builtin BATCH_MATMUL", 0) > 0.02 and shares.get("XNNPACK int8 GEMM", 0) > 0.02, shares
    assert "XNNPACK float GEMM" not in shares, shares
    assert result["cpu_ms_per_invocation"] <= 1.3 * result["wall_ms_per_invocation"]  # one thread: CPU within wall


def test_recipe_at_micro_scale(tmp_path, tokenizer):
    """`mobilekd qat` on a fine-tuned micro classifier: a full-integer file with metadata, scored on the whole SST-2
    dev set beside its float start and fake-quantized twin; bad input gives one-line errors."""
    torch.manual_seed(0)
    config = PRESETS["demo_student"].config.replace(num_hidden_layers=2)
    base = tmp_path / "base"
    save_pretrained(MobileBertForPreTraining(config), base, tokenizer)
    common = ["--task", "sst2", "--max-train-examples", 64, "--max-len", SEQ, "--threads", 1]
    run_module("mobilekd", "finetune", "--model", base, *common, "--epochs", 1, "--eval-every", 0,
               "--out", tmp_path / "ft")
    run_module("mobilekd", "qat", "--model", tmp_path / "ft", *common, "--max-steps", 4, "--int8-embeddings",
               "--out", tmp_path / "qat")
    result = json.loads((tmp_path / "qat" / "results.json").read_text())
    assert result["complete"] and result["dev_examples"] == 872 and result["steps"] == 4
    for kind in ("float", "fake_quant", "int8"):
        assert 0.3 < result[f"metrics_{kind}"]["accuracy"] < 0.8
    assert result["agreement_int8_fake_quant"] >= 0.9 and result["float_islands"]["islands"] > 0
    path = tmp_path / "qat" / "model_qat_int8.tflite"
    assert path.stat().st_size == result["tflite_bytes"]
    tables = [op.inputs[1] for op in read_graph(path) if op.name == "EMBEDDING_LOOKUP"]
    assert [t.dtype for t in tables] == ["INT8", "INT8"] and tables[0].shape == (30522, config.embedding_size)
    trained = load_file(str(tmp_path / "qat" / "checkpoint" / "model.safetensors"))
    table = next(v for k, v in trained.items() if k.endswith("word_embeddings.weight"))
    torch.testing.assert_close(table, int8_rows(table), atol=1e-7, rtol=0)  # trained against the file's int8 rows
    from mediapipe.tasks.python import text

    with text.TextClassifier.create_from_model_path(str(path)) as app:
        categories = app.classify("a gorgeous , witty , seductive movie .").classifications[0].categories
    assert {c.category_name for c in categories} == {"negative", "positive"}

    proc = run_module("mobilekd", "qat", "--model", base, *common, "--out", tmp_path / "x", check=False)
    assert "not a fine-tuned classifier" in one_line_error(proc)
    proc = run_module("mobilekd", "qat", "--model", tmp_path / "ft", "--task", "stsb", "--out", tmp_path / "x",
                      check=False)
    assert "do not fit task stsb" in one_line_error(proc)
    proc = run_module("mobilekd", "qat", "--model", tmp_path / "ft", *common, "--float-softmax", "--out",
                      tmp_path / "x", check=False)
    assert "--float-softmax goes with --symmetric-attention" in one_line_error(proc)
    assert not list((tmp_path / "x").glob("*.tflite"))


def test_regression_recipe_returns_a_score_in_its_integer_file(tmp_path, tokenizer):
    """STS-B: QAT trains the score's squared error; the full-integer file returns the score (no softmax over one
    output), close to its fake-quantized twin, scored by Pearson on the whole dev set; no classifier metadata. With
    the official clip of the attention scores, which the file computes in int8 (MAXIMUM / MINIMUM)."""
    torch.manual_seed(0)
    config = PRESETS["demo_student"].config.replace(num_hidden_layers=2)
    save_pretrained(MobileBertForPreTraining(config), tmp_path / "base", tokenizer)
    common = ["--task", "stsb", "--max-train-examples", 64, "--max-len", SEQ, "--threads", 1]
    run_module("mobilekd", "finetune", "--model", tmp_path / "base", *common, "--epochs", 1, "--eval-every", 0,
               "--out", tmp_path / "ft")
    run_module("mobilekd", "qat", "--model", tmp_path / "ft", *common, "--max-steps", 4, "--score-clip", -6, 60,
               "--out", tmp_path / "qat")
    result = json.loads((tmp_path / "qat" / "results.json").read_text())
    assert result["complete"] and result["dev_examples"] == 1500 and result["score_clip"] == [-6, 60]
    assert "agreement_int8_float" not in result
    assert all(-1 <= result[f"metrics_{k}"]["pearson"] <= 1 for k in ("float", "fake_quant", "int8"))
    scores = run_tflite(tmp_path / "qat" / "model_qat_int8.tflite",
                        {k: np.zeros((2, SEQ), np.int64) + (k == "attention_mask") for k in INPUT_NAMES})[0]
    assert scores.shape == (2,) and np.isfinite(scores).all()
    assert result["max_abs_diff_int8_fake_quant"] < 0.5
    assert b"TFLITE_METADATA" not in (tmp_path / "qat" / "model_qat_int8.tflite").read_bytes()
    ops = read_graph(tmp_path / "qat" / "model_qat_int8.tflite")
    histogram, islands = op_histogram(ops), float_islands(ops)
    assert histogram["MINIMUM"] == histogram["MAXIMUM"] == 2  # one clip per layer
    assert "MINIMUM" not in islands["ops_in_float"] and islands["islands"] <= 4
