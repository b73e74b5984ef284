"""The fine-tuning objectives: the task's hard-label loss, mixed with logit distillation from a fine-tuned teacher
(Hinton et al. 2015; BERT-PKD's `distillation_loss`; TinyBERT's prediction-layer loss, Jiao et al. 2020, eq. 10),
plus BERT-PKD's patience loss; TinyBERT's intermediate-layer task distillation; and a seq2seq student's
label-smoothed cross-entropy mixed with C-MLM's word-level distillation (Chen et al. 2020).

A teacher's logits and [CLS] vectors come from the batch when the recipe cached them (`teacher_outputs`:
`teacher_logits`, `teacher_cls`), else from running the teacher.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mobilekd.data.tasks import INPUTS, Task
from mobilekd.finetune.teacher_features import needed
from mobilekd.models.mobilebert import EncoderOutput
from mobilekd.transfer.losses import cmlm_distillation, label_smoothed_nll, logit_distillation, logit_mse, \
    neg_log_probs
from mobilekd.transfer.objectives import Features, Match, deepest, evaluate


@dataclass
class Distillation:
    """How a student learns from a fine-tuned teacher: `alpha` is the hard-label loss's weight, the rest goes to
    logit distillation: KL at `temperature` with `reduction` (`logit_distillation`), or with `logits="mse"` the
    squared distance of the logits (`logit_mse`, Tang et al.'s BiLSTM distillation); `patience` matches
    (BERT-PKD's) add their weighted terms. The field defaults are the one home of `mobilekd finetune`'s KD
    defaults (--alpha, --temperature, --kd-reduction without --method; mobilekd.finetune.methods reads them)."""

    alpha: float = 0.5
    temperature: float = 1.0
    reduction: str = "batchmean"
    patience: list[Match] = field(default_factory=list)
    logits: str = "kl"


def _cached_teacher(batch) -> Features:
    """The cached [CLS] vectors (B, layers, N) as one-token feature maps of a teacher's encoder output."""
    cls = batch["teacher_cls"]
    maps = [cls[:, l, None, :] for l in range(cls.shape[1])]
    return Features(EncoderOutput(maps[-1], feature_maps=maps))


def task_loss(task: Task, teacher, kd: Distillation | None):
    """Hard-label loss (CE, MSE for regression, start/end CE for QA), mixed with distillation when a teacher (or
    its cached outputs) is given."""

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
            return sum(logit_distillation(t, s, kd.temperature, kd.reduction) for t, s in zip(t_out, outputs)) / 2
        if task.is_regression:
            return F.mse_loss(outputs.float(), t_out.float())
        if kd.logits == "mse":
            return logit_mse(t_out, outputs)
        return logit_distillation(t_out, outputs, kd.temperature, kd.reduction)

    def loss(model, batch):
        inputs = [batch[k] for k in INPUTS]
        if kd is not None and kd.patience:
            outputs, enc = model.logits_and_encoder(*inputs, output_feature_maps=True)
        else:
            outputs = model(*inputs)
        h = hard(outputs, batch)
        if kd is None:
            return {"loss": h, "hard": h.detach()}
        if "teacher_logits" in batch:
            t_out = batch["teacher_logits"]
        else:
            with torch.no_grad():
                t_out = teacher(*inputs)
        s = soft(outputs, t_out)
        terms = {"loss": kd.alpha * h + (1 - kd.alpha) * s, "hard": h.detach(), "kd": s.detach()}
        if kd.patience:
            pt = evaluate(kd.patience, _cached_teacher(batch), Features(enc))
            terms.update({k: v for k, v in pt.items() if k != "loss"}, patience=pt["loss"].detach(),
                         loss=terms["loss"] + pt["loss"])
        return terms

    return loss


def intermediate_loss(teacher, matches: list[Match], store=None):
    """TinyBERT's intermediate-layer task distillation (task_distill.py, `main` without --pred_distill: `loss =
    rep_loss + att_loss` against the fine-tuned teacher): the matches' terms, the student's feature maps through
    its `projections`; no label and no logit is used. The teacher's features come from `store` (a
    `teacher_features.TeacherStore`, by the batch's `example_index`) where given, else from running it; either
    way the padded positions count as zero on both sides (`objectives.padding_zeroed`, a departure from
    task_distill.py), so the two give the same terms up to the store's precision (the teacher's pass in bf16 where
    this host's probe chose it, `outputs_precision`; float16 on disk)."""

    t_depth, s_depth = deepest(matches, "teacher"), deepest(matches, "student")  # no deeper than the matches read
    wanted = needed(matches)

    def loss(model, batch):
        inputs = [batch[k] for k in INPUTS]
        mask = batch["attention_mask"]
        if store is not None:
            t = store.features(batch, wanted)
        else:
            with torch.no_grad():
                t = Features(teacher.mobilebert(*inputs, num_layers=t_depth, output_feature_maps=True,
                                                output_attentions=True), attention_mask=mask, zero_padding=True)
        s = model.mobilebert(*inputs, num_layers=s_depth, output_feature_maps=True, output_attentions=True)
        return evaluate(matches, t, Features(s, attention_mask=mask, zero_padding=True),
                        getattr(getattr(model, "module", model), "projections", None))

    return loss


@dataclass
class CMLMDistillation:
    """C-MLM's student loss (Chen et al. 2020, eq. 6; Distill-BERT-Textgen-ONMT `BertKDLossCompute`, with the
    README's --kd_alpha 0.5 --kd_temperature 10.0 --kd_topk 8 and the config's label_smoothing 0.1):
    (1 - alpha) x label-smoothed cross-entropy + alpha x the word-level distillation (`cmlm_distillation`). Note
    that alpha weighs the distillation here, the other way round from `Distillation`, as the paper writes it.
    The field defaults and LABEL_SMOOTHING are the one home of `mobilekd seq2seq`'s defaults."""

    alpha: float = 0.5
    temperature: float = 10.0


LABEL_SMOOTHING = 0.1  # the official student's (config-transformer-base-mt-deen.yml `label_smoothing`)


def seq2seq_loss(kd: CMLMDistillation | None, smoothing: float):
    """A seq2seq student's loss per target token (both sums divided by the batch's target tokens, OpenNMT-py's
    `-normalization tokens`): label-smoothed cross-entropy, mixed with C-MLM distillation from the cached
    `teacher_topk_logits` / `teacher_topk_ids` when `kd` is given."""

    def loss(model, batch):
        keep = batch["labels"] != -100
        logits = model(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"], keep)
        labels = batch["labels"][keep][:, None]  # the output layer at real targets only
        tokens = keep.sum().clamp(min=1)
        ids = labels if kd is None else torch.cat([labels, batch["teacher_topk_ids"][keep]], 1)
        picked, every = neg_log_probs(logits, ids)  # one log-partition serves both losses
        xe = label_smoothed_nll(picked[:, 0], every, smoothing, logits.shape[-1]) / tokens
        if kd is None:
            return {"loss": xe, "xe": xe.detach()}
        soft = cmlm_distillation(picked[:, 1:], batch["teacher_topk_logits"][keep], kd.temperature) / tokens
        return {"loss": (1 - kd.alpha) * xe + kd.alpha * soft, "xe": xe.detach(), "kd": soft.detach()}

    return loss
