"""Does the exported file compute what PyTorch computes? Run both over real examples and compare."""

from __future__ import annotations

import numpy as np
import torch

from mobilekd.errors import UserError
from mobilekd.export.litert import ExportWrapper
from mobilekd.export.signatures import DEFAULT_SIGNATURE, INPUT_NAMES

# the parity gate's defaults (`gate_failures`; export's --parity-atol and --min-agreement): a float32 file computes
# what PyTorch computes up to summation order (our files: at most 2e-6 on the largest output, docs/results/
# runtimes.json and kernels.json), and a quantized one predicts as PyTorch does on most examples (dynamic-int8:
# 0.98-1.0 in runtimes.json and int8.json; full-integer int8 without QAT: 0.79-0.85 there, refused)
PARITY_ATOL, MIN_AGREEMENT = 1e-4, 0.9
EXACT_ROUTES = ("none", "onnx", "executorch", "onnx2tf")  # float32 weights and arithmetic: held to PARITY_ATOL


class TFLiteRunner:
    """A `.tflite` ready to run: `inputs` maps input names to their details (signature names, or for a file
    without signatures, as onnx2tf writes them, the input role a tensor name contains); calling it with arrays
    for those names returns the outputs in signature-name order (graph order without signatures)."""

    def __init__(self, path, threads: int = 1, signature: str | None = None):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        names = self.interpreter.get_signature_list()
        if names:  # a length-aware file's own signature, else its longest (serving_default)
            key = signature or (DEFAULT_SIGNATURE if DEFAULT_SIGNATURE in names and len(names) > 1 else None)
            if key is not None and key not in names:
                raise UserError(f"{path}: has no signature {key!r} (signatures: {', '.join(names)})")
            self.signature = self.interpreter.get_signature_runner(key)
            self.inputs = self.signature.get_input_details()
            details = self.signature.get_output_details()
            self.outputs = [details[name] for name in sorted(details)]
        else:
            self.signature = None
            self.interpreter.allocate_tensors()
            self.inputs = {_role(d["name"]): d for d in self.interpreter.get_input_details()}
            self.outputs = self.interpreter.get_output_details()

    def __call__(self, **feed) -> list[np.ndarray]:
        if self.signature is not None:
            result = self.signature(**feed)
            return [result[name] for name in sorted(result)]
        for name, detail in self.inputs.items():
            self.interpreter.set_tensor(detail["index"], feed[name])
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(d["index"]).copy() for d in self.outputs]


def xnnpack_undelegated(path) -> dict[str, int]:
    """The ops of a `.tflite` that XNNPACK, LiteRT's default CPU delegate, does not take, by name: they run on the
    builtin kernels, each a boundary between the delegate's partitions. Read from the interpreter with delegate
    node fusion off, so that every delegated op is a delegate node of its own, with the op's outputs."""
    from collections import Counter

    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1, experimental_disable_delegate_node_fusion=True)
    interpreter.allocate_tensors()
    ops = interpreter._get_ops_details()  # the only listing of nodes LiteRT's Python API has
    delegated = {tuple(op["outputs"]) for op in ops if op["op_name"] == "DELEGATE"}
    return dict(Counter(op["op_name"] for op in ops if op["op_name"] != "DELEGATE"
                        and tuple(op["outputs"]) not in delegated).most_common())


def _role(tensor_name: str) -> str:
    return next((role for role in INPUT_NAMES if role in tensor_name), tensor_name)


def run_tflite(path, arrays: dict[str, np.ndarray], signature: str | None = None) -> list[np.ndarray]:
    """One example at a time through the LiteRT interpreter (`signature`: one of a length-aware file's), dequantizing
    the outputs of a full-integer model."""
    runner = TFLiteRunner(path, signature=signature)
    missing = sorted(set(INPUT_NAMES) - set(runner.inputs))
    if missing:
        raise UserError(f"{path}: has no input named {', '.join(missing)} (inputs: {', '.join(runner.inputs)})")
    scales = [d["quantization"] if np.issubdtype(d["dtype"], np.integer) else None for d in runner.outputs]
    results = []
    for i in range(len(arrays["input_ids"])):
        out = runner(**{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES})
        results.append([o[0] if scale is None else (o[0].astype(np.float32) - scale[1]) * scale[0]
                        for o, scale in zip(out, scales)])
    return [np.stack([r[j] for r in results]) for j in range(len(runner.outputs))]


