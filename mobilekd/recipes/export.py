"""Export a model directory to `.tflite` (and ONNX) and check every file against PyTorch.

    scripts/export_tflite.sh --model runs/demo/sst2/student            # fp32, checked on shipped SST-2 dev
    scripts/export_tflite.sh --model M --quantize none fp16 dynamic-int8 int8 --onnx --parity-examples 872
    scripts/export_tflite.sh --model M --head qa --max-len 384 --quantize dynamic-int8

Writes into OUT, each file atomically:
  model_<quantize>.tflite   classifiers end in a softmax; classifiers and QA models carry TFLite metadata
                            (vocab, labels, input roles) that MediaPipe's TextClassifier / the Task Library read
  model_<quantize>_lengths.tflite  with --lengths: the same model at several input lengths (signatures
                            serving_default at --max-len and seq_N), fp32 weights stored once (a quantizer may
                            keep some quantized tensors per signature); an app runs the shortest
                            signature that holds its text (MediaPipe's text tasks refuse files of several subgraphs)
  model_<quantize>_fused.tflite  with --fused-lstm, for a BiLSTM: TFLite's fused LSTM kernel (two
                            UNIDIRECTIONAL_SEQUENCE_LSTM ops) instead of the unrolled steps, by the TensorFlow converter
                            (mobilekd/export/fused_lstm.py; none and dynamic-int8), with the same inputs and metadata;
                            with --lengths also model_<quantize>_lengths_fused.tflite; with --fused-only these
                            alone (no unrolled file: the app's is the fused one, and the unrolled one is slow to convert)
  model.onnx                with --onnx (opset 20), checked with onnxruntime
  model.pte                 with --executorch: for ExecuTorch, lowered to its XNNPACK delegate (fp32), checked
                            through ExecuTorch's runtime; the operators left to its portable kernels are listed
  model_onnx2tf.tflite      with --onnx2tf: the ONNX -> onnx2tf route, checked the same way (no metadata)
  model_early_exit.tflite   for a FastBERT directory (mobilekd fastbert): one signature per layer, run as an app
                            runs it at every threshold the model was scored at, exits compared with PyTorch's
  model_multitask_<q>.tflite  for a multi-task directory (mobilekd multitask): one output per task, each checked on
                            its own task's dev examples; with --single-task-files also model_<task>.tflite, each
                            task alone (with metadata), for the size comparison
  parity.json               per file: max abs output difference, prediction agreement and, for a classifier of
                            the parity task's labels, both dev accuracies; size, conversion time, non-finite
                            constants, Flex/custom ops
  ops.json                  per file: operator histogram
  report.md                 the same as a table
  README.md                 the model card, in the Hugging Face format (mobilekd/export/card.py): the dev score and
                            how the checkpoint was chosen, the base model, the license; each file's size, parity,
                            host latency (measured here, 1 thread) and Pixel 4 ESTIMATE
Quantizations: none, fp16, dynamic-int8, weight-int8, int8 (full integer) and int8-a16; the last two calibrate
activation ranges on --calibration-examples training examples of the parity task drawn at random with seed 0
(or on --calibration). A BiLSTM directory (mobilekd bilstm) exports the same way: its file takes the same three
inputs and runs the LSTM unrolled over --max-len.
  model_seq2seq.tflite      for a seq2seq directory (mobilekd seq2seq): `encode` and `decode` signatures
                            (mobilekd/export/seq2seq.py), source and target as long as the model trained with; the
                            app's greedy loop run on the file over --parity-examples of its task's dev pairs, its
                            output compared with PyTorch's greedy decoding (identical outputs, both BLEU and chrF),
                            and its host latency per token; with --quantize fp16 or dynamic-int8 (weights only),
                            model_seq2seq_<quantize>.tflite, checked the same way
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from mobilekd.data.custom import read_custom
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry, located
from mobilekd.export.card import agreement_cell, model_card, score_cell
from mobilekd.export.executorch import PTE_FILE
from mobilekd.export.graph import float_islands, foreign_ops, nonfinite_constants, op_histogram, read_graph
from mobilekd.export.litert import (CALIBRATED, QUANTIZATIONS, convert, mean_over_lengths, quantized_copy,
                                    tflite_name)
from mobilekd.export.signatures import DEFAULT_SIGNATURE, INPUT_NAMES, length_signature
from mobilekd.export.parity import gate_failures, parity_report, run_tflite, xnnpack_undelegated
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.finetune.evaluation import label_names
from mobilekd.export.config import SENTENCE_TASKS, ExportConfig, check
from mobilekd.flags import add_flags, from_flags
from mobilekd.host import identity
from mobilekd.models.bilstm import load_bilstm, load_bilstm_config
from mobilekd.models.early_exit import load_early_exit, scored_thresholds
from mobilekd.models.heads import HEADS
from mobilekd.models.hf import load_config, load_pretrained
from mobilekd.models.kinds import kind_of
from mobilekd.models.multitask import load_multitask, single_task
from mobilekd.models.seq2seq import load_seq2seq
from mobilekd.rundir import owned

SEQ2SEQ_FILE, EARLY_EXIT_FILE = "model_seq2seq.tflite", "model_early_exit.tflite"
SEQ2SEQ_QUANTIZE = ("none", "fp16", "dynamic-int8")  # weight quantizations: the decoder's inputs stay as they are


def parse_args(argv=None) -> ExportConfig:
    p = argparse.ArgumentParser(prog="mobilekd export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, ExportConfig)
    return check(from_flags(ExportConfig, p.parse_args(argv)))


def calibration_inputs(args, task, data: Path, tokenizer) -> dict[str, list[dict[str, np.ndarray]]]:
    """Representative inputs for full-integer int8: a seeded random sample of the task's own examples, per
    signature (--max-len's, and each of --lengths'), encoded at its length."""
    if args.calibration:
        if not Path(args.calibration).is_file():
            raise located(args.calibration, "no such calibration file")
        examples = read_custom(args.calibration)
    else:
        examples = load_task(task.name, data, regression=task.is_regression).train
    rng = np.random.default_rng(0)
    chosen = [examples[i] for i in rng.permutation(len(examples))[:args.calibration_examples]]

    def at(seq_len: int) -> list[dict[str, np.ndarray]]:
        arrays = encode_classification(task, chosen, tokenizer, seq_len).arrays
        return [{k: arrays[k][i:i + 1].astype(np.int32) for k in INPUT_NAMES} for i in range(len(chosen))]

    return {DEFAULT_SIGNATURE: at(args.seq_len), **{length_signature(n): at(n) for n in args.lengths}}


def length_report(model, head: str, path: Path, task, tokenizer, args, same_labels: bool) -> dict:
    """A length-aware file's signatures checked and timed: the parity task's whole dev set bucketed by the
    shortest signature its tokens fit (an example longer than --max-len is cut to it, as the app cuts it), each
    signature's parity on the parity examples that fit it (encoded at its length), each signature's host latency
    (1 thread, interleaved) and the mean latency over the dev set's buckets against that at --max-len."""
    from android_bench.host import measure_signatures

    lengths = sorted(args.lengths)
    buckets = [*lengths, args.seq_len]
    dev = next(iter(task.dev.values()))
    real = encode_classification(task, dev, tokenizer, args.seq_len).arrays["attention_mask"].sum(1)
    shortest = np.searchsorted(buckets, real)  # index of the shortest length holding each example
    share = {n: round(float(np.mean(shortest == i)), 4) for i, n in enumerate(buckets)}
    parity = {}
    for n in lengths:
        fits = [e for e, r in zip(dev[:args.parity_examples], real[:args.parity_examples]) if r <= n]
        if not fits:
            parity[n] = {"examples": 0}
            continue
        arrays = encode_classification(task, fits, tokenizer, n).arrays
        parity[n] = parity_report(model, head, lambda a, n=n: run_tflite(path, a, length_signature(n)), arrays,
                                  arrays.get("labels") if same_labels else None)
    names = {n: length_signature(n) for n in lengths} | {args.seq_len: DEFAULT_SIGNATURE}
    timed = measure_signatures(path, list(names.values()))
    ms = {n: round(timed[names[n]]["p50_ms"], 3) for n in buckets}
    at_dev = mean_over_lengths(share, ms)
    return {"dev_examples": len(dev), "dev_mean_tokens": round(float(real.mean()), 1), "share": share,
            "parity": parity, "host_ms": ms, "host_ms_at_dev": round(at_dev, 3),
            "speedup_at_dev": round(ms[args.seq_len] / at_dev, 2), "threads": 1}


