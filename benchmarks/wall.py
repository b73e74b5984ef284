"""The README's two commands, timed as a new user runs them: a fresh clone of this commit, then `scripts/demo.sh`
or `scripts/test.sh` exactly as the README prints them, set-up of `.venv` included (pip's cache as this machine
has it), with the host, the commit and how busy the machine was when it started.

    python -m benchmarks.wall demo              # clone HEAD into a temporary folder, time scripts/demo.sh there
    python -m benchmarks.wall tests             # the same for scripts/test.sh (and its pytest counts)
    python -m benchmarks.wall --table [--write] # the README's block from docs/results/wall.json

Each run is a row of its own (no run replaces another): task "demo" or "tests", method the command, metric
wall_seconds, and for the tests the counts pytest printed. A run whose command fails is recorded as failed (its
exit code) and exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.command import show_table, table_flags
from benchmarks.rows import write_rows
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.host import describe, identity

RESULTS = "docs/results/wall.json"
COMMANDS = {"demo": "scripts/demo.sh", "tests": "scripts/test.sh"}  # as the README prints them
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?)")
# the variables a set-up .venv or this session adds, which a new user's shell does not have
DROPPED = ("VIRTUAL_ENV", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def clean_env() -> dict[str, str]:
    """This process's environment less what a set-up venv adds (its bin/ on PATH, VIRTUAL_ENV, ...)."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def time_command(what: str, log: Path) -> dict:
    """Clone HEAD into a temporary folder and run `what`'s command there, its output to `log`: one row."""
    commit = _git("rev-parse", "--short", "HEAD")
    with tempfile.TemporaryDirectory(prefix="mobilekd-wall-") as tmp:
        clone = Path(tmp) / "mobilekd"
        _git("clone", "--quiet", str(REPO_ROOT), str(clone), cwd=Path(tmp))
        load = os.getloadavg()[0]
        start = time.time()
        with open(log, "w") as out:
            code = subprocess.run([COMMANDS[what]], cwd=clone, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL).returncode
        seconds = time.time() - start
    here = identity()
    row = {"task": what, "method": COMMANDS[what], "seed": None, "metric": "wall_seconds", "value": round(seconds, 1),
           "exit_code": code, "setup_included": True, "commit": commit,
           "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)), "load_at_start": round(load, 2),
           "cpu": here["cpu"], "host": here["id"], "host_fields": here}
    if what == "tests":
        tail = log.read_text().splitlines()[-5:]
        row["pytest"] = {kind.rstrip("s"): int(n) for line in tail for n, kind in COUNTS.findall(line)}
    return row


def table(rows: list[dict], hosts: dict) -> str:
    lines = ["| command, as the README prints it | commit | started | host | 1-min load at start | wall time | "
             "result |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        result = ("ok" if r["exit_code"] == 0 else f"failed (exit {r['exit_code']})") + (
            ", " + ", ".join(f"{n} {k}" for k, n in r["pytest"].items()) if r.get("pytest") else "")
        lines.append(f"| `{r['method']}` (fresh clone, set-up included) | {r['commit']} | "
                     f"{r['started']} | {describe({'id': r['host'], **hosts.get(r['host'], {})})} | "
                     f"{r['load_at_start']:.2f} | {r['value'] / 60:.1f} min | {result} |")
    return "\n".join(lines)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.wall", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", choices=sorted(COMMANDS), help="which of the README's commands to time")
    p.add_argument("--log", default="runs/wall", help="where each run's output goes (default runs/wall/WHAT.log)")
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    results = REPO_ROOT / args.results
    code = 0
    if not args.table:
        if not args.what:
            p.error("name the command to time (demo or tests), or ask for --table")
        log = REPO_ROOT / args.log / f"{args.what}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        row = time_command(args.what, log)
        write_rows(results, [*(read_json(results) if results.is_file() else []), row])
        print(f"{COMMANDS[args.what]}: {row['value']:.0f} s, exit {row['exit_code']}; log {log}; row in {results}")
        code = 1 if row["exit_code"] else 0
    hosts_path = results.parent / "hosts.json"
    hosts = read_json(hosts_path) if hosts_path.is_file() else {}
    return show_table(args, results, lambda rows: table(rows, hosts)) or code


if __name__ == "__main__":
    sys.exit(main())
