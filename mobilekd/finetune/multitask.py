"""The multi-task objective: each mini-batch is one task's (`mobilekd.data.multitask`), and its loss is that task's
(MT-DNN, Liu et al. 2019, Algorithm 1 line 3), with knowledge distillation from the task's ensemble where the batch
carries its soft targets (Liu et al. 2019, "Improving Multi-Task Deep Neural Networks via Knowledge Distillation",
Section 3 and Figure 2):

    classification   hard = CE(student logits, label)
                     soft = KL(Q || P_student), Q the ensemble's averaged class probabilities (`batchmean`, T = 1)
    regression       hard = MSE(score, label)
                     soft = MSE(score, the ensemble's mean score), with `regression_kd`

    combine "sum"    hard + soft: the official code, mt_dnn/model.py `MTDNNModel.update` (`loss = loss + kd_loss`)
    combine "mean"   (hard + soft) / 2: the paper's Figure 2, "the average of two objective functions"

KL and the paper's soft cross-entropy, -sum_c Q(c) log P(c), differ by Q's entropy, a constant: same gradient.
The official code's KL (an older `update`: `F.kl_div(F.log_softmax(logits), soft_labels, reduction='batchmean')`)
is this one; its current task definitions (experiments/glue/glue_task_def.yml) name `MseCriterion` as `kd_loss`
for every task, the squared distance between logits and probabilities, which we do not follow: the issue and the
paper ask for the soft targets' cross-entropy. For regression the paper has no teacher (STS-B is not among its
distilled tasks); the yml's `MseCriterion` to the teacher's score is `regression_kd`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mobilekd.data.tasks import INPUTS

COMBINE = ("sum", "mean")


def hard_and_soft(outputs: torch.Tensor, batch: dict, regression: bool, regression_kd: bool):
    """A task batch's hard-label loss, and its soft-target loss (None where the batch has no soft targets, or for
    regression without `regression_kd`)."""
    outputs = outputs.float()
    if regression:
        score = outputs[:, 0]
        hard = F.mse_loss(score, batch["labels"])
        soft = F.mse_loss(score, batch["soft_targets"][:, 0]) if regression_kd and "soft_targets" in batch else None
        return hard, soft
    hard = F.cross_entropy(outputs, batch["labels"])
    soft = None
    if "soft_targets" in batch:
        soft = F.kl_div(F.log_softmax(outputs, dim=-1), batch["soft_targets"].float(), reduction="batchmean")
    return hard, soft


def multitask_loss(names: list[str], regression: dict[str, bool], combine: str = "sum", regression_kd: bool = True):
    """The loop's loss function for a `MultiTaskModel` on `MultiTaskSplit` batches: `names` in the split's task
    order, `regression` per task."""
    if combine not in COMBINE:
        raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")

    def loss(model, batch):
        task = names[int(batch["task"])]
        outputs = model(*(batch[k] for k in INPUTS), task=task)
        hard, soft = hard_and_soft(outputs, batch, regression[task], regression_kd)
        if soft is None:
            return {"loss": hard, "hard": hard.detach()}
        total = hard + soft if combine == "sum" else (hard + soft) / 2
        return {"loss": total, "hard": hard.detach(), "soft": soft.detach()}

    return loss