def parity_task(args) -> tuple[str, Path, bool]:
    """The task (name, data directory, regression) whose dev sentences check the file: as given, else the
    sentence task the model was fine-tuned on (its results.json), else shipped SST-2."""
    own = Path(args.model) / "results.json"
    trained = read_json(own) if own.is_file() else {}
    name = args.parity_task or (trained.get("task") if trained.get("task") in SENTENCE_TASKS else None) or "sst2"
    data = args.parity_data or (trained.get("data") if name == trained.get("task") else None)
    data = Path(data) if data else default_data(name)
    if data is None:
        raise UserError(f"--parity-data is required for --parity-task {name} (it is not shipped)")
    return name, data, bool(trained.get("regression")) and name == trained.get("task")


def gated(args, path: Path, report: dict, quantize: str) -> list[Path]:
    """The file's parity gate (`mobilekd.export.parity.gate_failures`, at --parity-atol and --min-agreement): its
    verdict into `report` (`parity_check`); `[path]` where it fails (`parity_gated` removes it once every file is
    done, so that no file PyTorch's model does not stand behind is left for an app)."""
    why = gate_failures(report, quantize, args.parity_atol, args.min_agreement)
    report["parity_check"] = {"passed": not why, "atol": args.parity_atol, "min_agreement": args.min_agreement,
                              **({"why": why} if why else {})}
    if why:
        print(f"  fails the parity check (removed at the end): {'; '.join(why)}")
    return [path] if why else []


