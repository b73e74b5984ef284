"""PyTorch straight to LiteRT (`.tflite`) with litert-torch, and dynamic-range int8 through ai-edge-quantizer.

The exported graph takes three static `[1, seq_len]` int32 inputs named `input_ids`, `attention_mask` and
`token_type_ids` (the signature Android apps and MediaPipe's BERT tasks expect). Classifiers end in a softmax;
question answering returns start and end logits; the masked-LM head returns logits for every position.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from mobilekd.errors import UserError
from mobilekd.fileio import atomic_path

QUANTIZATIONS = ("none", "dynamic-int8", "weight-int8")


class ExportWrapper(torch.nn.Module):
    """int32 inputs in, the app-facing outputs out."""

    def __init__(self, model, head: str):
        super().__init__()
        self.model, self.head = model, head

    def forward(self, input_ids, attention_mask, token_type_ids):
        args = (input_ids.long(), attention_mask.long(), token_type_ids.long())
        if self.head == "classification":
            return torch.softmax(self.model(*args), dim=-1)
        if self.head == "qa":
            return self.model(*args)
        positions = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
        return self.model(*args, masked_positions=positions).mlm_logits.view(*input_ids.shape, -1)


def sample_inputs(seq_len: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.zeros(1, seq_len, dtype=torch.int32),
            "attention_mask": torch.ones(1, seq_len, dtype=torch.int32),
            "token_type_ids": torch.zeros(1, seq_len, dtype=torch.int32)}


def convert(model, head: str, seq_len: int, out_path, quantize: str = "none") -> Path:
    """Convert `model` (eval mode) and write `out_path` atomically; quantize afterwards if asked."""
    import litert_torch

    if quantize not in QUANTIZATIONS:
        raise UserError(f"--quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}")
    if seq_len > model.config.max_position_embeddings:
        raise UserError(f"--seq-len {seq_len} exceeds the model's {model.config.max_position_embeddings} positions")
    wrapper = ExportWrapper(model.eval(), head).eval()
    try:
        edge = litert_torch.convert(wrapper, sample_kwargs=sample_inputs(seq_len))
    except Exception as err:  # the converter's own message names the op it rejects
        raise UserError(f"litert-torch could not convert the model: {type(err).__name__}: {err}"[:500]) from None
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        edge.export(str(tmp))
        if quantize != "none":
            _quantize(tmp, quantize)
    return out_path


def _quantize(path: Path, quantize: str) -> None:
    from ai_edge_quantizer import quantizer, recipe

    chosen = {"dynamic-int8": recipe.dynamic_wi8_afp32, "weight-int8": recipe.weight_only_wi8_afp32}[quantize]
    result = quantizer.Quantizer(str(path), chosen()).quantize()
    path.write_bytes(bytes(result.quantized_model))


def op_histogram(path) -> dict[str, int]:
    """Operator counts of a `.tflite` graph, most frequent first."""
    from ai_edge_litert.interpreter import Interpreter

    ops = Interpreter(model_path=str(path))._get_ops_details()
    return dict(Counter(op["op_name"] for op in ops).most_common())