@torch.no_grad()
def run_torch(model, head: str, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    wrapper = ExportWrapper(model.eval(), head)
    out = wrapper(*(torch.from_numpy(arrays[k]) for k in INPUT_NAMES))
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def parity_report(model, head: str, run_exported, arrays: dict[str, np.ndarray],
                  labels: np.ndarray | None = None) -> dict:
    """Max abs output difference, prediction agreement, and (with labels) both accuracies; for a regression model
    (one score per example) both Pearson correlations with the labels instead.

    `run_exported(arrays)` runs the exported file (`run_tflite`, `mobilekd.export.onnx.run_onnx`).
    """
    ours, theirs = run_torch(model, head, arrays), run_exported(arrays)
    report = {"examples": len(arrays["input_ids"]),
              "max_abs_diff": float(max(np.abs(a - b).max() for a, b in zip(ours, theirs))),
              "finite": bool(all(np.isfinite(b).all() for b in theirs))}
    if head == "classification" and ours[0].ndim == 1:  # a score
        if len(ours[0]) > 1 and np.std(ours[0]) > 0 and np.std(theirs[0]) > 0:  # what agreement is to a classifier
            report["score_correlation"] = float(np.corrcoef(ours[0], theirs[0])[0, 1])
        if labels is not None:
            report.update(pearson_torch=float(np.corrcoef(ours[0], labels)[0, 1]),
                          pearson_exported=float(np.corrcoef(theirs[0], labels)[0, 1]))
        return report
    pred_torch = [a.argmax(-1) for a in ours]
    pred_lite = [b.argmax(-1) for b in theirs]
    report["agreement"] = float(np.mean([np.mean(a == b) for a, b in zip(pred_torch, pred_lite)]))
    if labels is not None and head == "classification":
        report["accuracy_torch"] = float(np.mean(pred_torch[0] == labels))
        report["accuracy_exported"] = float(np.mean(pred_lite[0] == labels))
    return report


def _checks(report: dict):
    """A file's report and the reports inside it, each with where it was made: a length-aware file's signatures,
    a multi-task file's tasks, an early-exit file's thresholds, a seq2seq file's beam search."""
    yield "", report
    for n, r in ((report.get("lengths") or {}).get("parity") or {}).items():
        yield f" at seq_{n}", r
    for task, r in (report.get("tasks") or {}).items():
        yield f" on task {task}", r
    for t, r in (report.get("thresholds") or {}).items():
        yield f" at threshold {t}", r
    if "beam_search" in report:
        yield " in beam search", report["beam_search"]


# what a report calls its share of examples the file answers as PyTorch does: a classifier's prediction agreement,
# a regression model's correlation with PyTorch's scores, an early-exit file's exit layer, a seq2seq file's output
SHARES = {"agreement": "prediction agreement", "score_correlation": "score correlation",
          "same_exit": "same exit layer", "identical": "identical greedy output"}


def gate_failures(report: dict, quantize: str, atol: float = PARITY_ATOL,
                  min_agreement: float = MIN_AGREEMENT) -> list[str]:
    """Why a file fails its parity check (none: it passes), from its report: non-finite outputs; a float32 route's
    (EXACT_ROUTES) largest output difference from PyTorch's above `atol`; any file's share of examples answered as
    PyTorch answers them (SHARES) below `min_agreement`, its 95% upper bound too (`upper_bound`). Every check inside
    the report is held to it (each signature, task, threshold). A check like Optimum's `validate_model_outputs`
    (optimum/exporters/onnx/convert.py: an atol on every output), with a share of predictions for the quantized
    files an atol cannot judge."""
    why = []
    for where, r in _checks(report):
        if r.get("finite") is False:
            why.append(f"non-finite outputs{where}")
        if quantize in EXACT_ROUTES and r.get("max_abs_diff", 0) > atol:
            why.append(f"max abs diff {r['max_abs_diff']:.2e} from PyTorch{where} (at most {atol:g})")
        n = r.get("examples", r.get("pairs"))
        for key, name in SHARES.items():
            if key in r and r[key] < min_agreement and upper_bound(r[key], n, key) < min_agreement:  # NaN: not judged
                why.append(f"{name} {r[key]:.4f} with PyTorch{where} on {n} examples (at least {min_agreement:g}; "
                           f"at most {upper_bound(r[key], n, key):.4f} at 95% confidence)")
    return why


def upper_bound(share: float, n: int | None, key: str) -> float:
    """The one-sided 95% upper confidence bound of a share measured on `n` examples, so that a file is refused only
    where its agreement is below the bar beyond the examples' sampling noise (one flip among 3 examples is not a
    verdict): Clopper-Pearson's exact bound (scipy.stats.binomtest), or for a correlation Fisher's z
    (atanh(r) + 1.645 / sqrt(n - 3)). Without a count, the share itself."""
    if not n:
        return share
    if key == "score_correlation":
        return 1.0 if n <= 3 else float(np.tanh(np.arctanh(min(share, 1 - 1e-12)) + 1.645 / np.sqrt(n - 3)))
    from scipy.stats import binomtest

    return float(binomtest(round(share * n), n).proportion_ci(confidence_level=0.90, method="exact").high)