def passed(report: dict) -> bool:
    return (report.get("parity_check") or {}).get("passed", True)


@contextlib.contextmanager
def parity_gated(out: Path, reports: dict):
    """The files the parity gate failed (`gated` adds them to the list this yields) are removed when the block ends,
    however it ends (not before: a later file may be made from one, as the quantized seq2seq files from the float
    one); where it ended well, the run is then refused in one line naming them and why. The other files stay,
    every report in OUT/parity.json."""
    failed: list[Path] = []
    try:
        yield failed
    finally:
        for path in failed:
            path.unlink(missing_ok=True)
    if failed:
        why = "; ".join(f"{p.name}: {', '.join(reports[p.name]['parity_check']['why'])}" for p in failed)
        raise located(out, f"{len(failed)} file{'s' if len(failed) > 1 else ''} failed the parity check and "
                           f"{'were' if len(failed) > 1 else 'was'} removed: {why}; the others are written, every "
                           f"report is in parity.json (--parity-atol and --min-agreement set the bars; "
                           f"--min-agreement 0 keeps a lossy quantization)")


def file_report(path: Path, ops: list, ops_count: dict) -> dict:
    """Size and graph checks of one exported file (`ops`: its `.tflite` graph; empty for ONNX)."""
    return {"size_bytes": path.stat().st_size, "nonfinite_constants": nonfinite_constants(ops),
            "flex_or_custom_ops": foreign_ops(ops), "op_count": sum(ops_count.values()),
            "float_islands": float_islands(ops),
            "xnnpack_undelegated": xnnpack_undelegated(path) if path.suffix == ".tflite" else None}


def islands_cell(islands: dict | None) -> str:
    """A file's float islands in a few words: '-' for a float model."""
    if not islands:
        return "-"
    return f"{islands['islands']} ({', '.join(f'{op} {n}' for op, n in islands['ops_in_float'].items())})"


def length_line(r: dict, seq_len: int) -> str:
    """A length-aware file's report in one line: each signature's share of the dev set, latency and parity."""
    cells = [f"{n}: {r['share'][n]:.0%} of dev, {r['host_ms'][n]:.2f} ms" + (
        f", max abs diff {r['parity'][n]['max_abs_diff']:.2e} on {r['parity'][n]['examples']}"
        if r["parity"].get(n, {}).get("examples") else "") for n in r["share"]]
    return (f"lengths ({'; '.join(cells)}): {r['host_ms_at_dev']:.2f} ms at the dev set's lengths (mean "
            f"{r['dev_mean_tokens']} tokens), {r['speedup_at_dev']}x faster than at {seq_len} (host, 1 thread)")


