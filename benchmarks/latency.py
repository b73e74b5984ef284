"""The latency table's rows: the latency recipe with the table's settings (`mobilekd latency --transformers-reference
--threads 1 2 4`: the paper's four presets in fp32 and dynamic-range int8, and transformers' MobileBERT through the
same converter, at sequence 128, every file and the host's own fp32 and int8 matrix-product ceilings timed
interleaved in one run, 20 runs each), its report turned into rows of docs/results/latency.json, and the table,
the paper's claims and the performance goals printed from those rows.

    python -m benchmarks.latency                                  # time (about 3 min on a fresh cache), rows, table
    python -m benchmarks.latency --from-report runs/latency/report.json   # rows of a finished report, no timing
    python -m benchmarks.latency --table [--write]        # the tables from the rows; --write: into its pages

One row per model, precision, thread count and metric (p50_ms, p90_ms, std_ms, achieved_gflops,
fraction_of_peak), and per model, precision and metric for what does not depend on threads (params_m, gflops,
ops, elementwise_ops, tflite_bytes, memory_mb, pixel4_ms, pixel6_ms, pixel8_ms: the cost model's estimates at 4
threads); method is the table's name ("MobileBERT", "MobileBERT dynamic-int8"), model the preset, precision fp32
or dynamic-int8. The host's ceilings are rows too (method "host matmul peak", model null). Every row names the
run's CPU, its core count and the ceilings measured in the same run (peak_gflops_fp32 and peak_gops_int8 at the
row's thread count, or all of them). The file holds one run: ratios are read within a run; absolute times drift
between runs and differ between hosts. The claims' verdicts ("reproduced": within 20% of the paper's ratio) and
the goals' are computed from the rows by android_bench.report's own rules.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from android_bench.models import PAPER_MODELS
from android_bench.report import DEVICES, GOAL_RULE, claims, goals
from benchmarks.command import show_table, table_flags
from benchmarks.rows import host_of, write_rows
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.errors import cli_entry

RESULTS = "docs/results/latency.json"
OUT = "runs/latency"
THREADS = ["1", "2", "4"]
RUNS = "20"
SEQ_LEN = "128"
RECIPE = ["latency", "--transformers-reference", "--threads", *THREADS, "--runs", RUNS, "--max-len", SEQ_LEN]
NAMES = {"bert_base": "BERT_BASE", "mobilebert_no_opt": "MobileBERT w/o OPT", "mobilebert": "MobileBERT",
         "mobilebert_tiny": "MobileBERT_TINY", "transformers_mobilebert": "transformers' MobileBERT, same converter"}
ORDER = [*PAPER_MODELS, "transformers_mobilebert"]
PRECISION = {"none": "fp32"}  # the report's quantize -> the rows' precision (others keep their name)
HOST_METRICS = ("p50_ms", "p90_ms", "std_ms", "achieved_gflops", "fraction_of_peak")
PEAK = "host matmul peak"


def run_recipe(out: Path) -> float:
    """`python -m mobilekd latency` with the table's settings, writing `out`/report.json; its wall seconds."""
    start = time.time()
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "mobilekd", *RECIPE, "--out", str(out)]
    print("$ " + " ".join(["python", *cmd[1:]]), flush=True)
    if subprocess.run(cmd, cwd=REPO_ROOT, env=env).returncode != 0:
        sys.exit("error: the latency recipe failed (its message is above)")
    return time.time() - start


