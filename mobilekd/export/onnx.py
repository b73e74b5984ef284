"""ONNX export (torch.onnx, dynamo exporter) for ONNX Runtime (Mobile), checked with onnxruntime.

The graph has the `.tflite`'s interface: static `[1, seq_len]` int32 inputs `input_ids`, `attention_mask`,
`token_type_ids`, and the same outputs (softmax probabilities, start/end logits, or MLM logits). Opset 20, the
first where GELU is one op (at 17/18 it is decomposed through Erf).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobilekd.errors import UserError
from mobilekd.export.litert import ExportWrapper, sample_inputs
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.fileio import atomic_path
from mobilekd.models.heads import HEADS

OPSET = 20


def export_onnx(model, head: str, seq_len: int, out_path) -> Path:
    import torch

    wrapper = ExportWrapper(model.eval(), head).eval()
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        try:
            program = torch.onnx.export(wrapper, (), kwargs=sample_inputs(seq_len), dynamo=True, opset_version=OPSET,
                                        input_names=list(INPUT_NAMES), output_names=list(HEADS[head].outputs),
                                        verbose=False)
        except Exception as err:
            raise UserError(f"torch.onnx could not export the model: {type(err).__name__}: {err}"[:500]) from None
        program.save(str(tmp))
    return out_path


def run_onnx(path, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One example at a time through onnxruntime's CPU provider; outputs in the graph's order."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    outputs = [session.run(None, {k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES})
               for i in range(len(arrays["input_ids"]))]
    return [np.concatenate([o[j] for o in outputs]) for j in range(len(outputs[0]))]


def onnx_ops(path) -> dict[str, int]:
    """Operator counts of the ONNX graph, most frequent first."""
    from collections import Counter

    import onnx

    return dict(Counter(node.op_type for node in onnx.load(str(path)).graph.node).most_common())