def write_markdown(out: Path, reports: dict, histograms: dict) -> None:
    lines = ["| file | MB | convert s | ops | float islands (ops in float) | max abs diff | agreement | "
             "dev score (PyTorch) | finite |", "|---|---|---|---|---|---|---|---|---|"]
    plain = {name: r for name, r in reports.items() if "thresholds" not in r}
    for name, r in plain.items():
        shown = name if passed(r) else f"{name} (removed: failed the parity check)"
        lines.append(f"| {shown} | {r['size_bytes'] / 1e6:.1f} | {r['convert_seconds']} | {r['op_count']} | "
                     f"{islands_cell(r.get('float_islands'))} | {r['max_abs_diff']:.2e} | {agreement_cell(r)} | "
                     f"{score_cell(r)} | {r['finite'] and not r['nonfinite_constants']} |")
    aware = [f"- {name}, {length_line(r['lengths'], r['seq_len'])}" for name, r in plain.items() if "lengths" in r]
    lines += ["", *aware] if aware else []
    lines += ["", "Operators per file:", ""]
    lines += [f"- {name}: " + ", ".join(f"{op} {n}" for op, n in histograms[name].items()) for name in plain]
    for name, r in reports.items():
        if name not in plain:
            lines += ["", f"{name} ({r['size_bytes'] / 1e6:.1f} MB), run layer by layer as an app runs it:", "",
                      "| threshold | same exit layer | same prediction | average layers |", "|---|---|---|---|"]
            lines += [f"| {t} | {x['same_exit']:.4f} | {x['same_prediction']:.4f} | {x['avg_layers']:.2f} |"
                      for t, x in r["thresholds"].items()]
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def routes(args) -> list[tuple[str, str]]:
    """A classifier's (quantization or route, file) pairs, in the order they are written (with --fused-only, no
    unrolled file)."""
    unrolled = not (args.fused_lstm and args.fused_only)
    found = [(q, tflite_name(q)) for q in args.quantize] if unrolled else []
    found += [(q, tflite_name(q, lengths=True)) for q in args.quantize] if args.lengths and unrolled else []
    found += [(q, tflite_name(q, fused=True)) for q in args.quantize] if args.fused_lstm else []
    both = args.fused_lstm and args.lengths
    found += [(q, tflite_name(q, lengths=True, fused=True)) for q in args.quantize] if both else []
    found += [("onnx", "model.onnx")] if args.onnx or args.onnx2tf else []
    found += [("onnx2tf", "model_onnx2tf.tflite")] if args.onnx2tf else []
    return found + ([("executorch", PTE_FILE)] if args.executorch else [])


def multitask_files(args, tasks) -> list[tuple[str, str]]:
    """A multi-task model's (quantization or task, file) pairs, in the order they are written."""
    files = [(q, tflite_name(q, "model_multitask")) for q in args.quantize]
    return files + ([(name, f"model_{name}.tflite") for name in tasks] if args.single_task_files else [])


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    if args.fused_lstm:
        from mobilekd.export.fused_lstm import FUSED, tensorflow_python

        if kind_of(args.model).name != "bilstm":
            raise UserError(f"--fused-lstm: {args.model} is not a BiLSTM (mobilekd bilstm's OUT, with bilstm.json)")
        unfused = [q for q in args.quantize if q not in FUSED]
        if unfused:
            raise UserError(f"--fused-lstm: the fused file is written for --quantize {' and '.join(FUSED)}, not "
                            f"{' '.join(unfused)}")
        tensorflow_python()  # made (or its failure told) before any conversion
    if args.executorch:
        from mobilekd.export.executorch import require_executorch

        require_executorch()  # before any conversion
    kind = kind_of(args.model).name  # a bad model is named before OUT
    (load_seq2seq if kind == "seq2seq" else load_bilstm_config if kind == "bilstm" else load_config)(args.model)
    with owned(args.out or Path(args.model) / "tflite", argv=argv):  # this run's OUT, no other's; checked before any conversion
        run(args, kind)