def rows_of(report: dict, wall_seconds: float | None = None) -> list[dict]:
    """The rows of a latency report (runs/latency/report.json as `mobilekd latency` writes it)."""
    host = report["host"]
    peaks = {kind: {str(t): v for t, v in by_t.items()} for kind, by_t in host["peak_gflops"].items()}
    shared = {"cpu": host["cpu"], "cpu_count": host["cpu_count"], **host_of(host), "seq_len": report["seq_len"],
              "runs": host["runs"],
              "interleaved": host.get("interleaved", False), "omp_wait_policy": host.get("omp_wait_policy")}
    if wall_seconds is not None:
        shared["run_seconds"] = round(wall_seconds)

    def row(model, precision, threads, metric, value, **more):
        at = {"peak_gflops_fp32": peaks["fp32"][str(threads)], "peak_gops_int8": peaks["int8"][str(threads)]} \
            if threads is not None else {"peak_gflops": peaks}
        return {"task": None, "method": PEAK if model is None else name(model, precision), "model": model,
                "precision": precision, "seed": None, "threads": threads, "metric": metric, "value": value,
                **shared, **at, **more}

    found = [row(None, kind, int(t), "peak_gflops", v) for kind, by_t in peaks.items() for t, v in by_t.items()]
    for r in report["rows"].values():
        precision = PRECISION.get(r["quantize"], r["quantize"])
        size = Path(r["file"])
        size = size.stat().st_size if size.is_file() else round(r["size_mb"] * 1e6)
        fixed = {"params_m": r["params_m"], "gflops": r["gflops"], "ops": r["ops"],
                 "elementwise_ops": r.get("elementwise_ops"), "tflite_bytes": size, "memory_mb": r.get("memory_mb")}
        found += [row(r["model"], precision, None, m, v) for m, v in fixed.items() if v is not None]
        found += [row(r["model"], precision, None, f"{d}_ms", v, estimate_threads=report["estimate"]["threads"],
                      calibrated_on=report["estimate"]["calibrated_on"]) for d, v in r["estimate_ms"].items()]
        for t, stats in r["host"].items():
            found += [row(r["model"], precision, int(t), m, stats[m]) for m in HOST_METRICS if m in stats]
    return sorted(found, key=_order)


def name(model: str, precision: str) -> str:
    """A model's row name (its line in the table): the paper's name, and the precision unless fp32."""
    shown = NAMES.get(model, model)
    return shown if precision == "fp32" else f"{shown} {precision}"


def _order(r: dict):
    method = ORDER.index(r["model"]) if r["model"] in ORDER else (-1 if r["model"] is None else len(ORDER))
    return method, r["precision"] != "fp32", r["precision"], r["threads"] or 0, r["metric"]


def _report_rows(rows: list[dict]) -> dict:
    """The rows back in the report's form (label -> model, quantize, host by thread, estimates), for
    android_bench.report's claims and goals."""
    out = {}
    for r in rows:
        if r["model"] is None:
            continue
        label = r["model"].replace("transformers_mobilebert", "transformers mobilebert") + \
            ("" if r["precision"] == "fp32" else f" {r['precision']}")
        entry = out.setdefault(label, {"model": r["model"], "quantize": r["precision"], "host": {},
                                       "estimate_ms": {}, "fixed": {}})
        if r["threads"] is not None:
            entry["host"].setdefault(str(r["threads"]), {})[r["metric"]] = r["value"]
        elif r["metric"].endswith("_ms") and r["metric"][:-3] in DEVICES:
            entry["estimate_ms"][r["metric"][:-3]] = r["value"]
        else:
            entry["fixed"][r["metric"]] = r["value"]
    return out


