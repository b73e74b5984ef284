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
annotation (linear) and ours (`annotate_activations`: add, mul, the attention products, softmax): every
activation, as in the official code. The attention products are explicit only in the official masked form
(`ModelConfig.masked_score`, -6 there: `mobilekd qat` sets it); with the additive -10000 mask our models run
PyTorch's fused attention, which stays a float island (`mobilekd.export.graph.float_islands` reports them), and
a -10000 would spoil the scores' int8 range anyway. The official clip of the scores to [-6, 60] is
`ModelConfig.score_clip` (`mobilekd qat --score-clip -6 60`; off by default until measured); relu6 and NoNorm are
the model's own options, not enforced here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from mobilekd.export.litert import ExportWrapper, load_litert_torch, sample_inputs
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.fileio import atomic_path


# how the attention core is quantized (`annotate_activations`): "int8" every tensor asymmetric as the quantizer
# has it; "int8-sym" the same with the second operand of both products (K^T in Q K^T, V in P V) symmetric per
# tensor, zero point 0, the only int8 BATCH_MATMUL XNNPACK takes; "int8-sym-float-softmax" that with the masking and
# softmax between the two products in float (XNNPACK takes no int8 SOFTMAX); "float" the whole core float
ATTENTION = ("int8", "int8-sym", "int8-sym-float-softmax", "float")


def quantizer(attention: str = "int8"):
    """litert-torch's PT2E quantizer, per-channel symmetric weights, QAT, with every activation product annotated
    (the attention core as `attention` says, ATTENTION): the one `prepare_qat` annotates with and `convert_qat`
    lowers with."""
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

    class Quantizer(PT2EQuantizer):
        # its QAT-only patterns fold convolutions into batch norms: our models have neither, and building those
        # patterns fails under torch 2.13 (torchao exports a plain function as the pattern)
        STATIC_QAT_ONLY_OPS: list = []

        def annotate(self, model):
            return annotate_activations(super().annotate(model), self.global_config, attention)

    return Quantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_qat=True))


def attention_cores(model: torch.fx.GraphModule) -> set:
    """The nodes from each attention's first product (Q K^T) through its scaling, masking, clip and softmax to its
    second product (P V), and the mask's own branch: in graph order, a matmul none of whose inputs is in a core
    opens one, a node reading a core node (not a core's closing matmul) joins it, a matmul reading one closes it;
    then, backwards from the core's other ops (not the matmuls: their Q, K, V stay int8), every node all of whose
    users are core nodes (the mask, 1 - mask, its -6 term) joins too."""
    core, closed = set(), set()
    for node in model.graph.nodes:
        if node.op != "call_function":
            continue
        reads = [a for a in node.args if isinstance(a, torch.fx.Node) and a in core and a not in closed]
        if node.target == torch.ops.aten.matmul.default:
            core.add(node)
            if reads:
                closed.add(node)
        elif reads:
            core.add(node)
    todo = [a for n in core if n.target != torch.ops.aten.matmul.default
            for a in n.args if isinstance(a, torch.fx.Node)]
    while todo:
        node = todo.pop()
        if node.op == "call_function" and node not in core and all(u in core for u in node.users):
            core.add(node)
            todo += [a for a in node.args if isinstance(a, torch.fx.Node)]
    return core


