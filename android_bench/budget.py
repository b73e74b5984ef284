"""A model shape's Pixel-class latency ESTIMATE before it is trained: what `mobilekd ship` keeps or drops a candidate
student by, so that no training is spent on a shape the latency budget excludes.

The shape (a `ModelConfig`) is built as a two-class classifier with random, trained-like weights
(`models.trained_like`: latency does not depend on the values, the graph does), converted fp32 at the sequence length
the app will run, and priced by the cost model of `android_bench.estimate` with the GEMM efficiency fitted on the
paper's MobileBERT (`efficiency`, as `mobilekd latency` does): the same figure `mobilekd latency` gives the trained
model's file. Each shape's figure is kept in the cache (a conversion takes 2-7 s on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

from android_bench import estimate as cost
from android_bench.models import CACHE, GRAPHS, export_preset, trained_like
from mobilekd.export.graph import read_graph
from mobilekd.fileio import read_json, write_json
from mobilekd.models.config import ModelConfig

ESTIMATES = "estimates.json"  # in the cache: shape digest -> its estimate


@lru_cache(maxsize=None)
def efficiency(cache: Path = CACHE) -> float:
    """The GEMM efficiency at which the cost model gives the paper's MobileBERT its published Pixel 4 latency
    (`estimate.calibrate`, on the fp32 preset at sequence 128, whatever length is estimated)."""
    return cost.calibrate(cost.op_costs(read_graph(export_preset("mobilebert", "none", 128, cache))))


def shape_key(config: ModelConfig, seq_len: int, device: str) -> str:
    """A digest of what the estimate depends on: the shape, the length, the device, the graphs' version."""
    shape = {k: v for k, v in config.to_dict().items() if k not in ("id2label", "label2id")}
    text = json.dumps([shape, seq_len, device, GRAPHS], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def estimate_file(path, device: str = "pixel4", cache: Path = CACHE) -> dict:
    """{"ms": the estimate at 4 threads, "gflops"} of an exported single-signature `.tflite` file's graph."""
    predicted = cost.estimate(cost.op_costs(read_graph(path)), cost.load_profile(device), 4, efficiency(cache))
    return {"ms": round(predicted["ms"], 2), "gflops": round(predicted["gflops"], 3)}


def estimate_shape(config: ModelConfig, seq_len: int, device: str = "pixel4", cache: Path = CACHE) -> dict:
    """{"ms": the estimate at 4 threads, "gflops", "params_m"} for a classifier of `config`'s shape at `seq_len`."""
    from mobilekd.export.litert import convert
    from mobilekd.models.heads import MobileBertForSequenceClassification

    cache = Path(cache)
    key, store = shape_key(config, seq_len, device), cache / ESTIMATES
    known = read_json(store) if store.is_file() else {}
    if key in known:
        return known[key]
    torch.manual_seed(0)
    model = trained_like(MobileBertForSequenceClassification(config.replace(id2label={0: "0", 1: "1"})).eval())
    with tempfile.TemporaryDirectory() as tmp:  # the graph is read, not kept: a teacher's file is ~90 MB
        predicted = estimate_file(convert(model, "classification", seq_len, Path(tmp) / "shape.tflite"), device,
                                  cache)
    result = {**predicted, "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
              "seq_len": seq_len, "device": device}
    known = read_json(store) if store.is_file() else {}  # another process may have added shapes meanwhile
    write_json(store, {**known, key: result})
    return result


def estimate_bilstm(sizes: dict, vocab_size: int, pair: bool, seq_len: int, device: str = "pixel4",
                    cache: Path = CACHE) -> dict:
    """`estimate_shape` for Tang et al.'s BiLSTM (`mobilekd bilstm`) of these sizes (`hidden_size`,
    `embedding_size`, ...) over a vocabulary of `vocab_size`, siamese for sentence pairs, as the file an app ships
    of it: TFLite's fused LSTM kernel (`mobilekd export --fused-lstm`, made in the TensorFlow venv; litert-torch's
    unrolled steps are about four times slower on the cost model at 64 word pieces), priced by the same cost
    model. The first BiLSTM priced makes the TensorFlow venv (minutes, once)."""
    from mobilekd.export.fused_lstm import convert_fused
    from mobilekd.models.bilstm import BiLSTMClassifier, BiLSTMConfig

    config = BiLSTMConfig(vocab_size=vocab_size, pair=pair, id2label={0: "0", 1: "1"}, **sizes)
    text = json.dumps(["bilstm-fused", config.to_dict(), seq_len, device, GRAPHS], sort_keys=True)
    key, store = hashlib.sha256(text.encode()).hexdigest()[:16], Path(cache) / ESTIMATES
    known = read_json(store) if store.is_file() else {}
    if key in known:
        return known[key]
    torch.manual_seed(0)
    model = trained_like(BiLSTMClassifier(config).eval())
    path = Path(cache) / "shapes" / f"bilstm-{key}.tflite"  # the converter's log stays beside it if it fails
    predicted = estimate_file(convert_fused(model, seq_len, path), device, cache)
    path.unlink()
    result = {**predicted, "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
              "seq_len": seq_len, "device": device}
    known = read_json(store) if store.is_file() else {}  # another process may have added shapes meanwhile
    write_json(store, {**known, key: result})
    return result