def table(rows: list[dict]) -> str:
    """The latency table, the paper's claims and the goals, from the rows."""
    if not rows:
        return "no latency rows yet (run python -m benchmarks.latency)\n"
    first = rows[0]
    by = _report_rows(rows)
    threads = sorted({r["threads"] for r in rows if r["threads"] is not None and r["model"] is not None})
    shown = [t for t in threads if t <= first["cpu_count"]]  # more threads than cores oversubscribe: rows only
    devices = [d for d in DEVICES if any(d in e["estimate_ms"] for e in by.values())]
    peak = {(r["precision"], r["threads"]): r["value"] for r in rows if r["model"] is None}
    lines = [f"Host: {first['cpu']}, {first['cpu_count']} cores, LiteRT interpreter + XNNPACK, sequence "
             f"{first['seq_len']}, {first['runs']} runs per file, every file and the matmul ceilings timed "
             f"interleaved in one run (OMP_WAIT_POLICY={first['omp_wait_policy']}"
             + (f", {first['run_seconds']} s" if first.get("run_seconds") else "") + "). Matmul peak, this run: fp32 "
             + ", ".join(f"{peak[('fp32', t)]:.0f} GFLOP/s at {t} thr" for t in threads if ('fp32', t) in peak)
             + "; int8 " + ", ".join(f"{peak[('int8', t)]:.0f} GOP/s at {t} thr" for t in threads
                                     if ('int8', t) in peak) + ".", "",
             "| model | params | GFLOPs | ops | size | " + " | ".join(
                 f"host p50, {t} thread{'s' * (t > 1)}" + (" | vs MobileBERT | % of host peak" if t == shown[0] else "")
                 for t in shown) + " | " + " | ".join(f"{d.replace('pixel', 'Pixel ')} est." for d in devices) + " |",
             "|---|---|---|---|---|" + "---|" * (len(shown) + 2) + "---|" * len(devices)]
    for label in sorted(by, key=lambda k: (ORDER.index(by[k]["model"]) if by[k]["model"] in ORDER else 99,
                                           by[k]["quantize"] != "fp32")):
        e, fixed = by[label], by[label]["fixed"]
        base = by.get("mobilebert" + ("" if e["quantize"] == "fp32" else f" {e['quantize']}"))
        fp32 = e["quantize"] == "fp32"
        cells = [f"{fixed['params_m']}M" if fp32 else "", f"{fixed['gflops']:.3g}" if fp32 else "",
                 f"{fixed['ops']:,}" if fp32 else "", f"{fixed['tflite_bytes'] / 1e6:.0f} MB"]
        for t in shown:
            h = e["host"][str(t)]
            cells.append(f"{h['p50_ms']:.1f} ms")
            if t == shown[0]:
                cells += [("1x" if base is e else f"{h['p50_ms'] / base['host'][str(t)]['p50_ms']:.2f}x") if base
                          else "-",
                          f"{100 * h['fraction_of_peak']:.0f}%"]
        fitted = " (fitted)" if e["model"] == "mobilebert" and fp32 else ""
        cells += [f"{e['estimate_ms'][d]:.0f} ms" + (fitted if d == "pixel4" else "") for d in devices]
        lines.append(f"| {name(e['model'], e['quantize'])} | " + " | ".join(cells) + " |")
    hidden = [t for t in threads if t not in shown]
    if hidden:
        lines += ["", f"{', '.join(map(str, hidden))} threads oversubscribe this {first['cpu_count']}-core host: "
                      f"in the rows, not in the table. Pixel columns are the cost model's estimates at "
                      f"{next(r['estimate_threads'] for r in rows if 'estimate_threads' in r)} threads "
                      f"(calibrated once: {next(r['calibrated_on'] for r in rows if 'calibrated_on' in r)})."]
    lines += ["", "| the paper's claim (Pixel 4, Table 4) | paper | " + " | ".join(
        f"host, {t} thread{'s' * (t > 1)}" for t in shown) + " | Pixel 4 estimate |",
              "|---|---|" + "---|" * len(shown) + "---|"]
    for c in claims(by, shown, {"pixel4": None} if "pixel4" in devices else {}):
        def cell(key):
            return f"{c[key]:.2f}x ({'reproduced' if c[key + '_reproduced'] else 'not'})" if key in c else "-"
        lines.append(f"| {c['claim']} | {c['paper_pixel4']:.2f}x | " +
                     " | ".join(cell(f"host_{t}_threads") for t in shown) + f" | {cell('estimate_pixel4')} |")
    lines += ["", "\"Reproduced\": within 20% of the paper's ratio.", "", "| performance goal (host, this run) | "
              "measured ± 1 SE | goal | verdict |", "|---|---|---|---|"]
    for g in goals(by, shown, first["runs"]):
        direction = "at least" if g["higher_is_better"] else "at most"
        lines.append(f"| {g['goal']} | {g['value']:.3f} ± {g['se']:.3f} | {direction} {g['target']} | "
                     f"{g['verdict']} |")
    lines += ["", GOAL_RULE]
    return "\n".join(lines) + "\n"


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=OUT, help=f"the recipe's output folder (default {OUT})")
    p.add_argument("--from-report", metavar="PATH", help="build the rows from this finished report.json; time nothing")
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    results = REPO_ROOT / args.results
    if not args.table:
        if args.from_report:
            report, wall = read_json(args.from_report), None
        else:
            out = (REPO_ROOT / args.out).resolve()
            wall = run_recipe(out)
            report = read_json(out / "report.json")
        rows = rows_of(report, wall)
        write_rows(results, rows)
        print(f"{len(rows)} rows in {results}" + (f"; the run took {wall:.0f} s" if wall else ""))
    return show_table(args, results, table)


if __name__ == "__main__":
    sys.exit(main())
