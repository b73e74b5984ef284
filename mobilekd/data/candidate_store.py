"""TinyBERT augmentation's word candidates, kept per sentence across runs.

What costs in TinyBERT's augmentation (`mobilekd.data.augment`) is the masked-LM pass that finds each word's
candidates: one masked query per eligible word of every sentence. A sentence's candidates depend on the sentence,
the model (its weights and vocabulary), M and the pass's precision, not on the run: not on the seed (which only
draws the variants from them), nor on which other examples are in the set. `ship`'s trials, its seeds (each carving
another validation split, so another training set) and any later run over the same text therefore need them once.
This store keeps them in one SQLite file per (model, M, precision) under the cache folder, keyed by the sentence's
text; a run asks for its sentences and computes those missing in chunks of CHUNK, each chunk committed as one
transaction (a killed run loses at most the chunk it was computing, and leaves no half-written row), and several
processes share the file through SQLite's own locking. Runs that start together on the same sentences (`ship`'s
two workers start two augmented trials over one training split, 4 and 12 copies) find the same ones missing and
cut the same chunks, and split the pass rather than both making it: each chunk is claimed through a lock file named
by its sentences (`CandidateStore.claim`, the `filelock` library); a run takes the chunks no other run holds, then
waits on the others' and reads them from the store (before it, RTE's seed 1 ran two such trials that each computed
all 4,076 of its sentences, side by side in fp32, for about 87 minutes). A run that starts after another has
committed chunks cuts other chunks and does not share the rest of the pass.

A set made through the store is the one a fresh run makes on the same kind of device (measured with
benchmarks/candidate_store.py: 100% of seed 1's augmented SST-2 examples the same on an AVX-512 bf16 EPYC; on an AMX
Xeon 99.65% while a length's last batch kept its few rows, where bf16 products round differently on small batches,
and 100% since batches are filled): the masked-LM pass batches queries of one length, unpadded, each batch filled to
at least FILL_TOKENS tokens or to its full rows (`Augmentor._masked_lm`), so a sentence's candidates do not depend on
the sentences that share its batches, and a sentence's candidates keep the words' order, in which the variants
draw. The store's name carries that (VERSION) and the device type (kernels differ): a store filled before (bf16
batches padded to their longest query, which reordered near-tied candidates of about one sentence in ten; candidates
read back in another order than a fresh run's, which changed a quarter of the examples; small batches left small)
is not read.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from mobilekd.fileio import file_digest

CHUNK = 500  # sentences computed (and committed, and claimed) at a time: a killed run keeps what it finished
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json")  # the vocabulary a candidate is drawn from
_QUERY = 900  # sentences per SELECT (under SQLite's limit on bound parameters)
RECORD_KEYS = ("candidate_sentences", "candidates_stored_share", "candidates_computed")  # `CandidateStore.record`
# how candidates are made and kept (`Augmentor._masked_lm`, `_candidates`)
VERSION = "one-length batches of 512 tokens or more, words-order"


def store_path(cache_dir: Path, model_dir: Path, m: int, precision: str, device: str) -> Path:
    """The store of a model's candidates: named by the digest of its weights and vocabulary files, M, the
    masked-LM pass's precision, the device type it runs on and VERSION."""
    h = hashlib.sha256(file_digest(Path(model_dir) / "model.safetensors").encode())
    for name in TOKENIZER_FILES:
        if (Path(model_dir) / name).is_file():
            h.update(file_digest(Path(model_dir) / name).encode())
    h.update(json.dumps([m, precision, device, VERSION]).encode())
    return Path(cache_dir) / "augmented" / f"candidates-{h.hexdigest()[:20]}.sqlite"


class CandidateStore:
    """Sentence -> {word index: candidates}, in a SQLite file; `asked` and `found` count this run's sentences
    (distinct) and those the store already had, `computed` those this run computed and kept (`put`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.asked = self.found = self.computed = 0

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=600)  # another process's commit: wait for it
        db.execute("CREATE TABLE IF NOT EXISTS candidates (sentence TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return db

    def get(self, sentences: list[str]) -> dict[str, dict[int, list[str]]]:
        """The candidates the store has for these sentences (those it lacks are left out), counted in the record."""
        out = self.read(sentences)
        self.asked += len(set(sentences))
        self.found += len(out)
        return out

    def read(self, sentences: list[str]) -> dict[str, dict[int, list[str]]]:
        """`get` without counting: what another run kept of a chunk this run waited for."""
        unique = list(dict.fromkeys(sentences))
        out = {}
        with closing(self._connect()) as db:
            for start in range(0, len(unique), _QUERY):
                chunk = unique[start:start + _QUERY]
                rows = db.execute(f"SELECT sentence, value FROM candidates WHERE sentence IN "
                                  f"({','.join('?' * len(chunk))})", chunk)
                out.update((s, {int(i): words for i, words in json.loads(v)}) for s, v in rows)
        return out

    def put(self, found: dict[str, dict[int, list[str]]]) -> None:
        """Keep these sentences' candidates, in one transaction (a sentence already kept is left as it is)."""
        with closing(self._connect()) as db, db:  # closed after the transaction commits (or rolls back)
            db.executemany("INSERT OR IGNORE INTO candidates VALUES (?, ?)",
                           [(s, json.dumps(list(c.items()))) for s, c in found.items()])  # in its order
        self.computed += len(found)

    @contextmanager
    def claim(self, sentences: list[str], wait: bool):
        """Hold the right to compute these sentences' candidates: a lock file beside the store, named by their
        digest. Yields True once held (`wait`: however long another run holds it), False where another run holds
        it and `wait` is off. The holder reads the store again before computing (a run that held it before may
        have kept them, or died first, leaving them to compute). The lock files (empty) stay in a folder beside
        the store: removing one while another run waits on it could let two runs hold the chunk."""
        digest = hashlib.sha256("\n".join(sentences).encode()).hexdigest()[:20]
        folder = self.path.with_name(f"{self.path.name}.claims")
        folder.mkdir(exist_ok=True)
        lock = FileLock(folder / f"{digest}.lock")
        try:
            lock.acquire(blocking=wait)
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def record(self) -> dict:
        """This run's use of the store: its distinct sentences (counted per column), the share the store had when
        it asked, and how many it computed itself (the rest of the missing ones a run beside it kept meanwhile)."""
        return dict(zip(RECORD_KEYS, (self.asked, round(self.found / self.asked, 4) if self.asked else None,
                                      self.computed)))
