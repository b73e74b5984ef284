"""The models the latency report compares: our presets at sequence 128 with random weights, as sentence classifiers
ending in a softmax, exported fp32, dynamic-range int8 and full-integer int8 (post-training or through a
quantization-aware graph) and kept in a cache; plus transformers' own MobileBERT through the same converter, the
reference our export must match.

Latency does not depend on the weights' values, but the graph does: the converter drops a normalization whose
scale is 1 and shift 0 and a bias of zeros, as a freshly initialised model has them and a trained one never does.
So the random weights include trained-like norms and biases (`trained_like`), and the graph timed is the graph an
app ships (measured: MobileBERT 1,319 operators, not the 933 of its initial weights; the same GFLOPs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.export.litert import convert, load_litert_torch, quantized_copy, sample_inputs
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.export.qat import convert_qat, freeze_ranges, prepare_qat, quantization
from mobilekd.fileio import REPO_ROOT, atomic_path
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.presets import get_preset

PAPER_MODELS = ("bert_base", "mobilebert_no_opt", "mobilebert", "mobilebert_tiny")
CACHE = REPO_ROOT / ".cache" / "android_bench"  # where the presets' files are kept (`mobilekd latency --cache`)
GRAPHS = "g2"  # in the cached files' names; bumped whenever the graphs change (g2: trained-like, shared products)

def preset_classifier(name: str, **changes) -> MobileBertForSequenceClassification:
    """A two-class classifier of preset `name` (config fields overridden by `changes`), seeded random weights,
    trained-like."""
    torch.manual_seed(0)
    config = get_preset(name).config.replace(id2label={0: "0", 1: "1"}, **changes)
    return trained_like(MobileBertForSequenceClassification(config).eval())


def trained_like(model: torch.nn.Module) -> torch.nn.Module:
    """Every normalization's scale and shift and every bias moved off its initial 1 or 0 (seeded), so that the
    converter keeps what it keeps for a trained model."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                start = 1.0 if "LayerNorm" in name and name.endswith("weight") else 0.0
                p.copy_(start + 0.1 * torch.randn(p.shape, generator=generator))
    return model

QUANTIZE = ("none", "dynamic-int8", "int8", "qat-int8", "qat-int8-sym", "qat-int8-sym-float-softmax",
            "qat-int8-float-attention")
# a qat form -> how its attention core is quantized (mobilekd.export.qat.ATTENTION)
QAT_ATTENTION = {"qat-int8": "int8", "qat-int8-sym": "int8-sym", "qat-int8-sym-float-softmax": "int8-sym-float-softmax",
                 "qat-int8-float-attention": "float"}
CALIBRATION_SENTENCES = 32  # shipped SST-2 training sentences: the full-integer files' ranges


def preset_path(name: str, quantize: str, seq_len: int, cache: Path) -> Path:
    """Where `export_preset` keeps preset `name`'s file."""
    return Path(cache) / f"{name}_{quantize.replace('-', '_')}_{seq_len}_{GRAPHS}.tflite"


def export_preset(name: str, quantize: str, seq_len: int, cache: Path) -> Path:
    """`cache/<name>_<quantize>_<seq_len>.tflite`, converted (and quantized) on first use: "int8" is the
    full-integer file of post-training quantization, "qat-int8" the one of `mobilekd.export.qat` (its ranges
    observed through fake quantization over the same sentences: random weights are not trained),
    "qat-int8-sym" the same with the attention products' second operands symmetric (zero point 0, which XNNPACK
    takes), "qat-int8-sym-float-softmax" that with the masking and softmax between the products in float,
    "qat-int8-float-attention" with each attention's core in float (QAT_ATTENTION)."""
    path = preset_path(name, quantize, seq_len, cache)
    if path.is_file():
        return path
    if quantize == "int8":
        arrays = calibration_arrays(seq_len)
        return convert(preset_classifier(name), "classification", seq_len, path, "int8",
                       [{k: v[i:i + 1] for k, v in arrays.items()} for i in range(CALIBRATION_SENTENCES)])
    if quantize in QAT_ATTENTION:
        model = preset_classifier(name, masked_score=-6.0)  # the official masked attention, as `mobilekd qat` has it
        prepared = quantization(prepare_qat(model, "classification", seq_len,
                                            QAT_ATTENTION[quantize]), True)
        with torch.no_grad():
            prepared(**{k: torch.from_numpy(v) for k, v in calibration_arrays(seq_len).items()})
        return convert_qat(freeze_ranges(prepared), seq_len, path)
    fp32 = preset_path(name, "none", seq_len, cache)
    if not fp32.is_file():
        convert(preset_classifier(name), "classification", seq_len, fp32)
    return path if quantize == "none" else quantized_copy(fp32, path, quantize)

def calibration_arrays(seq_len: int) -> dict[str, np.ndarray]:
    """The first shipped SST-2 training sentences, tokenized by the shipped vocabulary, as int32 model inputs."""
    task = load_task("sst2", default_data("sst2"))
    arrays = encode_classification(task, task.train[:CALIBRATION_SENTENCES], load_tokenizer(), seq_len).arrays
    return {k: arrays[k].astype(np.int32) for k in INPUT_NAMES}


class _TransformersClassifier(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        logits = self.model(input_ids=input_ids.long(), attention_mask=attention_mask.long(),
                            token_type_ids=token_type_ids.long()).logits
        return torch.softmax(logits, dim=-1)

def export_transformers_mobilebert(seq_len: int, cache: Path) -> Path:
    """transformers' MobileBertForSequenceClassification (its default config = the paper's MobileBERT)."""
    from transformers import MobileBertConfig, MobileBertForSequenceClassification as HFModel

    path = cache / f"transformers_mobilebert_none_{seq_len}_{GRAPHS}.tflite"
    if path.is_file():
        return path
    torch.manual_seed(0)
    model = _TransformersClassifier(trained_like(HFModel(MobileBertConfig(num_labels=2)).eval())).eval()
    edge = load_litert_torch().convert(model, sample_kwargs=sample_inputs(seq_len))
    with atomic_path(path) as tmp:
        edge.export(str(tmp))
    return path
