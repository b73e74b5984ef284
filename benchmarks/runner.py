"""The benchmarks' job runner: each run is a subprocess of the toolkit's own recipes (`python -m mobilekd VERB`),
one thread each, `workers` at a time, started when the runs it needs are done; a finished run (its summary.json,
or a complete results.json) is skipped and an interrupted one resumes from its checkpoint; a run that another
invocation is running (a shared stage, a seed's teacher: `claim`) is waited for, not started twice. And the rows a
fine-tuning run contributes to a results file, merged into what the file already holds; the command line the
comparison benchmarks share (run, or only --collect the finished runs, or only print the --table; --write puts the
table into its pages, --plot draws the benchmark's figure); the one verdict every goal table gives a difference
(`verdict`, `within`: judged against the seeds' noise); and the one writer of the pages' generated blocks
(`write_block`)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import math
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock
from safetensors import safe_open

from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.errors import UserError
from mobilekd.fileio import RECORDED, REPO_ROOT, atomic_path, read_json, record_keys, write_json
from mobilekd.models.heads import HEADS
from mobilekd.models.hf import load_config, transformers_extras
from mobilekd.recipes import export
from mobilekd.rundir import HELD_OUT, dev_scores, finished_results, trained_on
from mobilekd.host import UNKNOWN, cpu_model, identity

RESUMABLE = ["--threads", "1", "--resume"]
# a run's record of the cached files it shared (`Made.record`): its training set and the teacher's outputs over it
SHARED_RECORD = tuple(k for kind in RECORDED for k in record_keys(kind))


@dataclass
class Job:
    name: str
    argv: list[str]
    out: Path
    needs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for this run only
    after: list[str] = field(default_factory=list)  # runs once these have ended, done or failed (order, not need)

    def done(self) -> bool:
        if self.argv[0] in ("finetune", "fastbert", "bilstm", "qat", "multitask", "cmlm", "seq2seq"):
            return finished_results(self.out) is not None
        if self.argv[0] == "export":  # once parity.json holds every file the export writes
            parity = read_json(self.out / "parity.json") if (self.out / "parity.json").is_file() else {}
            return export.expected_files(export.parse_args(self.argv[1:])) <= set(parity)
        if self.argv[0] == "latency":
            return (self.out / "report.json").is_file()
        if self.argv[0] == "kernels":
            return (self.out / "kernels.json").is_file()
        if self.argv[0] == "ship":
            return (self.out / "ship.json").is_file()
        written = ["config.json", "model.safetensors"] + ([] if self.argv[0] == "init" else ["summary.json"])
        return all((self.out / name).is_file() for name in written)


def with_needs(plan: list[Job], wanted) -> list[Job]:
    """The jobs of `plan` for which `wanted(job)` is true and every job they need, transitively, in plan order."""
    by_name = {j.name: j for j in plan}
    keep = {j.name for j in plan if wanted(j)}
    stack = list(keep)
    while stack:
        for need in by_name[stack.pop()].needs:
            if need not in keep:
                keep.add(need)
                stack.append(need)
    return [j for j in plan if j.name in keep]


def claim(job: Job) -> int | None:
    """Claim `job` for this invocation: an open descriptor holding an exclusive `fcntl.flock` on `.OUT.claim` beside
    the job's output folder OUT (close it to release; the system releases it when every process holding it has
    ended, in any way), or None while another invocation holds it. The runs lock their own folder too
    (`mobilekd.rundir.owned`), but a run started on a held one fails; the claim lets a second invocation (another
    task, another seed, another benchmark sharing a stage) wait for the runs the two share, then read them."""
    job.out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(job.out.parent / f".{job.out.name}.claim", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def run_all(plan: list[Job], workers: int, logs: Path, poll: float = 10.0) -> list[str]:
    """Run the jobs `workers` at a time, each when the jobs it needs are done and those it comes `after` have ended
    (done or failed); return the names that failed. A job another invocation has claimed (`claim`) is looked at
    again every `poll` seconds: done there, it is done here; ended there unfinished, it runs here. A job that needs
    one the plan does not hold is skipped and counted as failed, as are the jobs that need it."""
    logs.mkdir(parents=True, exist_ok=True)
    done = {j.name for j in plan if j.done()}
    failed, running, elsewhere = [], {}, set()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}

    def launch(job: Job, fd: int) -> int:  # the run holds its claim too: it outlives an invocation killed under it
        with open(logs / (job.name.replace("/", "_") + ".log"), "w") as log:
            return subprocess.run([sys.executable, "-m", "mobilekd", *job.argv], stdout=log, stderr=subprocess.STDOUT,
                                  env={**env, **job.env}, cwd=REPO_ROOT, pass_fds=(fd,)).returncode

    todo = [j for j in plan if j.name not in done]
    names = {j.name for j in plan}
    started, begun, done_before = time.time(), [], sorted(done)
    existed = sorted(j.name for j in plan if j.name not in done and j.out.exists())  # to resume, or refused
    print(f"{len(plan) - len(todo)} of {len(plan)} runs done already; {len(todo)} to run, {workers} at a time")
    for job in todo:  # a need the plan does not run can never be met: said, not waited on in silence
        if missing := [n for n in job.needs if n not in names]:
            failed.append(job.name)
            print(f"skipped {job.name}: it needs {', '.join(missing)}, which this plan does not run")
    todo = [j for j in todo if j.name not in failed]
    with ThreadPoolExecutor(workers) as pool, contextlib.ExitStack() as held:
        held.callback(lambda: [os.close(fd) for _, _, fd in running.values()])  # the claims of runs still going
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
                if job.name in elsewhere:
                    print(f"{time.strftime('%H:%M:%S')} done {job.name} (by another invocation)")
            ended, waiting, again = done | set(failed), False, False
            for job in [j for j in todo if all(n in done for n in j.needs) and all(
                    n in ended or n not in names for n in j.after)]:
                if len(running) == workers:
                    break
                fd = claim(job)
                if fd is None:
                    if job.name not in elsewhere:
                        print(f"{time.strftime('%H:%M:%S')} waiting for {job.name}: another invocation is running it")
                    elsewhere.add(job.name)
                    waiting = True
                    continue
                if job.done():  # the invocation that held it finished it between our two looks
                    os.close(fd)
                    again = True  # look again at once: what needs it may start
                    continue
                print(f"{time.strftime('%H:%M:%S')} start {job.name}")
                running[pool.submit(launch, job, fd)] = (job, time.time(), fd)
                begun.append(job.name)
                todo.remove(job)
            if again:
                continue
            if not running and not waiting:
                break
            if running:
                finished, _ = wait(running, timeout=poll if waiting else None, return_when=FIRST_COMPLETED)
            else:
                finished = ()
                time.sleep(poll)
            for future in finished:
                job, start, fd = running.pop(future)
                os.close(fd)
                ok = future.result() == 0 and job.done()
                (done.add(job.name) if ok else failed.append(job.name))
                print(f"{time.strftime('%H:%M:%S')} {'done' if ok else 'FAILED'} {job.name} "
                      f"({time.time() - start:.0f} s)"
                      + ("" if ok else f"; log: {logs / (job.name.replace('/', '_') + '.log')}"))
    record_invocation(logs, {"started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                             "seconds": round(time.time() - started, 1), "workers": workers, "cpu": cpu_model(),
                             "host": identity()["id"], "host_fields": identity(),
                             "cores": os.cpu_count(), "ran": begun, "done_before": done_before, "existed": existed,
                             "failed": failed})
    return failed


INVOCATIONS = "invocations.json"  # in a benchmark's logs/: one entry per `run_all`, what it ran and its wall time


def record_invocation(logs: Path, entry: dict) -> None:
    """Append `entry` to the invocations file, under its lock: two invocations on one --out may end together."""
    path = logs / INVOCATIONS
    with FileLock(f"{path}.lock"):
        kept = read_json(path) if path.is_file() else []
        write_json(path, [*(kept if isinstance(kept, list) else []), entry])


def whole_plan_wall(logs: Path, plan: list[Job]) -> dict | None:
    """The last invocation recorded in `logs` that ran the jobs of `plan`, no other, from nothing (none done before
    it, no output folder there to resume) and none failing, as `run_all` recorded it, while what it wrote is what
    the plan's outputs still are (no file of theirs written after it ended): the plan's measured wall time on one
    machine; None if no invocation did."""
    path = logs / INVOCATIONS
    names = {j.name for j in plan}
    for entry in reversed(read_json(path) if path.is_file() else []):
        if set(entry.get("ran", [])) != names or entry.get("failed") or names & set(entry.get("existed", [])):
            continue  # (running every job of the plan, it found none done before)
        start = time.mktime(time.strptime(entry["started"], "%Y-%m-%dT%H:%M:%S"))
        if all(start <= written(j.out) <= start + entry["seconds"] + 1 for j in plan):
            return entry
    return None


def written(folder: Path) -> float:
    """When the newest file directly in `folder` was written (0 where there is none)."""
    return max((f.stat().st_mtime for f in folder.glob("*") if f.is_file()), default=0.0)


def parameters(model_dir: Path) -> int:
    """The numbers a model directory's weights file holds; where the weights stayed on another machine (a run on a
    lent GPU, its results and config brought back without them), those of its config's model, built on no device."""
    if not (model_dir / "model.safetensors").is_file() and (model_dir / "config.json").is_file():
        config, head = load_config(model_dir)
        with torch.device("meta"):
            model = HEADS[head].model_class(config)
            return sum(t.numel() for t in {**model.state_dict(), **transformers_extras(model)}.values())
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def finetune_rows(run_dir: Path, metrics: dict | None = None, **identity) -> list[dict]:
    """A finished fine-tuning run's rows, one per dev metric (the task's official one first, e.g. MRPC's F1 then its
    accuracy): its dev scores (of the model it kept; `val_value`: that model's validation score where it chose on
    one), or `metrics` ({split: {metric: value}}, e.g. one evaluation of its history) where given (no rows while
    unfinished)."""
    r = finished_results(run_dir)
    if r is None:
        return []
    dev = dev_scores(metrics or r["metrics"])
    if dev is None:  # an unlabelled dev set: no scores
        return []
    shared = {"params": parameters(run_dir), "train_seconds": r["wall_seconds"], "steps": r["steps"], "lr": r["lr"],
              **trained_on(r), **{k: r[k] for k in SHARED_RECORD if k in r}}
    names = [r["best_metric"]] + [m for m in dev if m != r["best_metric"]]
    taught = {k: r[k] for k in ("teacher_digest",) if k in r}  # the teacher that taught it (`teacher_record`)
    validation = (r["metrics"].get(HELD_OUT[0]) or {}) if metrics is None else {}
    return [{**identity, "metric": m, "value": round(dev[m], 4), **shared, **taught,
             **({"val_value": round(validation[m], 4)} if m in validation else {}),
             **({"teacher_value": round(r["teacher_dev"][m], 4)} if m in r.get("teacher_dev", {}) else {})}
            for m in names]


