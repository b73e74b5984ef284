"""Arrays computed once per training example and kept on disk, each example known by a digest of its tokens: what
a teacher gives over a training set (its logits, its layer features) is read by every seed, trial and method that
trains on those examples, whatever carve of the training set or sequence length brought them.

A store is a folder of segments. A segment holds a set of examples: `keys.npy` (`example_keys`), `lengths.npy`
(tokens per example), the arrays its maker wrote (`.npy` files, read memory-mapped with `allow_pickle=False`:
plain arrays, nothing unpickled) and `manifest.json` (what they are, the seconds making them took, anything the
maker adds). A run whose examples are not all stored adds one segment of the missing ones: built in a folder
beside the others and renamed into place under a lock beside the store (the `filelock` library), so runs started
together compute it once and nothing half-built is ever read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Callable

import numpy as np
from filelock import FileLock

MANIFEST = "manifest.json"


def example_keys(split) -> np.ndarray:
    """Each example's key: a 64-bit digest (blake2b) of its tokens and segment ids at its own length, so that one
    example has one key whatever the split, seed, carve or sequence length (that leaves it whole) it comes in."""
    ids, types = split.arrays["input_ids"], split.arrays["token_type_ids"]
    return np.array([int.from_bytes(hashlib.blake2b(ids[i, :n].astype(np.int32).tobytes() +
                                                    types[i, :n].astype(np.int8).tobytes(), digest_size=8).digest(),
                                    "little", signed=True) for i, n in enumerate(split.lengths)], dtype=np.int64)


class Segment:
    """One built segment, its arrays memory-mapped (`arrays[name]`)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.manifest = json.loads((folder / MANIFEST).read_text())
        self.keys = np.load(folder / "keys.npy", allow_pickle=False)
        self.lengths = np.load(folder / "lengths.npy", allow_pickle=False).astype(np.int64)
        self.arrays = {p.stem: np.load(p, mmap_mode="r", allow_pickle=False) for p in folder.glob("*.npy")
                       if p.stem not in ("keys", "lengths")}

    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.folder.iterdir())


class ExampleStore:
    """A store's segments, opened for the examples `keys`: `where[i]` is (segment, row) of example i, or None where
    no segment holds it (those are `missing`)."""

    def __init__(self, folder: Path, keys: np.ndarray):
        self.folder, self.keys = folder, keys
        self.segments = [Segment(d) for d in sorted(folder.glob("segment-*")) if (d / MANIFEST).is_file()]
        found = {}
        for s, seg in enumerate(self.segments):
            found.update({int(k): (s, i) for i, k in enumerate(seg.keys)})
        self.where = [found.get(int(k)) for k in keys]
        self.missing = np.array([i for i, w in enumerate(self.where) if w is None], dtype=np.int64)
        self.hit_rate = 1 - len(self.missing) / max(len(keys), 1)

    @property
    def name(self) -> str:
        return f"outputs/{self.folder.name}"

    @property
    def set_name(self) -> str:
        """The store's name and a digest of the examples opened (in any order): what runs over one set share (a
        seed's runs over its carve, say), so that a benchmark charges the teacher's pass over a set once."""
        digest = hashlib.sha256(np.sort(self.keys).tobytes()).hexdigest()[:12]
        return f"{self.name}/{digest}"

    def bytes(self) -> int:
        return sum(seg.bytes() for seg in self.segments)

    def rows(self, names: list[str]) -> dict[str, np.ndarray]:
        """Arrays `names`, each of one row per example, for the examples opened, in their order."""
        if len(self.missing):
            raise ValueError(f"{self.folder}: {len(self.missing)} examples are not stored")
        segment = np.array([w[0] for w in self.where], dtype=np.int64)
        row = np.array([w[1] for w in self.where], dtype=np.int64)
        out = {}
        for name in names:
            first = self.segments[0].arrays[name]
            out[name] = np.empty((len(self.where), *first.shape[1:]), first.dtype)
            for s, seg in enumerate(self.segments):
                mine = segment == s
                out[name][mine] = seg.arrays[name][row[mine]]
        return out

    def made_seconds(self) -> float:
        """What making these examples' arrays cost: each segment's seconds, in the share of its examples read."""
        used = np.bincount([w[0] for w in self.where if w is not None], minlength=len(self.segments))
        return round(float(sum(seg.manifest["seconds"] * n / len(seg.keys) for seg, n in zip(self.segments, used))), 3)


def stored(folder: Path, split, make: Callable[[object, Path], dict],
           refusal: Callable[[np.ndarray], str | None] | None = None, opener=ExampleStore) -> \
        tuple[ExampleStore | None, str | None]:
    """The store in `folder` opened for `split`'s examples (`opener(folder, keys)`, an `ExampleStore`), those no
    segment holds first added as a new segment: `make(subset, tmp)` writes its arrays into `tmp` for the split's
    `subset` and returns manifest entries. Where `refusal(the missing examples' indices)` gives a reason, nothing is
    made: None and the reason. The store's `hit_rate` is what this run found stored before it added its segment."""
    keys = example_keys(split)
    store = opener(folder, keys)
    if not len(store.missing):
        return store, None
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        for stale in folder.glob(".segment.*"):  # only a lock holder builds one: these are a killed run's
            shutil.rmtree(stale, ignore_errors=True)
        store = opener(folder, keys)  # segments another run added while this one waited
        if not len(store.missing):
            return store, None
        if refusal is not None and (why := refusal(store.missing)):
            return None, why
        hit_rate = store.hit_rate
        _add_segment(folder, split.subset(store.missing), keys[store.missing], make)
    store = opener(folder, keys)
    store.hit_rate = hit_rate
    return store, None


def _add_segment(folder: Path, split, keys: np.ndarray, make) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".segment.", dir=folder))
    try:
        start = time.perf_counter()
        extra = make(split, tmp)
        np.save(tmp / "keys.npy", keys)
        np.save(tmp / "lengths.npy", split.lengths.astype(np.int64))
        manifest = {"examples": len(split), "tokens": int(split.lengths.sum()),
                    "seconds": round(time.perf_counter() - start, 3), **extra}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.chmod(tmp, 0o755)
        os.replace(tmp, folder / f"segment-{time.time_ns()}")  # under the lock: one at a time, in order
    except BaseException:
        with suppress(FileNotFoundError):
            shutil.rmtree(tmp)
        raise
