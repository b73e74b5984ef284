"""TinyBERT augmentation's word candidates, kept per sentence across runs.

What costs in TinyBERT's augmentation (`mobilekd.data.augment`) is the masked-LM pass that finds each word's
candidates: one masked query per eligible word of every sentence. A sentence's candidates depend on the sentence,
the model (its weights and vocabulary), M and the pass's precision, not on the run: not on the seed (which only
draws the variants from them), nor on which other examples are in the set. `ship`'s trials, its seeds (each carving
another validation split, so another training set) and any later run over the same text therefore need them once.
This store keeps them in one SQLite file per (model, M, precision) under the cache folder, keyed by the sentence's
text; a run asks for its sentences, computes only those missing, in chunks of CHUNK sentences, each chunk committed
as one transaction (a killed run loses at most the chunk it was computing, and leaves no half-written row), and
several processes share the file through SQLite's own locking.

One departure from a run without the store: a sentence's candidates are those of the run that first computed them,
whose masked-LM batches held other sentences; padding a batch to another length can change the last bits of a
logit and so, rarely, the order of near-tied candidates (bf16 makes that likelier). A set made from the store is
therefore the one a fresh run makes up to such ties, not bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from mobilekd.fileio import file_digest

CHUNK = 2000  # sentences computed (and committed) at a time: a killed run keeps what it finished
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json")  # the vocabulary a candidate is drawn from
_QUERY = 900  # sentences per SELECT (under SQLite's limit on bound parameters)


def store_path(cache_dir: Path, model_dir: Path, m: int, precision: str) -> Path:
    """The store of a model's candidates: named by the digest of its weights and vocabulary files, M and the
    masked-LM pass's precision."""
    h = hashlib.sha256(file_digest(Path(model_dir) / "model.safetensors").encode())
    for name in TOKENIZER_FILES:
        if (Path(model_dir) / name).is_file():
            h.update(file_digest(Path(model_dir) / name).encode())
    h.update(json.dumps([m, precision]).encode())
    return Path(cache_dir) / "augmented" / f"candidates-{h.hexdigest()[:20]}.sqlite"


class CandidateStore:
    """Sentence -> {word index: candidates}, in a SQLite file; `asked` and `found` count this run's sentences
    (distinct) and those the store already had."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.asked = self.found = 0

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=600)  # another process's commit: wait for it
        db.execute("CREATE TABLE IF NOT EXISTS candidates (sentence TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return db

    def get(self, sentences: list[str]) -> dict[str, dict[int, list[str]]]:
        """The candidates the store has for these sentences (those it lacks are left out)."""
        unique = list(dict.fromkeys(sentences))
        out = {}
        with self._connect() as db:
            for start in range(0, len(unique), _QUERY):
                chunk = unique[start:start + _QUERY]
                rows = db.execute(f"SELECT sentence, value FROM candidates WHERE sentence IN "
                                  f"({','.join('?' * len(chunk))})", chunk)
                out.update((s, {int(i): words for i, words in json.loads(v)}) for s, v in rows)
        db.close()
        self.asked += len(unique)
        self.found += len(out)
        return out

    def put(self, found: dict[str, dict[int, list[str]]]) -> None:
        """Keep these sentences' candidates, in one transaction (a sentence already kept is left as it is)."""
        with self._connect() as db:
            db.executemany("INSERT OR IGNORE INTO candidates VALUES (?, ?)",
                           [(s, json.dumps(sorted(c.items()))) for s, c in found.items()])
        db.close()

    def record(self) -> dict:
        """This run's use of the store: its distinct sentences and the share the store already had."""
        return {"candidate_sentences": self.asked,
                "candidates_stored_share": round(self.found / self.asked, 4) if self.asked else None}