def metric_rank(task: str, metric: str) -> int:
    """Where a metric stands among its GLUE task's official metrics (0: the one the task is ranked by)."""
    return GLUE_TASKS[task].metrics.index(metric)


def columns(results: list[dict]) -> list[tuple[str, str]]:
    """The (task, metric) pairs of a results file, in its order."""
    return list(dict.fromkeys((r["task"], r["metric"]) for r in results))


def values(results: list[dict], task: str, metric: str, method: str) -> list[float]:
    """A method's values in a (task, metric) column, one per seed (`by_seed`: a seed run on two hosts is the mean
    of its runs)."""
    return list(by_seed(results, task, metric, method).values())


def by_seed(results: list[dict], task: str, metric: str, method: str) -> dict[int, float]:
    """A method's values in a (task, metric) column, by seed, in the rows' order; where a seed was run on several
    hosts (`merge_rows` keeps each), the mean of its runs, so every run counts and none outweighs a seed."""
    runs: dict[int, list[float]] = {}
    for r in results:
        if (r["task"], r["metric"], r["method"]) == (task, metric, method):
            runs.setdefault(r["seed"], []).append(r["value"])
    return {seed: v[0] if len(v) == 1 else statistics.fmean(v) for seed, v in runs.items()}


def paired_by_seed(results: list[dict], task: str, metric: str, method: str, base: str) -> dict[int, float]:
    """`method` - `base`, seed by seed over the seeds both have, in seed order (a seed gives both the same
    fine-tuning data order and classifier start, so the pairs vary less than the two means)."""
    mine, theirs = by_seed(results, task, metric, method), by_seed(results, task, metric, base)
    return {s: mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))}