def run(args, kind: str):
    """Export `args.model`, a model directory of `kind` (`mobilekd.models.kinds`)."""
    if kind == "seq2seq":
        return export_seq2seq(args, Path(args.out or Path(args.model) / "tflite"))
    if kind == "multitask":
        return export_multitask(args, Path(args.out or Path(args.model) / "tflite"))
    if kind == "bilstm":  # a BiLSTM (mobilekd bilstm) is a classifier
        if args.head not in (None, "classification"):
            raise UserError(f"{args.model}: a BiLSTM classifier has no {args.head} head")
        model, head = load_bilstm(args.model), "classification"
        config = model.config
    else:
        config, saved_head = load_config(args.model)
        head = args.head or saved_head
        if head == "classification" and not config.id2label:
            raise UserError(f"{args.model}: has no labels (not fine-tuned for classification); use --head pretraining "
                            f"or fine-tune it first")
        model = load_pretrained(args.model, head)
    # an early-exit classifier (FastBERT) also gets its layer-by-layer file; a bad branches file stops us here
    early = load_early_exit(args.model) if kind == "early_exit" and head == "classification" else None
    tokenizer = load_tokenizer(args.model)
    out = Path(args.out or Path(args.model) / "tflite")
    name, data, regression = parity_task(args)
    # dev read against the model's labels, in its order: a dev set lacking one of its classes still scores the file
    task = load_task(name, data, eval_only=True, regression=regression,
                     labels=label_names(config) if head == "classification" else None)

    split = encode_classification(task, next(iter(task.dev.values()))[:args.parity_examples], tokenizer, args.seq_len)
    same_labels = head == "classification" and task.fits(config.id2label)
    labels = split.arrays.get("labels") if same_labels else None
    metadata = None
    scores = head == "classification" and config.num_labels == 1  # a regression model
    if scores and not args.no_metadata:
        print("no TextClassifier metadata: a regression model's file returns a score, not class probabilities")
    if not args.no_metadata and HEADS[head].metadata and not scores:
        vocab = Path(args.model) / "vocab.txt"
        if not vocab.is_file():
            raise located(vocab, "missing: the metadata packs a WordPiece vocabulary (MediaPipe's BertTokenizer); "
                                 "a model of another tokenizer exports with --no-metadata, its app tokenizing")
        metadata = (vocab, [config.id2label[i] for i in range(len(config.id2label))] if config.id2label else None)

    reports = read_json(out / "parity.json") if (out / "parity.json").is_file() else {}
    histograms = read_json(out / "ops.json") if (out / "ops.json").is_file() else {}
    with parity_gated(out, reports) as failed:
        calibration = None  # drawn once, on the first calibrated quantization
        for quantize, name in routes(args):
            start = time.time()
            if quantize == "onnx":
                from mobilekd.export.onnx import export_onnx, onnx_ops, run_onnx
                path = export_onnx(model, head, args.seq_len, out / name)
                ops, histograms[name], runner = [], onnx_ops(path), run_onnx
            elif quantize == "executorch":
                from mobilekd.export.executorch import convert_pte, run_pte
                path, fallback, attention = convert_pte(model, head, args.seq_len, out / name)
                ops, histograms[name], runner = [], fallback, run_pte  # its histogram: the ops XNNPACK leaves
            else:
                if quantize == "onnx2tf":
                    from mobilekd.export.onnx2tf import convert_onnx2tf
                    path = convert_onnx2tf(out / "model.onnx", out / name, args.onnx2tf)
                elif name.endswith("_fused.tflite"):
                    from mobilekd.export.fused_lstm import convert_fused
                    both = name == tflite_name(quantize, lengths=True, fused=True)
                    lengths = tuple(sorted(args.lengths)) if both else ()
                    path = convert_fused(model, args.seq_len, out / name, quantize, metadata, lengths)
                else:
                    if quantize in CALIBRATED and calibration is None:
                        calibration = calibration_inputs(args, task, data, tokenizer)
                    lengths = tuple(sorted(args.lengths)) if name == tflite_name(quantize, lengths=True) else ()
                    signatures = [DEFAULT_SIGNATURE, *map(length_signature, lengths)]
                    path = convert(model, head, args.seq_len, out / name, quantize,
                                   {k: calibration[k] for k in signatures} if quantize in CALIBRATED else None,
                                   metadata, lengths)
                ops = read_graph(path)
                histograms[name], runner = op_histogram(ops), run_tflite
            seconds = round(time.time() - start, 1)
            report = parity_report(model, head, lambda arrays: runner(path, arrays), split.arrays, labels)
            report.update(file_report(path, ops, histograms[name]), quantize=quantize, seq_len=args.seq_len,
                          convert_seconds=seconds, model=str(args.model),
                          metadata=metadata is not None and quantize in QUANTIZATIONS,
                          **({"xnnpack_undelegated": fallback, "attention": attention} if quantize == "executorch"
                             else {}))
            if name in (tflite_name(quantize, lengths=True), tflite_name(quantize, lengths=True, fused=True)):
                report["lengths"] = length_report(model, head, path, task, tokenizer, args, same_labels)
            print(f"{path} ({report['size_bytes'] / 1e6:.1f} MB, {seconds:.0f} s): max abs diff "
                  f"{report['max_abs_diff']:.2e}, agreement {agreement_cell(report)}, {score_cell(report)}")
            print("  ops: " + ", ".join(f"{k} {v}" for k, v in histograms[name].items()))
            if "lengths" in report:
                print("  " + length_line(report["lengths"], args.seq_len))
            if report["float_islands"]:
                print(f"  float islands: {islands_cell(report['float_islands'])}")
            failed += gated(args, path, report, quantize)
            reports[name] = report
            write_json(out / "parity.json", reports)
            write_json(out / "ops.json", histograms)
        if early is not None:
            reports[EARLY_EXIT_FILE] = export_early_exit(args, early, out, split.arrays)
            failed += gated(args, out / EARLY_EXIT_FILE, reports[EARLY_EXIT_FILE], "none")
            write_json(out / "parity.json", reports)
        write_markdown(out, reports, histograms)
        write_card(args, out, head, reports)


