"""Masked-LM + next-sentence pre-training examples (BERT, Section 3.1; MobileBERT, Section 4.2).

Built once per (corpora, tokenizer, sequence length, seed) and cached on disk:
  tokens.npy    every sentence's token ids, concatenated (int32, memory-mapped when read)
  train.npy     (N, 5) int64 rows (a_start, a_end, b_start, b_end, is_random_next): segment spans into tokens
  heldout.npy   the same for held-out documents (every 20th document; the last one of a corpus of fewer than 20),
                which never appear in train.npy
  meta.json     sizes, build time, the unigram baseline's token
A line longer than one example (seq_len - 3 tokens) is running text, cut into pieces of that length (a 5 MB
one-line file becomes thousands of examples, not one), and a document is at most MAX_DOC_LINES lines or pieces.
The corpus is tokenized document by document and appended to disk, so a corpus larger than RAM streams; only
the sentence offsets stay in memory. Masking (15% of tokens; 80% [MASK], 10% random, 10% kept) is done when a
batch is drawn, from a generator seeded by (seed, epoch, example index): every epoch sees new masks, and a
resumed or multi-process run sees exactly the same ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mobilekd.errors import UserError, located
from mobilekd.fileio import current_umask, file_digest, read_lines

FORMAT_VERSION = 3  # 3: lines longer than an example are cut into pieces; held-out documents never train
HELDOUT_EVERY = 20  # every 20th document is held out for evaluation
MAX_DOC_LINES = 200  # longer documents (a novel) are cut into pieces of this many lines
SHORT_SEQ_PROB = 0.1  # as BERT: 10% of examples get a shorter random target length
MASK_PROB = 0.15
DEFAULT_CACHE = ".cache/mobilekd/pretraining"  # relative to the working directory


def read_documents(path):
    """Yield documents (lists of non-empty lines) from a text file: one sentence or paragraph per line,
    documents separated by blank lines."""
    doc = []
    for _, line in read_lines(path):
        line = line.strip()
        if line:
            doc.append(line)
            if len(doc) == MAX_DOC_LINES:
                yield doc
                doc = []
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def cache_key(corpora, tokenizer, seq_len: int, seed: int) -> str:
    h = hashlib.sha256()
    for path in corpora:
        h.update(file_digest(path).encode())
    vocab = sorted(tokenizer.get_vocab().items())
    h.update(json.dumps([vocab, tokenizer.do_lower_case if hasattr(tokenizer, "do_lower_case") else None,
                         seq_len, seed, FORMAT_VERSION, HELDOUT_EVERY, MAX_DOC_LINES]).encode())
    return h.hexdigest()[:16]


def _instances(doc_spans, all_docs, rng, max_tokens):
    """BERT's create_instances_from_document over sentence spans: fill up to a target length, split into A
    and B; B is the true continuation or, half the time, a span from a random other document."""
    target = max_tokens if rng.random() >= SHORT_SEQ_PROB else int(rng.integers(2, max_tokens + 1))
    chunk, length, i = [], 0, 0
    out = []
    while i < len(doc_spans):
        chunk.append(doc_spans[i])
        length += doc_spans[i][1] - doc_spans[i][0]
        if i == len(doc_spans) - 1 or length >= target:
            if chunk:
                n_sentences = len(chunk)
                if n_sentences == 1 and chunk[0][1] - chunk[0][0] >= 2:
                    # One long sentence or paragraph: its two parts are A and its true B (BERT would force a
                    # random B here, which skews NSP towards "random" on corpora of long paragraphs).
                    start, end = chunk[0]
                    cut = start + int(rng.integers(1, end - start))
                    chunk = [(start, cut), (cut, end)]
                a_end_idx = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                a = (chunk[0][0], chunk[a_end_idx - 1][1])
                is_random = len(chunk) == 1 or (rng.random() < 0.5 and len(all_docs) > 1)
                if is_random:
                    other = all_docs[int(rng.integers(len(all_docs)))]
                    while other is doc_spans and len(all_docs) > 1:
                        other = all_docs[int(rng.integers(len(all_docs)))]
                    start = int(rng.integers(len(other)))
                    b = (other[start][0], other[min(start + 8, len(other)) - 1][1])
                    if n_sentences > 1:
                        i -= n_sentences - a_end_idx  # put the unused sentences back, as BERT does
                else:
                    b = (chunk[a_end_idx][0], chunk[-1][1])
                a, b = _truncate_pair(a, b, max_tokens)
                if a[1] > a[0] and b[1] > b[0]:
                    out.append((a[0], a[1], b[0], b[1], int(is_random)))
            chunk, length = [], 0
            target = max_tokens if rng.random() >= SHORT_SEQ_PROB else int(rng.integers(2, max_tokens + 1))
        i += 1
    return out


def _truncate_pair(a, b, max_tokens):
    """Trim the longer segment from its end until both fit."""
    a, b = list(a), list(b)
    while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
        longer = a if a[1] - a[0] > b[1] - b[0] else b
        longer[1] -= 1
    return tuple(a), tuple(b)


def build_cache(corpora, tokenizer, seq_len: int, seed: int, cache_dir) -> Path:
    """Tokenize `corpora`, build the examples, and move the finished directory into place atomically."""
    key = cache_key(corpora, tokenizer, seq_len, seed)
    final = Path(cache_dir) / key
    if (final / "meta.json").is_file():
        return final
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    start = time.time()
    max_tokens = seq_len - 3  # [CLS] A [SEP] B [SEP]
    work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
    try:
        docs, n_tokens, n_lines = [], 0, 0
        with open(work / "tokens.bin", "wb") as f:
            for path in corpora:
                for doc in tqdm(read_documents(path), desc=f"tokenizing {Path(path).name}", unit=" docs",
                                leave=False):
                    ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
                    spans = []
                    for sentence in ids:
                        # a line longer than one example is running text: cut it into example-sized pieces
                        for offset in range(0, len(sentence), max_tokens):
                            piece = sentence[offset:offset + max_tokens]
                            spans.append((n_tokens, n_tokens + len(piece)))
                            n_tokens += len(piece)
                            f.write(np.asarray(piece, dtype=np.int32).tobytes())
                    n_lines += len(doc)
                    # a document of very long lines becomes several documents of at most MAX_DOC_LINES pieces
                    docs += [spans[i:i + MAX_DOC_LINES] for i in range(0, len(spans), MAX_DOC_LINES)]
        if n_tokens == 0:
            raise UserError(f"{', '.join(map(str, corpora))}: the corpus is empty (no text to pre-train on)")
        tokens = np.memmap(work / "tokens.bin", dtype=np.int32, mode="r", shape=(n_tokens,))
        np.save(work / "tokens.npy", tokens)
        del tokens
        (work / "tokens.bin").unlink()

        if len(docs) < 2:
            raise UserError(f"{', '.join(map(str, corpora))}: one document of {n_tokens} tokens is too little text "
                            f"to hold any out for evaluation (give at least two documents, or more text)")
        rng = np.random.default_rng(seed)
        every = min(HELDOUT_EVERY, len(docs))  # a corpus of fewer documents holds out its last one
        splits = {"train": [d for i, d in enumerate(docs) if i % every != every - 1],
                  "heldout": [d for i, d in enumerate(docs) if i % every == every - 1]}
        sizes = {}
        for name, split_docs in splits.items():
            rows = [row for d in split_docs for row in _instances(d, split_docs, rng, max_tokens)]
            arr = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
            np.save(work / f"{name}.npy", arr)
            sizes[name] = len(arr)
        counts = np.bincount(np.load(work / "tokens.npy", mmap_mode="r"), minlength=len(tokenizer))
        meta = {"corpora": [str(p) for p in corpora], "seq_len": seq_len, "seed": seed, "tokens": n_tokens,
                "lines": n_lines, "documents": len(docs), "examples": sizes,
                "most_frequent_token": int(counts.argmax()), "build_seconds": round(time.time() - start, 1)}
        (work / "meta.json").write_text(json.dumps(meta, indent=2))
        os.chmod(work, 0o777 & ~current_umask())  # mkdtemp makes 0700
        try:
            work.rename(final)
        except OSError:  # another process built the same cache meanwhile: use theirs
            if not (final / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


WIDE = ("input_ids", "token_type_ids", "attention_mask")  # an example's arrays of sequence length


@dataclass
class PretrainingSplit:
    """A split's examples, turned into fixed-length masked batches on demand."""

    tokens: np.ndarray
    rows: np.ndarray
    seq_len: int
    seed: int
    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int

    def __len__(self):
        return len(self.rows)

    @property
    def lengths(self) -> np.ndarray:
        """Each example's tokens, [CLS] and [SEP]s included (the loop groups batches by them)."""
        r = self.rows.astype(np.int64)
        return r[:, 1] - r[:, 0] + r[:, 3] - r[:, 2] + 3

    def example(self, index: int, epoch: int) -> dict:
        a0, a1, b0, b1, is_random = (int(x) for x in self.rows[index])
        ids = np.full(self.seq_len, self.pad_id, dtype=np.int64)
        seq = np.concatenate([[self.cls_id], self.tokens[a0:a1], [self.sep_id], self.tokens[b0:b1], [self.sep_id]])
        n = len(seq)
        ids[:n] = seq
        types = np.zeros(self.seq_len, dtype=np.int64)
        types[a1 - a0 + 2:n] = 1
        mask = np.zeros(self.seq_len, dtype=np.int64)
        mask[:n] = 1
        # 15% of the non-special tokens, at least one; 80% -> [MASK], 10% -> random token, 10% unchanged.
        rng = np.random.default_rng((self.seed, epoch, index))
        candidates = np.array([i for i in range(1, n - 1) if i != a1 - a0 + 1])
        max_predictions = max(1, round(self.seq_len * MASK_PROB))
        k = min(max_predictions, max(1, round(len(candidates) * MASK_PROB)))
        positions = np.sort(rng.choice(candidates, size=k, replace=False))
        labels = ids[positions].copy()
        roll = rng.random(k)
        ids[positions[roll < 0.8]] = self.mask_id
        random_slots = positions[(roll >= 0.8) & (roll < 0.9)]
        ids[random_slots] = rng.integers(0, self.vocab_size, size=len(random_slots))
        masked_positions = np.full(max_predictions, -1, dtype=np.int64)
        masked_labels = np.full(max_predictions, -1, dtype=np.int64)
        masked_positions[:k] = positions
        masked_labels[:k] = labels
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
                "masked_positions": masked_positions, "masked_labels": masked_labels,
                "nsp_labels": np.int64(is_random)}

    def first_batches(self, examples: int, batch_size: int = 32) -> list[dict[str, torch.Tensor]]:
        """The split's first `examples` (at most all of it), epoch 0's masks, `batch_size` at a time."""
        n = min(examples, len(self))
        return [self.batch(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]

    def batch(self, indices, epoch=0) -> dict[str, torch.Tensor]:
        """Examples `indices`, masked for `epoch` (one int, or one per example)."""
        epochs = [epoch] * len(indices) if isinstance(epoch, int) else epoch
        examples = [self.example(int(i), int(e)) for i, e in zip(indices, epochs)]
        width = max(int(e["attention_mask"].sum()) for e in examples)  # cut to the longest: padding does no work
        return {k: torch.from_numpy(np.stack([e[k][:width] if k in WIDE else e[k] for e in examples]))
                for k in examples[0]}


@dataclass
class PretrainingData:
    train: PretrainingSplit
    heldout: PretrainingSplit
    meta: dict
    path: Path


def load_pretraining_data(corpora, tokenizer, seq_len: int = 128, seed: int = 0,
                          cache_dir=DEFAULT_CACHE) -> PretrainingData:
    """Build (once) and open the cached examples for `corpora`."""
    if not corpora:
        raise UserError("no corpus given: pass at least one text file with --corpus")
    for path in corpora:
        if not Path(path).is_file():
            raise located(path, "no such corpus file")
    path = build_cache([Path(p) for p in corpora], tokenizer, seq_len, seed, cache_dir)
    meta = json.loads((path / "meta.json").read_text())
    tokens = np.load(path / "tokens.npy", mmap_mode="r")
    ids = dict(cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id, mask_id=tokenizer.mask_token_id,
               pad_id=tokenizer.pad_token_id, vocab_size=len(tokenizer), seq_len=seq_len, seed=seed)
    splits = {}
    for name in ("train", "heldout"):
        rows = np.load(path / f"{name}.npy")
        if len(rows) == 0:
            raise UserError(f"{', '.join(map(str, corpora))}: too little text to build {name} examples")
        splits[name] = PretrainingSplit(tokens, rows, **ids)
    return PretrainingData(splits["train"], splits["heldout"], meta, path)