def annotate_activations(model: torch.fx.GraphModule, config, attention: str = "int8") -> torch.fx.GraphModule:
    """Fake quantization where litert-torch's annotators leave float: its add / mul / softmax annotators find their
    ops by the source records a strict export keeps, which `torch.export`'s default (non-strict) export does not, so
    every residual add (and NoNorm's shift) was left float; and it has none for the attention products. Here, in
    graph order: add, mul and matmul get int8 inputs and output (an input whose producer already has an output range
    keeps that one: no requantize in between), a softmax of quantized scores the fixed output range TFLite's int8
    softmax requires (scale 1/256, zero point -128), except the classifier's: apps (MediaPipe) read float
    probabilities. The official code quantizes the same tensors (modeling.py `attention_layer`: the scores after
    QK^T and masking, the context layer; `dense_layer_*` inputs).

    With `attention` "int8-sym" the second operand of each matmul (K^T, V) is quantized symmetric per tensor (zero
    point 0), where its range is set: at its producer (the key or value projection, looked through the reshapes
    and transposes), so that no requantize stands between. LiteRT's XNNPACK delegate takes an int8 x int8
    BATCH_MATMUL only so (tflite/delegates/xnnpack/xnnpack_delegate.cc, `VisitBatchMatMulNode`: a non-zero zero
    point of input 1 is refused; the first operand and the output may have any; google-ai-edge/LiteRT f67457790,
    the same checks since v2.2.0); the official code's activations are all asymmetric (quant_ops.py
    `MovingAvgQuantize`), so this departs from it, for the delegate's sake.

    With "int8-sym-float-softmax" the products stay int8 as in "int8-sym", and what lies between them (the scaling,
    the masking, the softmax: `attention_cores` less the products) is float: the file dequantizes Q K^T's int8
    output, masks and softmaxes in float and quantizes the probabilities at P V's input, ops XNNPACK takes where it
    takes no int8 SOFTMAX (xnnpack_delegate.cc `VisitSoftmaxNode`: `CheckTensorFloatType` on its input and output;
    DEQUANTIZE and QUANTIZE of per-tensor int8 through `VisitUnaryNode`; LiteRT f67457790). A float softmax alone
    between int8 scores and int8 probabilities is not enough: the converter fuses dequantize, softmax and quantize
    into an int8 SOFTMAX. The official code leaves the probabilities float too (modeling.py `attention_layer`
    quantizes the scores after Q K^T, after the mask's multiply and add, and the context layer, not
    `attention_probs`); that it also quantizes the masked scores, and we do not, is the departure."""
    from litert_torch.quantize.pt2e_quantizer_utils import (get_fixed_qparams_qspec, get_input_act_qspec,
                                                            get_output_act_qspec)
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, QuantizationSpec

    aten = torch.ops.aten
    products = {aten.add.Tensor, aten.mul.Tensor, aten.matmul.default}
    softmax = {aten.softmax.int, aten._softmax.default}
    # ops that pass their input's range on unchanged (a clamp's output lies within it): a consumer looks through
    # them to the producer
    through = {aten.dropout.default, aten.view.default, aten.reshape.default, aten.transpose.int, aten.permute.default,
               aten.clone.default, aten.clamp.default}

    def producer(node):
        while node.op == "call_function" and node.target in through:
            node = node.args[0]
        return node

    def has_range(node) -> bool:
        annotation = producer(node).meta.get("quantization_annotation")
        return annotation is not None and annotation.output_qspec is not None

    def symmetric(spec):
        return dataclasses.replace(spec, qscheme=torch.per_tensor_symmetric)

    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}: one of {', '.join(ATTENTION)}")
    symmetric_second = attention.startswith("int8-sym")
    float_core = attention_cores(model) if attention in ("float", "int8-sym-float-softmax") else set()
    if attention != "float":  # the products themselves stay int8
        float_core = {n for n in float_core if n.target != aten.matmul.default}
    for node in float_core:  # litert-torch's own annotators may have reached some (the mask's mul): undone
        node.meta.pop("quantization_annotation", None)
    for node in model.graph.nodes:
        if node.op != "call_function" or "quantization_annotation" in node.meta or node in float_core:
            continue
        if node.target in softmax and has_range(node.args[0]) and all(u.op != "output" for u in node.users):
            node.meta["quantization_annotation"] = QuantizationAnnotation(
                output_qspec=get_fixed_qparams_qspec(config), _annotated=True)
        elif node.target in products:
            floats = [a for a in node.args[:2] if isinstance(a, torch.fx.Node) and a.meta.get("val") is not None
                      and a.meta["val"].is_floating_point()]
            if floats:
                inputs = {a: get_input_act_qspec(config) for a in floats if not has_range(a)}
                second = node.args[1]
                if symmetric_second and node.target == aten.matmul.default and second in floats:
                    at = None if second in inputs else producer(second).meta["quantization_annotation"]
                    if at is not None and isinstance(at.output_qspec, QuantizationSpec):
                        at.output_qspec = symmetric(at.output_qspec)
                    else:  # no range of its own to change (or a shared one): requantized on the way in
                        inputs[second] = symmetric(get_input_act_qspec(config))
                node.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map=inputs, output_qspec=get_output_act_qspec(config), _annotated=True)
    return model


