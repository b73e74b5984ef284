"""The BiLSTM's `.tflite` with TFLite's fused LSTM kernel: a tf-keras mirror of the trained weights, converted by the
TensorFlow converter, which turns a Keras LSTM layer into one UNIDIRECTIONAL_SEQUENCE_LSTM operator (its fusion of
the layer's `api_implements` function, tensorflow/compiler/mlir/lite/transforms/prepare_composite_functions_tf.cc).
litert-torch has no LSTM lowering: it unrolls `nn.LSTM` into about 50 operators a step and direction
(`mobilekd.models.bilstm._unrolled`), each a dispatch on a phone; this file has a few dozen in all.

The graph computes what `BiLSTMClassifier.forward` computes, under the export's three int32 inputs and its softmax
(the score itself for a one-output regression model):
  1. sentence a's and b's word pieces (`segment_masks`: attended, [CLS] and [SEP] left out, by segment); a pair
     runs as a batch of two through one shared encoder (siamese);
  2. each sentence's pieces gathered to the front in order (TOPK_V2 of mask x 2T - position) for the forward LSTM,
     and in reverse (mask x 2T + position) for the backward one: both read the sentence alone, as the packed
     `nn.LSTM` does. The fused kernel takes no mask (tensorflow/tensorflow#49936, the converter's maintainer: "we
     do not support masking for the fused lstm"), so padding is moved behind the sentence instead, where it cannot
     reach an earlier step;
  3. the forward direction's final state is its output at step len - 1, the backward one's likewise (the reversed
     sentence's last step is the first word); `pooling: max` takes the maximum of the outputs over steps < len;
  4. a sentence with no word pieces pools to zeros, then f(h1, h2) for pairs, fc1, ReLU, fc2, softmax (a
     regression model: fc2's score).
Keras' LSTM gates are PyTorch's (i, f, g / c, o), its kernel the transpose of weight_ih, its one bias b_ih + b_hh.

One departure, for the runtime's sake: each LSTM reads one step more, first. The converter gives the fused op its
initial hidden and cell states as variable tensors, which the kernel reads as the start and overwrites with the
final state (tensorflow/lite/kernels/unidirectional_sequence_lstm.cc, `Eval`: `GetVariableInput` for
kOutputStateTensor and kCellStateTensor, passed to `lstm_eval::EvalFloat` as in-out state): a run would start
where the previous one ended unless the app called `resetVariableTensors()` before each run, which MediaPipe's
text tasks do not. Writing zeros into them with an op (FILL) is refused by MediaPipe's interpreter ("Output tensor
... is a variable"). So a reset step shuts the input, forget and output gates (`reset_step`) and the sentence
starts from zero state inside the graph; the extra input feature is 0 on every real step, so the rest of the
computation is unchanged.

This file runs twice: in our environment (`convert_fused`: the weights to safetensors, the TensorFlow venv, the
converter in a subprocess, the tensor names MediaPipe's metadata reads, the metadata) and in the venv's
interpreter (`build_and_convert`: TensorFlow itself; it imports nothing of ours). The venv (PINS) is made once,
under .cache/ (minutes, from the package index); MOBILEKD_TENSORFLOW_PYTHON names an interpreter that has them.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

PINS = ["tensorflow-cpu==2.21.0", "tf-keras==2.21.0", "safetensors==0.7.0", "numpy==2.4.6"]
FUSED = {"none": "fp32", "dynamic-int8": "the TensorFlow converter's dynamic range: int8 weights, the LSTM and "
                                         "fully connected layers in its hybrid kernels"}  # --quantize it writes
VENV = ".cache/tensorflow-venv"  # under the checkout
RESET_PREACTIVATION = 1e4  # what the reset step puts into the shut gates (`reset_step`)


# --- the venv's side: TensorFlow, nothing of ours --------------------------------------------------------------

def build_and_convert(config: dict, weights: dict, signatures: dict[str, int], quantize: str) -> bytes:
    """The `.tflite` bytes of the BiLSTM `config` (bilstm.json) with `weights` (its state dict as numpy arrays): one
    signature per (name, input length) of `signatures`, in that order, over the same weights."""
    import tempfile

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    hidden, pair, pooling = config["hidden_size"], config["pair"], config["pooling"]
    table = tf.constant(weights["embeddings.weight"])

    def lstm(suffix: str):
        """The Keras LSTM of one direction, its input one wider: the reset feature (`reset_step`)."""
        kernel = weights[f"lstm.weight_ih_l0{suffix}"].T  # (E, 4H), gates i, f, g, o
        largest = np.maximum(np.abs(kernel).reshape(kernel.shape[0], 4, hidden).max(axis=(0, 2)), 1e-12)  # per gate
        reset = np.repeat(-largest * np.array([1, 1, 0, 1]), hidden)[None]  # i, f and o shut; g untouched
        layer = keras.layers.LSTM(hidden, return_sequences=True)
        layer.build((None, None, kernel.shape[0] + 1))
        layer.set_weights([np.concatenate([kernel, reset]).astype(np.float32),
                           weights[f"lstm.weight_hh_l0{suffix}"].T,
                           weights[f"lstm.bias_ih_l0{suffix}"] + weights[f"lstm.bias_hh_l0{suffix}"]])
        return layer, float(RESET_PREACTIVATION / largest[[0, 1, 3]].min())

    def reset_step(x, value: float):
        """The steps `x` (B, T, E) behind one reset step: a feature column, 0 on every real step, and a first step
        that is 0 but for that feature at `value`, which drives the input, forget and output gates to about
        -RESET_PREACTIVATION whatever the state: c = f * c_prev + i * g and h = o * tanh(c) come out 0 (sigmoid
        of -1e4 is 0 in float32), so the sentence starts from zero state whatever the previous run left in the
        kernel's state tensors."""
        batch = tf.shape(x)[0]
        first = tf.concat([tf.zeros([1, 1, x.shape[-1]]), tf.constant([[[value]]], tf.float32)], -1)
        return tf.concat([tf.tile(first, [batch, 1, 1]), tf.pad(x, [[0, 0], [0, 0], [0, 1]])], 1)

    directions = lstm(""), lstm("_reverse")  # (layer, its reset value) each
    w1, b1 = tf.constant(weights["fc1.weight"].T), tf.constant(weights["fc1.bias"])
    w2, b2 = tf.constant(weights["fc2.weight"].T), tf.constant(weights["fc2.bias"])

    def classifier(seq_len: int):
        spec = tf.TensorSpec([1, seq_len], tf.int32)
        return tf.function(lambda input_ids, attention_mask, token_type_ids: classify(
            input_ids, attention_mask, token_type_ids, seq_len), input_signature=[spec, spec, spec])

    def classify(input_ids, attention_mask, token_type_ids, seq_len: int):
        words = attention_mask * tf.cast((input_ids != config["cls_token_id"]) & (input_ids != config["sep_token_id"]),
                                         tf.int32)
        masks = [words * tf.cast(token_type_ids == k, tf.int32) for k in ((0, 1) if pair else (0,))]
        ids, mask = tf.concat([input_ids] * len(masks), 0), tf.concat(masks, 0)
        steps = tf.range(seq_len, dtype=tf.int32)[None]
        length = tf.reduce_sum(mask, 1)
        pooled = []
        keys = mask * 2 * seq_len - steps, mask * 2 * seq_len + steps  # the sentence first: in order, reversed
        for (layer, value), key in zip(directions, keys):
            order = tf.math.top_k(key, k=seq_len, sorted=True).indices
            out = layer(reset_step(tf.gather(table, tf.gather(ids, order, batch_dims=1)), value))[:, 1:]
            if pooling == "final":
                pooled.append(tf.gather(out, tf.maximum(length - 1, 0), batch_dims=1))
            else:
                pooled.append(tf.reduce_max(tf.where((steps < length[:, None])[..., None], out, -1.0), 1))
        h = tf.where((length > 0)[:, None], tf.concat(pooled, 1), 0.0)
        if pair:
            h1, h2 = h[:1], h[1:]
            h = tf.concat([h1, h2, h1 * h2, tf.abs(h1 - h2)], 1)
        logits = tf.matmul(tf.nn.relu(tf.matmul(h, w1) + b1), w2) + b2
        return {"output_0": logits[:, 0] if logits.shape[-1] == 1 else tf.nn.softmax(logits)}

    module = tf.Module()
    module.forward, module.backward = (layer for layer, _ in directions)
    functions = {name: classifier(n) for name, n in signatures.items()}
    with tempfile.TemporaryDirectory() as saved:  # a SavedModel keeps the LSTMs' `api_implements` functions
        tf.saved_model.save(module, saved, signatures=functions)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=list(signatures))
        if quantize == "dynamic-int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return converter.convert()


