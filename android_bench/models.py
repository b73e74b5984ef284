"""The models the latency report compares: our presets at sequence 128 with random weights (latency does not
depend on the values), as sentence classifiers ending in a softmax, exported fp32 and dynamic-range int8 and kept
in a cache; plus transformers' own MobileBERT through the same converter, the reference our export must match.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilekd.export.litert import convert, quantize_file, sample_inputs
from mobilekd.fileio import atomic_path
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.presets import get_preset

PAPER_MODELS = ("bert_base", "mobilebert_no_opt", "mobilebert", "mobilebert_tiny")

def preset_classifier(name: str, **changes) -> MobileBertForSequenceClassification:
    """A two-class classifier of preset `name` (config fields overridden by `changes`), seeded random weights."""
    torch.manual_seed(0)
    config = get_preset(name).config.replace(id2label={0: "0", 1: "1"}, **changes)
    return MobileBertForSequenceClassification(config).eval()

def export_preset(name: str, quantize: str, seq_len: int, cache: Path) -> Path:
    """`cache/<name>_<quantize>_<seq_len>.tflite`, converted (and quantized) on first use."""
    path = cache / f"{name}_{quantize.replace('-', '_')}_{seq_len}.tflite"
    if path.is_file():
        return path
    fp32 = cache / f"{name}_none_{seq_len}.tflite"
    if not fp32.is_file():
        convert(preset_classifier(name), "classification", seq_len, fp32)
    if quantize != "none":
        with atomic_path(path) as tmp:
            tmp.write_bytes(fp32.read_bytes())
            quantize_file(tmp, quantize)
    return path

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
    import litert_torch
    from transformers import MobileBertConfig, MobileBertForSequenceClassification as HFModel

    path = cache / f"transformers_mobilebert_none_{seq_len}.tflite"
    if path.is_file():
        return path
    torch.manual_seed(0)
    model = _TransformersClassifier(HFModel(MobileBertConfig(num_labels=2)).eval()).eval()
    edge = litert_torch.convert(model, sample_kwargs=sample_inputs(seq_len))
    with atomic_path(path) as tmp:
        edge.export(str(tmp))
    return path
