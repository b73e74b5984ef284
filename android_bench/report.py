"""The latency report as data (`collect`), and its Markdown and plot: measured on this host, estimated for
Pixel-class phones, beside the paper's claims. The program is `mobilekd latency` (mobilekd/recipes/latency.py).

For each model at sequence 128 (presets with random weights; latency does not depend on them): parameters,
FLOPs (from the graph), `.tflite` size, host p50 at each --threads count measured in this one run, the ratio
to MobileBERT at the same threads, the achieved FLOP/s as a fraction of the host's measured matmul peak, and
the cost model's Pixel estimates (android_bench.estimate, calibrated once on the paper's 62 ms MobileBERT).
Host times on a shared machine vary between runs:
compare the ratios measured in one run, not absolute times across runs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from tqdm import tqdm

from android_bench import estimate as cost
from android_bench.budget import efficiency as calibrated
from android_bench.host import SIGNATURE_MARK, measure_in_child, peak_memory, split_entry
from android_bench.models import export_preset, export_transformers_mobilebert
from android_bench.peak import FLOPS as PEAK_FLOPS
from android_bench.peak import peak_models
from mobilekd.errors import UserError, located
from mobilekd.export.graph import read_graph, subgraph_names
from mobilekd.export.litert import mean_over_lengths
from mobilekd.export.signatures import signature_length
from mobilekd.export.seq2seq import is_seq2seq_file, sentence_graph, sentence_tokens
from mobilekd.fileio import read_json, save_png
from mobilekd.host import describe

DEVICES = ("pixel4", "pixel6", "pixel8")
PAPER_RATIOS = {  # from the Pixel 4 latencies of Table 4 (pixel4.json)
    "BERT_BASE / MobileBERT (paper: 5.5x faster)": ("bert_base", "mobilebert", 342 / 62),
    "w/o OPT (LayerNorm + GELU) / MobileBERT (NoNorm + ReLU)": ("mobilebert_no_opt", "mobilebert", 192 / 62),
    "MobileBERT / MobileBERT_TINY": ("mobilebert", "mobilebert_tiny", 62 / 40),
}


def collect(*, models: list[str], quantize: list[str], seq_len: int, threads: list[int], runs: int,
            devices: list[str], cache: Path, tflite: dict[str, Path] | None = None,
            accuracy: dict[str, float] | None = None, transformers_reference: bool = False) -> dict:
    """Export (cached) the presets `models` in each of `quantize`, add the given `.tflite` files, time them all
    interleaved on this host at each thread count, and estimate each on `devices`: the report as data."""
    cache, accuracy = Path(cache), accuracy or {}
    files = {}
    jobs = [(m, q) for m in models for q in quantize]
    for name, q in tqdm(jobs, desc="export", unit="model"):
        files[f"{name}" + ("" if q == "none" else f" {q}")] = (name, q, export_preset(name, q, seq_len, cache))
    if transformers_reference:
        files["transformers mobilebert"] = ("transformers_mobilebert", "none",
                                            export_transformers_mobilebert(seq_len, cache))
    for name, path in (tflite or {}).items():
        if not Path(path).is_file():
            raise located(path, "no such .tflite file")
        files[name] = (name, "dynamic-int8" if "int8" in Path(path).name else "none", Path(path))
        for label, entry in length_entries(name, Path(path)).items():  # each shorter signature, a row of its own
            files[label] = (name, files[name][1], entry)
    if not files:
        raise UserError("nothing to measure: give --models and/or --tflite")
    # each graph read once, before any timing: a text file or a truncated model is named here; a seq2seq file's is
    # one generated sentence's (its encode, then GENERATED_TOKENS decode steps)
    graphs = {label: entry_graph(path) for label, (_, _, path) in files.items()}

    peak_files = peak_models(cache)
    timed = measure_in_child(list(peak_files.values()) + [path for _, _, path in files.values()], threads,
                             runs=runs)
    timing = {Path(p): {t["threads"]: t for t in r["by_threads"]} for p, r in timed["models"].items()}
    peaks = {kind: {t: PEAK_FLOPS / (timing[path][t]["min_ms"] / 1000) / 1e9 for t in threads}
             for kind, path in peak_files.items()}  # a ceiling: the best run

    efficiency = calibrated(cache)
    profiles = {d: cost.load_profile(d) for d in devices}
    rows = {}
    for label, (name, quantize, path) in tqdm(files.items(), desc="memory + estimate", unit="model"):
        graph = graphs[label]
        costs = cost.op_costs(graph)
        gflops = sum(c["flops"] for c in costs) / 1e9
        int8 = quantize != "none"
        row = {"model": name, "quantize": quantize, "file": str(path), "params_m": _params(graph),
               "gflops": round(gflops, 3), "size_mb": round(split_entry(path)[0].stat().st_size / 1e6, 2),
               "memory_mb": peak_memory(path), "host": {}, "estimate_ms": {}, "accuracy": accuracy.get(label),
               **({"generated_tokens": sentence_tokens(path)} if is_seq2seq_file(split_entry(path)[0]) else {})}
        for t, stats in timing[path].items():
            achieved = gflops / (stats["p50_ms"] / 1000)
            row["host"][str(t)] = {"p50_ms": round(stats["p50_ms"], 2), "p90_ms": round(stats["p90_ms"], 2),
                              "std_ms": round(stats["std_ms"], 2), "achieved_gflops": round(achieved, 1),
                              "fraction_of_peak": round(achieved / peaks["int8" if int8 else "fp32"][t], 3)}
        for device, profile in profiles.items():
            predicted = cost.estimate(costs, profile, 4, efficiency)
            row["estimate_ms"][device] = round(predicted["ms"], 1)
            row.setdefault("estimate_breakdown_ms", {})[device] = {k: round(v, 2) for k, v in
                                                                   predicted["by_kind_ms"].items()}
        row["ops"] = sum(c["kind"] != "free" for c in costs)
        row["elementwise_ops"] = sum(c["kind"] == "elementwise" for c in costs)
        row["elementwise_mb"] = round(sum(c["activations"] for c in costs if c["kind"] == "elementwise") / 1e6, 1)
        rows[label] = row
    for name, path in (tflite or {}).items():
        rows.update(at_dev_lengths(name, Path(path), rows))
    return {"host": {"cpu": timed["cpu"], "cpu_count": timed["cpu_count"], "identity": timed["host"],
                     "threads": threads, "runs": runs, "interleaved": True,
                     "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                     "peak_gflops": {k: {t: round(v, 1) for t, v in p.items()} for k, p in peaks.items()}},
            "seq_len": seq_len, "estimate": {"threads": 4, "efficiency": round(efficiency, 3),
                                                  "calibrated_on": "MobileBERT fp32, Pixel 4, 62 ms (paper, Table 4)"},
            "rows": rows, "claims": claims(rows, threads, profiles), "goals": goals(rows, threads, runs)}


def length_entries(name: str, path: Path) -> dict[str, Path]:
    """A length-aware file's (`mobilekd export --lengths`) shorter signatures as timed entries, {"NAME @N":
    FILE#SIGNATURE}; none for any other file."""
    if is_seq2seq_file(path):
        return {}
    return {f"{name} @{signature_length(s)}": Path(f"{path}{SIGNATURE_MARK}{s}") for s in subgraph_names(path)
            if signature_length(s) is not None}