def _venv_main(argv=None) -> None:
    """The venv's entry: read the config and weights, write the `.tflite`."""
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--signatures", nargs="+", required=True, help="NAME=LENGTH ...")
    p.add_argument("--quantize", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from safetensors.numpy import load_file

    model = build_and_convert(json.loads(Path(args.config).read_text()), load_file(args.weights),
                              {k: int(v) for k, v in (s.split("=") for s in args.signatures)},
                              args.quantize)
    Path(args.out).write_bytes(model)


# --- our side ------------------------------------------------------------------------------------------------

def tensorflow_python() -> Path:
    """The TensorFlow venv's interpreter (made once under .cache/), or $MOBILEKD_TENSORFLOW_PYTHON's as given."""
    from mobilekd.errors import located
    from mobilekd.fileio import REPO_ROOT
    from mobilekd.sidevenv import side_venv

    given = os.environ.get("MOBILEKD_TENSORFLOW_PYTHON")
    if given and not os.access(given, os.X_OK):
        raise located(given, "MOBILEKD_TENSORFLOW_PYTHON names no executable interpreter")
    return Path(given) if given else side_venv(REPO_ROOT / VENV, PINS, "the fused-LSTM export (TensorFlow)",
                                               "MOBILEKD_TENSORFLOW_PYTHON_BASE")


def convert_fused(model, seq_len: int, out_path, quantize: str = "none", metadata: tuple | None = None,
                  lengths: tuple[int, ...] = ()) -> Path:
    """The BiLSTM `model` (eval mode) as a fused-LSTM `.tflite` at `out_path`, written atomically: converted in the
    TensorFlow venv, the inputs named and ordered as litert-torch's files (`INPUT_NAMES`), then `metadata` =
    (vocab file, labels) as `mobilekd.export.litert.convert` attaches it. `lengths`: shorter input lengths, each one
    more signature (`length_signature`), as `mobilekd.export.litert.convert` makes them."""
    import subprocess
    import tempfile

    from safetensors.torch import save_file

    from mobilekd.errors import UserError
    from mobilekd.export.graph import edit
    from mobilekd.export.signatures import DEFAULT_SIGNATURE, length_signature
    from mobilekd.fileio import atomic_path

    if quantize not in FUSED:
        raise UserError(f"--quantize {quantize}: the fused-LSTM file is written for {', '.join(FUSED)} only")
    python = tensorflow_python()
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as work, atomic_path(out_path) as tmp:
        work = Path(work)
        (work / "bilstm.json").write_text(json.dumps(model.config.to_dict()))
        save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(work / "weights"))
        log = out_path.with_suffix(".log")
        with open(log, "w") as f:  # -I: the child's path starts at the venv, not at this file's folder
            rc = subprocess.run([str(python), "-I", __file__, "--config", str(work / "bilstm.json"), "--weights",
                                 str(work / "weights"), "--signatures", f"{DEFAULT_SIGNATURE}={seq_len}",
                                 *(f"{length_signature(n)}={n}" for n in lengths), "--quantize", quantize, "--out",
                                 str(tmp)], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}).returncode
        if rc != 0:
            raise UserError(f"{log}: the TensorFlow converter failed on the BiLSTM (exit {rc})")
        unfused = _unfused(tmp, 1 + len(lengths))
        if unfused:
            raise UserError(f"{log}: the TensorFlow converter did not fuse the BiLSTM's LSTMs ({unfused})")
        log.unlink()
        tmp.write_bytes(edit(tmp.read_bytes(), _litert_layout))
        if metadata is not None:
            from mobilekd.export.metadata import add_metadata

            add_metadata(tmp, "classification", *metadata)
    return out_path


