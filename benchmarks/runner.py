"""The benchmarks' job runner: each run is a subprocess of the toolkit's own recipes (`python -m mobilekd VERB`),
one thread each, `workers` at a time, started when the runs it needs are done; a finished run (its summary.json,
or a complete results.json) is skipped and an interrupted one resumes from its checkpoint. And the rows a
fine-tuning run contributes to a results file, merged into what the file already holds."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from safetensors import safe_open

from mobilekd.fileio import REPO_ROOT, read_json, write_json

RESUMABLE = ["--threads", "1", "--resume"]


@dataclass
class Job:
    name: str
    argv: list[str]
    out: Path
    needs: list[str] = field(default_factory=list)

    def done(self) -> bool:
        if self.argv[0] == "finetune":
            return finished_results(self.out) is not None
        written = ["config.json", "model.safetensors"] + ([] if self.argv[0] == "init" else ["summary.json"])
        return all((self.out / name).is_file() for name in written)


def run_all(plan: list[Job], workers: int, logs: Path) -> list[str]:
    """Run the jobs `workers` at a time, each when the jobs it needs are done; return the names that failed."""
    logs.mkdir(parents=True, exist_ok=True)
    done = {j.name for j in plan if j.done()}
    failed, running = [], {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}

    def launch(job: Job) -> int:
        with open(logs / (job.name.replace("/", "_") + ".log"), "w") as log:
            return subprocess.run([sys.executable, "-m", "mobilekd", *job.argv], stdout=log, stderr=subprocess.STDOUT,
                                  env=env, cwd=REPO_ROOT).returncode

    todo = [j for j in plan if j.name not in done]
    print(f"{len(plan) - len(todo)} of {len(plan)} runs done already; {len(todo)} to run, {workers} at a time")
    with ThreadPoolExecutor(workers) as pool:
        while todo or running:
            blocked = True
            while blocked:  # a job whose needs failed (or were skipped) is skipped, and so on down the chain
                blocked = {j.name for j in todo if any(n in failed for n in j.needs)}
                for name in sorted(blocked):
                    failed.append(name)
                    print(f"skipped {name}: a run it needs failed")
                todo = [j for j in todo if j.name not in blocked]
            for job in [j for j in todo if all(n in done for n in j.needs)]:
                if len(running) == workers:
                    break
                print(f"{time.strftime('%H:%M:%S')} start {job.name}")
                running[pool.submit(launch, job)] = (job, time.time())
                todo.remove(job)
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job, start = running.pop(future)
                ok = future.result() == 0 and job.done()
                (done.add(job.name) if ok else failed.append(job.name))
                print(f"{time.strftime('%H:%M:%S')} {'done' if ok else 'FAILED'} {job.name} "
                      f"({time.time() - start:.0f} s)"
                      + ("" if ok else f"; log: {logs / (job.name.replace('/', '_') + '.log')}"))
    return failed


def parameters(model_dir: Path) -> int:
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def finished_results(run_dir: Path) -> dict | None:
    """A fine-tuning run's results.json once the run is complete (None before)."""
    path = run_dir / "results.json"
    r = read_json(path) if path.is_file() else {}
    return r if r.get("complete") else None


def finetune_row(run_dir: Path, **identity) -> dict | None:
    """A finished fine-tuning run's row: its dev score after the last step (None while unfinished)."""
    r = finished_results(run_dir)
    if r is None:
        return None
    dev = next(iter(r["metrics"].values()))
    return {**identity, "metric": r["best_metric"], "value": round(dev[r["best_metric"]], 4),
            "params": parameters(run_dir), "train_seconds": r["wall_seconds"], "steps": r["steps"], "lr": r["lr"]}


def mean_std_cell(values: list[float], note: str = "") -> str:
    """A table cell: mean +- std over seeds (std 0 for one), a note, and the number of runs."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {std:.4f}{note} [n={len(values)}]"


def merge_rows(path: Path, found: list[dict], order) -> list[dict]:
    """Write `found` into the results file at `path`, keeping its rows of other (task, method, seed)."""
    key = ("task", "method", "seed")
    new = {tuple(f[k] for k in key) for f in found}
    kept = [r for r in (read_json(path) if path.is_file() else []) if tuple(r[k] for k in key) not in new]
    rows = sorted(kept + found, key=order)
    write_json(path, rows)
    return rows
