"""A multi-task model (MT-DNN, Liu et al. 2019, Section 3; namisan/mt-dnn mt_dnn/matcher.py `SANBertNetwork`): one
shared encoder and one output layer per task on the pooled [CLS] vector, dropout before each; a classification
task's layer gives one logit per label, a regression task's (STS-B) one score.

A saved multi-task model is a directory: config.json (the encoder's), model.safetensors (the encoder as
`mobilebert.*`, the task layers as `heads.<task>.*`), the tokenizer files and `multitask.json`, which lists the
tasks in order with their labels (none for regression) and metrics. `single_task(model, task)` is the ordinary
classifier of one task (the shared encoder and that task's layer): what dev scoring runs and what
`mobilekd export --single-task-files` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mobilekd.errors import located
from mobilekd.fileio import read_json, write_json
from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.hf import load_config, load_state, save_pretrained
from mobilekd.models.mobilebert import MobileBert, init_weights

SETTINGS = "multitask.json"


@dataclass(frozen=True)
class TaskHead:
    """What a task's output layer is: its labels (None: a regression score) and its metrics, the first one
    the task's official score."""

    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]

    @property
    def outputs(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def id2label(self) -> dict[int, str]:
        """What the task's own classifier has as `id2label` (`Task.id2label`'s form)."""
        return {0: "score"} if self.labels is None else dict(enumerate(self.labels))


class MultiTaskModel(nn.Module):
    """`model(input_ids, attention_mask, token_type_ids, task=name)` -> that task's logits (B, labels) or scores
    (B, 1); `model.all_outputs(...)` -> every task's probabilities (classification) or score (regression), the
    exported file's outputs."""

    def __init__(self, config: ModelConfig, tasks: dict[str, TaskHead], dropout: float | None = None):
        super().__init__()
        self.config, self.tasks = config.replace(id2label={}, problem_type=None), dict(tasks)  # no single task's
        self.mobilebert = MobileBert(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if dropout is None else dropout)
        self.heads = nn.ModuleDict({name: nn.Linear(config.hidden_size, t.outputs) for name, t in tasks.items()})
        init_weights(self, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, *, task: str) -> torch.Tensor:
        pooled = self.mobilebert(input_ids, attention_mask, token_type_ids).pooled
        return self.heads[task](self.dropout(pooled))

    def all_outputs(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, torch.Tensor]:
        """One encoder pass, every task's output: probabilities, or the regression score (B,)."""
        pooled = self.dropout(self.mobilebert(input_ids, attention_mask, token_type_ids).pooled)
        return {name: (self.heads[name](pooled)[:, 0] if t.labels is None else
                       torch.softmax(self.heads[name](pooled), dim=-1)) for name, t in self.tasks.items()}


def single_task(model: MultiTaskModel, task: str) -> MobileBertForSequenceClassification:
    """The ordinary classifier of `task`: the shared encoder (a copy) and that task's output layer."""
    t = model.tasks[task]
    config = model.config.replace(id2label=t.id2label,
                                  problem_type="regression" if t.labels is None else "single_label_classification",
                                  classifier_dropout=model.dropout.p)
    classifier = MobileBertForSequenceClassification(config)
    classifier.mobilebert.load_state_dict(model.mobilebert.state_dict())
    classifier.classifier.load_state_dict(model.heads[task].state_dict())
    return classifier.to(next(model.parameters()).device).eval()


def save_multitask(model: MultiTaskModel, out_dir, tokenizer=None) -> Path:
    out_dir = save_pretrained(model, out_dir, tokenizer, head="pretraining",
                              refused="a multi-task model (one encoder, a classifier per task, MT-DNN)")
    write_json(out_dir / SETTINGS, {"tasks": {name: {"labels": None if t.labels is None else list(t.labels),
                                                     "metrics": list(t.metrics)} for name, t in model.tasks.items()},
                                    "dropout": model.dropout.p})
    return out_dir


def load_multitask(model_dir) -> MultiTaskModel:
    """A saved multi-task model; a malformed settings file or weights that do not fit it is one clear error."""
    model_dir = Path(model_dir)
    config, _ = load_config(model_dir)
    settings = read_json(model_dir / SETTINGS)

    def strings(value) -> bool:
        return isinstance(value, list) and len(value) > 0 and all(isinstance(v, str) for v in value)

    try:
        given, dropout = settings["tasks"], settings["dropout"]
        ok = (isinstance(given, dict) and given and isinstance(dropout, (int, float)) and 0 <= dropout < 1 and
              all(isinstance(t, dict) and (t["labels"] is None or strings(t["labels"])) and strings(t["metrics"])
                  for t in given.values()))
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise located(model_dir / SETTINGS, "not a multi-task settings file: it needs 'tasks' (name -> labels, a "
                                            "list of names or null for regression, and metrics, a list) and "
                                            "'dropout' in [0, 1)")
    tasks = {name: TaskHead(None if t["labels"] is None else tuple(t["labels"]), tuple(t["metrics"]))
             for name, t in given.items()}
    model = MultiTaskModel(config, tasks, float(dropout))
    path = model_dir / "model.safetensors"
    state, own = load_state(path), model.state_dict()
    wrong = sorted(k for k in own if k not in state or state[k].shape != own[k].shape)
    if wrong:
        raise located(path, f"does not hold this multi-task model ({len(wrong)} weights missing or of another shape, "
                            f"e.g. {wrong[0]})")
    model.load_state_dict({k: state[k] for k in own})
    return model.eval()