def _unfused(path: Path, signatures: int) -> str | None:
    """What is wrong with a converted file, if anything: it must hold one subgraph per signature (no control-flow
    subgraphs, which a loop the converter did not fuse brings), each with the two fused LSTMs."""
    from mobilekd.export.graph import op_histogram, read_graph, subgraph_names

    names = subgraph_names(path)
    if len(names) != signatures:
        return f"{len(names)} subgraphs for {signatures} signatures"
    for k, name in enumerate(names):
        ops = op_histogram(read_graph(path, k))
        if ops.get("UNIDIRECTIONAL_SEQUENCE_LSTM") != 2:
            return f"{name}: {ops.get('UNIDIRECTIONAL_SEQUENCE_LSTM', 0)} UNIDIRECTIONAL_SEQUENCE_LSTM ops, not 2"
    return None


def _litert_layout(tree, schema) -> None:
    """Each signature's inputs named and ordered as litert-torch names them (serving_default_input_ids, ...), which
    the metadata writer looks up, and serving_default's subgraph first (the one MediaPipe and the metadata writer
    read), the others by length; the TensorFlow converter names the inputs serving_default_input_ids:0, orders them
    by name, and orders the subgraphs by signature name. The graph has no control flow: no subgraph refers to
    another, so they may move."""
    from mobilekd.export.signatures import DEFAULT_SIGNATURE, INPUT_NAMES, signature_length

    tree.signatureDefs.sort(key=lambda s: (s.signatureKey.decode() != DEFAULT_SIGNATURE,
                                           signature_length(s.signatureKey.decode()) or 0))
    tree.subgraphs = [tree.subgraphs[s.subgraphIndex] for s in tree.signatureDefs]
    for k, (signature, graph) in enumerate(zip(tree.signatureDefs, tree.subgraphs)):
        signature.subgraphIndex = k
        by_name = {}
        for i in graph.inputs:
            name = graph.tensors[i].name.decode().removesuffix(":0")
            graph.tensors[i].name = name.encode()
            by_name[name] = int(i)
        graph.inputs = [by_name[f"{signature.signatureKey.decode()}_{name}"] for name in INPUT_NAMES]


if __name__ == "__main__":
    _venv_main()