def entry_graph(entry) -> list:
    """The graph of a timed entry: a file's main subgraph (a seq2seq file's: one generated sentence's), or the
    subgraph of FILE#SIGNATURE."""
    path, signature = split_entry(entry)
    if signature:
        return read_graph(path, subgraph_names(path).index(signature))
    return sentence_graph(path) if is_seq2seq_file(path) else read_graph(path)


def at_dev_lengths(name: str, path: Path, rows: dict) -> dict:
    """A length-aware file's latency at its task's dev lengths, {"NAME @dev": row}: each signature's host p50 and
    estimates weighted by the share of the parity task's dev sentences it is the shortest to hold (the export's
    parity.json beside the file); none without those shares."""
    parity = path.parent / "parity.json"
    lengths = read_json(parity).get(path.name, {}).get("lengths") if parity.is_file() else None
    if not lengths:
        return {}
    seq_len = max(int(n) for n in lengths["share"])
    share = lengths["share"]
    parts = {n: rows.get(name if int(n) == seq_len else f"{name} @{n}") for n in share}
    if None in parts.values():  # the file's signatures are not the lengths its parity.json holds
        return {}

    def mean(get) -> float:
        return mean_over_lengths(share, {n: get(r) for n, r in parts.items()})

    base = rows[name]
    row = {**base, "file": str(path), "share": share, "dev_mean_tokens": lengths["dev_mean_tokens"],
           "gflops": round(mean(lambda r: r["gflops"]), 3),
           "host": {t: {k: round(mean(lambda r, t=t, k=k: r["host"][t][k]), 3)
                        for k in ("p50_ms", "achieved_gflops", "fraction_of_peak")}  # means, not a p90
                    for t in base["host"]},
           "estimate_ms": {d: round(mean(lambda r, d=d: r["estimate_ms"][d]), 1) for d in base["estimate_ms"]},
           "estimate_breakdown_ms": {d: {k: round(mean(lambda r, d=d, k=k: r["estimate_breakdown_ms"][d].get(k, 0)),
                                                  2) for k in b} for d, b in base["estimate_breakdown_ms"].items()}}
    return {f"{name} @dev": row}


