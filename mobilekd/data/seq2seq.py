"""(source, target) pairs as word-piece arrays for a seq2seq student and its C-MLM teacher.

Teacher and student read the teacher's WordPiece vocabulary (issue 36: the teacher's soft targets then need no
mapping). The student's source is the source's word pieces alone; its target is the target's word pieces followed by
[SEP], the end of sequence, and its decoder reads [CLS] (the start of sequence) and the target shifted right, as in
OpenNMT-py's `tgt_ids = [BOS] + tgt + [EOS]` (Distill-BERT-Textgen-ONMT's data). The teacher's input for the same
pair is `[CLS] source [SEP] target [SEP]` (`mobilekd.data.cmlm`), whose final [SEP] predicts the same end of sequence.
"""

from __future__ import annotations

import numpy as np
import torch

from mobilekd.data.pairs import PairTask, TextPair
from mobilekd.data.tasks import length_batches
from mobilekd.errors import UserError, located

IGNORE = -100  # a padded target position's label (torch's cross-entropy default)


class PairSplit:
    """Encoded pairs: `source_ids` (N, S) and `target_ids` (N, T) (target word pieces, then [SEP]), 0-padded; other
    arrays (a teacher's cached top-k) are indexed like `target_ids`, (N, T, ...), and ride along. `batch` cuts to the batch's widest
    source and target."""

    def __init__(self, arrays: dict[str, np.ndarray], bos: int, pad: int = 0):
        self.arrays, self.bos, self.pad = arrays, bos, pad
        if len(self) == 0:
            raise UserError("the split is empty")

    def __len__(self):
        return len(self.arrays["source_ids"])

    @property
    def source_lengths(self) -> np.ndarray:
        return (self.arrays["source_ids"] != self.pad).sum(1)

    @property
    def target_lengths(self) -> np.ndarray:
        return (self.arrays["target_ids"] != self.pad).sum(1)

    @property
    def lengths(self) -> np.ndarray:
        """Source plus target word pieces (the loop groups batches by them)."""
        return self.source_lengths + self.target_lengths

    def by_length(self, batch_size: int) -> tuple[list[np.ndarray], np.ndarray]:
        """`length_batches` of these pairs (source plus target lengths)."""
        return length_batches(self.lengths, batch_size)

    def batch(self, indices, epoch=0) -> dict[str, torch.Tensor]:
        """`input_ids`/`attention_mask` (the source), `decoder_input_ids` ([CLS] + the target shifted right),
        `labels` (the target, IGNORE where padded) and the arrays riding along, cut to the batch's widths."""
        idx = np.asarray(list(indices))
        s, t = int(self.source_lengths[idx].max()), int(self.target_lengths[idx].max())
        source, target = self.arrays["source_ids"][idx, :s], self.arrays["target_ids"][idx, :t]
        decoder_in = np.concatenate([np.full((len(idx), 1), self.bos), target[:, :-1]], 1)
        out = {"input_ids": source, "attention_mask": (source != self.pad).astype(np.int64),
               "decoder_input_ids": decoder_in,
               "labels": np.where(target == self.pad, IGNORE, target)}
        for k, v in self.arrays.items():
            if k not in ("source_ids", "target_ids"):
                out[k] = v[idx, :t]  # indexed like target_ids
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}


def word_pieces(tokenizer, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def encode_pairs(pairs: list[TextPair], tokenizer, max_len: int, refuse_long: bool, what: str = "pairs") \
        -> tuple[PairSplit, list[TextPair]]:
    """The pairs whose source and target (with [SEP]) fit in `max_len` word pieces, encoded, and those pairs.
    A longer pair is refused with one line where `refuse_long` (a user's file), else left out and counted."""
    sources, targets = word_pieces(tokenizer, [p.source for p in pairs]), word_pieces(tokenizer, [p.target for p in pairs])
    kept = []
    for i, (p, s, t) in enumerate(zip(pairs, sources, targets)):
        if not s or not t:
            side = "source" if not s else "target"
            raise UserError(f"{p.origin or what}: the {side} has no word piece the tokenizer knows")
        if len(s) > max_len or len(t) + 1 > max_len:
            if refuse_long:
                side, n = ("source", len(s)) if len(s) > max_len else ("target", len(t) + 1)
                path, _, line = p.origin.rpartition(":")
                raise located(path or what, f"the {side} is {n} word pieces{' with [SEP]' if side == 'target' else ''}"
                                            f", over --max-len {max_len} (raise it or shorten the pair)",
                              int(line) if line.isdigit() else None)
            continue
        kept.append(i)
    if not kept:
        raise UserError(f"{what}: no pair fits --max-len {max_len}")
    if len(kept) < len(pairs):
        print(f"{what}: {len(pairs) - len(kept)} of {len(pairs)} pairs longer than --max-len {max_len} left out")
    pad = tokenizer.pad_token_id
    src = np.full((len(kept), max(len(sources[i]) for i in kept)), pad, dtype=np.int64)
    tgt = np.full((len(kept), max(len(targets[i]) for i in kept) + 1), pad, dtype=np.int64)
    for row, i in enumerate(kept):
        src[row, :len(sources[i])] = sources[i]
        tgt[row, :len(targets[i]) + 1] = [*targets[i], tokenizer.sep_token_id]
    return (PairSplit({"source_ids": src, "target_ids": tgt}, tokenizer.cls_token_id, tokenizer.pad_token_id),
            [pairs[i] for i in kept])


def encode_task(task: PairTask, tokenizer, max_len: int, train: list[TextPair] | None = None):
    """The task's (training subset's) and dev pairs encoded: (train split, train pairs, dev split, dev pairs)."""
    train_split, train_pairs = encode_pairs(train if train is not None else task.train, tokenizer, max_len,
                                            task.user_file, f"{task.name} train")
    dev_split, dev_pairs = encode_pairs(task.dev, tokenizer, max_len, task.user_file, f"{task.name} dev")
    return train_split, train_pairs, dev_split, dev_pairs
