"""Does the exported file compute what PyTorch computes? Run both over real examples and compare."""

from __future__ import annotations

import numpy as np
import torch

from mobilekd.export.litert import INPUT_NAMES, ExportWrapper


def run_tflite(path, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One example at a time through the LiteRT interpreter's signature runner; outputs in signature order,
    dequantized where the model is full-integer."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    runner = interpreter.get_signature_runner()
    scales = {name: d["quantization"] for name, d in runner.get_output_details().items()
              if np.issubdtype(d["dtype"], np.integer)}
    outputs = []
    for i in range(len(arrays["input_ids"])):
        out = runner(**{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES})
        for name, (scale, zero_point) in scales.items():
            out[name] = (out[name].astype(np.float32) - zero_point) * scale
        outputs.append([out[k][0] for k in sorted(out)])
    return [np.stack([o[j] for o in outputs]) for j in range(len(outputs[0]))]


@torch.no_grad()
def run_torch(model, head: str, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    wrapper = ExportWrapper(model.eval(), head)
    out = wrapper(*(torch.from_numpy(arrays[k]) for k in INPUT_NAMES))
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def parity_report(model, head: str, run_exported, arrays: dict[str, np.ndarray],
                  labels: np.ndarray | None = None) -> dict:
    """Max abs output difference, prediction agreement, and (with labels) both accuracies.

    `run_exported(arrays)` runs the exported file (`run_tflite`, `mobilekd.export.onnx.run_onnx`).
    """
    ours, theirs = run_torch(model, head, arrays), run_exported(arrays)
    report = {"examples": len(arrays["input_ids"]),
              "max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(ours, theirs))),
              "finite": bool(all(np.isfinite(b).all() for b in theirs))}
    pred_torch = [a.argmax(-1) for a in ours]
    pred_lite = [b.argmax(-1) for b in theirs]
    report["agreement"] = float(np.mean([np.mean(a == b) for a, b in zip(pred_torch, pred_lite)]))
    if labels is not None and head == "classification":
        report["accuracy_torch"] = float(np.mean(pred_torch[0] == labels))
        report["accuracy_exported"] = float(np.mean(pred_lite[0] == labels))
    return report
