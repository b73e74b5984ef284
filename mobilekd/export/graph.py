"""A `.tflite` file read as data: its operators with their tensors' shapes and types, and its constants.

The op histogram in every export report, the check for inf/NaN constants, and android_bench's cost model all read
the graph through `read_graph`; the flatbuffer schema comes with ai-edge-litert.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobilekd.errors import located

_NUMPY = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32, "INT8": np.int8, "UINT8": np.uint8,
          "INT16": np.int16, "INT64": np.int64, "BOOL": np.bool_}


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str  # the schema's name: FLOAT32, INT8, ...
    constant: np.ndarray | None  # the stored value of a weight or constant, else None
    index: int = -1  # its place in the subgraph's tensor list: what links one op's output to another's input
    buffer: int = -1  # the file's buffer holding its value (signatures of one file may share a constant's)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(_NUMPY.get(self.dtype, np.float32)).itemsize


@dataclass
class Op:
    name: str  # FULLY_CONNECTED, ADD, ...
    inputs: list[Tensor]
    outputs: list[Tensor]


def read_graph(path, subgraph: int = 0) -> list[Op]:
    """A subgraph's operators in execution order (the main one by default; a file with several signatures has one
    subgraph each); a file that is not a whole `.tflite` model (no TFL3 flatbuffer identifier, or truncated) is a
    UserError naming it."""
    return _parsed(path, lambda data: _read_graph(data, subgraph))


def subgraph_names(path) -> list[str]:
    """The names of a `.tflite`'s subgraphs, in order (litert-torch names each after its signature)."""
    from ai_edge_litert import schema_py_generated as schema

    def names(data):
        model = schema.Model.GetRootAs(data, 0)
        return [(model.Subgraphs(i).Name() or b"").decode() for i in range(model.SubgraphsLength())]

    return _parsed(path, names)


def _parsed(path, read):
    """`read(the file's bytes)`, a file that is not a whole `.tflite` model being one UserError naming it."""
    data = Path(path).read_bytes()
    if data[4:8] != b"TFL3":
        raise located(path, "not a .tflite model (no TFL3 flatbuffer identifier)")
    try:
        return read(data)
    except Exception as err:  # a flatbuffer cut short reads past its end somewhere
        raise located(path, f"not a whole .tflite model, truncated or corrupt ({type(err).__name__})") from None


def _read_graph(data: bytes, subgraph: int = 0) -> list[Op]:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    graph = model.Subgraphs(subgraph)

    def tensor(i: int) -> Tensor:
        t = graph.Tensors(i)
        dtype = type_names[t.Type()]
        buffer = model.Buffers(t.Buffer())
        if buffer.Offset() > 1 and buffer.Offset() + buffer.Size() > len(data):
            raise ValueError(f"tensor {t.Name().decode()!r} lies past the end of the file")
        raw = (data[buffer.Offset():buffer.Offset() + buffer.Size()] if buffer.Offset() > 1
               else buffer.DataAsNumpy().tobytes() if buffer.DataLength() else None)
        constant = np.frombuffer(raw, dtype=_NUMPY[dtype]) if raw and dtype in _NUMPY else None
        return Tensor(t.Name().decode(), tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else (),
                      dtype, constant, int(i), int(t.Buffer()))

    ops = []
    for j in range(graph.OperatorsLength()):
        op = graph.Operators(j)
        code = model.OperatorCodes(op.OpcodeIndex())
        name = op_names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "UNKNOWN")
        if name == "CUSTOM":
            name = f"CUSTOM:{code.CustomCode().decode()}"
        ops.append(Op(name, [tensor(i) for i in op.InputsAsNumpy() if i >= 0],
                      [tensor(i) for i in op.OutputsAsNumpy()]))
    return ops


def op_histogram(ops: list[Op]) -> dict[str, int]:
    """Operator counts, most frequent first."""
    return dict(Counter(op.name for op in ops).most_common())


def nonfinite_constants(ops: list[Op]) -> list[str]:
    """Names of float constants holding inf or NaN (an additive mask of -inf breaks fp16 and int8 alike)."""
    seen = {t.name: t for op in ops for t in op.inputs if t.constant is not None and t.dtype.startswith("FLOAT")}
    return sorted(name for name, t in seen.items() if not np.isfinite(t.constant).all())


def foreign_ops(ops: list[Op]) -> list[str]:
    """Flex (TensorFlow) and custom ops: interpreters without the TF runtime refuse them."""
    return sorted({op.name for op in ops if op.name.startswith(("Flex", "CUSTOM"))})