def write_card(args, out: Path, head: str, reports: dict) -> None:
    """Time the files (`timing`), keep the figures in parity.json, then OUT/README.md, the model card
    (`mobilekd.export.card`)."""
    reports.update(timing(out, reports))
    write_json(out / "parity.json", reports)
    with atomic_path(out / "README.md") as tmp:
        tmp.write_text(model_card(args.model, head, reports, args.license))


def timing(out: Path, reports: dict) -> dict:
    """The reports of OUT's single-signature `.tflite` files and `.pte`, each with `timing`: its host latency (1
    thread, the median of 30 runs after 5, the files interleaved: `android_bench.host.measure`), the host's id,
    and a `.tflite`'s Pixel 4 estimate (`android_bench.budget.estimate_file`; the cost model reads .tflite graphs)."""
    from android_bench.budget import estimate_file
    from android_bench.host import measure
    from android_bench.models import CACHE, preset_path

    files = [name for name, r in reports.items() if name.endswith((".tflite", ".pte")) and (out / name).is_file()
             and passed(r) and not ({"thresholds", "lengths", "pairs"} & set(r))]  # several signatures: their reports
    if not files:
        return {}
    measured = measure([out / name for name in files], [1], runs=30, warmup=5)
    if not preset_path("mobilebert", "none", 128, CACHE).is_file():
        print("the Pixel 4 estimate's calibration: converting the paper's MobileBERT once (a minute or two; kept in "
              f"{CACHE})", flush=True)
    return {name: {**reports[name], "timing": {
        "host_ms_p50": round(measured["models"][str(out / name)]["by_threads"][0]["p50_ms"], 3), "threads": 1,
        "host": measured["host"], "pixel4_ms_est": estimate_file(out / name)["ms"] if name.endswith(".tflite")
        else None}} for name in files}


def export_early_exit(args, model, out: Path, arrays: dict) -> dict:
    """The early-exit file (one signature per layer) and its parity: at each threshold the model was scored at,
    the same exit layer and prediction in the file, run as an app runs it, as in PyTorch."""
    from mobilekd.export.early_exit import convert_early_exit, early_exit_parity

    start = time.time()
    path = convert_early_exit(model, args.seq_len, out / EARLY_EXIT_FILE)
    seconds = round(time.time() - start, 1)
    report = {"size_bytes": path.stat().st_size, "convert_seconds": seconds, "seq_len": args.seq_len,
              "model": str(args.model),
              "thresholds": early_exit_parity(model, path, arrays, scored_thresholds(args.model))}
    worst = min(r["same_exit"] for r in report["thresholds"].values())
    print(f"{path} ({report['size_bytes'] / 1e6:.1f} MB, {seconds:.0f} s): {model.config.num_hidden_layers} layer "
          f"signatures; same exit layer as PyTorch for at least {worst:.4f} of examples at every threshold")
    return report


def seq2seq_file(quantize: str) -> str:
    """A seq2seq model's file for a quantization: model_seq2seq.tflite in float32, else model_seq2seq_<q>.tflite."""
    return SEQ2SEQ_FILE if quantize == "none" else tflite_name(quantize, "model_seq2seq")