def _params(ops) -> float:
    """Stored weight values (float or int8; per-channel scales add a fraction of a percent), each buffer once (the
    signatures of one file share theirs)."""
    seen = {t.buffer: t.size for op in ops for t in op.inputs if t.constant is not None and t.dtype != "INT32"}
    return round(sum(seen.values()) / 1e6, 1)


def claims(rows: dict, threads: list[int], profiles: dict) -> list[dict]:
    """The paper's latency claims beside our host ratios and the estimate's, each marked reproduced or not
    (within 20% of the paper's ratio)."""
    out = []
    for claim, (slow, fast, paper) in PAPER_RATIOS.items():
        if slow not in rows or fast not in rows:
            continue
        entry = {"claim": claim, "paper_pixel4": round(paper, 2)}
        for t in threads:
            host = {name: rows[name]["host"][str(t)]["p50_ms"] for name in (slow, fast)}
            entry[f"host_{t}_threads"] = round(host[slow] / host[fast], 2)
        if "pixel4" in profiles:
            entry["estimate_pixel4"] = round(rows[slow]["estimate_ms"]["pixel4"] / rows[fast]["estimate_ms"]["pixel4"],
                                             2)
        for key in [k for k in entry if k.startswith(("host", "estimate"))]:
            entry[f"{key}_reproduced"] = abs(entry[key] / paper - 1) <= 0.2
        out.append(entry)
    return out


GOAL_RULE = ("Verdicts judge the timing noise: *met* when the value is on the goal's side of the target by more "
             "than two standard errors (from each file's spread over the timed runs), *missed* when on the other "
             "side by as much, *tie* in between.")


def goals(rows: dict, threads: list[int], runs: int) -> list[dict]:
    """The performance goals of the latency issue, checked on this run's host measurements (per thread count),
    judged against the timing noise as the benchmarks judge seeds: a goal is "met" when the measured value is on
    its side of the target by more than two standard errors, "missed" when on the other side by as much, "tie"
    otherwise. The standard error of a ratio of two files' times (or of a fraction of peak) is taken from the
    files' spread over the `runs` timed runs: relative SE = sqrt(sum of (std / p50)^2) / sqrt(runs)."""
    out = []

    def check(goal, value, target, timed, higher_is_better=True):
        se = value * math.sqrt(sum((t["std_ms"] / t["p50_ms"]) ** 2 for t in timed) / runs)
        gap = (value - target) if higher_is_better else (target - value)
        verdict = "met" if gap > 2 * se else "missed" if gap < -2 * se else "tie"
        out.append({"goal": goal, "value": round(value, 3), "target": target, "se": round(se, 4), "verdict": verdict,
                    "higher_is_better": higher_is_better})

    def host(name, t):
        return rows[name]["host"][str(t)]

    for t in threads:
        if "mobilebert" in rows:
            check(f"MobileBERT fp32 fraction of host fp32 matmul peak ({t} thr)",
                  host("mobilebert", t)["fraction_of_peak"], 0.8, [host("mobilebert", t)])
        if "mobilebert" in rows and "transformers mobilebert" in rows:
            ours, theirs = host("mobilebert", t), host("transformers mobilebert", t)
            check(f"our MobileBERT / transformers' MobileBERT latency ({t} thr)",
                  ours["p50_ms"] / theirs["p50_ms"], 1.0, [ours, theirs], higher_is_better=False)
        if "mobilebert" in rows and "bert_base" in rows:
            check(f"BERT_BASE / MobileBERT latency ({t} thr)", host("bert_base", t)["p50_ms"] /
                  host("mobilebert", t)["p50_ms"], 4.0, [host("bert_base", t), host("mobilebert", t)])
        for name in ("mobilebert", "mobilebert_tiny", "mobilebert_no_opt", "bert_base"):
            if name in rows and f"{name} dynamic-int8" in rows:
                fp32, int8 = host(name, t), host(f"{name} dynamic-int8", t)
                check(f"{name} fp32 / dynamic-int8 latency ({t} thr)", fp32["p50_ms"] / int8["p50_ms"], 2.0,
                      [fp32, int8])
    return out


