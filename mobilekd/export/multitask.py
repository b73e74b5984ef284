"""A multi-task model (MT-DNN) as one `.tflite` that serves every task: one signature, the three int32 inputs, one
encoder pass, and one output per task named after it: a classification task's probabilities (1, labels), a
regression task's score (1,). An app feeds its sentence (or pair) and reads the output of the feature it needs;
the other task layers cost one small matrix product each.

One signature for every task rather than one per task: an app with several features scores a sentence for all
of them in one encoder pass. Size would not decide it: litert-torch shares the weights of signatures built from the
same module (a micro model measured 13.06 MB with one signature, 13.17 MB with two).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mobilekd.errors import UserError
from mobilekd.export.litert import convert_module
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.export.parity import TFLiteRunner, parity_report
from mobilekd.models.multitask import MultiTaskModel, single_task

UNCALIBRATED = ("none", "fp16", "dynamic-int8", "weight-int8")  # the quantizations that need no task's examples


class MultiTaskExport(torch.nn.Module):
    """int32 inputs in, every task's output out (a dict: the signature's output names)."""

    def __init__(self, model: MultiTaskModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids) -> dict[str, torch.Tensor]:
        return self.model.all_outputs(input_ids.long(), attention_mask.long(), token_type_ids.long())


def convert_multitask(model: MultiTaskModel, seq_len: int, out_path, quantize: str = "none") -> Path:
    """Convert (eval mode) and write `out_path` atomically, quantized afterwards if asked (`convert_module`)."""
    if quantize not in UNCALIBRATED:
        raise UserError(f"--quantize {quantize}: a multi-task file takes {', '.join(UNCALIBRATED)} (a calibrated "
                        f"int8 would need every task's examples)")
    return convert_module(MultiTaskExport(model.eval()).eval(), model.config, seq_len, out_path, quantize,
                          what="the multi-task model")


def run_multitask(path, arrays: dict[str, np.ndarray], task: str, runner: TFLiteRunner | None = None) -> np.ndarray:
    """`task`'s output of the file for every example, one at a time, as an app runs it."""
    runner = runner or TFLiteRunner(path)
    if runner.signature is None or task not in runner.signature.get_output_details():
        raise UserError(f"{path}: has no output named {task}; not a multi-task file of this model")
    return np.stack([runner.signature(**{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES})[task][0]
                     for i in range(len(arrays["input_ids"]))])


def multitask_parity(model: MultiTaskModel, path, examples: dict[str, dict[str, np.ndarray]]) -> dict:
    """Per task, `parity_report` of the task's own classifier (`single_task`) against the file's output for that
    task, over the task's examples (encoded arrays, with labels where known)."""
    runner = TFLiteRunner(path)
    return {task: parity_report(single_task(model, task), "classification",
                                lambda arrays, task=task: [run_multitask(path, arrays, task, runner)], arrays,
                                arrays.get("labels")) for task, arrays in examples.items()}
