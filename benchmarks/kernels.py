"""Exported files at the sentence's own length (issue 35, item 3; the first rows of docs/results/kernels.json): the
demo's student (the adapted teacher's layers 0 and 5, `init --layers spread:2`, fine-tuned on SST-2) exported as
a length-aware file (`mobilekd export --lengths 16 32 64`: signatures at 16, 32, 64 and 128 tokens over the same
weights) in fp32 and dynamic-range int8; each signature timed on this host at 1 and 2 threads, interleaved, and
estimated for a Pixel 4; the latency at SST-2's dev lengths (each sentence run at the shortest signature holding
it) set against the latency at 128.

    python -m benchmarks.kernels                 # about 15 minutes on 2 cores, resumable
    python -m benchmarks.kernels --table [--write]

Rows: task `sst2`, method `student <form>`, model `student`, form (`fp32`, `dynamic-int8`), seq (`128`, `dev`, or
a signature's length), threads (host rows), metric (`host_ms` p50 of --runs interleaved runs, `pixel4_ms` the
estimate at 4 threads, `ops` the signature's operators, `undelegated_ops` those XNNPACK leaves to TFLite, and
`speedup` at `dev`: 128's latency over the dev set's), value; each with the CPU it was measured on. The dev
figure is the mean over the dev set's sentences, bucketed by the shortest signature that holds them (the shares
in the export's parity.json), of that signature's latency. The student's accuracy does not enter: its file's
parity per signature is the export's (`lengths` in its parity.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.runner import RESUMABLE, Job, merge_rows, run_all, show_table, table_flags
from benchmarks.quality import stage_dirs as quality_stages
from benchmarks import teacher_value
from mobilekd.fileio import REPO_ROOT, read_json

LENGTHS = ("16", "32", "64")
SEQ_LEN = 128
FORMS = {"fp32": "none", "dynamic-int8": "dynamic-int8"}
TRAIN_EXAMPLES = "4000"  # the student's fine-tuning: latency does not depend on it, parity is checked on real text


def jobs(out: Path) -> list[Job]:
    adapt = quality_stages(REPO_ROOT / "runs" / "quality")["adapt"]  # benchmarks.quality's adapted teacher
    student = out / "student"
    return [Job("adapt", ["train-teacher", *teacher_value.ADAPT, "--out", str(adapt), *RESUMABLE], adapt),
            Job("init", ["init", str(adapt), str(out / "subset2"), "--layers", "spread:2"], out / "subset2", ["adapt"]),
            Job("finetune", ["finetune", "--model", str(out / "subset2"), "--task", "sst2", "--max-train-examples",
                             TRAIN_EXAMPLES, "--epochs", "1", "--eval-every", "0", "--out", str(student), *RESUMABLE],
                student, ["init"]),
            Job("export", ["export", "--model", str(student), "--seq-len", str(SEQ_LEN), "--lengths", *LENGTHS,
                           "--quantize", *FORMS.values(), "--parity-task", "sst2", "--parity-examples", "872",
                           "--out", str(out / "tflite")], out / "tflite", ["finetune"])]


def file_rows(out: Path) -> list[dict]:
    """What the export recorded of each length-aware file (its parity.json): its size against the one-length file
    beside it, and per signature the dev sentences it is the shortest to hold and its parity on those of the
    parity examples that fit it."""
    from mobilekd.export.litert import tflite_name

    parity = read_json(out / "tflite" / "parity.json")
    found = []
    for form, quantize in FORMS.items():
        name, plain = tflite_name(quantize, lengths=True), tflite_name(quantize)
        lengths = parity[name]["lengths"]
        common = {"task": "sst2", "method": f"student {form}", "seed": 0, "model": "student", "form": form,
                  "file": name}
        found += [{**common, "seq": "all", "metric": "tflite_bytes", "value": parity[name]["size_bytes"]},
                  {**common, "seq": str(SEQ_LEN), "metric": "tflite_bytes", "value": parity[plain]["size_bytes"],
                   "file": plain}]
        for n, share in lengths["share"].items():
            found.append({**common, "seq": n, "metric": "dev_share", "value": share})
            checked = lengths["parity"].get(n) or (parity[name] if int(n) == SEQ_LEN else {})
            found += [{**common, "seq": n, "metric": m, "value": checked[m]} for m in ("examples", "max_abs_diff")
                      if m in checked]
    return found


def rows(out: Path, threads: list[int], runs: int) -> list[dict]:
    from android_bench import estimate as cost
    from android_bench.host import measure_signatures
    from android_bench.models import CACHE, export_preset
    from mobilekd.export.graph import read_graph, subgraph_names
    from mobilekd.export.litert import mean_over_lengths, signature_length, tflite_name
    from mobilekd.export.parity import xnnpack_undelegated
    from mobilekd.train.precision import cpu_model

    parity = read_json(out / "tflite" / "parity.json")
    efficiency = cost.calibrate(cost.op_costs(read_graph(export_preset("mobilebert", "none", 128, CACHE))))
    pixel4 = cost.load_profile("pixel4")
    found = file_rows(out)
    for form, quantize in FORMS.items():
        name = tflite_name(quantize, lengths=True)
        path, lengths = out / "tflite" / name, parity[name]["lengths"]
        share = {int(n): v for n, v in lengths["share"].items()}
        signatures = subgraph_names(path)  # litert-torch names each subgraph after its signature
        length_of = {s: signature_length(s) or parity[name]["seq_len"] for s in signatures}

        def row(seq, metric, value, **extra):
            found.append({"task": "sst2", "method": f"student {form}", "seed": 0, "model": "student", "form": form,
                          "seq": str(seq), "metric": metric, "value": round(value, 3), "cpu": cpu_model(),
                          "file": name, **extra})

        estimates = {}
        for k, signature in enumerate(signatures):
            graph = read_graph(path, k)
            estimates[length_of[signature]] = cost.estimate(cost.op_costs(graph), pixel4, 4, efficiency)["ms"]
            row(length_of[signature], "ops", len(graph))
            row(length_of[signature], "pixel4_ms", estimates[length_of[signature]])
        row(SEQ_LEN, "undelegated_ops", sum(xnnpack_undelegated(path).values()))  # the main subgraph's
        at_dev = mean_over_lengths(share, estimates)
        row("dev", "pixel4_ms", at_dev)
        row("dev", "speedup", estimates[SEQ_LEN] / at_dev, against="pixel4_ms")
        for t in threads:
            timed = measure_signatures(path, signatures, t, runs)
            ms = {length_of[s]: timed[s]["p50_ms"] for s in signatures}
            for n, v in ms.items():
                row(n, "host_ms", v, threads=t)
            at_dev = mean_over_lengths(share, ms)
            row("dev", "host_ms", at_dev, threads=t)
            row("dev", "speedup", ms[SEQ_LEN] / at_dev, threads=t, against="host_ms")
    return found


def table(results: list[dict]) -> str:
    forms = list(dict.fromkeys(r["form"] for r in results))
    threads = sorted({r["threads"] for r in results if "threads" in r})
    seqs = [*LENGTHS, str(SEQ_LEN), "dev"]
    head = ["form", "seq", "ops", *(f"host ms, {t} thread{'s' * (t > 1)}" for t in threads), "Pixel 4 est. ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(form, seq, metric, t=None):
        got = [r for r in results if (r["form"], r["seq"], r["metric"]) == (form, seq, metric)
               and r.get("threads") == t]
        return f"{got[0]['value']:g}" if got else "-"

    for form in forms:
        for seq in seqs:
            lines.append(f"| {form} | {seq} | {cell(form, seq, 'ops')} | "
                         + " | ".join(cell(form, seq, "host_ms", t) for t in threads)
                         + f" | {cell(form, seq, 'pixel4_ms')} |")
        lines.append(f"| {form} | speedup at dev | - | "
                     + " | ".join(f"{cell(form, 'dev', 'speedup', t)}x" for t in threads)
                     + f" | {cell(form, 'dev', 'speedup')}x |")
    undelegated = {f: cell(f, str(SEQ_LEN), "undelegated_ops") for f in forms}
    sizes = {f: {r["seq"]: r["value"] / 1e6 for r in results if (r["form"], r["metric"]) == (f, "tflite_bytes")}
             for f in forms}
    size_line = "; ".join(f"{f} {v['all']:.1f} MB against {v[str(SEQ_LEN)]:.1f} MB" for f, v in sizes.items()
                          if {"all", str(SEQ_LEN)} <= set(v))
    cpu = next((r["cpu"] for r in results if "cpu" in r), "-")
    return ("\n".join(lines) + "\n\nOperators XNNPACK leaves to TFLite (main signature): "
            + ", ".join(f"{f} {n}" for f, n in undelegated.items()) + f". Host: {cpu}."
            + (f" Size of the length-aware file against the one-length file: {size_line}." if size_line else "")
            + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, "docs/results/kernels.json")
    p.add_argument("--out", default="runs/kernels", help="where its runs go (default runs/kernels)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="host thread counts (default 1 2)")
    p.add_argument("--runs", type=int, default=50, help="timed runs per signature (default 50)")
    p.add_argument("--collect", action="store_true",
                   help="only the rows the export recorded (sizes, dev shares, parity): no run, no timing")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    results_path = REPO_ROOT / args.results
    if args.collect or not args.table:
        if not args.collect:
            failed = run_all(jobs(out), 1, out / "logs")
            if failed:
                print(f"failed: {', '.join(failed)}", file=sys.stderr)
                return 1
        found = file_rows(out) if args.collect else rows(out, args.threads, args.runs)
        merge_rows(results_path, found, lambda r: (r["model"], r["form"], r["seq"], r["metric"], r.get("threads", 0)),
                   key=("model", "form", "seq", "metric", "threads", "file"))
    return show_table(args, results_path, table)


if __name__ == "__main__":
    sys.exit(main())