def float_islands(ops: list[Op]) -> dict | None:
    """Where a file with integer activations computes in float: the ops whose output is float32 (DEQUANTIZE, which
    only enters float, aside), grouped into islands (ops joined by float tensors), and the QUANTIZE / DEQUANTIZE
    ops at their shores. None for a float model (no op with an integer activation output)."""
    def computes_in_float(op: Op) -> bool:
        return op.name != "DEQUANTIZE" and any(t.dtype.startswith("FLOAT") for t in op.outputs)

    if not any(t.dtype in ("INT8", "UINT8", "INT16") for op in ops for t in op.outputs):
        return None
    floating = [op for op in ops if computes_in_float(op)]
    producer = {t.index: k for k, op in enumerate(floating) for t in op.outputs}
    island = list(range(len(floating)))  # union-find over ops joined by a float tensor

    def root(k: int) -> int:
        while island[k] != k:
            island[k] = island[island[k]]
            k = island[k]
        return k

    for k, op in enumerate(floating):
        for t in op.inputs:
            if t.index in producer:
                island[root(k)] = root(producer[t.index])
    groups: dict[int, Counter] = {}
    for k, op in enumerate(floating):
        groups.setdefault(root(k), Counter())[op.name] += 1
    ops_in_float = Counter(op.name for op in floating)
    return {"islands": len(groups), "ops_in_float": dict(ops_in_float.most_common()),
            "island_shapes": dict(Counter(" + ".join(f"{n} {c}" for n, c in sorted(g.items()))
                                          for g in groups.values()).most_common()),
            "quantize": sum(op.name == "QUANTIZE" for op in ops),
            "dequantize": sum(op.name == "DEQUANTIZE" for op in ops)}


