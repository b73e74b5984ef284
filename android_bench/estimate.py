"""Pixel-class latency ESTIMATE: a cost model over the `.tflite` graph against a phone's published figures.

Every operator of the graph (`mobilekd.export.graph.read_graph`) costs, at `threads` threads on the fastest cores:
  matrix products (FULLY_CONNECTED, BATCH_MATMUL)   FLOPs / (SIMD peak of those cores x efficiency), and at
                                                   least their weight bytes / DRAM bandwidth when the model's
                                                   weights do not fit the shared cache (re-read every run);
  every other op (elementwise, reductions, layout)  one pass over its activation bytes at one core's streaming
                                                   rate (16 B/cycle) plus transcendental work (cycles/element,
                                                   TRANSCENDENTAL), on one core;
  fused LSTMs (UNIDIRECTIONAL_SEQUENCE_LSTM)        their gate products (2 x steps x batch x the weights'
                                                   elements, input and recurrent) at ONE core's SIMD peak x
                                                   efficiency, the steps being sequential and the float kernel
                                                   single-threaded, plus 5 transcendentals (3 sigmoids, 2 tanh)
                                                   per cell and step on that core (an assumption: the
                                                   efficiency fitted on GEMMs applied to per-step products);
  every op but RESHAPE (a view)                    DISPATCH_US of fixed overhead.
SIMD peak per core: 128-bit pipes x 8 fp32 FLOP (4-lane FMA) or x 32 int8 ops (SDOT, 16 MACs) per cycle.

This is why LayerNorm + GELU cost more on a phone than their FLOPs say: a LayerNorm is nine elementwise or
reduction passes (MEAN, SQUARED_DIFFERENCE, MEAN, ADD, RSQRT, SUB, MUL, MUL, ADD) over the activations, each
paying a memory pass and a dispatch, where NoNorm folds into the neighbouring matrix product; GELU adds a
transcendental per element where ReLU folds into the product's output clamp.

One number is fitted, `efficiency`, on one published measurement (the paper's MobileBERT, 62 ms on a Pixel 4);
everything else is a prediction. DISPATCH_US, the streaming rate and TRANSCENDENTAL are this model's own
assumptions, not measurements.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from mobilekd.errors import located
from mobilekd.export.graph import Op

PROFILES = Path(__file__).parent / "profiles"
GEMM_OPS = {"FULLY_CONNECTED", "BATCH_MATMUL"}
LSTM_OPS = {"UNIDIRECTIONAL_SEQUENCE_LSTM": {"LOGISTIC": 3, "TANH": 2}}  # transcendentals per cell and step
FREE_OPS = {"RESHAPE"}
DISPATCH_US = 3.0
STREAM_BYTES_PER_CYCLE = 16.0
TRANSCENDENTAL = {"GELU": 3.0, "TANH": 3.0, "LOGISTIC": 3.0, "EXP": 2.0, "SOFTMAX": 2.0, "RSQRT": 1.0}
CALIBRATION = ("pixel4", "mobilebert", 62.0)


def load_profile(name: str) -> dict:
    path = PROFILES / f"{name}.json"
    if not path.is_file():
        raise located(path, f"no device profile {name!r} (have: {', '.join(p.stem for p in PROFILES.glob('*.json'))})")
    return json.loads(path.read_text())


def fastest_cores(profile: dict, threads: int) -> list[dict]:
    cores = [c for c in sorted(profile["cores"], key=lambda c: -c["ghz"]) for _ in range(c["count"])]
    return cores[:threads]


def peak_ops_per_s(profile: dict, threads: int, int8: bool) -> float:
    per_pipe = 32 if int8 else 8
    return sum(c["ghz"] * 1e9 * c["simd_128bit_pipes"] * per_pipe for c in fastest_cores(profile, threads))


def op_costs(ops: list[Op]) -> list[dict]:
    """Per op of a graph (`read_graph`): kind, FLOPs, activation bytes, weight bytes, transcendental elements,
    int8 or not."""
    costs = []
    for op in ops:
        activations = sum(t.nbytes for t in op.inputs + op.outputs if t.constant is None)
        weights = sum(t.nbytes for t in op.inputs if t.constant is not None)
        if op.name in GEMM_OPS:
            k = op.inputs[0].shape[-1]
            flops = 2 * op.outputs[0].size * k
            int8 = any(t.dtype == "INT8" for t in op.inputs[1:])
            costs.append(dict(op=op.name, kind="gemm", flops=flops, weights=weights, int8=int8,
                              activations=activations))
        elif op.name in LSTM_OPS:
            out = op.outputs[0]
            steps = out.size // out.shape[-1]  # steps x batch
            matrices = [t for t in op.inputs if t.constant is not None and len(t.shape) == 2]
            costs.append(dict(op=op.name, kind="sequence", flops=2 * steps * sum(t.size for t in matrices),
                              weights=weights, int8=any(t.dtype == "INT8" for t in matrices), activations=activations,
                              transcendental=out.size))
        else:
            # a DEQUANTIZE of a constant runs once (tensorflow/lite/kernels/dequantize.cc keeps its output:
            # `float_dequantized_weights_initialized`), not every run
            once = op.name == "DEQUANTIZE" and all(t.constant is not None for t in op.inputs)
            kind = "free" if op.name in FREE_OPS or once else "elementwise"
            costs.append(dict(op=op.name, kind=kind, flops=0, weights=weights, int8=False, activations=activations,
                              transcendental=op.outputs[0].size if op.name in TRANSCENDENTAL else 0))
    return costs


def estimate(costs: list[dict], profile: dict, threads: int = 4, efficiency: float = 1.0) -> dict:
    """Predicted latency (ms) of a graph (`op_costs`) with its breakdown by op kind and op type."""
    prime = fastest_cores(profile, 1)[0]["ghz"] * 1e9
    weights_total = sum(c["weights"] for c in costs if c["kind"] == "gemm")
    streams_weights = weights_total > profile["shared_cache_mb"] * 2 ** 20
    by_kind, by_op = defaultdict(float), defaultdict(float)
    for c in costs:
        if c["kind"] == "gemm":
            seconds = c["flops"] / (peak_ops_per_s(profile, threads, c["int8"]) * efficiency)
            if streams_weights:
                seconds = max(seconds, c["weights"] / (profile["dram_gbps"] * 1e9))
        elif c["kind"] == "sequence":
            seconds = (c["flops"] / (peak_ops_per_s(profile, 1, c["int8"]) * efficiency)
                       + c["transcendental"] * sum(n * TRANSCENDENTAL[f] for f, n in LSTM_OPS[c["op"]].items()) / prime)
        elif c["kind"] == "elementwise":
            seconds = (c["activations"] / (STREAM_BYTES_PER_CYCLE * prime)
                       + c["transcendental"] * TRANSCENDENTAL.get(c["op"], 0) / prime)
        else:
            seconds = 0.0
        by_kind[c["kind"]] += seconds * 1000
        by_op[c["op"]] += seconds * 1000
        if c["kind"] != "free":
            by_kind["dispatch"] += DISPATCH_US / 1000
            by_op[c["op"]] += DISPATCH_US / 1000
    counted = [c for c in costs if c["kind"] != "free"]
    return {"ms": sum(by_kind.values()), "by_kind_ms": dict(by_kind),
            "by_op_ms": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
            "ops": len(counted), "elementwise_ops": sum(c["kind"] == "elementwise" for c in costs),
            "elementwise_mb": sum(c["activations"] for c in costs if c["kind"] == "elementwise") / 1e6,
            "gflops": sum(c["flops"] for c in costs) / 1e9, "weights_stream_from_dram": streams_weights}


def calibrate(costs: list[dict]) -> float:
    """The GEMM efficiency at which the model predicts the one published figure used (CALIBRATION) for the
    graph `costs` of that model; bisection, since the prediction falls monotonically with efficiency."""
    device, _, published_ms = CALIBRATION
    profile = load_profile(device)
    low, high = 1e-3, 4.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if estimate(costs, profile, 4, mid)["ms"] > published_ms else (low, mid)
    return (low + high) / 2
