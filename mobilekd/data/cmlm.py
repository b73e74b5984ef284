"""The conditional masked language model's inputs (C-MLM: Chen et al. 2020, "Distilling Knowledge Learned in BERT
for Text Generation", Section 3.1), as the official code builds them (ChenRocks/Distill-BERT-Textgen):

- a pair is `[CLS] source [SEP] target [SEP]`, segment 0 for [CLS], the source and the first [SEP], segment 1 for
  the target and the final [SEP] (cmlm/data.py, `convert_example_to_features`);
- in training only the target's positions are masked, the final [SEP] among them, each with probability
  MASK_PROB and always as [MASK] (no 80/10/10: "we always MASK given our purpose", `random_word`); a masked final
  [SEP] learns the end of sequence (its label: [SEP] itself here, the end of sequence of our student's vocabulary,
  which is the teacher's); drawn again until at least one position is masked (the `while True` loop of
  `convert_example_to_features`);
- for the soft targets each pair is copied COPIES times, copy i masking target positions i, i + COPIES,
  i + 2 COPIES, ... (a target of at most COPIES positions: one copy per position), so that every position, the final
  [SEP] included, is predicted exactly once with its neighbours visible (dump_teacher_hiddens.py,
  `convert_example`).

Departure: the official data is mBERT word pieces with OpenNMT's `@@` continuation marks and a separate OpenNMT
vocabulary for the labels; ours is one WordPiece vocabulary for teacher and student, so a label is the token
itself. A draw is a pure function of (seed, epoch, pair), like every batch of the training loop.
"""

from __future__ import annotations

import numpy as np
import torch

from mobilekd.data.seq2seq import PairSplit
from mobilekd.errors import located

MASK_PROB = 0.15
COPIES = 7


def check_positions(teacher_dir, positions: int, max_len: int) -> None:
    """Refuse a teacher of `positions` positions for pairs of up to `max_len` word pieces a side: `[CLS] source
    [SEP] target [SEP]` reads up to 2 x max_len + 2 (the target's own [SEP] counted in max_len)."""
    if 2 * max_len + 2 > positions:
        raise located(teacher_dir, f"reads {positions} positions; --max-len {max_len} needs {2 * max_len + 2}")


def copy_masks(target_len: int, copies: int = COPIES) -> list[np.ndarray]:
    """The target positions (0-based, the final [SEP] being `target_len - 1`) each copy masks."""
    return [np.arange(i, target_len, copies) for i in range(min(copies, target_len))]


class CMLMSplit:
    """A `PairSplit` as the C-MLM teacher's training examples, masked afresh for every (seed, epoch, pair)."""

    def __init__(self, pairs: PairSplit, tokenizer, seed: int):
        self.pairs, self.seed = pairs, seed
        self.cls, self.sep, self.mask = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id

    def __len__(self):
        return len(self.pairs)

    @property
    def lengths(self) -> np.ndarray:
        return self.pairs.lengths + 2

    def masked_targets(self, index: int, epoch: int) -> np.ndarray:
        """The target positions masked for this pair in this epoch: each with MASK_PROB, at least one."""
        n = int(self.pairs.target_lengths[index])
        rng = np.random.default_rng((self.seed, epoch, index))
        while True:
            chosen = np.flatnonzero(rng.random(n) < MASK_PROB)
            if len(chosen):
                return chosen

    def batch(self, indices, epoch=0) -> dict[str, torch.Tensor]:
        epochs = [epoch] * len(indices) if isinstance(epoch, int) else epoch
        rows = [(int(i), self.masked_targets(int(i), int(e))) for i, e in zip(indices, epochs)]
        return inputs(self.pairs, rows, self.cls, self.sep, self.mask)


def inputs(pairs: PairSplit, rows: list[tuple[int, np.ndarray]], cls: int, sep: int, mask: int) \
        -> dict[str, torch.Tensor]:
    """`[CLS] source [SEP] target [SEP]` for each (pair, masked target positions) of `rows`, those positions set to
    [MASK]: input_ids, token_type_ids, attention_mask, `masked_positions` (the masked positions in the sequence,
    -1-padded) and `masked_labels` (their tokens, -1-padded), as masked-LM pre-training's batches have them."""
    seqs, types, spots, labels = [], [], [], []
    for index, masked in rows:
        s, t = int(pairs.source_lengths[index]), int(pairs.target_lengths[index])
        target = pairs.arrays["target_ids"][index, :t]  # ends with [SEP]
        seq = np.concatenate([[cls], pairs.arrays["source_ids"][index, :s], [sep], target])
        at = s + 2 + masked
        labels.append(seq[at].copy())
        seq[at] = mask
        seqs.append(seq)
        types.append(np.r_[np.zeros(s + 2, np.int64), np.ones(t, np.int64)])
        spots.append(at)
    width, most = max(len(x) for x in seqs), max(len(x) for x in spots)

    def padded(parts, size, fill):
        out = np.full((len(parts), size), fill, dtype=np.int64)
        for r, x in enumerate(parts):
            out[r, :len(x)] = x
        return torch.from_numpy(out)

    return {"input_ids": padded(seqs, width, pairs.pad), "token_type_ids": padded(types, width, 0),
            "attention_mask": padded([np.ones(len(x)) for x in seqs], width, 0),
            "masked_positions": padded(spots, most, -1), "masked_labels": padded(labels, most, -1)}
