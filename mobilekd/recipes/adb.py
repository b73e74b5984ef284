"""Latency measured on a phone: TFLite's official `benchmark_model` over adb, with the paper's settings
(android_bench/adb.py: 4 threads on the fastest cores, XNNPACK, op profiling).

    mobilekd adb --model model.tflite --benchmark-binary ~/android/benchmark_model --out phone.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from android_bench.adb import Phone, run_on_phone
from mobilekd.errors import cli_entry, located
from mobilekd.fileio import write_json
from mobilekd.flags import at_least


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd adb", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help=".tflite file")
    p.add_argument("--benchmark-binary", required=True, help="TFLite benchmark_model built for the phone's ABI")
    p.add_argument("--adb", default="adb", help="adb executable (default: adb on PATH)")
    p.add_argument("--serial", help="device serial when several are attached")
    p.add_argument("--threads", type=int, default=4, help="threads, on the fastest cores (default 4, the paper's)")
    p.add_argument("--runs", type=int, default=50, help="timed runs (default 50)")
    p.add_argument("--out", help="write the result as JSON here")
    args = p.parse_args(argv)
    at_least("--threads", args.threads, 1)
    at_least("--runs", args.runs, 1)
    for path in (args.model, args.benchmark_binary):
        if not Path(path).is_file():
            raise located(path, "no such file")
    result = run_on_phone(Path(args.model), Path(args.benchmark_binary), Phone(args.adb, args.serial),
                          args.threads, args.runs)
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
