"""Task-specific distillation methods as flag presets of `mobilekd finetune --method` (configs as data): each
fills the flags the user left unset.

    ft        plain fine-tuning on the labels (no teacher)
    kd        logit KD as BERT-PKD's baseline and its `distillation_loss` (src/KD_loss.py): alpha 0.7 on the
              soft targets at T 10 with reduction "mean" (the `kd.cls` preset of src/argument_parser.py minus the
              patience term, so that PKD - KD measures the patience loss alone; the separate `kd` preset uses T 20)
    pkd-skip  BERT-PKD (Sun et al. 2019, Section 3): kd + beta 500 x the patience loss on normalised [CLS]
              vectors, teacher layers by PKD-Skip (`kd.cls` preset: lr 1e-5 there, alpha 0.7, T 10, beta 500)
    pkd-last  the same with PKD-Last's layers
    tinybert  TinyBERT's task distillation (Jiao et al. 2020, Section 3.3; task_distill.py): intermediate-layer
              distillation against the fine-tuned teacher for --intermediate-epochs (default: as many as the
              prediction step), then prediction-layer distillation alone (T 1, soft cross-entropy averaged over
              classes, i.e. reduction "mean"); for regression it fits the teacher's scores by MSE (the
              paper's Eq. 10 distils the teacher's predictions). That departs from task_distill.py, whose
              regression branch fits the labels (`loss_mse(student_logits, label_ids)`): over the augmented set a
              pair whose words were swapped carries its original's gold score, which misdescribes it. On STS-B
              (seed 0, docs/quality.md) the labels gave 0.3858 dev Pearson, the teacher's scores 0.7387.
    pkt-td    TinyBERT's two steps with MobileBERT's objectives (issue 78): progressive knowledge transfer against
              the fine-tuned teacher over the task's own (augmented) examples (MobileBERT paper, Section 4.3: one
              stage per student layer, feature-map and attention transfer, the layers below frozen), then the
              prediction step as tinybert's

`--alpha` is the weight of the hard-label loss here (BERT-PKD's alpha weighs the soft targets: its 0.7 is our 0.3).
"""

from __future__ import annotations

from dataclasses import fields

from mobilekd.finetune.objective import Distillation

METHODS = {
    "ft": {},
    "kd": {"alpha": 0.3, "temperature": 10.0, "kd_reduction": "mean"},
    "pkd-skip": {"alpha": 0.3, "temperature": 10.0, "kd_reduction": "mean", "patience_weight": 500.0,
                 "patience_layers": "pkd_skip"},
    "pkd-last": {"alpha": 0.3, "temperature": 10.0, "kd_reduction": "mean", "patience_weight": 500.0,
                 "patience_layers": "pkd_last"},
    "tinybert": {"alpha": 0.0, "temperature": 1.0, "kd_reduction": "mean", "intermediate": True},
    "pkt-td": {"alpha": 0.0, "temperature": 1.0, "kd_reduction": "mean", "intermediate": "pkt"},
}
_KD = {f.name: f.default for f in fields(Distillation)}
# "intermediate": False (none), True (TinyBERT's step 1, as runs have recorded it since before pkt-td) or "pkt"
# without --method: logit KD when a teacher is given, as before the methods existed. The KD weight, temperature
# and reduction are `Distillation`'s field defaults (mobilekd/finetune/objective.py, their one home); finetune's
# --help prints these values
DEFAULTS = {"alpha": _KD["alpha"], "temperature": _KD["temperature"], "kd_reduction": _KD["reduction"],
            "patience_weight": 0.0, "patience_layers": "pkd_skip", "intermediate": False}


def method_flags(method: str | None) -> dict:
    """The flag values `method` gives (then the defaults)."""
    return {**DEFAULTS, **METHODS.get(method or "", {})}
