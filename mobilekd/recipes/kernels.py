"""Where `.tflite` files' time goes on this host, kernel by kernel: Linux `perf` samples the LiteRT interpreter
(XNNPACK and TFLite's builtin kernels, named as in their sources) while it runs each file (android_bench/kernels.py).

    mobilekd kernels a.tflite b.tflite --threads 1 --seconds 5
    mobilekd kernels fp32=model_none.tflite int8=model_int8.tflite --out profiles   # named; profiles/kernels.json
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from android_bench.kernels import format_profile, profile
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import write_json
from mobilekd.flags import pairs
from mobilekd.rundir import owned


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="[NAME=]FILE", help=".tflite files, profiled one after the other "
                                                                     "(NAME: what the output calls it)")
    p.add_argument("--threads", type=int, default=1, help="interpreter threads (default 1)")
    p.add_argument("--seconds", type=float, default=5.0, help="sampled invocation time per file (default 5)")
    p.add_argument("--top", type=int, default=8, help="kernels printed per file (default 8)")
    p.add_argument("--out", help="also write the profiles as JSON to OUT/kernels.json (a directory this run owns)")
    args = p.parse_args(argv)
    if args.threads < 1:  # --seconds is checked by `profile`
        raise UserError("--threads must be at least 1")
    files = pairs([f if "=" in f else f"{f}={f}" for f in args.files], "kernels")
    with owned(args.out, argv=argv) if args.out else contextlib.nullcontext():  # OUT taken first, marked once written
        results = [{"name": name, **profile(path, args.threads, args.seconds)} for name, path in files.items()]
        if args.out:
            write_json(Path(args.out) / "kernels.json", results)
    print("\n\n".join(format_profile(r, args.top) for r in results))


if __name__ == "__main__":
    main()
