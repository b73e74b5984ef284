"""File helpers shared by every reader and writer: text that may be gzipped, atomic writes, and caches computed once."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import gzip
import json
import os
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from filelock import FileLock

from mobilekd.errors import located

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout: data/ and .cache/ live here


def open_binary(path):
    """Open a file (or a named pipe) for reading bytes, transparently gunzipping `*.gz`; a missing file is a
    UserError."""
    path = Path(path)
    if not path.exists() or path.is_dir():
        raise located(path, "no such file")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def file_digest(path) -> str:
    """The SHA-256 of a file's bytes, in hex (cache keys of files that may change, e.g. a retrained model). Read once
    per version of the file in a process: several keys of one run (an augmented set's, its candidates' store's)
    hash the same weights file; a file written again (atomically: another inode) or changed in place (another
    modification time or size) is read again."""
    found = os.stat(path)
    return _digest(os.path.realpath(path), found.st_ino, found.st_mtime_ns, found.st_ctime_ns, found.st_size)


@functools.lru_cache(maxsize=64)
def _digest(path: str, inode: int, mtime_ns: int, ctime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):  # not hashlib.file_digest: Python 3.11 and up
            h.update(chunk)
    return h.hexdigest()


def read_lines(path):
    """Yield `(line_number, line)` of a UTF-8 text file without the newline (a leading BOM is dropped).

    Lines are decoded one by one, so a non-UTF-8 byte is reported with its own line number.
    """
    with open_binary(path) as f:
        number = 0
        try:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as err:
                    raise located(path, f"not UTF-8 text ({err.reason} at column {err.start + 1})", number) from None
                yield number, line.rstrip("\r\n")
        except (OSError, EOFError) as err:  # a truncated or corrupt .gz
            raise located(path, f"cannot be read after line {number}: {err}") from None


def current_umask() -> int:
    """The process's umask: from /proc (Linux), without changing it; elsewhere by setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; on success rename it over `path`, on failure remove it.

    Nothing half-written is ever visible under `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; a finished file gets open()'s mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def cached_file(path, read, make, write):
    """The value cached in the file `path` and True, or `make()`'s value, written there and False.

    `read(path)` gives the file's value, or None where it is unusable (damaged, or for other inputs); `write(value,
    tmp)` writes a value, atomically (`atomic_path`), while holding the lock beside the file (`<path>.lock`, the
    `filelock` library): runs started together (a benchmark's seeds) compute it once, the others wait on the lock
    and read the file."""
    path = Path(path)
    found = read(path) if path.is_file() else None
    if found is not None:
        return found, True
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        found = read(path) if path.is_file() else None  # written by a run that held the lock before this one
        if found is not None:
            return found, True
        value = make()
        with atomic_path(path) as tmp:
            write(value, tmp)
    return value, False


def timed(make) -> tuple[object, float]:
    """`make()` and the seconds it took, to the microsecond (a small set is made in a few milliseconds)."""
    start = time.perf_counter()
    return make(), round(time.perf_counter() - start, 6)


class Made(NamedTuple):
    """How a run got a value a cache file keeps (`cached_timed`'s, or the teacher's outputs: `teacher_outputs`): from
    the file or made here, what making it cost whichever run made it, and the file's name (what the runs that share
    it share)."""
    cached: bool
    seconds: float | None  # None for a file made before mobilekd kept the seconds
    name: str

    def record(self, seconds: float, kind: str = "set") -> dict:
        """A run's record of a shared file it trained over, by its `kind` (`RECORDED`): `shared_set` (the file),
        `set_seconds` (the `seconds` this run spent getting it: making it, or waiting for it and reading it) and,
        where known, `set_made_seconds` (what making it cost, whichever run made it); `shared_outputs`, ... for the
        teacher's outputs over it."""
        name, got, made = record_keys(kind)
        return {name: self.name, got: round(seconds, 3), **({made: self.seconds} if self.seconds is not None else {})}


# the kinds of shared file a run records (`Made.record`): its training set (augmented, or the BiLSTM's transfer set)
# and the teacher's outputs over it
RECORDED = ("set", "outputs")


def record_keys(kind: str) -> tuple[str, str, str]:
    """The keys of a run's record of a shared file of `kind` (`Made.record`): the file's name, the seconds the run
    spent getting it, and what making it cost (e.g. `shared_set`, `set_seconds`, `set_made_seconds`)."""
    return f"shared_{kind}", f"{kind}_seconds", f"{kind}_made_seconds"


def cached_timed(path, read, make, write) -> tuple[object, Made]:
    """`cached_file`, also giving what making the value cost, whichever run made it: `make()`'s seconds, kept beside
    the file (`<path>.seconds`, written before the file appears), so a run that reads the file can charge its
    making as the run that made it did (a benchmark's cost per run)."""
    path = Path(path)
    kept = Path(f"{path}.seconds")  # JSON, named so that no glob of the cache files finds it

    def write_timed(made, tmp):
        write_json(kept, {"seconds": made[1]})
        write(made[0], tmp)

    def read_timed(p):
        value = read(p)
        if value is None:
            return None
        try:
            seconds = float(json.loads(kept.read_text())["seconds"])
        except (OSError, ValueError, KeyError, TypeError):  # made before the seconds were kept, or damaged
            seconds = None
        return value, seconds

    (value, seconds), cached = cached_file(path, read_timed, lambda: timed(make), write_timed)
    return value, Made(cached, seconds, f"{path.parent.name}/{path.stem}")


def save_png(fig, path, dpi: int = 120) -> None:
    """Write a matplotlib figure atomically and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)


def write_json(path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path):
    """Parse a JSON file; a missing file or malformed JSON is a UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise located(path, "no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise located(path, f"not valid JSON ({err})") from None