def paired_differences(results: list[dict], task: str, metric: str, method: str, base: str) -> list[float]:
    """`paired_by_seed`'s differences."""
    return list(paired_by_seed(results, task, metric, method, base).values())


def mean_std_cell(values: list[float], note: str = "", signed: bool = False, digits: int = 4, runs: bool = True) -> str:
    """A table cell: mean +- std over seeds, a note, and (`runs`) the number of runs (a single run: its value, no
    spread)."""
    mean = f"{statistics.mean(values):{'+' if signed else ''}.{digits}f}"
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{mean}{spread}{note}" + (f" [n={len(values)}]" if runs else "")


def method_table(results: list[dict], methods: list[str], shares=None) -> str:
    """A comparison of methods: one line per method of `methods` that has rows (its student, parameters, .tflite
    size, host latency and Pixel 4 estimate from its first row), mean +- std over seeds per task on its official
    metric; with `shares(task, metric, method)` (its runs' scores as fractions of something, e.g. of the teacher
    that taught each), each cell also gives their mean as a percentage (none where it gives none)."""
    cols = [c for c in columns(results) if metric_rank(*c) == 0]
    lines = ["| method | student | params | .tflite MB | host ms | Pixel 4 ms (est.) | " +
             " | ".join(f"{t} ({m})" for t, m in cols) + " |", "|---|---|---|---|---|---|" + "---|" * len(cols)]
    for method in methods:
        mine = [r for r in results if r["method"] == method]
        if not mine:
            continue
        r0 = mine[0]

        def fmt(key, scale=1.0, digits=1, r0=r0):
            if r0.get(key) is None:
                return "-"
            return "<0.1" if key.endswith("_ms") and r0[key] < 0.05 else f"{r0[key] / scale:.{digits}f}"

        cells = []
        for c in cols:
            mine_values, fractions = values(results, *c, method), shares(*c, method) if shares else []
            share = f" ({100 * statistics.mean(fractions):.0f}%)" if mine_values and fractions else ""
            cells.append(mean_std_cell(mine_values, share) if mine_values else "-")
        params = f"{r0['params'] / 1e6:.1f}M" if r0.get("params") else "-"
        lines.append(f"| {method} | {r0.get('student', '-')} | {params} | {fmt('tflite_bytes', 1e6)} | "
                     f"{fmt('host_ms')} | {fmt('pixel4_ms')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


NOT_JUDGED = "not judged (n=1)"
VERDICTS = ("Verdicts judge the seed-by-seed differences against their noise: *holds* when their mean is above the "
            "target by more than two standard errors (std / √n), *fails* when below it by as much, *tie* in between.")
WITHIN = ("*Within* ±bound: the whole of mean ± 2 standard errors inside the bound; *undecided* when it straddles "
          "one, *fails* when it lies beyond one.")


def verdict(differences: list[float], above: float = 0.0) -> str:
    """Whether seed-by-seed differences (or per-seed values) stand above `above` beyond their own noise: "holds"
    when their mean exceeds `above` by more than two standard errors (SE = sample std / sqrt(n)), "fails" when it
    falls below `above` by more than two, "tie" otherwise; a single difference has no spread to judge by (NOT_JUDGED).

    Two standard errors of three seeds is a loose bar (a t-distribution with 2 degrees of freedom puts about 82% of
    its mass within it, not 95%): a "tie" says the seeds cannot tell, and a "holds" is the least a claim needs."""
    if not differences:
        raise ValueError("no differences to judge")
    if len(differences) < 2:
        return NOT_JUDGED
    gap = round(statistics.mean(differences) - above, 10)  # the values carry 4 digits: no float dust decides
    bar = round(2 * statistics.stdev(differences) / math.sqrt(len(differences)), 10)
    return "holds" if gap > bar else "fails" if gap < -bar else "tie"


def within(differences: list[float], bound: float) -> str:
    """Two-sided: whether the mean difference lies within ±`bound` beyond its noise. "holds" when the whole interval
    mean ± 2 standard errors is inside [-bound, +bound] (both `verdict(bound - d)` and `verdict(d + bound)` hold),
    "fails" when the interval lies wholly beyond one bound, "undecided" when it straddles one; NOT_JUDGED for n=1.
    (Not merely the mean inside the bound: +1.26 ± 0.46 points is not shown to be within 1 point.)"""
    sides = [verdict([bound - d for d in differences]), verdict([d + bound for d in differences])]
    if NOT_JUDGED in sides:
        return NOT_JUDGED
    return "holds" if sides == ["holds", "holds"] else "fails" if "fails" in sides else "undecided"


def judged_cell(differences: list[float], above: float = 0.0) -> str:
    """A table cell for paired differences: mean +- std [n] and their verdict against `above`."""
    return f"{mean_std_cell(differences, signed=True)} {verdict(differences, above)}"


def task_panels(rows: list[dict], width: float, height: float):
    """A figure with one panel per task of `rows` (in their order), side by side: (figure, [(axes, task), ...]), or
    None when the rows have no task. matplotlib draws off-screen (Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(width * len(tasks), height), squeeze=False)
    return fig, list(zip(axes[0], tasks))


BASELINES = ("tfidf", "majority")  # the rows benchmarks.baselines adds beside a fine-tuning benchmark's methods


def row_order(methods: list[str], tasks: list[str] | None = None):
    """A fine-tuning benchmark's sort of its file: task (in `tasks`' order, else by name), the metric's rank, the
    method (in `methods`' order, the baselines after them), seed."""
    known = list(methods) + [b for b in BASELINES if b not in methods]
    return lambda r: (r["task"] if tasks is None else tasks.index(r["task"]), metric_rank(r["task"], r["metric"]),
                      known.index(r["method"]), r["seed"])


ROW_KEY = ("task", "method", "seed", "metric", "threshold", "model", "threads")
HOSTS = "hosts.json"  # beside the results files: {host id: its fields (`mobilekd.host.identity`)}


def register_hosts(folder: Path, rows: list[dict]) -> list[dict]:
    """`rows` ready to write into a results file in `folder`: each row's "host_fields" (`trained_on`) moved into
    the folder's hosts file under its id, as are this machine's fields where a row names its id; the rows keep the
    id alone."""
    here = identity()
    found = {r["host"]: r["host_fields"] for r in rows if isinstance(r.get("host_fields"), dict)}
    if any(r.get("host") == here["id"] for r in rows):
        found.setdefault(here["id"], here)
    if found:
        path = folder / HOSTS
        with FileLock(f"{path}.lock"):
            known = read_json(path) if path.is_file() else {}
            fresh = {k: {f: v for f, v in fields.items() if f != "id"} for k, fields in found.items() if k not in known}
            if fresh:
                write_json(path, dict(sorted({**known, **fresh}.items())))
    return [{k: v for k, v in r.items() if k != "host_fields"} for r in rows]


def host_of(report_host: dict) -> dict:
    """A latency report's "host" (`android_bench.report`) as a row's fields: its id and fields ("unknown" for a
    report from before hosts were recorded)."""
    fields = report_host.get("identity")
    return {"host": fields["id"], "host_fields": fields} if fields else {"host": UNKNOWN}


def host_fields(results: dict) -> dict:
    """A row's host fields for a finished run's results (`trained_on`'s, less the CPU name)."""
    return {k: v for k, v in trained_on(results).items() if k in ("host", "host_fields")}


def recorded_host(result: dict) -> dict:
    """A row's host fields for a file that recorded `mobilekd.host.identity` under "host" ("unknown" for one
    from before hosts were recorded)."""
    fields = result.get("host")
    return {"host": fields["id"], "host_fields": fields} if isinstance(fields, dict) else {"host": UNKNOWN}


def write_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Write a results file (its hosts registered, `register_hosts`) and return the rows as written."""
    rows = register_hosts(path.parent, rows)
    write_json(path, rows)
    return rows


def merge_rows(path: Path, found: list[dict], order, key=ROW_KEY) -> list[dict]:
    """Write `found` into the results file at `path`, keeping its rows of other `key` (by default task, method,
    seed, metric and, where rows have them, threshold, model and thread count) or of another host: a row whose
    key and host are among the new rows' is replaced (the same run collected again), while a run on another
    machine stays beside it, so no host's run is lost to another's (the tables pool them: `by_seed`). Hosts that
    were never recorded, or back-filled from evidence (an "evidence" field in the hosts file), count as one: a run
    from before hosts were recorded, collected again, names none and replaces its own back-filled rows."""
    found = register_hosts(path.parent, found)
    hosts = read_json(path.parent / HOSTS) if (path.parent / HOSTS).is_file() else {}
    unrecorded = {None, UNKNOWN} | {h for h, fields in hosts.items() if "evidence" in fields}

    def ident(row):
        host = UNKNOWN if row.get("host") in unrecorded else row.get("host")
        return (*(tuple(v) if isinstance(v, list) else v for v in (row.get(k) for k in key)), host)

    new = {ident(f) for f in found}
    with FileLock(f"{path}.lock"):  # two invocations may end together
        kept = [r for r in (read_json(path) if path.is_file() else []) if ident(r) not in new]
        rows = sorted(kept + found, key=order)
        write_json(path, rows)
    return rows


def comparison(args, plan, found, order, report, draw=None, key=ROW_KEY) -> int:
    """A comparison benchmark's command: run the plan (unless --collect or --table), merge the finished runs' rows
    into the results file, print `report(rows of the tasks asked for)`, and with --write put it into its pages'
    blocks (`write_block`), with --plot `draw(rows, path)` its figure; exit 1 if a run failed, 2 with no results
    or no page to write. `plan()` and `found()` build the jobs and the rows; `order(row)` sorts the file. Nothing
    but the results file (not with --table), the pages (--write) and the figure (--plot) is written. `key`: what
    makes two rows the same (`merge_rows`)."""
    results_path = REPO_ROOT / args.results
    failed = []
    if not args.table:
        start = time.time()
        if not args.collect:
            failed = run_all(plan(), args.workers, (REPO_ROOT / args.out).resolve() / "logs")
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


# The pages' generated blocks: a BEGIN and an END line naming the command whose output stands between them.
MARKER = re.compile(r"<!-- (BEGIN|END) generated by `python -m benchmarks\.(\w+) --table` -->")
FENCE = re.compile(r"^\s*(```|~~~)")


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path)


def pages() -> list[Path]:
    """The Markdown pages that may hold generated blocks: README.md and docs/*.md."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def block_markers(name: str) -> tuple[str, str]:
    """The BEGIN and END lines of the block that `python -m benchmarks.NAME --table` prints."""
    command = f"python -m benchmarks.{name} --table"
    return f"<!-- BEGIN generated by `{command}` -->", f"<!-- END generated by `{command}` -->"


def block_text(table: str) -> str:
    """What stands between a block's markers: one blank line, the table as printed, one blank line."""
    return "\n" + table.strip("\n") + "\n\n"


def find_blocks(text: str, where="page") -> list[tuple[str, int, int]]:
    """The generated blocks of a page: (name, the index of the first character after its BEGIN line, the index of
    its END line's first character), in order; markers in fenced code are examples, not blocks. A UserError names
    the line of a marker that does not pair (BEGIN without END of the same name, nesting, END alone)."""
    found, open_, fenced, offset = [], None, False, 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        start, offset = offset, offset + len(line)
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else MARKER.fullmatch(line.strip())  # a marker is a line of its own
        if m is None:
            continue
        kind, name = m.groups()
        if kind == "BEGIN":
            if open_:
                raise UserError(f"{where}:{number}: BEGIN of {name} inside the block of {open_[0]} "
                                f"(opened on line {open_[2]})")
            open_ = (name, offset, number)
        elif open_ is None or open_[0] != name:
            raise UserError(f"{where}:{number}: END of {name} without its BEGIN"
                            + (f" (the block of {open_[0]} is open)" if open_ else ""))
        else:
            found.append((name, open_[1], start))
            open_ = None
    if open_:
        raise UserError(f"{where}:{open_[2]}: BEGIN of {open_[0]} without its END")
    return found


def replace_blocks(text: str, name: str, table: str, where="page") -> tuple[str, int]:
    """`text` with every block of `name` holding `block_text(table)`, and how many there were."""
    mine = [(s, e) for n, s, e in find_blocks(text, where) if n == name]
    for start, end in reversed(mine):
        text = text[:start] + block_text(table) + text[end:]
    return text, len(mine)


def write_pages(name: str, table: str) -> int:
    """A benchmark's --write: `write_block` into the pages, saying where; 0, or 2 after one error line."""
    try:
        written = write_block(name, table)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote the table into {', '.join(map(_shown, written))}", file=sys.stderr)
    return 0


def write_block(name: str, table: str, among: list[Path] | None = None) -> list[Path]:
    """Put `table` (what `python -m benchmarks.NAME --table` prints) between its markers in every page that holds
    them (`among`, default `pages()`); return the pages changed or already equal. A UserError (one line) when no
    page holds the markers or a page's markers do not pair; then no page is written."""
    changed, holding = {}, []
    for page in among if among is not None else pages():
        text = page.read_text(encoding="utf-8")
        new, count = replace_blocks(text, name, table, _shown(page))
        if count:
            holding.append(page)
            if new != text:
                changed[page] = new
    if not holding:
        raise UserError(f"no page holds {block_markers(name)[0]} (looked in README.md and docs/*.md): put the BEGIN "
                        f"and END lines where the table belongs")
    for page, new in changed.items():
        with atomic_path(page) as tmp:
            Path(tmp).write_text(new, encoding="utf-8")
    return holding
