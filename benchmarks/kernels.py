"""Exported files at their best and at the sentence's own length (issue 35; docs/results/kernels.json): three models
of one SST-2 budget (4,000 training examples), each exported as length-aware files (`mobilekd export --lengths 16 32
64`: signatures at 16, 32, 64 and 128 tokens over the same weights) in fp32 and dynamic-range int8:
  student  the demo's student (the adapted teacher's layers 0 and 5, `init --layers spread:2`), fine-tuned;
  teacher  the adapted teacher (all-MiniLM-L6-v2, 6 layers of 384), fine-tuned: the reference the others beat;
  bilstm   Tang et al.'s BiLSTM (mobilekd bilstm, logit KD from that teacher, a 64-wide table), as litert-torch
           unrolls it (`bilstm-unrolled`) and with TFLite's fused LSTM kernel (`bilstm-fused`, `export --fused-lstm`).
And full-size MobileBERT (`mobilebert`, the paper's preset with random weights: latency does not depend on training,
`mobilekd latency`'s files, one a length: 16, 32, 64 and 128 tokens), in fp32, dynamic-range int8 and QAT full int8
with three of the attention forms (`qat-int8` asymmetric, `qat-int8-sym` with symmetric second operands,
`qat-int8-sym-float-softmax` with the masking and softmax between the products in float;
mobilekd.export.qat.ATTENTION); its dev-length figures weight its files by the student's dev shares.
Every signature of every file is timed on this host at 1 and 2 threads, interleaved in one run per thread count,
and estimated for a Pixel 4; the latency at SST-2's dev lengths (each sentence run at the shortest signature
holding it) is set against the latency at 128.

    python -m benchmarks.kernels                 # about 1.5 hours on 2 cores, resumable
    python -m benchmarks.kernels --models mobilebert   # one model's files, timed among themselves
    python -m benchmarks.kernels --table [--write]

Rows: task `sst2`, method `<model> <form>`, model, form (`fp32`, `dynamic-int8`; the BiLSTM's `bilstm-unrolled`,
`bilstm-fused` and their `-dynamic-int8`; MobileBERT's `qat-int8...`), seq (`128`, `dev`, a signature's length, or
`all` for the whole file), threads (host rows), metric (`host_ms` p50 of --runs interleaved runs, `pixel4_ms` the
estimate at 4 threads, `ops` the signature's operators, `ops_in_file`, `undelegated_ops` those XNNPACK leaves to
TFLite, `attention_products_delegated` the share of BATCH_MATMULs XNNPACK takes, `speedup` at
`dev`: 128's latency over the dev set's; `tflite_bytes`, `dev_share`, and the export's parity per signature,
`examples` and `max_abs_diff`), value; each with the CPU it was measured on. The dev figure is the mean over the
dev set's sentences, bucketed by the shortest signature that holds them (the shares in the export's parity.json),
of that signature's latency. Accuracy does not enter: each file's parity per signature is the export's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows
from benchmarks.runner import RESUMABLE, Job, run_all, with_needs
from benchmarks.quality import stage_dirs as quality_stages
from benchmarks import teacher_value
from mobilekd.data.tasks import BERT_LR
from mobilekd.fileio import REPO_ROOT, read_json

LENGTHS = ("16", "32", "64")
SEQ_LEN = 128
FORMS = {"fp32": "none", "dynamic-int8": "dynamic-int8"}  # form -> --quantize
QUANTIZE = tuple(FORMS.values())
PRESET = "mobilebert"  # the full-size model, timed from `mobilekd latency`'s files (android_bench.models.export_preset)
PRESET_FORMS = {**FORMS, **{q: q for q in ("qat-int8", "qat-int8-sym", "qat-int8-sym-float-softmax")}}  # -> quantize
TRAINED = ("student", "teacher", "bilstm")  # the models the benchmark trains and exports itself
TRAIN_EXAMPLES = "4000"  # the students' and the teacher's fine-tuning: latency does not depend on it


def forms() -> dict[str, dict[str, tuple[str | None, str]]]:
    """model -> form -> (its export's folder under OUT, the length-aware file timed; for PRESET: None, the
    quantization export_preset makes its one-length files with)."""
    from mobilekd.export.litert import tflite_name

    return {"student": {form: ("tflite", tflite_name(q, lengths=True)) for form, q in FORMS.items()},
            "teacher": {form: ("teacher_tflite", tflite_name(q, lengths=True)) for form, q in FORMS.items()},
            "bilstm": {f"bilstm-{kind}{'' if q == 'none' else '-' + q}": ("bilstm_tflite",
                                                                          tflite_name(q, lengths=True, fused=fused))
                       for q in QUANTIZE for kind, fused in (("unrolled", False), ("fused", True))},
            PRESET: {form: (None, q) for form, q in PRESET_FORMS.items()}}


def jobs(out: Path) -> list[Job]:
    adapt = quality_stages(REPO_ROOT / "runs" / "quality")["adapt"]  # benchmarks.quality's adapted teacher
    student, teacher, bilstm = out / "student", out / "teacher", out / "bilstm"
    # --lr as its runs had it (finetune's default for this 15.6M student was 5e-5 until the small-model threshold
    # moved to 20M): the files it times are of the same students
    finetune = ["--task", "sst2", "--max-train-examples", TRAIN_EXAMPLES, "--epochs", "1", "--eval-every", "0",
                "--lr", str(BERT_LR)]

    def export(name: str, model: Path, folder: str, needs: str, *extra: str) -> Job:
        return Job(name, ["export", "--model", str(model), "--max-len", str(SEQ_LEN), "--lengths", *LENGTHS,
                          "--quantize", *QUANTIZE, *extra, "--parity-task", "sst2", "--parity-examples", "872",
                          "--out", str(out / folder)], out / folder, [needs])

    return [Job("adapt", ["train-teacher", *teacher_value.ADAPT, "--out", str(adapt), *RESUMABLE], adapt),
            Job("init", ["init", str(adapt), str(out / "subset2"), "--layers", "spread:2"], out / "subset2", ["adapt"]),
            Job("finetune", ["finetune", "--model", str(out / "subset2"), *finetune, "--out", str(student),
                             *RESUMABLE], student, ["init"]),
            Job("teacher", ["finetune", "--model", str(adapt), *finetune, "--out", str(teacher), *RESUMABLE], teacher,
                ["adapt"]),
            Job("bilstm", ["bilstm", "--teacher", str(teacher), "--task", "sst2", "--max-train-examples",
                           TRAIN_EXAMPLES, "--embedding-size", "64", "--max-len", "64", "--out", str(bilstm),
                           *RESUMABLE], bilstm, ["teacher"]),
            export("student-export", student, "tflite", "finetune"),
            export("teacher-export", teacher, "teacher_tflite", "teacher"),
            export("bilstm-export", bilstm, "bilstm_tflite", "bilstm", "--fused-lstm")]


def file_rows(out: Path, models=TRAINED) -> list[dict]:
    """What the exports recorded of each length-aware file (their parity.json): its size against the one-length
    file beside it, and per signature the dev sentences it is the shortest to hold and its parity on those of the
    parity examples that fit it."""
    found = []
    for model, files in forms().items():
        for form, (folder, name) in files.items():
            if model not in models or folder is None:
                continue
            parity = read_json(out / folder / "parity.json")
            plain, lengths = name.replace("_lengths", ""), parity[name]["lengths"]
            common = {"task": "sst2", "method": f"{model} {form}", "seed": 0, "model": model, "form": form,
                      "file": name}
            found += [{**common, "seq": "all", "metric": "tflite_bytes", "value": parity[name]["size_bytes"]},
                      {**common, "seq": str(SEQ_LEN), "metric": "tflite_bytes", "value": parity[plain]["size_bytes"],
                       "file": plain},
                      {**common, "seq": "all", "metric": "ops_in_file", "value": parity[name]["op_count"]}]
            for n, share in lengths["share"].items():
                found.append({**common, "seq": n, "metric": "dev_share", "value": share})
                checked = lengths["parity"].get(n) or (parity[name] if int(n) == SEQ_LEN else {})
                found += [{**common, "seq": n, "metric": m, "value": checked[m]} for m in ("examples", "max_abs_diff")
                          if m in checked]
    return found


def dev_shares(parity: dict) -> dict[int, float]:
    """A length-aware file's parity report (export's parity.json entry) -> length: the share of dev sentences it is
    the shortest signature for."""
    return {int(n): v for n, v in parity["lengths"]["share"].items()}


def rows(out: Path, threads: list[int], runs: int, models=(*TRAINED, PRESET)) -> list[dict]:
    """Per file and signature of the `models`: operators, the Pixel 4 estimate and the host latency, every
    signature of every file timed interleaved in one run per thread count (so that the ratios between models hold on
    a drifting host; a goal between models timed by different invocations, `--models`, does not have that); the
    figures at the dev set's lengths and the speed-up of dev over 128 (PRESET's from its one-length files at each
    length, weighted by the student's dev shares: the same SST-2 dev sentences in the same word pieces)."""
    from android_bench import estimate as cost
    from android_bench.host import SIGNATURE_MARK, measure
    from android_bench.models import CACHE, export_preset
    from mobilekd.export.graph import read_graph, subgraph_names
    from mobilekd.export.litert import mean_over_lengths
    from mobilekd.export.signatures import signature_length
    from mobilekd.export.parity import xnnpack_undelegated
    from mobilekd.host import cpu_model, identity

    efficiency = cost.calibrate(cost.op_costs(read_graph(export_preset("mobilebert", "none", 128, CACHE))))
    pixel4 = cost.load_profile("pixel4")
    found, entries = file_rows(out, models), {}  # entries: FILE#SIGNATURE -> (model, form, length, file name)
    shares, files_of = {}, {model: files for model, files in forms().items() if model in models}
    paths = {}

    def row(model, form, seq, metric, value, **extra):
        found.append({"task": "sst2", "method": f"{model} {form}", "seed": 0, "model": model, "form": form,
                      "seq": str(seq), "metric": metric, "value": round(value, 3), "cpu": cpu_model(),
                      "host": identity()["id"],
                      "file": paths[model, form].name, **extra})

    # PRESET's dev shares: the student's, the same SST-2 dev sentences in the same word pieces
    folder, name = forms()["student"]["fp32"]
    student_parity = out / folder / "parity.json"
    parity = read_json(student_parity).get(name) if student_parity.is_file() else None
    preset_shares = dev_shares(parity) if parity else None
    for model, files in files_of.items():
        for form, (folder, name) in files.items():
            if folder is None:  # PRESET: a one-length file per length (export_preset's), the 128 one the main
                lengths = [(export_preset(PRESET, name, int(n), CACHE), int(n)) for n in (*LENGTHS, SEQ_LEN)]
                paths[model, form] = path = lengths[-1][0]
                row(model, form, SEQ_LEN, "tflite_bytes", path.stat().st_size)
                if preset_shares:
                    shares[model, form] = preset_shares
                else:
                    print(f"{PRESET} {form}: no figures at the dev lengths without the student's export "
                          f"({student_parity})", file=sys.stderr)
            else:
                paths[model, form] = path = out / folder / name
                lengths = [(path, SEQ_LEN)]
                shares[model, form] = dev_shares(read_json(out / folder / "parity.json")[name])
            estimates, main = {}, None
            for file, length in lengths:
                names = subgraph_names(file)
                for k, signature in enumerate(names):  # a length-aware file's subgraphs are named after its signatures
                    n = signature_length(signature) or length
                    graph = read_graph(file, k)
                    main = graph if n == SEQ_LEN else main
                    estimates[n] = cost.estimate(cost.op_costs(graph), pixel4, 4, efficiency)["ms"]
                    row(model, form, n, "ops", len(graph), file=file.name)
                    row(model, form, n, "pixel4_ms", estimates[n], file=file.name)
                    # a one-subgraph file (its subgraph "main", signature serving_default) runs by its default runner
                    entries[f"{file}{SIGNATURE_MARK}{signature}" if len(names) > 1 else str(file)] = \
                        (model, form, n, file.name)
            undelegated = xnnpack_undelegated(path)  # the main subgraph's
            row(model, form, SEQ_LEN, "undelegated_ops", sum(undelegated.values()))
            products = sum(op.name == "BATCH_MATMUL" for op in main)
            if products:
                row(model, form, SEQ_LEN, "attention_products_delegated",
                    1 - undelegated.get("BATCH_MATMUL", 0) / products)
            if (model, form) not in shares:
                continue
            at_dev = mean_over_lengths(shares[model, form], estimates)
            row(model, form, "dev", "pixel4_ms", at_dev)
            row(model, form, "dev", "speedup", estimates[SEQ_LEN] / at_dev, against="pixel4_ms")
    for t in threads:
        timed = measure(list(entries), [t], runs, 5)["models"]
        ms = {}
        for entry, (model, form, n, file) in entries.items():
            ms.setdefault((model, form), {})[n] = timed[entry]["by_threads"][0]["p50_ms"]
            row(model, form, n, "host_ms", ms[model, form][n], threads=t, file=file)
        for (model, form), per_length in ms.items():
            if (model, form) not in shares:
                continue
            at_dev = mean_over_lengths(shares[model, form], per_length)
            row(model, form, "dev", "host_ms", at_dev, threads=t)
            row(model, form, "dev", "speedup", per_length[SEQ_LEN] / at_dev, threads=t, against="host_ms")
    return found


