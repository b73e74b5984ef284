"""Time `.tflite` files on this host through the LiteRT interpreter (XNNPACK), interleaved round by round so a
slow spell of a shared machine hits them all alike (android_bench/host.py).

    mobilekd host-bench a.tflite b.tflite --threads 1 2 4 --runs 30 [--out timings.json]
"""

from __future__ import annotations

import argparse

from android_bench.host import measure_in_child
from mobilekd.errors import cli_entry
from mobilekd.fileio import write_json
from mobilekd.flags import at_least


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd host-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help=".tflite files")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="thread counts (default 1 2 4)")
    p.add_argument("--runs", type=int, default=30, help="timed runs per file and thread count (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs before them (default 5)")
    p.add_argument("--out", help="write the timings as JSON here")
    args = p.parse_args(argv)
    for n in args.threads:
        at_least("--threads", n, 1)
    at_least("--runs", args.runs, 1)
    at_least("--warmup", args.warmup, 0)
    result = measure_in_child(args.models, args.threads, args.runs, args.warmup)
    if args.out:
        write_json(args.out, result)
    print(f"{result['cpu']} ({result['cpu_count']} CPUs); models timed interleaved")
    for path, r in result["models"].items():
        print(f"{path} ({r['size_mb']:.1f} MB)")
        for t in r["by_threads"]:
            print(f"  {t['threads']} threads: p50 {t['p50_ms']:.2f} ms, p90 {t['p90_ms']:.2f} ms, "
                  f"min {t['min_ms']:.2f} ms, mean {t['mean_ms']:.2f} +- {t['std_ms']:.2f} ms over {t['runs']} runs")


if __name__ == "__main__":
    main()
