"""The benchmarks' job runner: each run is a subprocess of the toolkit's own recipes (`python -m mobilekd VERB`),
one thread each, `workers` at a time, started when the runs it needs are done; a finished run (the recipe's own
mark, OUT/complete.json, for the same flags) is skipped and an interrupted one resumes from its checkpoint; a run
that another invocation is running (a shared stage, a seed's teacher: `claim`) is waited for, not started twice;
each invocation's wall time is kept beside the logs."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from mobilekd.fileio import REPO_ROOT, read_json, write_json
from mobilekd.host import cpu_model, identity
from mobilekd.rundir import completed

RESUMABLE = ["--threads", "1", "--resume"]


@dataclass
class Job:
    name: str
    argv: list[str]
    out: Path
    needs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for this run only
    after: list[str] = field(default_factory=list)  # runs once these have ended, done or failed (order, not need)
    # the same run's flags before a flag was renamed: a run finished under them is done too
    renamed_from: list[list[str]] = field(default_factory=list)

    def done(self) -> bool:
        """The recipe marked its OUT complete for exactly these flags, or flags it had before a rename
        (`renamed_from`; `mobilekd.rundir.completed`)."""
        return any(completed(self.out, argv[1:]) for argv in (self.argv, *self.renamed_from))


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


def run_all(plan: list[Job], workers: int, logs: Path, poll: float = 10.0, grow=None) -> list[str]:
    """Run the jobs `workers` at a time, each when the jobs it needs are done and those it comes `after` have ended
    (done or failed); return the names that failed. A job another invocation has claimed (`claim`) is looked at
    again every `poll` seconds: done there, it is done here; ended there unfinished, it runs here. A job that needs
    one the plan does not hold is skipped and counted as failed, as are the jobs that need it. `grow()`, where
    given, is the plan named again each time a run ends, here or elsewhere (a choice made names the runs that
    follow it): the jobs it names that `plan` lacks join it (appended to the list) and run in this invocation,
    beside those still going, rather than in the next one once every run of this one has ended; what waits starts
    in `grow()`'s order. A `grow()` that fails is said and asked no more (the runs going end and are recorded; the
    caller's next look at its plan meets the error again). Jobs of a growing plan use `needs`, not `after` (an
    `after` naming a job not yet named is met)."""
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

    def unmet(jobs):  # a need the plan does not run can never be met: said, not waited on in silence
        for job in jobs:
            if missing := [n for n in job.needs if n not in names]:
                failed.append(job.name)
                print(f"skipped {job.name}: it needs {', '.join(missing)}, which this plan does not run")
        return [j for j in jobs if j.name not in failed]

    def grown():  # the runs the plan names now that it did not before, and what waits in its order
        nonlocal grow
        try:
            latest = grow()
        except Exception as err:  # a plan unreadable midway: the runs going still end and are recorded
            print(f"{time.strftime('%H:%M:%S')} the plan could not be named again ({type(err).__name__}: {err}); "
                  "no more runs join this invocation")
            grow = None
            return
        new = [j for j in latest if j.name not in names]
        plan.extend(new)
        names.update(j.name for j in new)
        for job in new:
            if job.done():
                done.add(job.name)
                done_before.append(job.name)
            elif job.out.exists():
                existed.append(job.name)
        if new:
            print(f"{time.strftime('%H:%M:%S')} named {len(new)} more: {', '.join(j.name for j in new)}")
        todo.extend(unmet([j for j in new if j.name not in done]))
        rank = {j.name: i for i, j in enumerate(latest)}
        todo.sort(key=lambda j: rank.get(j.name, len(rank)))

    todo = unmet(todo)
    seen = -1  # how many runs had ended when the plan was last named again
    with ThreadPoolExecutor(workers) as pool, contextlib.ExitStack() as held:
        held.callback(lambda: [os.close(fd) for _, _, fd in running.values()])  # the claims of runs still going
        while todo or running or (grow is not None and len(done) + len(failed) != seen):
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
            while grow is not None and len(done) + len(failed) != seen:  # a run ended: a choice may be made
                seen = len(done) + len(failed)
                grown()
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
GROWN = 30  # seconds at most between a command's `run_all` entries while its plan grows (it names the next runs)


def record_invocation(logs: Path, entry: dict) -> None:
    """Append `entry` to the invocations file, under its lock: two invocations on one --out may end together."""
    path = logs / INVOCATIONS
    with FileLock(f"{path}.lock"):
        kept = read_json(path) if path.is_file() else []
        write_json(path, [*(kept if isinstance(kept, list) else []), entry])


def whole_plan_wall(logs: Path, plan: list[Job]) -> dict | None:
    """The last command recorded in `logs` that ran the jobs of `plan`, no other, from nothing (none done before it,
    no output folder there to resume) and none failing, while what it wrote is what the plan's outputs still are (no
    file of theirs written after it ended): the plan's measured wall time on one machine; None if no command did.
    A command is one `run_all` entry, or consecutive ones where its plan grows as its runs finish (a choice made
    names the runs that follow it: `benchmarks.command.comparison` calls `run_all` again), each later entry running
    something, having found done exactly what the ones before it ran, and starting within GROWN seconds of the one
    before's end (not a later command: a rerun that finds all done, another asking for more tasks); their span,
    first start to last end, is its wall time."""
    def began(entry):
        return time.mktime(time.strptime(entry["started"], "%Y-%m-%dT%H:%M:%S"))

    path = logs / INVOCATIONS
    names, found, chain = {j.name for j in plan}, None, []
    for entry in read_json(path) if path.is_file() else []:
        before, ran = names & set(entry.get("done_before", [])), set(entry.get("ran", []))
        so_far = {n for e in chain for n in e["ran"]}
        if entry.get("failed") or names & set(entry.get("existed", [])) or not ran <= names:
            chain = []
        elif chain and ran and before == so_far and began(entry) <= began(chain[-1]) + chain[-1]["seconds"] + GROWN:
            chain.append(entry)  # the same command's next stage: it began as soon as the last one ended
        else:
            chain = [entry] if not before else []
        if chain and {n for e in chain for n in e["ran"]} == names:
            start, end = began(chain[0]), began(entry) + entry["seconds"]
            if all(start <= written(j.out) <= end + 1 for j in plan):
                found = chain[0] if len(chain) == 1 else {
                    **chain[0], "seconds": round(end - start, 1), "ran": [n for e in chain for n in e["ran"]],
                    "invocations": len(chain)}
    return found


def written(folder: Path) -> float:
    """When the newest file directly in `folder` was written (0 where there is none)."""
    return max((f.stat().st_mtime for f in folder.glob("*") if f.is_file()), default=0.0)