def export_seq2seq(args, out: Path) -> None:
    """The two-signature file per --quantize (SEQ2SEQ_QUANTIZE; a quantized file is the float one rewritten by
    `quantized_copy`, the float one kept only where asked for) and its parity: the app's greedy loop on the file
    against PyTorch's greedy decoding over --parity-examples dev pairs of the task the model trained on (its
    results.json)."""
    from mobilekd.data.pairs import load_pairs
    from mobilekd.data.seq2seq import encode_pairs
    from mobilekd.export.seq2seq import beam_parity, convert_seq2seq, seq2seq_parity
    from mobilekd.finetune.generation import as_text, references, scores
    from mobilekd.models.decoding import decode_split

    unsupported = [f for f, given in (("--head", args.head), ("--onnx", args.onnx), ("--onnx2tf", args.onnx2tf),
                                      ("--lengths", args.lengths), ("--executorch", args.executorch),
                                      ("--parity-task", args.parity_task), ("--calibration", args.calibration))
                   if given] + [q for q in args.quantize if q not in SEQ2SEQ_QUANTIZE]
    if unsupported:
        raise UserError(f"{args.model}: a seq2seq model exports with --quantize {' '.join(SEQ2SEQ_QUANTIZE)}, checked "
                        f"on its own task's pairs (no {', '.join(unsupported)})")
    results = Path(args.model) / "results.json"
    trained = read_json(results) if results.is_file() else {}
    if "task" not in trained or "max_len" not in trained:
        raise located(results, "missing or without task and max_len: the parity check reads the model's own task")
    model, tokenizer = load_seq2seq(args.model), load_tokenizer(args.model)
    task = load_pairs(trained["task"], args.parity_data or trained.get("data"))
    split, _ = encode_pairs(task.dev[:args.parity_examples], tokenizer, trained["max_len"], False, f"{task.name} dev")
    mine = decode_split(model, split, trained["max_len"])  # PyTorch's greedy outputs, checked against every file
    refs = references(tokenizer, split)

    def scored(outputs):  # BLEU and chrF against the references
        return scores([as_text(tokenizer, t) for t in outputs], refs)

    pytorch = scored(mine)
    beam = trained.get("beam", 1)  # the beam the model was scored with: the app's search, checked on the file too
    beam_mine = decode_split(model, split, trained["max_len"], beam=beam) if beam > 1 else None

    reports = read_json(out / "parity.json") if (out / "parity.json").is_file() else {}
    with parity_gated(out, reports) as failed:  # removed once every file is made (the float one makes the others)
        with tempfile.TemporaryDirectory(prefix=".float-", dir=out) as scratch:  # the float file, where not asked for
            start = time.time()
            fp32 = convert_seq2seq(model, trained["max_len"], trained["max_len"],
                                   (out if "none" in args.quantize else Path(scratch)) / SEQ2SEQ_FILE)
            float_seconds = time.time() - start
            for quantize in args.quantize:
                start = time.time()
                path = fp32 if quantize == "none" else quantized_copy(fp32, out / seq2seq_file(quantize), quantize)
                seconds = round(float_seconds + time.time() - start, 1)
                ops = read_graph(path, 0) + read_graph(path, 1)  # both signatures' (XNNPACK's check: the first's)
                parity, outputs = seq2seq_parity(model, path, split, mine=mine)
                reports[path.name] = report = {**file_report(path, ops, op_histogram(ops)), **parity,
                                               "scores": {"file": scored(outputs), "pytorch": pytorch},
                                               "convert_seconds": seconds, "model": str(args.model),
                                               "quantize": quantize,
                                               "host": identity()}  # the machine host_ms were measured on
                if beam_mine is not None:
                    found, outputs, _ = beam_parity(model, path, split, beam, mine=beam_mine)
                    report["beam_search"] = {**found, "scores": {"file": scored(outputs), "pytorch": scored(beam_mine)}}
                write_json(out / "parity.json", reports)
                ms, bleu = report["host_ms"], report["scores"]
                print(f"{path} ({report['size_bytes'] / 1e6:.1f} MB, {seconds:.0f} s): greedy output identical to "
                      f"PyTorch's for {report['identical']:.4f} of {report['pairs']} dev pairs, BLEU "
                      f"{bleu['file']['bleu']:.2f} against PyTorch's {bleu['pytorch']['bleu']:.2f}; host (1 thread): "
                      f"encode {ms['encode']:.2f} ms, {ms['per_token']:.2f} ms a token, {ms['per_sentence']:.1f} ms a "
                      f"sentence")
                if "beam_search" in report:
                    b = report["beam_search"]
                    print(f"  beam {b['beam']}: output identical to PyTorch's for {b['identical']:.4f} of "
                          f"{b['pairs']} dev "
                          f"pairs, BLEU {b['scores']['file']['bleu']:.2f} against PyTorch's "
                          f"{b['scores']['pytorch']['bleu']:.2f}; host (1 thread): "
                          f"{b['host_ms']['per_sentence']:.1f} ms a "
                          f"sentence")
                failed += gated(args, path, report, quantize)
                write_json(out / "parity.json", reports)
        write_card(args, out, "seq2seq", reports)  # once, after every file


