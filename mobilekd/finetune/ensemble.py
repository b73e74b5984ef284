"""An ensemble of fine-tuned teachers of one task, and its soft targets (MT-DNN knowledge distillation, Liu et al.
2019, Section 3: "the ensemble's soft targets are the average of the class probabilities of its members"; for a
regression task, the average of their scores).

Each teacher's logits over a split come from `teacher_outputs`' store (`<teacher>/outputs/<key>-outputs/`, keyed
by the teacher's weights, each example by its tokens): computed once per teacher and example, reused by every run
over those examples, and recomputed when a teacher is retrained.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mobilekd.data.tasks import Task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, located
from mobilekd.finetune.evaluation import fine_tuned_classifier, require_labels
from mobilekd.finetune.teacher_outputs import teacher_outputs


def check_teacher(teacher_dir, task: Task, tokenizer, student_dir) -> None:
    """Refuse, before any work, a teacher that is not a classifier fine-tuned on `task` (a missing directory, no
    labels or other ones) or whose vocabulary differs from the student's (it must read the student's token ids)."""
    config = require_labels(teacher_dir, "teacher")
    if not task.fits(config.id2label):
        raise located(Path(teacher_dir) / "config.json", f"teacher's labels {list(config.id2label.values())} do not "
                                                         f"fit task {task.name}")
    if load_tokenizer(teacher_dir).get_vocab() != tokenizer.get_vocab():
        raise UserError(f"{teacher_dir}: its vocabulary differs from {student_dir}'s; a teacher must read the "
                        f"student's token ids")


def member_outputs(teacher_dirs: list[Path], task: Task, splits: list, device="cpu") -> tuple[list[np.ndarray], int]:
    """Per split, the (teachers, N, C) logits (C = 1 for regression) of each teacher over it, from the cache where
    it holds them; and how many (teacher, split) pairs were read from the cache."""
    logits, cached = [[] for _ in splits], 0
    for d in teacher_dirs:
        teacher = fine_tuned_classifier(d, task, "teacher").to(device).eval()
        for out, split in zip(logits, splits):
            arrays, made = teacher_outputs(d, teacher, split, with_cls=False)
            out.append(arrays["teacher_logits"])
            cached += made.cached
    return [np.stack(x) for x in logits], cached


def soft_targets(logits: np.ndarray, regression: bool) -> np.ndarray:
    """The ensemble's targets from its members' (teachers, N, C) logits: the mean of their class probabilities,
    or of their scores (N, 1) for regression."""
    if regression:
        return logits.mean(0).astype(np.float32)
    return torch.softmax(torch.from_numpy(logits).double(), dim=-1).mean(0).float().numpy()
