"""Quantization-aware training for a full-integer `.tflite`, through PyTorch's PT2E flow as litert-torch consumes it.

    prepared = prepare_qat(model, "classification", seq_len)   # the app's graph with fake quantization
    ... train `prepared` (it takes and returns what the .tflite will) ...
    convert_qat(prepared, seq_len, out_path)                    # int8 weights and activations, ranges from training

The official recipe (google-research mobilebert/modeling.py, `quantize` and its callers): activations fake-quantized
with moving-average ranges (`quant_ops.MovingAvgQuantize`: ema_decay 0.999, asymmetric, 8 bits, starting at
[-6, 6]) at the input of every dense layer, on the attention scores (after QK^T, after masking, after adding the -6
mask, then clipped to [-6, 60]) and on the context layer; weights with their last value's range, symmetric, narrow
range (`quant_ops.LastValueQuantize`); `BertModel.__init__` refuses QAT without relu6 and NoNorm.

Ours is litert-torch's PT2E quantizer (`litert_torch/quantize/pt2e_quantizer.py`,
`get_symmetric_quantization_config(is_per_channel=True, is_qat=True)`), chosen because its fake quantization is
what litert-torch lowers to TFLite's int8 kernels, with the ranges learned in training (no calibration):
activations asymmetric int8 with moving-average ranges (`FusedMovingAvgObsFakeQuantize`, averaging constant 0.01,
i.e. an EMA decay of 0.99, not 0.999); weights symmetric narrow range [-127, 127] per output channel (per tensor in
the official code), their range a moving average too. Which tensors get fake quantization is the quantizer's
annotation (inputs and outputs of linear, add, mul, cat and fixed-range ops such as softmax), not the official
list: the attention products are not annotated, so they stay float islands (`mobilekd.export.graph.float_islands`
reports them). relu6, NoNorm and the clipped -6 mask are the model's own options, not enforced here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mobilekd.export.litert import INPUT_NAMES, ExportWrapper, sample_inputs
from mobilekd.fileio import atomic_path


def quantizer():
    """litert-torch's PT2E quantizer, per-channel symmetric weights, QAT: the one `prepare_qat` annotates with and
    `convert_qat` lowers with."""
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

    class NoConvolution(PT2EQuantizer):
        # its QAT-only patterns fold convolutions into batch norms: our models have neither, and building those
        # patterns fails under torch 2.13 (torchao exports a plain function as the pattern)
        STATIC_QAT_ONLY_OPS: list = []

    return NoConvolution().set_global(get_symmetric_quantization_config(is_per_channel=True, is_qat=True))


def prepare_qat(model: torch.nn.Module, head: str, seq_len: int) -> torch.fx.GraphModule:
    """The app-facing graph of `model` (int32 inputs, `head`'s outputs, as `convert` exports it) with fake
    quantization inserted; any batch size, `seq_len` tokens. Exported in eval mode: no dropout while it trains."""
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    batch = torch.export.Dim("batch", min=1, max=4096)
    sample = {k: v.repeat(2, 1) for k, v in sample_inputs(seq_len).items()}  # 2 rows: a batch size that can vary
    program = torch.export.export(ExportWrapper(model.eval(), head).eval(), (), sample,
                                  dynamic_shapes={k: {0: batch} for k in INPUT_NAMES})
    return allow_exported_model_train_eval(prepare_qat_pt2e(program.module(), quantizer()))  # .train() / .eval() work


def quantization(prepared: torch.fx.GraphModule, on: bool) -> torch.fx.GraphModule:
    """Switch fake quantization and range tracking on or off together (off: the float model's function)."""
    from torchao.quantization.pt2e import disable_fake_quant, disable_observer, enable_fake_quant, enable_observer

    for fn in ((enable_fake_quant, enable_observer) if on else (disable_fake_quant, disable_observer)):
        prepared.apply(fn)
    return prepared


def freeze_ranges(prepared: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Stop tracking ranges, fake quantization staying on: the graph as the int8 file computes it (evaluation, and
    the official code's `is_training=False`)."""
    from torchao.quantization.pt2e import disable_observer

    return prepared.apply(disable_observer)


def convert_qat(prepared: torch.fx.GraphModule, seq_len: int, out_path, metadata=None, head: str = "classification"
                ) -> Path:
    """Lower a trained `prepare_qat` graph to a full-integer `.tflite` at `out_path` (written atomically), its
    ranges the ones training tracked; `metadata` as `mobilekd.export.litert.convert` takes it."""
    import litert_torch
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    converted = convert_pt2e(prepared, fold_quantize=False)
    edge = litert_torch.convert(converted, sample_kwargs=sample_inputs(seq_len),
                                quant_config=QuantConfig(pt2e_quantizer=quantizer()))
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        edge.export(str(tmp))
        if metadata is not None:
            from mobilekd.export.metadata import add_metadata

            add_metadata(tmp, head, *metadata)
    return out_path