def export_multitask(args, out: Path) -> None:
    """The multi-task file per --quantize, each task's output checked on --parity-examples of its own dev set
    (the task data its training used, from MODEL/results.json, else the shipped copy); with --single-task-files,
    each task's own classifier file beside it, checked the same way."""
    from mobilekd.export.multitask import UNCALIBRATED, convert_multitask, multitask_parity

    unsupported = [flag for flag, given in (("--head", args.head), ("--onnx", args.onnx), ("--onnx2tf", args.onnx2tf),
                                            ("--lengths", args.lengths), ("--executorch", args.executorch),
                                            ("--parity-task", args.parity_task), ("--parity-data", args.parity_data),
                                            ("--calibration", args.calibration)) if given]
    refused = [q for q in args.quantize if q not in UNCALIBRATED]
    if unsupported or refused:
        raise UserError(f"{args.model}: a multi-task model takes neither {', '.join(unsupported + refused)} (each task "
                        f"is checked on its own data; --quantize {' '.join(UNCALIBRATED)})")
    model, tokenizer = load_multitask(args.model), load_tokenizer(args.model)
    results = Path(args.model) / "results.json"
    trained = read_json(results).get("tasks") if results.is_file() else None
    trained = trained if isinstance(trained, dict) else {}
    examples = {}
    for name, head in model.tasks.items():
        data = (trained.get(name) or {}).get("data") or default_data(name)
        if data is None:
            raise UserError(f"{args.model}: task {name}'s data is neither recorded in results.json nor shipped")
        task = load_task(name, Path(data), eval_only=True, regression=head.labels is None)
        if task.id2label != head.id2label:
            raise located(data, f"task {name}'s labels {list(task.id2label.values())} are not the model's "
                                f"{list(head.id2label.values())}")
        examples[name] = encode_classification(task, next(iter(task.dev.values()))[:args.parity_examples], tokenizer,
                                               args.seq_len).arrays
    reports = read_json(out / "parity.json") if (out / "parity.json").is_file() else {}
    histograms = read_json(out / "ops.json") if (out / "ops.json").is_file() else {}
    files = multitask_files(args, model.tasks)
    vocab = Path(args.model) / "vocab.txt"
    with parity_gated(out, reports) as failed:
        for what, name in files:
            start = time.time()
            if what in model.tasks:
                one = single_task(model, what)
                regression = model.tasks[what].labels is None
                path = convert(one, "classification", args.seq_len, out / name,
                               metadata=None if args.no_metadata or regression or not vocab.is_file() else
                               (vocab, list(one.config.id2label.values())))
                checks = {what: parity_report(one, "classification", lambda arrays: run_tflite(path, arrays),
                                              examples[what], examples[what].get("labels"))}
            else:
                path = convert_multitask(model, args.seq_len, out / name, what)
                checks = multitask_parity(model, path, examples)
            ops = read_graph(path)
            histograms[name] = op_histogram(ops)
            reports[name] = {**file_report(path, ops, histograms[name]), "tasks": checks, "quantize": "none" if
                             what in model.tasks else what, "convert_seconds": round(time.time() - start, 1),
                             "seq_len": args.seq_len, "model": str(args.model)}
            write_json(out / "parity.json", reports)
            write_json(out / "ops.json", histograms)
            print(f"{path} ({reports[name]['size_bytes'] / 1e6:.1f} MB, {reports[name]['convert_seconds']:.0f} s)" +
                  "".join(f"\n  {t}: max abs diff {r['max_abs_diff']:.2e}, agreement {agreement_cell(r)}, "
                          f"{score_cell(r)}"
                          for t, r in checks.items()))
            failed += gated(args, path, reports[name], reports[name]["quantize"])
            write_json(out / "parity.json", reports)
        write_card(args, out, "multitask", reports)


if __name__ == "__main__":
    main()
