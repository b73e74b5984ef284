"""(source, target) pairs a text generator learns from (issue 36; C-MLM, Chen et al. 2020): the shipped tasks, and
a user's own files.

    paraphrase  MRPC's paraphrase pairs (label 1) and STS-B's pairs scored 4 or more: sentence 1 -> sentence 2.
                Training pairs that share a sentence with a dev pair are left out (STS-B's MSRpar part is drawn
                from MRPC: without this, some dev sentences would be training targets)
    entailment  RTE's entailment pairs: premise -> hypothesis
    correction  the shipped Brown corpus's sentences of MIN_WORDS to MAX_WORDS words, each with seeded keyboard
                noise (`mobilekd.data.noise`) as the source and the clean sentence as the target; CORRECTION_DEV
                sentences, drawn once with seed 0, are the dev set, the rest the training set
    pairs       your files: DIR/train and DIR/dev as .tsv (a header naming `source` and `target`) or .jsonl
                (objects with `source` and `target`), optionally gzipped

A pair with an empty source or target, a row without one of the columns, and (at encoding,
`mobilekd.data.seq2seq`) a side longer than --max-len word pieces in a user's file are refused with one line naming
the file and its line; the shipped tasks leave over-long pairs out and say how many.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mobilekd.data.custom import records
from mobilekd.data.examples import source_file
from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.data.glue import find_split, read_glue
from mobilekd.data.noise import add_noise
from mobilekd.errors import UserError, located
from mobilekd.fileio import REPO_ROOT, file_digest, read_lines

PAIR_TASKS = ("paraphrase", "entailment", "correction", "pairs")
BROWN = REPO_ROOT / "data" / "corpus" / "brown.txt.gz"
MIN_WORDS, MAX_WORDS = 5, 30
CORRECTION_DEV = 1000
NOISE_SEED = 0  # the correction task's noise: fixed, so every run and seed reads the same pairs
# word pieces a side (the source; the target with its [SEP]) per task: one pair of paraphrase and three of
# correction's 42,734 are longer (left out); RTE's premises are paragraphs (a C-MLM teacher reads 2 x 128 + 2)
MAX_LEN = {"paraphrase": 64, "entailment": 128, "correction": 64, "pairs": 64}


@dataclass
class TextPair:
    source: str
    target: str
    origin: str = ""  # file:line, for error messages


@dataclass
class PairTask:
    name: str
    train: list[TextPair]
    dev: list[TextPair]
    user_file: bool  # over-long pairs: refused in a user's file, left out (and counted) in a shipped task


def files_digest(task: PairTask) -> str:
    """The SHA-256 of the files the task's pairs were read from (each file's digest, in path order): what a resumed
    run checks its data by, so an edited or other --data directory of the same size is not trained on as the old."""
    files = sorted({source_file(p.origin) for p in [*task.train, *task.dev]})
    return hashlib.sha256(" ".join(file_digest(f) for f in files).encode()).hexdigest()


def read_pairs(path) -> list[TextPair]:
    """A user's .tsv / .jsonl file of `source`, `target` records."""
    pairs = []
    for number, record in records(path):
        missing = [c for c in ("source", "target") if c not in record]
        if missing:
            raise located(path, f"record has no {' or '.join(repr(c) for c in missing)} field "
                                f"(fields: {sorted(record)})", number)
        wrong = [c for c in ("source", "target") if not isinstance(record[c], str | None)]
        if wrong:  # a JSON number, list or object: not a text (its str() would be trained on)
            raise located(path, f"{wrong[0]} is {type(record[wrong[0]]).__name__}, not a text", number)
        source, target = ((record[c] or "").strip() for c in ("source", "target"))
        for side, text in (("source", source), ("target", target)):
            if not text:
                raise located(path, f"empty {side}", number)
        pairs.append(TextPair(source, target, f"{path}:{number}"))
    if not pairs:
        raise located(path, "no pairs (the file is empty)")
    return pairs


def _find(directory: Path, stem: str) -> Path:
    for suffix in (".tsv", ".jsonl"):
        for name in (f"{stem}{suffix}", f"{stem}{suffix}.gz"):
            if (directory / name).is_file():
                return directory / name
    raise located(directory / f"{stem}.tsv", "no such file (looked for .tsv and .jsonl, optionally .gz)")


def _glue(task: str, split: str, keep) -> list[TextPair]:
    spec = GLUE_TASKS[task]
    examples = read_glue(spec, find_split(REPO_ROOT / "data" / "glue" / spec.directory, split))
    return [TextPair(e.text_a, e.text_b, e.source) for e in examples if keep(e.label)]


def _apart(train: list[TextPair], dev: list[TextPair]) -> list[TextPair]:
    """The training pairs that share no sentence (case and spacing aside) with a dev pair."""
    seen = {" ".join(s.lower().split()) for p in dev for s in (p.source, p.target)}
    return [p for p in train if not ({" ".join(s.lower().split()) for s in (p.source, p.target)} & seen)]


def paraphrase() -> PairTask:
    pairs = {split: _glue("mrpc", split, lambda label: label == "1") +
             _glue("stsb", split, lambda score: score >= 4.0) for split in ("train", "dev")}
    return PairTask("paraphrase", _apart(pairs["train"], pairs["dev"]), pairs["dev"], False)


def entailment() -> PairTask:
    pairs = {split: _glue("rte", split, lambda label: label == "entailment") for split in ("train", "dev")}
    return PairTask("entailment", _apart(pairs["train"], pairs["dev"]), pairs["dev"], False)


def correction(path=BROWN) -> PairTask:
    """Brown's sentences of MIN_WORDS..MAX_WORDS words (first occurrence of each), noised; CORRECTION_DEV of them,
    drawn with seed 0, are dev."""
    sentences, seen = [], set()
    for number, line in read_lines(path):
        text = " ".join(line.split())
        if MIN_WORDS <= len(text.split()) <= MAX_WORDS and text not in seen:
            seen.add(text)
            sentences.append((number, text))
    if len(sentences) <= CORRECTION_DEV:
        raise located(path, f"has {len(sentences)} sentences of {MIN_WORDS}-{MAX_WORDS} words; the correction task "
                            f"needs more than {CORRECTION_DEV}")
    dev = set(np.random.default_rng(0).choice(len(sentences), CORRECTION_DEV, replace=False).tolist())
    pairs = [TextPair(add_noise(text, NOISE_SEED, number), text, f"{path}:{number}") for number, text in sentences]
    return PairTask("correction", [p for i, p in enumerate(pairs) if i not in dev],
                    [p for i, p in enumerate(pairs) if i in dev], False)


def load_pairs(task: str, data=None) -> PairTask:
    """A task's training and dev pairs: a shipped task, or `pairs` from the directory `data`."""
    if task == "pairs":
        if not data:
            raise UserError("--data is required for task pairs: a directory with train and dev .tsv or .jsonl files")
        data = Path(data)
        if not data.is_dir():
            raise located(data, "no such data directory (it should hold train and dev .tsv or .jsonl files)")
        return PairTask("pairs", read_pairs(_find(data, "train")), read_pairs(_find(data, "dev")), True)
    if data:
        raise UserError(f"--data is for task pairs (your files); {task} is shipped")
    shipped = {"paraphrase": paraphrase, "entailment": entailment, "correction": correction}
    if task not in shipped:
        raise UserError(f"unknown generation task {task!r}; choose one of: {', '.join(PAIR_TASKS)}")
    return shipped[task]()
