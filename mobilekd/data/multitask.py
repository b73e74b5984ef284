"""MT-DNN's task sampler as a split the training loop reads (Liu et al. 2019, Algorithm 1; namisan/mt-dnn train.py
with `MultiTaskBatchSampler` of mt_dnn/batcher.py): every epoch, each task's training set is shuffled and cut into
mini-batches of one task each, and all tasks' mini-batches are shuffled together; a task is therefore drawn in
proportion to its number of mini-batches, and each of its examples is seen once per epoch.

`MultiTaskSplit` presents the epoch's mini-batches as its items: the loop draws one item per step (batch size 1)
in an order that is a pure function of (seed, epoch), so a resumed run sees exactly the batches of an uninterrupted
one. Item `i` of epoch `e` is the `i`-th mini-batch of that epoch's cut, itself a pure function of (seed, e).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mobilekd.data.tasks import EncodedSplit


class MultiTaskSplit:
    """Tasks' encoded training splits as mini-batches of `batch_size` (a task's last one may be smaller); each
    batch also holds `task`, the task's index in `names`."""

    def __init__(self, splits: dict[str, EncodedSplit], batch_size: int, seed: int):
        self.splits, self.names, self.batch_size, self.seed = splits, list(splits), batch_size, seed
        self.counts = [math.ceil(len(s) / batch_size) for s in splits.values()]
        self._cut = {}

    def __len__(self) -> int:
        return sum(self.counts)

    def proportions(self) -> dict[str, float]:
        """Each task's share of the mini-batches of an epoch (MT-DNN's sampling probabilities)."""
        return {name: n / len(self) for name, n in zip(self.names, self.counts)}

    def _batches(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """The epoch's mini-batches, (task index, example indices), in task order (the loop shuffles them)."""
        if epoch not in self._cut:
            cut = []
            for t, split in enumerate(self.splits.values()):
                order = np.random.default_rng((self.seed, epoch, t)).permutation(len(split))
                cut += [(t, order[i:i + self.batch_size]) for i in range(0, len(split), self.batch_size)]
            self._cut = {epoch: cut}
        return self._cut[epoch]

    def batch(self, indices, epochs=(0,)) -> dict[str, torch.Tensor]:
        """The one mini-batch `indices[0]` of epoch `epochs[0]` (the loop's batch size is 1 item)."""
        if len(indices) != 1:
            raise ValueError(f"a multi-task split serves one mini-batch per step, asked for {len(indices)}")
        t, rows = self._batches(int(epochs[0]))[int(indices[0])]
        return {**self.splits[self.names[t]].batch(rows), "task": torch.tensor(t)}