def markdown(report: dict, title: bool = True) -> str:
    """The report as Markdown (`title=False` leaves out its own title, for a document that embeds it)."""
    host, threads = report["host"], report["host"]["threads"]
    devices = list(next(iter(report["rows"].values()))["estimate_ms"])
    lines = [f"# Latency at sequence {report['seq_len']}", ""] if title else [""]
    named = describe(host["identity"]) if host.get("identity") else f"{host['cpu']}, {host['cpu_count']} CPUs"
    lines += [f"Host (measured, this run): {named}, LiteRT interpreter + XNNPACK; "
             f"matmul peak fp32 " + ", ".join(f"{v} GFLOP/s at {t} thr" for t, v in host["peak_gflops"]["fp32"].items())
             + "; int8 " + ", ".join(f"{v} GOP/s at {t} thr" for t, v in host["peak_gflops"]["int8"].items()) + ".",
             f"Pixel columns are ESTIMATES (4 threads, cost model calibrated once: "
             f"{report['estimate']['calibrated_on']}, GEMM efficiency {report['estimate']['efficiency']}). "
             f"Host times: {host['runs']} runs per model, all models timed interleaved; memory: peak resident memory "
             f"of a process that loads the file and runs it once, over the process's own start-up.", "",
             "| model | params (M) | GFLOPs | size (MB) | memory (MB) | ops | " +
             " | ".join(f"host p50 {t} thr (ms) | vs MobileBERT | % of peak" for t in threads) + " | " +
             " | ".join(f"{d} est. (ms)" for d in devices) + " | accuracy |",
             "|---|---|---|---|---|---|" + "---|---|---|" * len(threads) + "---|" * len(devices) + "---|"]
    rows = report["rows"]
    for label, r in rows.items():
        base = rows.get("mobilebert" + ("" if r["quantize"] == "none" else f" {r['quantize']}"),
                        rows.get("mobilebert"))
        cells = []
        for t in threads:
            h = r["host"][str(t)]
            ratio = f"{h['p50_ms'] / base['host'][str(t)]['p50_ms']:.3g}x" if base else "-"
            cells.append(f"{h['p50_ms']:.1f} | {ratio} | {100 * h['fraction_of_peak']:.0f}%")
        accuracy = f"{r['accuracy']:.4f}" if r["accuracy"] is not None else "-"
        lines.append(f"| {label} | {r['params_m']} | {r['gflops']:.3g} | "
                     f"{r['size_mb']:.1f} | {r['memory_mb']} | {r['ops']} | " + " | ".join(cells) + " | " +
                     " | ".join(f"{r['estimate_ms'][d]:.0f}" for d in devices) + f" | {accuracy} |")
    generators = {label: r for label, r in rows.items() if r.get("generated_tokens")}
    if generators:
        t, d = threads[0], devices[0]
        lines += ["", "Text generators (a seq2seq file's encode and decode signatures): a row is one sentence of N "
                  "generated tokens, its encode and N decode steps over a full-length source; a token is that over N "
                  "(encode included): " + "; ".join(
                      f"{label}: N = {r['generated_tokens']}, {r['host'][str(t)]['p50_ms'] / r['generated_tokens']:.2f} "
                      f"ms a token on the host at {t} thr, {r['estimate_ms'][d] / r['generated_tokens']:.2f} ms on {d} "
                      f"(est.)" for label, r in generators.items()) + "."]
    at_dev = {label: r for label, r in rows.items() if r.get("share")}
    if at_dev:
        lines += ["", "Length-aware files (`mobilekd export --lengths`): a row NAME @N is the file's signature of N "
                  "tokens; NAME @dev the mean over its task's dev sentences, each run at the shortest signature "
                  "holding it (shares of the dev set: " + "; ".join(
                      f"{label}: " + ", ".join(f"{n} {v:.0%}" for n, v in r["share"].items())
                      + f", mean {r['dev_mean_tokens']} tokens" for label, r in at_dev.items()) + ")."]
    if report["claims"]:
        lines += ["", "## The paper's claims (ratios of latency)", "",
                  "| claim | paper, Pixel 4 | " + " | ".join(f"host {t} thr" for t in threads) +
                  " | Pixel 4 estimate |", "|---|---|" + "---|" * len(threads) + "---|"]
        for c in report["claims"]:
            def cell(key: str) -> str:
                if key not in c:
                    return "-"
                return f"{c[key]:.2f}x ({'reproduced' if c[key + '_reproduced'] else 'not reproduced'})"

            lines.append(f"| {c['claim']} | {c['paper_pixel4']:.2f}x | " +
                         " | ".join(cell(f"host_{t}_threads") for t in threads) + f" | {cell('estimate_pixel4')} |")
    if "pixel4" in devices:
        lines += ["", "## Where the Pixel 4 estimate's time goes (from each graph)", "",
                  "| model | ops | elementwise ops | elementwise traffic (MB) | matrix products (ms) | "
                  "elementwise (ms) | dispatch (ms) | total (ms) |", "|---|---|---|---|---|---|---|---|"]
        for label, r in rows.items():
            b = r["estimate_breakdown_ms"]["pixel4"]
            lines.append(f"| {label} | {r['ops']} | {r['elementwise_ops']} | {r['elementwise_mb']} | "
                         f"{b.get('gemm', 0):.1f} | {b.get('elementwise', 0):.1f} | {b.get('dispatch', 0):.1f} | "
                         f"{r['estimate_ms']['pixel4']:.1f} |")
        lines += ["", "Matrix products are FLOPs over the fastest cores' SIMD peak x the fitted efficiency; every "
                  "other op is a pass over its activations on one core plus a fixed dispatch cost "
                  "(android_bench/estimate.py). LayerNorm + GELU add passes, not FLOPs."]
    if report["goals"]:
        lines += ["", "## Performance goals (host, this run)", "", "| goal | measured ± 1 SE | target | verdict |",
                  "|---|---|---|---|"]
        lines += [f"| {g['goal']} | {g['value']} ± {g['se']} | {g['target']} | {g['verdict']} |"
                  for g in report["goals"]]
        lines += ["", GOAL_RULE]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    """Latency against accuracy where every row has one, else against file size (log scales): host (measured,
    first thread count) and the Pixel 4 estimate side by side; one colour per model, squares for int8."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = report["rows"]
    by_accuracy = all(r["accuracy"] is not None for r in rows.values())
    thread = report["host"]["threads"][0]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    panels = [(axes[0], lambda r: next(iter(r["host"].values()))["p50_ms"], f"host, measured ({thread} thread)"),
              (axes[1], lambda r: r["estimate_ms"].get("pixel4", float("nan")), "Pixel 4, estimated (4 threads)")]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = list(dict.fromkeys(r["model"] for r in rows.values()))
    for ax, latency, title in panels:
        for label, r in rows.items():
            ax.scatter(latency(r), r["accuracy"] if by_accuracy else r["size_mb"], label=label,
                       marker="s" if r["quantize"] != "none" else "o",
                       color=colours[models.index(r["model"]) % len(colours)])
        ax.set_xscale("log")
        if not by_accuracy:
            ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers at 1, 2, 5 x 10^k on log axes
            axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("accuracy" if by_accuracy else ".tflite size (MB)")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"sequence {report['seq_len']}; squares = int8")
    save_png(fig, path)
