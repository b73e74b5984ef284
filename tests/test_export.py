"""Export to .tflite: the LiteRT interpreter computes what PyTorch computes, on shipped SST-2 dev sentences."""

import json

import pytest
import torch

from helpers import one_line_error, run_module
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.models.presets import PRESETS


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("classifier")
    model = MobileBertForSequenceClassification(PRESETS["demo_student"].config.replace(id2label={0: "0", 1: "1"}))
    with torch.no_grad():  # a non-trivial NoNorm, so folding it into neighbours is really exercised
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    save_pretrained(model, out, tokenizer)
    return out


def test_fp32_and_dynamic_int8_match_pytorch(classifier_dir, tmp_path):
    for quantize in ("none", "dynamic-int8"):
        run_module("mobilekd.export.run", "--model", classifier_dir, "--out", tmp_path, "--seq-len", 64,
                   "--quantize", quantize, "--parity-task", "sst2", "--parity-examples", 48)
        report = json.loads((tmp_path / "parity.json").read_text())
        assert report["examples"] == 48 and report["finite"] and report["flex_or_custom_ops"] == []
        if quantize == "none":
            assert report["max_abs_diff"] <= 1e-5 and report["agreement"] == 1.0
            assert report["accuracy_tflite"] == report["accuracy_torch"]
            fp32_size = report["size_bytes"]
        else:
            assert report["size_bytes"] < fp32_size / 2
            assert report["agreement"] >= 0.9
    ops = json.loads((tmp_path / "ops.json").read_text())
    assert "FULLY_CONNECTED" in ops and not any(op.startswith("Flex") for op in ops)

    from ai_edge_litert.interpreter import Interpreter
    signature = Interpreter(model_path=str(tmp_path / "model_none.tflite")).get_signature_list()["serving_default"]
    assert sorted(signature["inputs"]) == ["attention_mask", "input_ids", "token_type_ids"]


def test_export_bad_input_is_one_line(classifier_dir, tmp_path, tokenizer):
    line = one_line_error(run_module("mobilekd.export.run", "--model", classifier_dir, "--seq-len", 1024, "--out",
                                     tmp_path, check=False))
    assert "--seq-len 1024 exceeds the model's 512 positions" in line
    assert not list(tmp_path.glob("*.tflite"))
    save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), tmp_path / "pre", tokenizer)
    line = one_line_error(run_module("mobilekd.export.run", "--model", tmp_path / "pre", "--task", "classification",
                                     check=False))
    assert "has no labels" in line