def table(results: list[dict]) -> str:
    pairs = list(dict.fromkeys((r["model"], r["form"]) for r in results))
    threads = sorted({r["threads"] for r in results if "threads" in r})
    seqs = [*LENGTHS, str(SEQ_LEN), "dev"]
    head = ["model", "form", "seq", "ops", *(f"host ms, {t} thread{'s' * (t > 1)}" for t in threads),
            "Pixel 4 est. ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def value(model, form, seq, metric, t=None):
        got = [r["value"] for r in results if r.get("threads") == t
               and (r["model"], r["form"], r["seq"], r["metric"]) == (model, form, seq, metric)]
        return got[0] if got else None

    def cell(*key, t=None):
        v = value(*key, t=t)
        return "-" if v is None else f"{v:g}"

    for model, form in pairs:
        for seq in seqs:
            if value(model, form, seq, "pixel4_ms") is None:  # a length this file does not have
                continue
            lines.append(f"| {model} | {form} | {seq} | {cell(model, form, seq, 'ops')} | "
                         + " | ".join(cell(model, form, seq, "host_ms", t=t) for t in threads)
                         + f" | {cell(model, form, seq, 'pixel4_ms')} |")
        if value(model, form, "dev", "speedup") is None:
            continue
        lines.append(f"| {model} | {form} | speed-up at dev | - | "
                     + " | ".join(f"{cell(model, form, 'dev', 'speedup', t=t)}x" for t in threads)
                     + f" | {cell(model, form, 'dev', 'speedup')}x |")
    undelegated = "; ".join(f"{m} {f} {cell(m, f, str(SEQ_LEN), 'undelegated_ops')}" for m, f in pairs)
    sizes = "; ".join(f"{m} {f} {value(m, f, 'all', 'tflite_bytes') / 1e6:.1f} MB against "
                      f"{value(m, f, str(SEQ_LEN), 'tflite_bytes') / 1e6:.1f} MB" for m, f in pairs
                      if value(m, f, "all", "tflite_bytes") and value(m, f, str(SEQ_LEN), "tflite_bytes"))
    cpu = next((r["cpu"] for r in results if "cpu" in r), "-")
    goals = ["", "| goal | measured | target | verdict |", "|---|---|---|---|"]
    for form, teacher in (("bilstm-fused", "fp32"), ("bilstm-fused-dynamic-int8", "dynamic-int8")):
        for seq in (str(SEQ_LEN), "dev"):
            for metric, t, where in [*(("host_ms", t, f"host, {t} thread{'s' * (t > 1)}") for t in threads),
                                     ("pixel4_ms", None, "Pixel 4 estimate")]:
                mine, theirs = value("bilstm", form, seq, metric, t), value("teacher", teacher, seq, metric, t)
                if mine and theirs:
                    goals.append(f"| {form} against the teacher ({teacher}) at {seq}, {where} | {theirs / mine:.1f}x | "
                                 f">= 10x | {'met' if theirs / mine >= 10 else 'missed'} |")
        ops = value("bilstm", form, str(SEQ_LEN), "ops")
        if ops is not None:
            goals.append(f"| {form}: operators | {ops:g} | < 100 | {'met' if ops < 100 else 'missed'} |")
    for form in (f for f in PRESET_FORMS if f.startswith("qat")):
        mine, theirs = value(PRESET, form, str(SEQ_LEN), "host_ms", 1), value(PRESET, "dynamic-int8", str(SEQ_LEN),
                                                                              "host_ms", 1)
        if mine and theirs:
            goals.append(f"| {PRESET} {form} against dynamic-int8 at {SEQ_LEN}, host, 1 thread | "
                         f"{mine / theirs:.2f}x | <= 0.8x | {'met' if mine / theirs <= 0.8 else 'missed'} |")
        share = value(PRESET, form, str(SEQ_LEN), "attention_products_delegated")
        if share is not None:
            goals.append(f"| {PRESET} {form}: attention products XNNPACK takes | {share:.0%} | 100% | "
                         f"{'met' if share == 1 else 'missed'} |")
    for form in ("fp32", "dynamic-int8"):
        for t in [*threads, None]:
            got = value("student", form, "dev", "speedup", t)
            if got:
                where = f"host, {t} thread{'s' * (t > 1)}" if t else "Pixel 4 estimate"
                goals.append(f"| student {form} at SST-2's dev lengths against 128, {where} | {got:g}x | >= 3x | "
                             f"{'met' if got >= 3 else 'missed'} |")
    return ("\n".join(lines) + f"\n\nOperators XNNPACK leaves to TFLite (main signature): {undelegated}. Host: {cpu}."
            + (f" Size of each length-aware file against its one-length file: {sizes}." if sizes else "")
            + "\n" + "\n".join(goals) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, "docs/results/kernels.json")
    p.add_argument("--out", default="runs/kernels", help="where its runs go (default runs/kernels)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="host thread counts (default 1 2)")
    p.add_argument("--runs", type=int, default=50, help="timed runs per signature (default 50)")
    p.add_argument("--models", nargs="+", choices=[*TRAINED, PRESET], default=[*TRAINED, PRESET],
                   help="the models whose files are timed, interleaved among themselves (default all)")
    p.add_argument("--collect", action="store_true",
                   help="only the rows the export recorded (sizes, dev shares, parity): no run, no timing")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    results_path = REPO_ROOT / args.results
    if args.collect or not args.table:
        exports = {f"{m}-export" for m in args.models}
        plan = with_needs(jobs(out), lambda job: job.name in exports)  # the asked models' exports, what they need
        if not args.collect and plan:
            failed = run_all(plan, 1, out / "logs")
            if failed:
                print(f"failed: {', '.join(failed)}", file=sys.stderr)
                return 1
        found = file_rows(out, args.models) if args.collect else rows(out, args.threads, args.runs, args.models)
        order = {model: k for k, model in enumerate(forms())}
        merge_rows(results_path, found, lambda r: (order.get(r["model"], len(order)), r["form"], r["seq"], r["metric"],
                                                   r.get("threads", 0)),
                   key=("model", "form", "seq", "metric", "threads"))
    return show_table(args, results_path, table)


if __name__ == "__main__":
    sys.exit(main())
