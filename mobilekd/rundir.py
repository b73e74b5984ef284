"""A run owns its output directory: `owned(out)` holds an exclusive lock on OUT/.mobilekd.lock for the run's
whole life, so a second run pointed at the same directory stops at once with one line, before it reads or writes
anything there.

The lock is an advisory `fcntl.flock` on the file, which the operating system releases when the process ends in
any way (kill -9 included): a lock file left by a killed run is therefore stale by construction, and the next run
simply takes it. The file records who holds it (pid, host, start time, command) for the message.

A run marks its own output complete: `owned(out, argv=...)` writes OUT/complete.json with the run's flags when the
run starts (unfinished) and again when its body returns (finished); `completed(out, argv)` is then the one test of
"done" for every verb, so that a program running recipes (the benchmarks' runner, `ship`'s stages) knows no
recipe's layout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from mobilekd.errors import UserError, located
from mobilekd.fileio import REPO_ROOT, file_digest, read_json, write_json
from mobilekd.host import UNKNOWN

LOCK = ".mobilekd.lock"
COMPLETE = "complete.json"


@contextlib.contextmanager
def owned(out, enabled: bool = True, argv: list[str] | None = None):
    """Lock `out` (created if missing) for this process, or raise a UserError naming the run that holds it.
    `enabled=False` for the other processes of a multi-process run: the main process holds the lock for all.
    Given the run's flags (`argv`, None for sys.argv[1:]), OUT/complete.json says on entry that a run of them is
    under way and, once the body returns (not when it raises), that it finished: the run's own mark that OUT is
    whole for those flags. A run refused for bad input (a UserError) before it wrote anything leaves no OUT
    behind where it made OUT, and an earlier run's mark as it was where OUT held one (a finished run asked to resume
    under other flags stays finished)."""
    out = Path(out)
    if not enabled:
        yield out
        return
    if out.is_symlink() and not out.exists():
        raise located(out, f"is a broken link (to {os.readlink(out)}); remove it or choose another --out")
    if out.exists() and not out.is_dir():
        raise located(out, "exists and is not a directory; choose another --out")
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise located(out, f"in use by another run ({_holder(out / LOCK)}); wait for it to finish or choose "
                               f"another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "command": " ".join(sys.argv)}).encode())
        flags = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        mark = out / COMPLETE
        before = mark.read_bytes() if mark.is_file() else None  # an earlier run's mark, kept if this one is refused
        root = str(REPO_ROOT)  # the checkout that ran it: `completed` reads paths inside it relative to it
        write_json(mark, {"argv": flags, "root": root, "started": started, "finished": None})  # under way
        entered = mark.lstat().st_ctime  # the file system's clock, as `_written_since` reads it
        try:
            yield out
        except UserError:
            if made and {p.name for p in out.iterdir()} <= {LOCK, COMPLETE}:  # refused before any work: no OUT
                for name in (COMPLETE, LOCK):
                    (out / name).unlink(missing_ok=True)
                out.rmdir()
            elif before is not None and not _written_since(out, entered):  # e.g. a resume under other flags
                mark.write_bytes(before)  # refused before it wrote anything: OUT is as it was, its mark too
            raise
        write_json(mark, {"argv": flags, "root": root, "started": started,
                          "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    finally:
        os.close(fd)  # releases the lock; the file stays, harmless, for the next run to take


def _written_since(out: Path, when: float) -> bool:
    """Whether anything under `out` but its lock and mark (a file or a folder: its entries added, renamed or removed)
    changed at or after `when` (an inode's change time, which a copy keeping its modification time still moves);
    what cannot be read counts as changed."""
    try:
        return any(p.lstat().st_ctime >= when for p in out.rglob("*") if p.name not in (LOCK, COMPLETE))
    except OSError:
        return True


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info['host']}, started {info['started']}: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its details yet"


def completed(out, argv: list[str]) -> bool:
    """Whether the run that owned `out` finished with exactly these flags (its OUT/complete.json, `owned`), paths
    inside the checkout that ran it or this one read relative to it (the same run made from another checkout of the
    repository, a git worktree whose runs/ is this one's, is done); a run made before the mark existed, by the mark
    its recipe wrote last then (`_finished_before_marks`)."""
    path = Path(out) / COMPLETE
    if not path.exists():
        return _finished_before_marks(Path(out))
    try:
        mark = json.loads(path.read_text())
        roots = [r for r in (mark.get("root"), str(REPO_ROOT)) if r]
        return bool(mark.get("finished")) and _in_checkout(mark.get("argv"), roots) == _in_checkout(argv, roots)
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def _in_checkout(argv: list, roots: list[str]) -> list[str]:
    """Flags with each path inside one of the checkouts `roots` relative to it."""
    inside = [f"{r.rstrip('/')}/" for r in roots]
    return [next((a[len(r):] for r in inside if a.startswith(r)), a) for a in map(str, argv)]


def _finished_before_marks(out: Path) -> bool:
    """A run finished before complete.json: what its recipe wrote last then, so that finished work is not run (and
    its timings not overwritten) again: a complete results.json (finetune, bilstm, cmlm, seq2seq, ...), ship.json,
    latency's report.json, or summary.json beside the weights (train-teacher, distill). An export and an init, whose
    last file did not say whether every file asked for was written, run again (minutes at most)."""
    if finished_results(out) is not None or (out / "ship.json").is_file() or (out / "report.json").is_file():
        return True
    return all((out / name).is_file() for name in ("config.json", "model.safetensors", "summary.json"))


def finished_results(run_dir) -> dict | None:
    """A fine-tuning run's results.json once the run is complete (None before): its recipes write `complete` last."""
    path = Path(run_dir) / "results.json"
    r = read_json(path) if path.is_file() else {}
    return r if r.get("complete") else None


HELD_OUT = ("validation", "selection")  # results.json's splits carved from training (`mobilekd.finetune.selection`;
# "selection" is what runs before named it): never dev


def dev_scores(metrics: dict) -> dict | None:
    """A run's results.json `metrics` ({split: {metric: value}}): its first dev split's, not a split held out of the
    training data (HELD_OUT, nor a variant of one such as `validation_beam`); None where it has none (an unlabelled
    dev set)."""
    return next((scores for split, scores in (metrics or {}).items() if split.split("_")[0] not in HELD_OUT), None)


def teacher_record(teacher, task: str) -> dict:
    """What a student's results.json says of the teacher that taught it: its weights' SHA-256 (`teacher_digest`,
    the first 16 hex digits) and, where the teacher is a finished fine-tuning run on the same `task`, its dev scores
    (`teacher_dev`, `dev_scores`), so that a student's share of its teacher stays that teacher's after the teacher is
    made again."""
    weights = Path(teacher) / "model.safetensors"
    record = {"teacher_digest": file_digest(weights)[:16]} if weights.is_file() else {}
    done = finished_results(teacher)
    if done is not None and done.get("task") == task:
        dev = dev_scores(done.get("metrics"))
        if dev:
            record["teacher_dev"] = dev
    return record


def training_cpu(results: dict) -> str | None:
    """The CPU a run's seconds were measured on, as its training loop recorded it (None: a run from before the
    loop recorded it)."""
    return next((s["cpu"] for s in results.get("training") or [] if s.get("cpu")), None)


def training_gpu(results: dict) -> dict:
    """The GPU a run trained on, as its training loop recorded it, as a row's field ({} for a run on a CPU)."""
    found = next((s["gpu"] for s in results.get("training") or [] if s.get("gpu")), None)
    return {"gpu": found} if found else {}


def training_host(results: dict) -> dict | None:
    """The host identity (`mobilekd.host.identity`) a run's training loop recorded (None: a run from before the
    loop recorded it)."""
    return next((s["host"] for s in results.get("training") or [] if isinstance(s.get("host"), dict)), None)


def trained_on(results: dict) -> dict:
    """A row's fields for the machine a run trained on: its CPU, its host id ("unknown" for a run from before hosts
    were recorded) with the id's fields under "host_fields" (the results writer moves them into the hosts file),
    and its GPU where it had one."""
    host = training_host(results)
    return {"cpu": training_cpu(results), "host": host["id"] if host else UNKNOWN,
            **({"host_fields": host} if host else {}), **training_gpu(results)}
