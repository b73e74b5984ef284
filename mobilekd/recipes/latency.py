"""The latency report: measured on this host, estimated for Pixel-class phones, beside the paper's claims.

    scripts/latency.sh                                           # the paper's four models, fp32 + int8
    scripts/latency.sh --models --tflite student=runs/demo/tflite/model_none.tflite \\
        --accuracy student=0.789 --out runs/demo/latency           # your own exported files

A seq2seq file (`mobilekd export` of a `mobilekd seq2seq` student: encode and decode signatures) is timed and
estimated per generated sentence of 20 tokens, and the report gives its time per token beside.

Writes OUT/report.json (the figures, as data), and from it OUT/report.md and OUT/latency.png. Host times on a
shared machine vary between runs: compare the ratios measured in one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from android_bench.models import CACHE, PAPER_MODELS, QUANTIZE
from android_bench.report import DEVICES, collect, markdown, plot
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.flags import add_length_flag, pairs
from mobilekd.rundir import owned


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="*", default=list(PAPER_MODELS), help="presets to export and compare "
                   f"(default: {' '.join(PAPER_MODELS)}; none with a bare --models)")
    p.add_argument("--quantize", nargs="+", default=["none", "dynamic-int8"], choices=QUANTIZE,
                   help="how the presets are exported (default none dynamic-int8; int8: post-training full integer, "
                        "qat-int8: full integer through mobilekd.export.qat, ranges observed on shipped sentences; "
                        "qat-int8-sym: the same with the attention products' second operands symmetric, which "
                        "XNNPACK takes; qat-int8-sym-float-softmax: that with each softmax in float, which XNNPACK "
                        "takes where it takes no int8 softmax; qat-int8-float-attention: the attention cores in "
                        "float, which XNNPACK runs)")
    p.add_argument("--tflite", nargs="*", default=[], metavar="NAME=PATH",
                   help="existing .tflite files to add (a file name containing int8 is set against the int8 peak)")
    p.add_argument("--accuracy", nargs="*", default=[], metavar="NAME=VALUE",
                   help="task accuracy of a model row (plotted against latency)")
    p.add_argument("--transformers-reference", action="store_true",
                   help="also time transformers' MobileBERT through the same converter")
    add_length_flag(p, dest="seq_len", default=128, help="sequence length (default 128)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    p.add_argument("--runs", type=int, default=20, help="timed runs per model and thread count (default 20)")
    p.add_argument("--devices", nargs="+", default=list(DEVICES))
    p.add_argument("--cache", default=str(CACHE), help="exported presets")
    p.add_argument("--out", default="runs/latency")
    return p.parse_args(argv)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    with owned(args.out, argv=argv):  # this run's OUT, no other's; checked before any conversion
        run(args)


def run(args):
    accuracy = {}
    for name, value in pairs(args.accuracy, "--accuracy").items():
        try:
            accuracy[name] = float(value)
        except ValueError:
            raise UserError(f"--accuracy {name}={value}: not a number") from None
    out = Path(args.out)
    report = collect(models=args.models, quantize=args.quantize, seq_len=args.seq_len, threads=args.threads,
                     runs=args.runs, devices=args.devices, cache=Path(args.cache),
                     tflite={k: Path(v) for k, v in pairs(args.tflite, "--tflite").items()}, accuracy=accuracy,
                     transformers_reference=args.transformers_reference)
    write_json(out / "report.json", report)
    report = read_json(out / "report.json")  # the Markdown and the plot are made from the data as written
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text(markdown(report))
    plot(report, out / "latency.png")
    print(markdown(report))


if __name__ == "__main__":
    main()
