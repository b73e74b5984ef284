"""The command line the comparison benchmarks share: run the plan (or only --collect the finished runs, or only
print the --table), merge the rows into its results file, and with --write put the table into its pages, with
--plot draw its figure."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.pages import block_markers, write_pages
from benchmarks.rows import ROW_KEY, merge_rows
from benchmarks.runner import run_all
from mobilekd.fileio import REPO_ROOT, read_json


def comparison(args, plan, found, order, report, draw=None, key=ROW_KEY, grows: bool = False) -> int:
    """A comparison benchmark's command: run the plan (unless --collect or --table; again while it names new runs once
    its runs have finished), merge the finished runs' rows into the results file, print `report(rows of the tasks asked
    for)`, and with --write put it into its pages' blocks (`write_block`), with --plot `draw(rows, path)` its figure;
    exit 1 if a run failed, 2 with no results or no page to write. `plan()` and `found()` build the jobs and the rows;
    `order(row)` sorts the file. Nothing but the results file (not with --table), the pages (--write) and the figure
    (--plot) is written. `key`: what makes two rows the same (`merge_rows`). `grows`: `plan()` names runs as
    choices are made and has no side effect, so the runner asks it again each time a run ends (`run_all`'s `grow`)."""
    results_path = REPO_ROOT / args.results
    failed = []
    if not args.table:
        start = time.time()
        ran = None
        while not args.collect:  # a plan may grow as its runs finish (a choice made names the runs that follow it):
            jobs = plan()  # with `grows`, run_all names them as runs end; a stage found done at once, here
            if {j.name for j in jobs} == ran:
                break
            failed = run_all(jobs, args.workers, (REPO_ROOT / args.out).resolve() / "logs",
                             grow=plan if grows else None)
            if failed:
                break
            ran = {j.name for j in jobs}  # with those run_all named
        rows = found()
        merge_rows(results_path, rows, order, key)
        print(f"{len(rows)} rows of this invocation in {results_path}; it took {time.time() - start:.0f} s")
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
    tasks = getattr(args, "tasks", None)

    def asked(rows):
        return [r for r in rows if tasks is None or r["task"] in (*tasks, None)]

    if show_table(args, results_path, lambda rows: report(asked(rows))):
        return 2
    if args.plot:
        draw(asked(read_json(results_path)), REPO_ROOT / args.plot)
        print(f"drew {args.plot}", file=sys.stderr)
    return 1 if failed else 0


def measured_here(prog: str, doc: str, results: str, measure, order, key, table, argv=None) -> int:
    """The command of a benchmark that measures in its own process, no runs to resume (`--table` alone prints its
    table from the rows): `measure()`'s rows merged into `results` (`merge_rows` with `order` and `key`), then the
    table printed and, with --write, put into its pages."""
    p = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, results)
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        merge_rows(path, measure(), order, key)
    return show_table(args, path, table)


def show_table(args, path: Path, table) -> int:
    """The end of every benchmark's command: print `table(rows of the results file)` and, with --write, put it into
    its pages' blocks; 0, or 2 after one error line (no results file yet, or no page holding the markers)."""
    if not path.is_file():
        print(f"error: {path}: no results yet (run without --table)", file=sys.stderr)
        return 2
    text = table(read_json(path)).rstrip("\n")
    print(text)
    return write_pages(args.benchmark, text) if args.write else 0


def table_flags(p, results: str) -> None:
    """--results, --table and --write, which every benchmark shares; its name (for its pages' blocks) is its
    parser's prog, "python -m benchmarks.NAME"."""
    prefix = "python -m benchmarks."
    if not p.prog.startswith(prefix):
        raise ValueError(f"a benchmark's parser is named {prefix}NAME, not {p.prog!r}")
    name = p.prog[len(prefix):]
    p.set_defaults(benchmark=name)
    p.add_argument("--results", default=results, help=f"its rows (default {results})")
    p.add_argument("--table", action="store_true",
                   help="only print the table of the results file (no file is written, but with --write or --plot)")
    p.add_argument("--write", action="store_true",
                   help="also put the table into its block in the pages (README.md, docs/*.md) that hold its markers: "
                        + " ... ".join(block_markers(name)))


def comparison_flags(p, out: str, results: str, tasks: list[str] | None = None, choices=(), seeds=True,
                     plot: str | None = None) -> None:
    """The flags every comparison benchmark shares (--tasks and --seeds where it offers a choice; --plot where it
    draws a figure, `plot` its path). The benchmark's name, for its pages' blocks, is its parser's prog
    ("python -m benchmarks.NAME")."""
    table_flags(p, results)
    p.set_defaults(plot=None)
    p.add_argument("--out", default=out, help=f"where its runs go (default {out})")
    if tasks:
        p.add_argument("--tasks", nargs="+", default=tasks, choices=sorted(choices))
    if seeds:
        p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--workers", type=int, default=2, help="runs at a time, one thread each (default 2)")
    p.add_argument("--collect", action="store_true",
                   help="only gather the runs finished so far into the results file (e.g. while a run goes on)")
    if plot:
        p.add_argument("--plot", action="store_const", const=plot, help=f"also draw {plot} from the results file")


def task_comparison(argv, module: str, doc: str, out: str, results: str, tasks: dict, jobs, rows, table,
                    plot: str | None = None, draw=None, flags=None) -> int:
    """The whole command of a comparison over `tasks` (names, in the table's order) and seeds whose runs live in
    OUT/TASK/METHOD/seedN beside task-agnostic rows (task None, sorted last): `python -m benchmarks.MODULE`, its
    flags (`comparison_flags`), `jobs(out, tasks, seeds)` and `rows(out, tasks, seeds)`, the file sorted by task,
    method, seed and metric. A benchmark with flags of its own adds them by `flags(parser)`; its `jobs` and `rows`
    then take the parsed arguments as a fourth argument."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, out, results, list(tasks), tasks, plot=plot)
    if flags:
        flags(p)
    args = p.parse_args(argv)
    where = (REPO_ROOT / args.out).resolve()
    order = [*tasks, None]
    own = (args,) if flags else ()
    return comparison(args, lambda: jobs(where, args.tasks, args.seeds, *own),
                      lambda: rows(where, args.tasks, args.seeds, *own),
                      lambda r: (order.index(r["task"]), r["method"], r.get("seed") or 0, r["metric"]), table,
                      draw=draw)
