"""An early-exit model (FastBERT) as one `.tflite` an app runs layer by layer: one signature per layer.

    layer_0(input_ids, attention_mask, token_type_ids) -> hidden, probabilities, uncertainty
    layer_k(hidden, attention_mask)                    -> hidden, probabilities, uncertainty   (0 < k < L-1)
    layer_{L-1}(hidden, attention_mask)                -> probabilities, uncertainty           (the model's own head)

Each signature runs one encoder layer (the first also the embeddings) and that layer's classifier; `hidden`
(1, T, H) float32 goes from one signature's output to the next one's input. The app stops at the first layer
whose `uncertainty` (entropy / log(labels), computed in the graph: the app compares one number) is below its
threshold. `run_early_exit` is that loop, run on the file exactly as an app would; the README gives it in Kotlin.
Each signature holds its own layer's weights, so the file is about the size of the plain export.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mobilekd.errors import UserError
from mobilekd.host import identity
from mobilekd.export.litert import convert_signatures, sample_inputs
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.models.early_exit import EarlyExitClassifier, predictions_at, uncertainty
from mobilekd.models.flops import flops_of
from mobilekd.models.mobilebert import additive_mask


def signature_name(layer: int) -> str:
    return f"layer_{layer}"


class LayerSegment(nn.Module):
    """Layer `layer` of an early-exit model (the embeddings first when 0) and the classifier after it."""

    def __init__(self, model: EarlyExitClassifier, layer: int):
        super().__init__()
        self.layer, self.last = layer, layer == model.config.num_hidden_layers - 1
        encoder = model.model.mobilebert
        self.encoder, self.block = encoder, encoder.encoder.layer[layer]
        self.head = model.model if self.last else model.branches[layer]
        self.explicit_attention = False  # True: attention as matrix products a FLOP counter sees (same outputs)

    def forward(self, attention_mask, input_ids=None, token_type_ids=None, hidden=None) -> dict[str, torch.Tensor]:
        attention_mask = attention_mask.long()
        if self.layer == 0:
            hidden = self.encoder.embeddings(input_ids.long(), token_type_ids.long())
        hidden, _ = self.block(hidden, self.encoder.block_mask(attention_mask, hidden.dtype), self.explicit_attention)
        if self.last:
            logits = self.head.classifier(self.encoder.pooler(hidden))
        else:
            logits = self.head(hidden, additive_mask(attention_mask, hidden.dtype))
        probs = torch.softmax(logits, dim=-1)
        out = {"probabilities": probs, "uncertainty": uncertainty(probs)}
        return out if self.last else {"hidden": hidden, **out}


def segment_inputs(model: EarlyExitClassifier, layer: int, seq_len: int) -> dict[str, torch.Tensor]:
    if layer == 0:
        return sample_inputs(seq_len)
    return {"hidden": torch.zeros(1, seq_len, model.config.hidden_size),
            "attention_mask": torch.ones(1, seq_len, dtype=torch.int32)}


@torch.no_grad()
def segment_flops(model: EarlyExitClassifier, seq_len: int) -> list[int]:
    """FLOPs of each layer's signature at batch 1 and `seq_len` (2 x multiply-accumulates, torch's counter): the
    layer, its classifier, and for the first the embeddings' products."""
    flops = []
    was_training = model.training
    model.eval()
    for layer in range(model.config.num_hidden_layers):
        segment = LayerSegment(model, layer)
        segment.explicit_attention = True
        inputs = {k: v.to(next(model.parameters()).device) for k, v in segment_inputs(model, layer, seq_len).items()}
        flops.append(flops_of(segment, **inputs))
    model.train(was_training)
    return flops


def convert_early_exit(model: EarlyExitClassifier, seq_len: int, out_path) -> Path:
    """All layers' signatures in one file, written atomically."""
    model.eval()
    return convert_signatures([(signature_name(layer), LayerSegment(model, layer).eval(),
                                segment_inputs(model, layer, seq_len))
                               for layer in range(model.config.num_hidden_layers)], out_path, "the early-exit model")


