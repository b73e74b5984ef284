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
from dataclasses import dataclass, field
from pathlib import Path

from android_bench.models import CACHE, PAPER_MODELS, QUANTIZE
from android_bench.report import DEVICES, collect, markdown, plot
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.flags import add_flags, at_least, pairs, take_flags
from mobilekd.rundir import owned


@dataclass
class LatencyConfig:
    models: list[str] = field(default_factory=lambda: list(PAPER_MODELS), metadata={
        "nargs": "*", "default_help": f"{' '.join(PAPER_MODELS)}; none with a bare --models",
        "help": "presets to export and compare"})
    quantize: list[str] = field(default_factory=lambda: ["none", "dynamic-int8"], metadata={
        "nargs": "+", "choices": QUANTIZE, "default_help": "none dynamic-int8",
        "help": "how the presets are exported (int8: post-training full integer, qat-int8: full integer through "
                "mobilekd.export.qat, ranges observed on shipped sentences; qat-int8-sym: the same with the "
                "attention products' second operands symmetric, which XNNPACK takes; qat-int8-sym-float-softmax: "
                "that with each softmax in float, which XNNPACK takes where it takes no int8 softmax; "
                "qat-int8-float-attention: the attention cores in float, which XNNPACK runs)"})
    tflite: list[str] = field(default_factory=list, metadata={
        "nargs": "*", "metavar": "NAME=PATH", "default_help": "none",
        "help": "existing .tflite files to add (a file name containing int8 is set against the int8 peak)"})
    accuracy: list[str] = field(default_factory=list, metadata={
        "nargs": "*", "metavar": "NAME=VALUE", "default_help": "none",
        "help": "task accuracy of a model row (plotted against latency)"})
    transformers_reference: bool = field(default=False, metadata={
        "help": "also time transformers' MobileBERT through the same converter"})
    seq_len: int = field(default=128, metadata={"length": True, "min": 1, "help": "sequence length"})
    threads: list[int] = field(default_factory=lambda: [1, 4], metadata={
        "nargs": "+", "type": int, "default_help": "1 4", "help": "thread counts timed"})
    runs: int = field(default=20, metadata={"min": 1, "help": "timed runs per model and thread count"})
    devices: list[str] = field(default_factory=lambda: list(DEVICES), metadata={
        "nargs": "+", "choices": list(DEVICES), "default_help": "all", "help": "phones estimated"})
    cache: str = field(default=str(CACHE), metadata={"help": "exported presets"})
    out: str = field(default="runs/latency", metadata={"help": "output directory"})


def parse_args(argv=None):
    """The parsed flags as one `LatencyConfig`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, LatencyConfig)
    c = take_flags(LatencyConfig, p.parse_args(argv))
    for n in c.threads:
        at_least("--threads", n, 1)
    return c


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