def edit(model: bytes, change) -> bytes:
    """`change(tree, schema)` edits the object tree of `model` (weights inlined); returns the re-packed model."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    tree = schema.ModelT.InitFromObj(schema.Model.GetRootAs(model, 0))
    for b in tree.buffers:
        if b.offset > 1:
            b.data, b.offset, b.size = np.frombuffer(model, np.uint8, b.size, b.offset), 0, 0
    change(tree, schema)
    builder = flatbuffers.Builder(len(model) + 1024)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def inline_buffers(model: bytes) -> bytes:
    """The same model with every weight buffer inside the flatbuffer (none at an offset past its end)."""
    return edit(model, lambda tree, schema: None)


def float_outputs(model: bytes) -> bytes:
    """Drop the QUANTIZE ops a full-integer recipe puts before the graphs' outputs (every signature's), so apps read
    float32."""
    def change(tree, schema):
        for g, graph in enumerate(tree.subgraphs):
            for op in list(graph.operators):
                code = tree.operatorCodes[op.opcodeIndex]
                if (max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.QUANTIZE
                        and op.outputs[0] in graph.outputs):
                    source, target = int(op.inputs[0]), int(op.outputs[0])
                    graph.outputs = [source if t == target else t for t in graph.outputs]
                    for signature in tree.signatureDefs or []:
                        if signature.subgraphIndex != g:
                            continue
                        for tensor in signature.outputs:
                            tensor.tensorIndex = source if tensor.tensorIndex == target else tensor.tensorIndex
                    graph.operators.remove(op)
    return edit(model, change)


def shared_products(model: bytes) -> tuple[bytes, int]:
    """Compute each FULLY_CONNECTED product once: a later FULLY_CONNECTED with the same input tensor, the same
    constant weights and bias (byte for byte) and the same options but for `keep_num_dims` becomes a RESHAPE of the
    earlier one's output. Returns the model and the number of products removed (the model unchanged when none).

    Why: MobileBERT_TINY feeds Q, K, V and the attention's residual from one bottleneck projection. With its
    NoNorm at the initial identity (a freshly initialised model, as the latency benchmark exports), the converter
    drops the NoNorm and lowers the projection twice, flattened to 2-D for Q/K/V and 3-D for the residual: the
    same 512-to-128 product twice per layer (24 products, about 11% of TINY's FLOPs). Both copies read the same
    weights, so the RESHAPE is exact. A trained NoNorm is folded into a single product and nothing is shared.
    Quantized tensors are left alone (this runs before quantization)."""
    removed = 0

    def change(tree, schema):
        nonlocal removed
        fully_connected, reshape = schema.BuiltinOperator.FULLY_CONNECTED, schema.BuiltinOperator.RESHAPE
        for g, graph in enumerate(tree.subgraphs):
            first = {}
            for k, op in enumerate(graph.operators):
                code = tree.operatorCodes[op.opcodeIndex]
                if max(code.builtinCode, code.deprecatedBuiltinCode) != fully_connected:
                    continue
                key = _product_key(tree, graph, op)
                if key is None or first.setdefault(key, op) is op:
                    continue
                shape = np.asarray(graph.tensors[op.outputs[0]].shape, np.int32)
                graph.operators[k] = _reshape(tree, graph, schema, _opcode(tree, schema, reshape),
                                              int(first[key].outputs[0]), int(op.outputs[0]), shape)
                removed += 1
            _drop_unused_tensors(tree, g)

    edited = edit(model, change)
    return (edited, removed) if removed else (model, 0)


def _product_key(tree, graph, op):
    """What makes two FULLY_CONNECTEDs the same product: inputs (constants by value), options, output type and
    size; None for a quantized one."""
    inputs = []
    for i in op.inputs:
        if i < 0:
            inputs.append(None)
            continue
        t = graph.tensors[i]
        if t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale):
            return None
        data = tree.buffers[t.buffer].data if t.buffer else None
        inputs.append(("constant", t.type, tuple(t.shape), np.asarray(data, np.uint8).tobytes())
                      if data is not None and len(data) else ("tensor", int(i)))
    o = op.builtinOptions
    options = (o.fusedActivationFunction, o.weightsFormat, o.asymmetricQuantizeInputs,
               o.quantizedBiasType) if o is not None else None
    out = graph.tensors[op.outputs[0]]
    return tuple(inputs), options, out.type, int(np.prod(out.shape))


def _opcode(tree, schema, builtin: int) -> int:
    """The index of `builtin`'s operator code, added when the model has none."""
    for i, code in enumerate(tree.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin:
            return i
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), 1
    tree.operatorCodes.append(code)
    return len(tree.operatorCodes) - 1


def _reshape(tree, graph, schema, opcode: int, source: int, target: int, shape: np.ndarray):
    """A RESHAPE op from tensor `source` to tensor `target` of `shape` (its shape input a new int32 constant)."""
    buffer = schema.BufferT()
    buffer.data = shape.view(np.uint8)
    tree.buffers.append(buffer)
    t = schema.TensorT()
    t.shape, t.type, t.buffer = [len(shape)], schema.TensorType.INT32, len(tree.buffers) - 1
    t.name = bytes(graph.tensors[target].name or b"") + b"/shape"
    graph.tensors.append(t)
    options = schema.ReshapeOptionsT()
    options.newShape = [int(d) for d in shape]
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode, [source, len(graph.tensors) - 1], [target]
    op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.ReshapeOptions, options
    return op


def _drop_unused_tensors(tree, g: int) -> None:
    """Remove subgraph `g`'s tensors no op, graph input/output or signature names, and empty the buffers only they
    held (the weights of a removed product), renumbering every reference."""
    graph = tree.subgraphs[g]
    signatures = [s for s in tree.signatureDefs or [] if s.subgraphIndex == g]
    used = {int(i) for i in [*graph.inputs, *graph.outputs] if i >= 0}
    for op in graph.operators:
        used |= {int(i) for i in [*op.inputs, *op.outputs, *(op.intermediates if op.intermediates is not None else [])]
                 if i >= 0}
    used |= {t.tensorIndex for s in signatures for t in [*s.inputs, *s.outputs]}
    dropped = [t for i, t in enumerate(graph.tensors) if i not in used]
    if not dropped:
        return
    keep = sorted(used)
    new = {old: n for n, old in enumerate(keep)}
    graph.tensors = [graph.tensors[i] for i in keep]
    held = {t.buffer for sub in tree.subgraphs for t in sub.tensors}
    for t in dropped:
        if t.buffer and t.buffer not in held:
            tree.buffers[t.buffer].data = None

    def renumber(indices):
        return [new[int(i)] if i >= 0 else int(i) for i in indices]

    graph.inputs, graph.outputs = renumber(graph.inputs), renumber(graph.outputs)
    for op in graph.operators:
        op.inputs, op.outputs = renumber(op.inputs), renumber(op.outputs)
        if op.intermediates is not None:
            op.intermediates = renumber(op.intermediates)
    for s in signatures:
        for t in [*s.inputs, *s.outputs]:
            t.tensorIndex = new[t.tensorIndex]
