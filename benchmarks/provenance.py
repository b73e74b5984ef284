"""Which machine stands behind each figure: every results row that holds a time, a speed or a precision choice
names its host (`mobilekd.host`), and docs/results/hosts.json says what each host is. This command lists the
hosts with the rows each holds, file by file, and the rows that name none (a test keeps that list empty).

    python -m benchmarks.provenance --table            # print the hosts and their rows
    python -m benchmarks.provenance --table --write    # and put it into docs/reproducibility.md

A host measured before hosts were recorded was back-filled from what its rows show (a bf16 training choice, a
bf16 matrix peak of 0.9 GFLOP/s), its entry saying so under "evidence"; where nothing tells, the row says
"unknown" and no page's claim may rest on it.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from benchmarks.command import show_table, table_flags
from benchmarks.rows import HOSTS
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.host import UNKNOWN, describe

RESULTS = REPO_ROOT / "docs" / "results"
# metrics that are a time, a speed or a share of a machine's peak
TIMING_METRICS = {
    "achieved_gflops", "compile_seconds", "cpu_ms", "examples_per_second", "first_step_seconds", "fraction_of_peak",
    "gop_s", "host_ms", "host_p50_ms", "optimizer_share", "outside_matmul_share", "p50_ms", "p90_ms",
    "paper_schedule_hours", "pd_seconds", "peak_gflops", "pkt_seconds", "profiled_wall_ms", "ratio",
    "real_tokens_per_second", "seconds", "seconds_per_pass", "seconds_per_step", "speedup", "std_ms",
    "tokens_per_s", "useful_gflops", "wall_seconds", "peak_gpu_gib", "memory_mb", "intermediate_seconds",
    "teacher_store_seconds", "transfer_seconds", "search_wall_seconds", "trial_wall_seconds_median"}
# fields beside a score that are a time or a precision the host's probe chose
TIMING_FIELDS = {
    "train_seconds", "host_ms", "full_host_ms", "single_task_host_ms", "soft_target_seconds", "importance_seconds",
    "set_seconds", "set_made_seconds", "outputs_seconds", "outputs_made_seconds", "start_seconds", "run_seconds",
    "cpu_seconds", "train_precision", "augment_precision", "teacher_outputs_precision", "soft_target_precision",
    "score_precision", "peak_gflops_fp32", "peak_gops_int8", "teacher_store_precision"}


def timed(row: dict) -> bool:
    """Whether a row holds a time, a speed or a precision choice (so must name its host)."""
    return row.get("metric") in TIMING_METRICS or any(row.get(k) is not None for k in TIMING_FIELDS)


def result_files(folder: Path = RESULTS) -> dict[str, list[dict]]:
    """Every results file of rows in `folder` (not the hosts file, not the sample files), by name."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        rows = read_json(path)
        if path.name != HOSTS and isinstance(rows, list):
            found[path.stem] = rows
    return found


def unhosted(folder: Path = RESULTS) -> list[str]:
    """"file: row i (metric)" for each timed row that names no host, or a host the hosts file does not know."""
    known = set(read_json(folder / HOSTS)) | {UNKNOWN} if (folder / HOSTS).is_file() else {UNKNOWN}
    return [f"{name}: row {i} ({r.get('metric')})" for name, rows in result_files(folder).items()
            for i, r in enumerate(rows) if timed(r) and r.get("host") not in known]


def table(hosts: dict, folder: Path = RESULTS) -> str:
    """One line per host of the hosts file `hosts` or the rows: what it is, and how many timed rows of each results
    file it holds."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, rows in result_files(folder).items():
        for r in rows:
            if timed(r):
                counts[r.get("host", "none")][name] += 1
    lines = ["| host | what it is | how known | timed rows |", "|---|---|---|---|"]
    for host in sorted(counts, key=lambda h: (h == UNKNOWN, h)):
        fields = {"id": host, **hosts.get(host, {})}
        known = fields.get("evidence", "recorded by the run") if host in hosts else "-"
        where = ", ".join(f"{n} {c}" for n, c in sorted(counts[host].items()))
        lines.append(f"| `{host}` | {describe(fields)} | {known} | {where} |")
    return "\n".join(lines)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.provenance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, f"docs/results/{HOSTS}")
    p.add_argument("--check", action="store_true", help="exit 1, listing them, if a timed row names no known host")
    args = p.parse_args(argv)
    folder = (REPO_ROOT / args.results).parent
    if args.check:
        missing = unhosted(folder)
        print("\n".join(missing) or "every timed row names a known host")
        return 1 if missing else 0
    return show_table(args, folder / HOSTS, lambda hosts: table(hosts, folder))


if __name__ == "__main__":
    sys.exit(main())
