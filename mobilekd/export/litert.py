"""PyTorch straight to LiteRT (`.tflite`) with litert-torch; fp16 and int8 through ai-edge-quantizer recipes.

The exported graph takes three static `[1, seq_len]` int32 inputs named `input_ids`, `attention_mask` and
`token_type_ids` (the signature Android apps and MediaPipe's BERT tasks expect). What each head returns is
its entry in `mobilekd.models.heads.HEADS`: classifiers end in a softmax; question answering returns start and
end logits; the masked-LM head returns logits for every position.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilekd.errors import UserError
from mobilekd.export.graph import float_outputs, shared_products
from mobilekd.export.metadata import add_metadata
from mobilekd.export.signatures import DEFAULT_SIGNATURE, INPUT_NAMES, length_signature
from mobilekd.fileio import atomic_path
from mobilekd.models.heads import HEADS

QUANTIZATIONS = {
    "none": "float32 weights and activations",
    "fp16": "float16 weights, float32 compute (half the size)",
    "dynamic-int8": "int8 weights, activations quantized on the fly (int8 matrix products)",
    "weight-int8": "int8 weights dequantized to float32 (smaller file, float speed)",
    "int8": "full integer: int8 weights and activations with ranges calibrated on task examples",
    "int8-a16": "int8 weights, int16 activations, calibrated: closer to fp32 than int8, but XNNPACK has no "
                "kernels for it (about 20x slower than fp32 on our host)",
}


def tflite_name(quantize: str, prefix: str = "model", lengths: bool = False, fused: bool = False) -> str:
    """The file `mobilekd export` writes for a quantization (model_none.tflite, model_dynamic_int8.tflite, ...;
    a multi-task model's with the prefix model_multitask; with `lengths` the length-aware file beside it,
    model_none_lengths.tflite: MediaPipe's text tasks refuse a file of several subgraphs, so the file they read
    stays one signature; with `fused` a BiLSTM's file with TFLite's fused LSTM kernel, model_none_fused.tflite)."""
    return f"{prefix}_{quantize.replace('-', '_')}{'_lengths' if lengths else ''}{'_fused' if fused else ''}.tflite"
CALIBRATED = ("int8", "int8-a16")


class ExportWrapper(torch.nn.Module):
    """int32 inputs in, the app-facing outputs out."""

    def __init__(self, model, head: str):
        super().__init__()
        self.model, self.head = model, head

    def forward(self, input_ids, attention_mask, token_type_ids):
        outputs = HEADS[self.head].app_outputs(self.model, input_ids.long(), attention_mask.long(),
                                               token_type_ids.long())
        return outputs[0] if len(outputs) == 1 else outputs


def mean_over_lengths(share: dict, per_length: dict) -> float:
    """A per-length figure (latency, FLOPs) averaged over a task's sentences, each run at the shortest signature of
    a length-aware file that holds it: `share` maps each length to the share of sentences it is the shortest for."""
    return sum(share[n] * per_length[n] for n in share)


def load_litert_torch():
    """litert-torch, its progress lines ("[START] LiteRT-Torch Convert", "Write Model to") sent to stderr, so that
    stdout stays what our commands print (tables, JSON) even when a conversion runs inside them. Its progress
    console is rich's, which picks `sys.stderr` at each print once `stderr` is set."""
    import litert_torch
    import litert_torch.progress

    litert_torch.progress.console.stderr = True
    return litert_torch


def sample_inputs(seq_len: int) -> dict[str, torch.Tensor]:
    return {name: (torch.ones if name == "attention_mask" else torch.zeros)(1, seq_len, dtype=torch.int32)
            for name in INPUT_NAMES}


def convert(model, head: str, seq_len: int, out_path, quantize: str = "none", calibration=None,
            metadata: tuple | None = None, lengths: tuple[int, ...] = ()) -> Path:
    """Convert `model` (eval mode) and write `out_path` atomically.

    Quantizes afterwards if asked (`calibration`: input dicts for the calibrated ones, or with `lengths` a dict of
    them per signature); `metadata` = (vocab file, labels or None) attaches the TFLite metadata of
    `mobilekd.export.metadata` last, so quantization cannot drop it. `lengths`: shorter input lengths, each one
    more signature (`length_signature`) over the same weights: litert-torch stores a constant once, so the file
    grows by the signatures' operators only.
    """
    return convert_module(ExportWrapper(model.eval(), head).eval(), model.config, seq_len, out_path, quantize,
                          calibration, metadata, head, lengths=lengths)