class EarlyExitRunner:
    """The app's loop over an early-exit `.tflite`: `runner(threshold, input_ids=..., attention_mask=...,
    token_type_ids=...)` (each (1, T) int32) -> (probabilities, the 0-based layer it left at)."""

    def __init__(self, path, threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        names = self.interpreter.get_signature_list()
        if not names or set(names) != {signature_name(k) for k in range(len(names))}:
            raise UserError(f"{path}: not an early-exit file (signatures {sorted(names)})")
        self.layers = [self.interpreter.get_signature_runner(signature_name(k)) for k in range(len(names))]

    def __call__(self, threshold: float, **inputs) -> tuple[np.ndarray, int]:
        out = self.layers[0](**inputs)
        layer = 0
        while layer < len(self.layers) - 1 and not out["uncertainty"][0] < threshold:
            layer += 1
            out = self.layers[layer](hidden=out["hidden"], attention_mask=inputs["attention_mask"])
        return out["probabilities"][0], layer


def run_early_exit(path, arrays: dict[str, np.ndarray], threshold: float,
                   runner: EarlyExitRunner | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every example through the file one at a time: (N, labels) probabilities and (N,) exit layers."""
    runner = runner or EarlyExitRunner(path)
    probs, layers = [], []
    for i in range(len(arrays["input_ids"])):
        p, layer = runner(threshold, **{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES})
        probs.append(p)
        layers.append(layer)
    return np.stack(probs), np.asarray(layers)


@torch.no_grad()
def torch_exits(model: EarlyExitClassifier, arrays: dict[str, np.ndarray], thresholds, batch_size: int = 64):
    """PyTorch's decisions over the same examples: per threshold, (predicted labels, exit layers)."""
    model.eval()
    logits = torch.cat([model(*(torch.from_numpy(arrays[k][s:s + batch_size]) for k in INPUT_NAMES))
                        for s in range(0, len(arrays["input_ids"]), batch_size)])
    return {t: (p.numpy(), layers.numpy()) for t, (p, layers) in predictions_at(logits, thresholds).items()}


def early_exit_parity(model: EarlyExitClassifier, path, arrays: dict[str, np.ndarray], thresholds) -> dict:
    """Per threshold: how many examples leave at the same layer with the same prediction in the file as in
    PyTorch, and the average layers executed."""
    runner, ours = EarlyExitRunner(path), torch_exits(model, arrays, thresholds)
    report = {}
    for t in thresholds:
        probs, layers = run_early_exit(path, arrays, t, runner)
        pred_torch, layers_torch = ours[t]
        report[str(t)] = {"examples": len(layers), "same_exit": float(np.mean(layers == layers_torch)),
                          "same_prediction": float(np.mean(probs.argmax(-1) == pred_torch)),
                          "avg_layers": float(np.mean(layers + 1)),
                          "avg_layers_torch": float(np.mean(layers_torch + 1))}
    return report


def time_early_exit(path, full_path, arrays: dict[str, np.ndarray], thresholds, rounds: int = 2,
                    threads: int = 1) -> dict:
    """Host latency per input of the app's loop over every example, at each threshold, and of the plain full model
    (`full_path`, one signature) over the same examples: each round times every configuration in turn (the order
    reversed every other round), so a slow spell of a shared machine hits them alike; reported: the median over
    rounds of the mean milliseconds per input. One untimed pass of each first."""
    from mobilekd.export.parity import TFLiteRunner

    runner, full = EarlyExitRunner(path, threads), TFLiteRunner(full_path, threads)
    n = len(arrays["input_ids"])
    feeds = [{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES} for i in range(n)]
    configs = {"full": lambda feed: full(**feed), **{t: (lambda feed, t=t: runner(t, **feed)) for t in thresholds}}
    times = {key: [] for key in configs}
    for r in range(rounds + 1):
        for key in (list(configs) if r % 2 else list(configs)[::-1]):
            start = time.perf_counter()
            for feed in feeds:
                configs[key](feed)
            if r:  # round 0 is the warm-up
                times[key].append((time.perf_counter() - start) * 1000 / n)
    return {"examples": n, "threads": threads, "rounds": rounds, "full_ms": float(np.median(times["full"])),
            "ms": {str(t): float(np.median(times[t])) for t in thresholds}, "host": identity()}
