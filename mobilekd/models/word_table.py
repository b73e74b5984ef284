"""A student's word-embedding table started from its teacher's: the teacher's rows (same vocabulary), projected
onto their leading principal components when the student's table is narrower. The BiLSTM (Tang et al. start theirs
from word2vec, which cannot be downloaded here) and the seq2seq student (`mobilekd seq2seq --init-embeddings`)
start this way."""

from __future__ import annotations

import torch

from mobilekd.errors import UserError


def teacher_table(teacher, width: int | None = None) -> torch.Tensor:
    """The teacher's word embeddings (vocab, H), or with `width` below H their projection onto the `width` principal
    components (centred, by SVD): a smaller table keeping most of the variance."""
    table = teacher.mobilebert.embeddings.word_embeddings.weight.detach().float()
    if width is not None and width > table.shape[1]:
        raise UserError(f"the student's embedding width {width} exceeds the teacher's {table.shape[1]}")
    if width is not None and width < table.shape[1]:
        centred = table - table.mean(0)
        table = centred @ torch.linalg.svd(centred, full_matrices=False).Vh[:width].T
    return table