def convert_module(module: torch.nn.Module, config, seq_len: int, out_path, quantize: str = "none", calibration=None,
                   metadata: tuple | None = None, head: str | None = None, what: str = "the model",
                   lengths: tuple[int, ...] = ()) -> Path:
    """`convert` for any module taking the three int32 inputs (`ExportWrapper`'s, or the multi-task model's, whose
    outputs are named), `config` its model's: the same checks, graph rewrite, quantization and metadata."""
    litert_torch = load_litert_torch()

    if quantize not in QUANTIZATIONS:
        raise UserError(f"--quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}")
    if quantize in CALIBRATED and not calibration:
        raise UserError(f"--quantize {quantize} needs calibration examples")
    if seq_len > config.max_position_embeddings:
        raise UserError(f"--max-len {seq_len} exceeds the model's {config.max_position_embeddings} positions")
    try:
        if lengths:
            edge = _convert_signatures([(DEFAULT_SIGNATURE, module, sample_inputs(seq_len)),
                                        *((length_signature(n), module, sample_inputs(n)) for n in lengths)])
        else:
            edge = litert_torch.convert(module, sample_kwargs=sample_inputs(seq_len))
    except Exception as err:  # the converter's own message names the op it rejects
        raise UserError(f"litert-torch could not convert {what}: {type(err).__name__}: {err}"[:500]) from None
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        edge.export(str(tmp))
        tmp.write_bytes(shared_products(tmp.read_bytes())[0])  # MobileBERT_TINY's bottleneck computed once
        if quantize != "none":
            quantize_file(tmp, quantize, calibration)
        if metadata is not None:
            add_metadata(tmp, head, *metadata)
    return out_path


def convert_signatures(signatures: list[tuple[str, torch.nn.Module, dict]], out_path, what: str) -> Path:
    """One `.tflite` with a signature per (name, module in eval mode, sample keyword inputs), written atomically;
    a conversion litert-torch refuses is one line naming `what` (the converter's own message names the op)."""
    try:
        edge = _convert_signatures(signatures)
    except Exception as err:
        raise UserError(f"litert-torch could not convert {what}: {type(err).__name__}: {err}"[:500]) from None
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        edge.export(str(tmp))
    return out_path


def _convert_signatures(signatures: list[tuple[str, torch.nn.Module, dict]]):
    """litert-torch's edge model of one signature per (name, module, sample keyword inputs)."""
    litert_torch = load_litert_torch()

    converter = None
    for name, module, sample in signatures:
        add = litert_torch.signature if converter is None else converter.signature
        converter = add(name, module, sample_kwargs=sample)
    return converter.convert()


def quantize_embeddings(path: Path) -> None:
    """Rewrite the `.tflite` at `path` with its EMBEDDING_LOOKUP tables in int8, one symmetric scale per row
    (ai-edge-quantizer's dynamic-range config for that op alone: the lookup reads the int8 rows and returns float),
    the rest of the graph as it is. Rows already on that grid (`mobilekd.export.qat.int8_rows`) come through
    unchanged."""
    from ai_edge_quantizer import qtyping, quantizer

    q = quantizer.Quantizer(str(path))
    q.add_dynamic_config(regex=".*", operation_name=qtyping.TFLOperationName.EMBEDDING_LOOKUP, num_bits=8)
    path.write_bytes(bytes(q.quantize(None, enable_progress_report=False).quantized_model))


def quantized_copy(source: Path, path: Path, quantize: str) -> Path:
    """`source` quantized by `quantize_file` (no calibration) into `path`, written atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(Path(source).read_bytes())
        quantize_file(tmp, quantize)
    return path


def quantize_file(path: Path, quantize: str, calibration=None) -> None:
    """Rewrite the `.tflite` at `path` quantized by the ai-edge-quantizer recipe for `quantize`."""
    from ai_edge_quantizer import qtyping, quantizer, recipe

    if quantize == "fp16":
        q = quantizer.Quantizer(str(path))
        q.add_weight_only_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, num_bits=16,
                                 algorithm_key=recipe.AlgorithmName.FLOAT_CASTING)
    else:
        chosen = {"dynamic-int8": recipe.dynamic_wi8_afp32, "weight-int8": recipe.weight_only_wi8_afp32,
                  "int8": recipe.static_wi8_ai8, "int8-a16": recipe.static_wi8_ai16}[quantize]
        q = quantizer.Quantizer(str(path), chosen())
    ranges = None
    if quantize in CALIBRATED:  # softmax stays float: a float output (MediaPipe reads no int8), finer attention
        q.update_quantization_recipe(regex=".*", operation_name=qtyping.TFLOperationName.SOFTMAX,
                                     algorithm_key=recipe.AlgorithmName.NO_QUANTIZE)
        ranges = q.calibrate(calibration if isinstance(calibration, dict) else {DEFAULT_SIGNATURE: calibration},
                             num_threads=1)
    model = bytes(q.quantize(ranges, enable_progress_report=False).quantized_model)
    path.write_bytes(float_outputs(model) if quantize in CALIBRATED else model)
