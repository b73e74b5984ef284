"""The fine-tuning objective: the task's hard-label loss, mixed with logit distillation from a fine-tuned teacher
(Hinton et al. 2015; TinyBERT's prediction-layer loss, Jiao et al. 2020, eq. 10)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mobilekd.data.tasks import Task
from mobilekd.transfer.losses import logit_distillation


def task_loss(task: Task, teacher, alpha: float, temperature: float):
    """Hard-label loss (CE, MSE for regression, start/end CE for QA), mixed with logit KD when a teacher is given."""

    def hard(outputs, batch):
        if task.head == "qa":
            start, end = outputs
            return (F.cross_entropy(start.float(), batch["start_positions"]) +
                    F.cross_entropy(end.float(), batch["end_positions"])) / 2
        if task.is_regression:
            return F.mse_loss(outputs.squeeze(-1).float(), batch["labels"])
        return F.cross_entropy(outputs.float(), batch["labels"])

    def soft(outputs, t_out):
        if task.head == "qa":
            return sum(logit_distillation(t, s, temperature) for t, s in zip(t_out, outputs)) / 2
        if task.is_regression:
            return F.mse_loss(outputs.float(), t_out.float())
        return logit_distillation(t_out, outputs, temperature)

    def loss(model, batch):
        outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        h = hard(outputs, batch)
        if teacher is None:
            return {"loss": h, "hard": h.detach()}
        with torch.no_grad():
            t_out = teacher(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        s = soft(outputs, t_out)
        return {"loss": alpha * h + (1 - alpha) * s, "hard": h.detach(), "kd": s.detach()}

    return loss
