"""Export: the LiteRT interpreter, onnxruntime and MediaPipe compute what PyTorch computes, on shipped SST-2 dev."""

import json

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard

from helpers import one_line_error, run_module
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.export.graph import nonfinite_constants, read_graph
from mobilekd.export.metadata import read_metadata
from mobilekd.export.parity import run_tflite
from mobilekd.models.heads import (MobileBertForPreTraining, MobileBertForQuestionAnswering,
                                   MobileBertForSequenceClassification)
from mobilekd.models.hf import save_pretrained
from mobilekd.models.presets import PRESETS


def perturbed(model):
    """A non-trivial NoNorm, so folding it into neighbours is really exercised."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("classifier")
    config = PRESETS["demo_student"].config.replace(id2label={0: "negative", 1: "positive"})  # SST-2's
    save_pretrained(perturbed(MobileBertForSequenceClassification(config)), out, tokenizer)
    return out


@pytest.fixture(scope="module")
def exported(classifier_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported")
    run_module("mobilekd.recipes.export", "--model", classifier_dir, "--out", out, "--max-len", 64, "--quantize", "none",
               "fp16", "dynamic-int8", "int8", "--calibration-examples", 32, "--onnx", "--executorch", "--parity-task",
               "sst2", "--parity-examples", 48)
    return out


def test_every_format_matches_pytorch(exported):
    reports = json.loads((exported / "parity.json").read_text())
    assert sorted(reports) == ["model.onnx", "model.pte", "model_dynamic_int8.tflite", "model_fp16.tflite",
                               "model_int8.tflite", "model_none.tflite"]
    for name, report in reports.items():
        assert report["examples"] == 48 and report["finite"], name
        assert report["nonfinite_constants"] == [] and report["flex_or_custom_ops"] == [], name
    assert all(r["parity_check"]["passed"] for r in reports.values())  # the gate each file passed (no file removed)
    for exact in ("model_none.tflite", "model.onnx", "model.pte"):
        assert reports[exact]["max_abs_diff"] <= 1e-5 and reports[exact]["agreement"] == 1.0
        assert reports[exact]["accuracy_exported"] == reports[exact]["accuracy_torch"]
    fp32 = reports["model_none.tflite"]["size_bytes"]
    assert reports["model_fp16.tflite"]["size_bytes"] < 0.6 * fp32
    assert reports["model_fp16.tflite"]["max_abs_diff"] <= 1e-2
    assert reports["model_dynamic_int8.tflite"]["size_bytes"] < fp32 / 2
    assert "| model_int8.tflite |" in (exported / "report.md").read_text()

    card = ModelCard.load(exported / "README.md")  # the model card, as the Hub reads it
    assert card.data.pipeline_tag == "text-classification" and card.data.license == "other"
    assert card.data.eval_results is None  # a model no run scored: no dev score is claimed
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in card.text.splitlines()
            if line.startswith("| model")}
    assert sorted(rows) == sorted(reports)
    host, pixel = ({name: float(rows[name][i].strip(" |")) for name in rows if name.endswith(".tflite")}
                   for i in (5, 6))
    assert all(v > 0 for v in [*host.values(), *pixel.values()]) and rows["model.onnx"][6].strip(" |") == "-"
    assert float(rows["model.pte"][5]) > 0  # ExecuTorch's file timed beside the .tflite files, in the same run
    fallback = reports["model.pte"]["xnnpack_undelegated"]  # what XNNPACK left to ExecuTorch's portable kernels
    assert "aten.embedding.default" in fallback  # XNNPACK has no gather: the lookups stay on the portable kernels
    assert not {"aten.addmm.default", "aten.mm.default", "aten.bmm.default"} & set(fallback)  # the products do not
    # attention captured as written (explicit_attention), so its mask's boolean ops and the products' expand copies,
    # which torch's fused op and 4-D products brought, are not left to the portable kernels
    assert reports["model.pte"]["attention"] == "explicit-bmm"
    assert not {"aten.where.self", "aten.logical_not.default", "aten.any.dim", "aten.expand_copy.default"} & \
        set(fallback)
    assert "- model.pte: " in card.text and "aten.embedding.default" in card.text
    assert pixel["model_int8.tflite"] < pixel["model_none.tflite"]  # the cost model prices integer kernels lower
    assert "ESTIMATES" in card.text and "Host latency measured on `" in card.text

    ops = json.loads((exported / "ops.json").read_text())
    assert "FULLY_CONNECTED" in ops["model_none.tflite"] and "MatMul" in ops["model.onnx"]
    # NoNorm + ReLU: no LayerNorm decomposition (MEAN, RSQRT) and no GELU/Erf in the graph
    assert not {"MEAN", "RSQRT", "GELU", "SQUARED_DIFFERENCE"} & set(ops["model_none.tflite"])
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(exported / "model_int8.tflite"))
    signature = interpreter.get_signature_list()["serving_default"]
    assert sorted(signature["inputs"]) == ["attention_mask", "input_ids", "token_type_ids"]
    assert all(d["dtype"] == np.int32 for d in interpreter.get_input_details())
    assert interpreter.get_output_details()[0]["dtype"] == np.float32  # full-integer inside, float for the app


def test_mediapipe_text_classifier_reads_the_file_as_is(exported, classifier_dir):
    from mediapipe.tasks.python.text import text_classifier

    # MediaPipe's BertTokenizer lowercases but keeps accents ("clichés" != "cliches"), unlike bert-base-uncased's
    # (README: strip accents in the app); these sentences have none
    sentences = ["A gorgeous, witty, seductive movie.", "the plot is nothing but boilerplate cliches"]
    tokenizer = load_tokenizer(classifier_dir)
    arrays = {k: np.asarray(v) for k, v in tokenizer(sentences, max_length=64, truncation=True,
                                                     padding="max_length").items()}
    for name in ("model_none.tflite", "model_dynamic_int8.tflite", "model_int8.tflite"):
        meta = read_metadata(exported / name)
        assert meta["associated_files"] == ["labels.txt", "vocab.txt"], name
        expected = run_tflite(exported / name, arrays)[0]
        assert abs(expected[0, 0] - expected[1, 0]) > 1e-4  # the scores tell the two sentences apart
        with text_classifier.TextClassifier.create_from_model_path(str(exported / name)) as classifier:
            for sentence, probs in zip(sentences, expected):
                categories = classifier.classify(sentence).classifications[0].categories
                scores = {c.category_name: c.score for c in categories}
                assert scores.keys() == {"negative", "positive"}  # the task's label names, as the app shows
                # MediaPipe tokenizes with the packed vocab and runs its own XNNPACK set-up
                np.testing.assert_allclose([scores["negative"], scores["positive"]], probs, atol=1e-6 if "none" in name else 1e-4)


def test_qa_export_has_the_task_library_layout(tmp_path, tokenizer):
    model_dir = tmp_path / "qa"
    save_pretrained(perturbed(MobileBertForQuestionAnswering(PRESETS["demo_student"].config)), model_dir, tokenizer)
    run_module("mobilekd.recipes.export", "--model", model_dir, "--out", tmp_path / "out", "--max-len", 64,
               "--parity-examples", 8)
    path = tmp_path / "out" / "model_none.tflite"
    report = json.loads((tmp_path / "out" / "parity.json").read_text())["model_none.tflite"]
    assert report["max_abs_diff"] <= 1e-4 and report["agreement"] == 1.0
    meta = read_metadata(path)
    assert meta["associated_files"] == ["vocab.txt"]
    subgraph = meta["metadata"]["subgraph_metadata"][0]
    assert [t["name"] for t in subgraph["input_tensor_metadata"]] == ["ids", "mask", "segment_ids"]
    assert subgraph["input_process_units"][0]["options_type"] == "BertTokenizerOptions"
    # the metadata names the graph's outputs in the graph's order: check start against the interpreter
    from ai_edge_litert.interpreter import Interpreter
    names = [t["name"] for t in subgraph["output_tensor_metadata"]]
    assert sorted(names) == ["end_logits", "start_logits"]
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    inputs = {"input_ids": np.full((1, 64), 1000, np.int32), "attention_mask": np.ones((1, 64), np.int32),
              "token_type_ids": np.zeros((1, 64), np.int32)}
    inputs["input_ids"][0, :5] = [101, 2054, 2003, 1037, 102]
    by_signature = runner(**inputs)
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    for k, d in zip(("input_ids", "attention_mask", "token_type_ids"), interpreter.get_input_details()):
        assert d["name"].endswith(k)
        interpreter.set_tensor(d["index"], inputs[k])
    interpreter.invoke()
    start = interpreter.get_tensor(interpreter.get_output_details()[names.index("start_logits")]["index"])
    np.testing.assert_allclose(start, by_signature["output_0"], atol=1e-6)


def test_graph_reader_finds_nonfinite_constants(exported):
    ops = read_graph(exported / "model_fp16.tflite")
    assert nonfinite_constants(ops) == []
    weights = [t for op in ops for t in op.inputs if t.constant is not None and t.dtype == "FLOAT16"]
    assert weights, "fp16 weights are read"
    weights[0].constant = np.array([np.inf], np.float16)
    assert nonfinite_constants(ops) == [weights[0].name]


def test_a_file_failing_its_parity_check_is_removed_and_the_export_fails(classifier_dir, tmp_path):
    """The parity gate: a float32 file held to --parity-atol (here below any conversion's rounding) is removed, the
    run ends non-zero in one line naming it and why, the file that passed (fp16, its agreement at least
    --min-agreement) stays, the reports stay, and the run is not marked complete (ship and the benchmarks redo it)."""
    from mobilekd.rundir import completed

    argv = ["--model", classifier_dir, "--out", tmp_path, "--max-len", 32, "--quantize", "none", "fp16",
            "--parity-atol", "1e-12", "--parity-task", "sst2", "--parity-examples", 24]
    line = one_line_error(run_module("mobilekd.recipes.export", *argv, check=False))
    assert f"{tmp_path}: 1 file failed the parity check and was removed: model_none.tflite: max abs diff" in line
    assert "(at most 1e-12); the others are written" in line and "--parity-atol and --min-agreement set" in line
    assert not (tmp_path / "model_none.tflite").exists() and (tmp_path / "model_fp16.tflite").is_file()
    reports = json.loads((tmp_path / "parity.json").read_text())
    assert reports["model_none.tflite"]["parity_check"]["passed"] is False
    assert reports["model_fp16.tflite"]["parity_check"] == {"passed": True, "atol": 1e-12, "min_agreement": 0.9}
    assert "| model_none.tflite (removed: max abs diff" in (tmp_path / "README.md").read_text()
    assert "| model_none.tflite (removed: failed the parity check) |" in (tmp_path / "report.md").read_text()
    assert not completed(tmp_path, [str(a) for a in argv])
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", classifier_dir, "--min-agreement", 1.5,
                                     "--out", tmp_path / "x", check=False))
    assert "--min-agreement 1.5: a share of examples, at most 1" in line and not (tmp_path / "x").exists()


def test_the_parity_gate_judges_a_share_beyond_its_examples_sampling_noise():
    """A quantized file agreeing with PyTorch on 4 of 5 examples is no verdict (its 95% upper bound is above 0.9);
    on 800 of 1000 it is refused, as is a float file off by more than the tolerance or one with NaN outputs."""
    from mobilekd.export.parity import gate_failures

    assert gate_failures({"examples": 5, "agreement": 0.8, "finite": True, "max_abs_diff": 0.1}, "dynamic-int8") == []
    why = gate_failures({"examples": 1000, "agreement": 0.8, "finite": True, "max_abs_diff": 0.1}, "dynamic-int8")
    assert len(why) == 1 and why[0].startswith("prediction agreement 0.8000 with PyTorch on 1000 examples")
    assert len(gate_failures({"examples": 1000, "agreement": 1.0, "finite": False, "max_abs_diff": 0.1}, "none")) == 2
    assert gate_failures({"pairs": 12, "identical": 1.0, "beam_search": {"pairs": 12, "identical": 0.25}}, "none")


def test_export_bad_input_is_one_line(classifier_dir, tmp_path, tokenizer):
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", classifier_dir, "--max-len", 1024, "--out",
                                     tmp_path, check=False))
    assert "--max-len 1024 exceeds the model's 512 positions" in line
    assert not list(tmp_path.glob("*.tflite"))
    save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), tmp_path / "pre", tokenizer)
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", tmp_path / "pre", "--task", "classification",
                                     check=False))
    assert "has no labels" in line
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", classifier_dir, "--quantize", "int8",
                                     "--calibration", tmp_path / "missing.csv", "--out", tmp_path, check=False))
    assert "missing.csv: no such calibration file" in line
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", classifier_dir, "--max-len", 64,
                                     "--lengths", 32, 64, "--out", tmp_path, check=False))
    assert "--lengths 64: each length is between 1 and --max-len (64)" in line
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", tmp_path, check=False))
    assert str(tmp_path) in line
    assert not list(tmp_path.glob("*.tflite")) and not list(tmp_path.glob(".*.tmp"))


def test_length_aware_file_runs_each_length_as_pytorch_does(classifier_dir, tmp_path):
    """--lengths: one more file whose signatures run the model at 16, 32 and 64 tokens over weights stored once,
    each checked on the SST-2 dev sentences that fit it, full-integer calibrated per signature; the one-signature
    file beside it is the one MediaPipe reads (its test above)."""
    from ai_edge_litert.interpreter import Interpreter

    run_module("mobilekd.recipes.export", "--model", classifier_dir, "--out", tmp_path, "--max-len", 64, "--lengths",
               32, 16, "--quantize", "int8", "--calibration-examples", 16, "--parity-task", "sst2",
               "--parity-examples", 48)
    plain, aware = tmp_path / "model_int8.tflite", tmp_path / "model_int8_lengths.tflite"
    assert set(Interpreter(model_path=str(aware)).get_signature_list()) == {"serving_default", "seq_16", "seq_32"}
    assert aware.stat().st_size < 1.1 * plain.stat().st_size  # the weights once, not three times
    report = json.loads((tmp_path / "parity.json").read_text())[aware.name]
    assert report["max_abs_diff"] <= 1e-2 and report["agreement"] >= 0.95  # serving_default, at 64
    lengths = report["lengths"]
    assert abs(sum(lengths["share"].values()) - 1) < 1e-3 and lengths["dev_examples"] == 872
    for n in ("16", "32"):
        assert lengths["parity"][n]["examples"] > 0 and lengths["parity"][n]["max_abs_diff"] <= 1e-2, n
        assert lengths["parity"][n]["agreement"] >= 0.95, n
    assert lengths["host_ms"]["16"] < lengths["host_ms"]["64"] and lengths["speedup_at_dev"] > 1

    # `mobilekd latency --tflite NAME=FILE` times and estimates each shorter signature as a row of its own
    from android_bench.host import load_runner, random_inputs
    from android_bench.report import entry_graph, length_entries

    entries = length_entries("s", aware)
    assert set(entries) == {"s @16", "s @32"} and length_entries("p", plain) == {}
    runner = load_runner(entries["s @16"], 1)
    assert runner.inputs["input_ids"]["shape"].tolist() == [1, 16]
    assert [o.shape for o in runner(**random_inputs(runner.inputs))] == [(1, 2)]  # SST-2's two labels
    assert 0 < len(entry_graph(entries["s @16"])) == len(entry_graph(entries["s @32"]))


def test_the_official_masked_score_form_exports_with_parity(tmp_path, tokenizer):
    """A student masking padding as TF1 does (scores * mask + (1 - mask) * -6) exports to a .tflite that computes
    what PyTorch computes on padded SST-2 dev sentences; transformers refuses the directory (it masks additively)."""
    import transformers

    torch.manual_seed(0)
    config = PRESETS["demo_student"].config.replace(id2label={0: "negative", 1: "positive"}, masked_score=-6.0)
    save_pretrained(perturbed(MobileBertForSequenceClassification(config)), tmp_path / "model", tokenizer)
    run_module("mobilekd.recipes.export", "--model", tmp_path / "model", "--out", tmp_path / "out", "--max-len", 64,
               "--quantize", "none", "--parity-task", "sst2", "--parity-examples", 48)
    report = json.loads((tmp_path / "out" / "parity.json").read_text())["model_none.tflite"]
    assert report["max_abs_diff"] <= 1e-5 and report["agreement"] == 1.0
    with pytest.raises(ValueError, match="ib_bert"):
        transformers.AutoModel.from_pretrained(tmp_path / "model")


@pytest.mark.parametrize("preset,trained,shared", [("mobilebert_tiny", False, 3), ("mobilebert_tiny", True, 0),
                                                   ("mobilebert", False, 0)])
def test_tiny_bottleneck_is_computed_once(preset, trained, shared, tmp_path, capsys):
    """TINY feeds Q/K/V and the residual from one bottleneck. With the NoNorm at its initial identity (the latency
    benchmark's random-weight files) the converter computes it twice per layer, our export once (one RESHAPE
    instead), with bit-equal outputs; a trained NoNorm is folded into a single product and nothing is shared.
    MobileBERT's two bottlenecks (different weights) stay two. Our conversion prints nothing on stdout (the
    converter's progress goes to stderr), so that a table a benchmark prints stays the table."""
    import litert_torch

    from mobilekd.export.graph import shared_products
    from mobilekd.export.litert import ExportWrapper, convert, sample_inputs

    layers = shared or 3
    config = PRESETS[preset].config.replace(num_hidden_layers=layers, hidden_size=64, intra_bottleneck_size=32,
                                            intermediate_size=64, embedding_size=32, num_attention_heads=2)
    torch.manual_seed(0)
    model = MobileBertForQuestionAnswering(config).eval()
    model = perturbed(model) if trained else model
    raw = tmp_path / "raw.tflite"
    litert_torch.convert(ExportWrapper(model, "qa").eval(), sample_kwargs=sample_inputs(32)).export(str(raw))
    capsys.readouterr()
    ours = convert(model, "qa", 32, tmp_path / "ours.tflite")
    printed = capsys.readouterr()
    assert printed.out == "" and "LiteRT-Torch Convert" in printed.err

    def products(path):
        return [op for op in read_graph(path) if op.name in ("FULLY_CONNECTED", "BATCH_MATMUL")]

    assert shared_products(raw.read_bytes())[1] == shared
    assert len(products(raw)) - len(products(ours)) == shared
    rng = np.random.default_rng(0)
    arrays = {"input_ids": rng.integers(0, config.vocab_size, (1, 32)).astype(np.int32),
              "attention_mask": np.ones((1, 32), np.int32), "token_type_ids": np.zeros((1, 32), np.int32)}
    arrays["attention_mask"][0, 20:] = 0
    for a, b in zip(run_tflite(raw, arrays), run_tflite(ours, arrays)):
        assert np.abs(a).max() > 1e-3
        np.testing.assert_array_equal(a, b)


def test_float_islands_are_reported(exported):
    """The full-int8 file keeps each layer's softmax (and the classifier's) in float, by our recipe: one island per
    softmax, entered by a DEQUANTIZE; the float files report none."""
    from mobilekd.export.graph import float_islands

    reports = json.loads((exported / "parity.json").read_text())
    assert reports["model_none.tflite"]["float_islands"] is None
    assert reports["model_dynamic_int8.tflite"]["float_islands"] is None  # int8 weights, float activations
    islands = reports["model_int8.tflite"]["float_islands"]
    layers = PRESETS["demo_student"].config.num_hidden_layers
    assert islands == float_islands(read_graph(exported / "model_int8.tflite"))
    assert islands["ops_in_float"].get("SOFTMAX") == layers + 1
    assert islands["islands"] >= layers + 1 and islands["dequantize"] >= layers + 1
    assert "| model_int8.tflite |" in (exported / "report.md").read_text()
