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


def read_graph(path) -> list[Op]:
    """The main subgraph's operators in execution order; a file that is not a whole `.tflite` model (no TFL3
    flatbuffer identifier, or truncated) is a UserError naming it."""
    data = Path(path).read_bytes()
    if data[4:8] != b"TFL3":
        raise located(path, "not a .tflite model (no TFL3 flatbuffer identifier)")
    try:
        return _read_graph(data)
    except Exception as err:  # a flatbuffer cut short reads past its end somewhere
        raise located(path, f"not a whole .tflite model, truncated or corrupt ({type(err).__name__})") from None


def _read_graph(data: bytes) -> list[Op]:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    graph = model.Subgraphs(0)

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
                      dtype, constant)

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
    """Drop the QUANTIZE ops a full-integer recipe puts before the graph's outputs, so apps read float32."""
    def change(tree, schema):
        graph = tree.subgraphs[0]
        for op in list(graph.operators):
            code = tree.operatorCodes[op.opcodeIndex]
            if (max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.QUANTIZE
                    and op.outputs[0] in graph.outputs):
                source, target = int(op.inputs[0]), int(op.outputs[0])
                graph.outputs = [source if t == target else t for t in graph.outputs]
                for signature in tree.signatureDefs or []:
                    for tensor in signature.outputs:
                        tensor.tensorIndex = source if tensor.tensorIndex == target else tensor.tensorIndex
                graph.operators.remove(op)
    return edit(model, change)
