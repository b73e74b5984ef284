"""The benchmarks' job runner: each run is a subprocess of the toolkit's own recipes (`python -m mobilekd VERB`),
one thread each, `workers` at a time, started when the runs it needs are done; a finished run (its summary.json,
or a complete results.json) is skipped and an interrupted one resumes from its checkpoint. And the rows a
fine-tuning run contributes to a results file, merged into what the file already holds; and the command line
the comparison benchmarks share (run, or only --collect the finished runs, or only print the --table)."""

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

from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.fileio import REPO_ROOT, read_json, write_json
from mobilekd.models.early_exit import is_early_exit
from mobilekd.models.multitask import is_multitask

RESUMABLE = ["--threads", "1", "--resume"]


@dataclass
class Job:
    name: str
    argv: list[str]
    out: Path
    needs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for this run only

    def done(self) -> bool:
        if self.argv[0] in ("finetune", "fastbert", "bilstm", "qat", "multitask"):
            return finished_results(self.out) is not None
        if self.argv[0] == "export":  # an early-exit model's is done once its layer-by-layer file is checked too,
            parity = read_json(self.out / "parity.json") if (self.out / "parity.json").is_file() else {}
            model = self.argv[self.argv.index("--model") + 1]  # a multi-task model's once each of its files is
            if is_multitask(model):
                tasks = read_json(Path(model) / "multitask.json")["tasks"] if "--single-task-files" in self.argv else []
                return {*(f"model_multitask_{q.replace('-', '_')}.tflite" for q in _values(self.argv, "--quantize")),
                        *(f"model_{t}.tflite" for t in tasks)} <= set(parity)
            return bool(parity) and (not is_early_exit(model) or "model_early_exit.tflite" in parity)
        if self.argv[0] == "latency":
            return (self.out / "report.json").is_file()
        if self.argv[0] == "kernels":
            return (self.out / "kernels.json").is_file()
        written = ["config.json", "model.safetensors"] + ([] if self.argv[0] == "init" else ["summary.json"])
        return all((self.out / name).is_file() for name in written)


def _values(argv: list[str], flag: str, default=("none",)) -> list[str]:
    """The values a flag of `nargs="+"` has in an argument list (`default` where it is absent)."""
    if flag not in argv:
        return list(default)
    rest = argv[argv.index(flag) + 1:]
    return rest[:next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]


def run_all(plan: list[Job], workers: int, logs: Path) -> list[str]:
    """Run the jobs `workers` at a time, each when the jobs it needs are done; return the names that failed."""
    logs.mkdir(parents=True, exist_ok=True)
    done = {j.name for j in plan if j.done()}
    failed, running = [], {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}

    def launch(job: Job) -> int:
        with open(logs / (job.name.replace("/", "_") + ".log"), "w") as log:
            return subprocess.run([sys.executable, "-m", "mobilekd", *job.argv], stdout=log, stderr=subprocess.STDOUT,
                                  env={**env, **job.env}, cwd=REPO_ROOT).returncode

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
            for job in [j for j in todo if j.done()]:  # finished meanwhile, e.g. by another invocation
                done.add(job.name)
                todo.remove(job)
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


def finetune_rows(run_dir: Path, **identity) -> list[dict]:
    """A finished fine-tuning run's rows, one per dev metric (the task's official one first, e.g. MRPC's F1 then its
    accuracy): its dev scores after the last step (no rows while unfinished)."""
    r = finished_results(run_dir)
    if r is None:
        return []
    dev = next(iter(r["metrics"].values()))
    shared = {"params": parameters(run_dir), "train_seconds": r["wall_seconds"], "steps": r["steps"], "lr": r["lr"]}
    names = [r["best_metric"]] + [m for m in dev if m != r["best_metric"]]
    return [{**identity, "metric": m, "value": round(dev[m], 4), **shared} for m in names]


def metric_rank(task: str, metric: str) -> int:
    """Where a metric stands among its GLUE task's official metrics (0: the one the task is ranked by)."""
    return GLUE_TASKS[task].metrics.index(metric)


def columns(results: list[dict]) -> list[tuple[str, str]]:
    """The (task, metric) pairs of a results file, in its order."""
    return list(dict.fromkeys((r["task"], r["metric"]) for r in results))


def values(results: list[dict], task: str, metric: str, method: str) -> list[float]:
    return [r["value"] for r in results if (r["task"], r["metric"], r["method"]) == (task, metric, method)]


def paired_differences(results: list[dict], task: str, metric: str, method: str, base: str) -> list[float]:
    """`method` - `base`, seed by seed over the seeds both have (a seed gives both the same fine-tuning data order
    and classifier start, so the pairs vary less than the two means)."""
    by_seed = [{r["seed"]: r["value"] for r in results if (r["task"], r["metric"], r["method"]) == (task, metric, m)}
               for m in (method, base)]
    return [by_seed[0][s] - by_seed[1][s] for s in sorted(set(by_seed[0]) & set(by_seed[1]))]


def mean_std_cell(values: list[float], note: str = "", signed: bool = False) -> str:
    """A table cell: mean +- std over seeds (std 0 for one), a note, and the number of runs."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):{'+' if signed else ''}.4f} ± {std:.4f}{note} [n={len(values)}]"


def merge_rows(path: Path, found: list[dict], order) -> list[dict]:
    """Write `found` into the results file at `path`, keeping its rows of other (task, method, seed, metric and,
    where rows have them, threshold, model and thread count)."""
    key = ("task", "method", "seed", "metric", "threshold", "model", "threads")
    new = {tuple(f.get(k) for k in key) for f in found}
    kept = [r for r in (read_json(path) if path.is_file() else []) if tuple(r.get(k) for k in key) not in new]
    rows = sorted(kept + found, key=order)
    write_json(path, rows)
    return rows


def comparison(args, plan, found, order, report) -> int:
    """A comparison benchmark's command: run the plan (unless --collect or --table), merge the finished runs' rows
    into the results file, print `report(rows of the tasks asked for)`; exit 1 if a run failed, 2 with no results.
    `plan()` and `found()` build the jobs and the rows; `order(row)` sorts the file."""
    results_path = REPO_ROOT / args.results
    failed = []
    if not args.table:
        start = time.time()
        if not args.collect:
            failed = run_all(plan(), args.workers, (REPO_ROOT / args.out).resolve() / "logs")
        rows = found()
        merge_rows(results_path, rows, order)
        print(f"{len(rows)} rows of this invocation in {results_path}; it took {time.time() - start:.0f} s")
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
    if not results_path.is_file():
        print(f"error: {results_path}: no results yet (run without --table)", file=sys.stderr)
        return 2
    tasks = getattr(args, "tasks", None)
    print(report([r for r in read_json(results_path) if tasks is None or r["task"] in (*tasks, None)]))
    return 1 if failed else 0


def comparison_flags(p, out: str, results: str, tasks: list[str] | None = None, choices=(), seeds=True) -> None:
    """The flags every comparison benchmark shares (--tasks and --seeds where it offers a choice)."""
    p.add_argument("--out", default=out, help=f"where its runs go (default {out})")
    if tasks:
        p.add_argument("--tasks", nargs="+", default=tasks, choices=sorted(choices))
    if seeds:
        p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--workers", type=int, default=2, help="runs at a time, one thread each (default 2)")
    p.add_argument("--results", default=results)
    p.add_argument("--collect", action="store_true",
                   help="only gather the runs finished so far into the results file (e.g. while a run goes on)")
    p.add_argument("--table", action="store_true", help="only print the table of the results file")
