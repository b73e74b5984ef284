"""ExecuTorch, PyTorch's own on-device runtime: the `.tflite`'s graph written as a `.pte`.

The module exported is the `.tflite`'s (`ExportWrapper`: three int32 `[1, seq_len]` inputs, a classifier's softmax
at the end), captured by `torch.export.export`, lowered to the XNNPACK delegate and serialised, as ExecuTorch's
XNNPACK tutorial does it (docs/source/tutorial-xnnpack-delegate-lowering.md: `to_edge_transform_and_lower(...,
partitioner=[XnnpackPartitioner()])`, then `.to_executorch()`), in fp32. It runs through ExecuTorch's Python runtime
(`executorch.runtime.Runtime`) for parity and timing; the runtime's thread pool is set to the thread count asked
for (`_unsafe_reset_threadpool`, the one control its Python bindings have).

Attention is captured as written, softmax(q k^T / sqrt(d) + mask) v with 3-D batched products
(`mobilekd.models.blocks.explicit_attention`), not as torch's fused op: that op's exported decomposition brings
boolean mask operators (eq, any, where, logical_not) that XNNPACK does not take, and a 4-D product an expand whose
copy it does not take either; on two CoLA students the `.pte` took 2.20x LiteRT fp32's host time that way and 1.18x
now (docs/results/runtimes.json, its rows' `attention`). The operators XNNPACK does not take run on ExecuTorch's portable
kernels; `fallback_ops` counts them by name, as
`get_delegation_info` (executorch/devtools/backend_debug/delegation_info.py) counts a lowered graph's call_function
nodes outside `executorch_call_delegate`, without its pandas table (pandas is not among our dependencies).

ExecuTorch is installed without its declared dependencies (scripts/setup.sh): those that lowering to XNNPACK and
the runtime need are ours already, except ruamel.yaml; the others (coremltools, pandas, test tools) serve backends
and tools we do not use.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch

from mobilekd.errors import UserError
from mobilekd.export.litert import ExportWrapper, sample_inputs
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.fileio import atomic_path
from mobilekd.models.blocks import explicit_attention

PTE_FILE = "model.pte"
# how a `.pte`'s attention is captured, in its parity report: "explicit-bmm", written out as 3-D batched products
# (before it: "sdpa", torch's fused op; "explicit", written out with 4-D products); None for a model without any
PTE_ATTENTION = "explicit-bmm"


def require_executorch() -> None:
    """One line, not a traceback, where the `executorch` package is missing (scripts/setup.sh installs it)."""
    import importlib.util

    if importlib.util.find_spec("executorch") is None:
        raise UserError("ExecuTorch is not installed: scripts/setup.sh installs it (pip install --no-deps -c "
                        "constraints.txt executorch ruamel.yaml ruamel.yaml.clib)")


def fallback_ops(graph_module) -> dict[str, int]:
    """The operators of a lowered graph that the delegate did not take, by name, most frequent first (a tuple
    output's `getitem` is not an operator and is left out)."""
    names = Counter(getattr(n.target, "__name__", str(n.target)) for n in graph_module.graph.nodes
                    if n.op == "call_function" and "executorch_call_delegate" not in n.name
                    and getattr(n.target, "__name__", "") != "getitem")
    return dict(names.most_common())


def convert_pte(model, head: str, seq_len: int, out_path) -> tuple[Path, dict[str, int], str | None]:
    """`model` (eval mode) with `head`'s app outputs as a `.pte` at `out_path` (written atomically) with the XNNPACK
    delegate; the operators left to the portable kernels (`fallback_ops`); and how its attention was captured
    (PTE_ATTENTION, None for a model without attention). A graph ExecuTorch refuses is one line naming the first
    line of its message."""
    require_executorch()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if seq_len > model.config.max_position_embeddings:
        raise UserError(f"--max-len {seq_len} exceeds the model's {model.config.max_position_embeddings} positions")
    wrapper = ExportWrapper(model.eval(), head).eval()
    try:
        with explicit_attention(model) as switched:  # softmax as written: operators XNNPACK delegates
            exported = torch.export.export(wrapper, (), kwargs=sample_inputs(seq_len))
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        fallback = fallback_ops(edge.exported_program().graph_module)
        program = edge.to_executorch()
    except Exception as err:  # the exporter's own message names what it rejects
        first = (str(err).strip().splitlines() or [""])[0]
        raise UserError(f"ExecuTorch could not export the model: {type(err).__name__}: {first}"[:500]) from None
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        tmp.write_bytes(program.buffer)
    return out_path, fallback, PTE_ATTENTION if switched else None


class PteRunner:
    """A `.pte` ready to run, as `parity.TFLiteRunner` is: `inputs` maps the three input names to their shape and
    dtype; calling it with arrays for them returns the outputs as arrays."""

    def __init__(self, path, threads: int = 1):
        require_executorch()
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime

        _unsafe_reset_threadpool(threads)
        try:
            self.method = Runtime.get().load_program(str(path)).load_method("forward")
        except (RuntimeError, ValueError) as err:
            raise UserError(f"{path}: ExecuTorch cannot load it ({type(err).__name__})") from None
        meta = self.method.metadata
        self.inputs = {name: {"shape": tuple(meta.input_tensor_meta(i).sizes()), "dtype": np.int32}
                       for i, name in enumerate(INPUT_NAMES)}

    def __call__(self, **feed) -> list[np.ndarray]:
        return [o.numpy() for o in self.method.execute([torch.from_numpy(feed[k]) for k in INPUT_NAMES])]


def run_pte(path, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One example at a time through ExecuTorch's runtime (its inputs are `[1, seq_len]`)."""
    runner = PteRunner(path)
    results = [runner(**{k: np.ascontiguousarray(arrays[k][i:i + 1], dtype=np.int32) for k in INPUT_NAMES})
               for i in range(len(arrays["input_ids"]))]
    return [np.concatenate([r[j] for r in results]) for j in range(len(results[0]))]