def prepare_qat(model: torch.nn.Module, head: str, seq_len: int, attention: str = "int8") -> torch.fx.GraphModule:
    """The app-facing graph of `model` (int32 inputs, `head`'s outputs, as `convert` exports it) with fake
    quantization inserted; any batch size, `seq_len` tokens. Exported in eval mode: no dropout while it trains.
    `attention` (ATTENTION): "int8", every tensor of the attention core asymmetric int8: XNNPACK, LiteRT's CPU
    delegate, takes neither its BATCH_MATMULs (their second operand has a zero point) nor int8 SOFTMAX, so they run
    on the builtin kernels between the delegate's partitions; "int8-sym", the products' second operands symmetric,
    which XNNPACK takes; "int8-sym-float-softmax", that with the masking and softmax in float (XNNPACK takes no int8
    SOFTMAX); "float", the attention cores (`attention_cores`) left float."""
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    batch = torch.export.Dim("batch", min=1, max=4096)
    sample = {k: v.repeat(2, 1) for k, v in sample_inputs(seq_len).items()}  # 2 rows: a batch size that can vary
    program = torch.export.export(ExportWrapper(model.eval(), head).eval(), (), sample,
                                  dynamic_shapes={k: {0: batch} for k in INPUT_NAMES})
    # .train() / .eval() work on the result
    return allow_exported_model_train_eval(prepare_qat_pt2e(program.module(), quantizer(attention)))


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


# the tables the exported graph looks rows up in (EMBEDDING_LOOKUP); the position table is added as a constant
LOOKUP_TABLES = ("mobilebert.embeddings.word_embeddings.weight", "mobilebert.embeddings.token_type_embeddings.weight")


@torch.no_grad()
def int8_rows(weight: torch.Tensor) -> torch.Tensor:
    """`weight` on the int8 grid the file will store it on: per row, symmetric, narrow range, scale = the row's
    largest magnitude / 127 (ai_edge_quantizer, uniform_quantize_tensor.py `tensor_zp_scale_from_min_max` with
    symmetric=True, and its narrow-range rounding)."""
    scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-9) / 127
    return (weight / scale).round().clamp(-127, 127) * scale


@torch.no_grad()
def int8_lookup_tables(model: torch.nn.Module) -> list[str]:
    """Put the model's lookup tables (LOOKUP_TABLES) on their int8 grid, in place, before quantization-aware
    training: the network then trains against exactly the rows the file will hold, and `convert_qat(...,
    int8_embeddings=True)` stores them in int8 without a further rounding. The tables stay frozen while it trains
    (a step of training would move them off the grid). Returns their names. Not in the official code, whose
    integer models keep the embedding tables float; ours are 47 of a full-integer file's 51 MB."""
    params = dict(model.named_parameters())
    for name in LOOKUP_TABLES:
        params[name].copy_(int8_rows(params[name]))
    return list(LOOKUP_TABLES)


def convert_qat(prepared: torch.fx.GraphModule, seq_len: int, out_path, metadata=None, head: str = "classification",
                int8_embeddings: bool = False) -> Path:
    """Lower a trained `prepare_qat` graph to a full-integer `.tflite` at `out_path` (written atomically), its
    ranges the ones training tracked; `metadata` as `mobilekd.export.litert.convert` takes it. With
    `int8_embeddings`, the lookup tables too are stored in int8 (`quantize_embeddings`)."""
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    converted = convert_pt2e(prepared, fold_quantize=False)
    # litert-torch reads only whether the quantizer is dynamic: the fake quantization in the graph decides the rest
    edge = load_litert_torch().convert(converted, sample_kwargs=sample_inputs(seq_len),
                                       quant_config=QuantConfig(pt2e_quantizer=quantizer()))
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        edge.export(str(tmp))
        if int8_embeddings:
            from mobilekd.export.litert import quantize_embeddings

            quantize_embeddings(tmp)
        if metadata is not None:
            from mobilekd.export.metadata import add_metadata

            add_metadata(tmp, head, *metadata)
    return out_path
