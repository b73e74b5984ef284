"""Loading a model for a task, predicting a split, and scoring dev splits with the task's official metrics while
keeping the best model in OUT."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from mobilekd.data.tasks import Task
from mobilekd.errors import UserError, located
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.finetune.metrics import classification_metrics, selection_score, squad_metrics
from mobilekd.finetune.qa import decode_answers
from mobilekd.models.bilstm import load_bilstm, load_bilstm_config
from mobilekd.models.hf import load_config, load_pretrained, save_pretrained
from mobilekd.models.kinds import kind_of


def build_model(model_dir, task: Task, role: str = "model", classifier_dropout: float | None = None, **changes):
    """Load `model_dir` with the task's head; its labels, if it has any, must be the task's. A classifier's
    dropout is `classifier_dropout` when given, else the model's own; `changes` override other config fields. A
    BiLSTM directory loads as the classifier it is (to score it)."""
    if kind_of(model_dir).name == "bilstm":  # its own config file, the same label check
        model = load_bilstm(model_dir)
        if task.head == "qa" or (model.config.id2label and not task.fits(model.config.id2label)):
            raise located(Path(model_dir) / "bilstm.json", f"{role}, a BiLSTM classifier, does not fit task "
                                                            f"{task.name}")
        return model
    config, _ = load_config(model_dir)
    if task.head == "qa":
        return load_pretrained(model_dir, "qa")
    if config.id2label and not task.fits(config.id2label):
        raise located(Path(model_dir) / "config.json", f"{role}'s labels {list(config.id2label.values())} do not "
                                                       f"fit task {task.name} (labels {list(task.id2label.values())})")
    problem = "regression" if task.is_regression else "single_label_classification"
    dropout = config.classifier_dropout if classifier_dropout is None else classifier_dropout
    return load_pretrained(model_dir, "classification", config=config.replace(
        id2label=task.id2label, problem_type=problem, classifier_dropout=dropout, **changes))


def model_labels(model_dir) -> list[str] | None:
    """A fine-tuned classifier's label names in its order; None for a model without labels. Scoring reads a dev
    set against them, so a dev set that lacks a class still fits its model, and a label it never learned is named
    at its line."""
    return label_names(load_bilstm_config(model_dir) if kind_of(model_dir).name == "bilstm" else
                       load_config(model_dir)[0])


def label_names(config) -> list[str] | None:
    """A model configuration's label names in its id order (`model_labels` of one already loaded); None without."""
    return [config.id2label[i] for i in sorted(config.id2label)] or None


def require_labels(model_dir, role: str = "model"):
    """The directory's config, refused in one line when it has no labels: not a fine-tuned classifier, so its
    head is untrained (a teacher, FastBERT's base, QAT's start must be one)."""
    config, _ = load_config(model_dir)
    if not config.id2label:
        raise located(Path(model_dir) / "config.json", f"{role} is not a fine-tuned classifier (no labels); run "
                                                       "mobilekd finetune first")
    return config


def fine_tuned_classifier(model_dir, task: Task, role: str = "model", **changes):
    """`build_model` for a directory that must already be a classifier of the task."""
    require_labels(model_dir, role)
    return build_model(model_dir, task, role, **changes)


@torch.no_grad()
def predict(model, split, batch_size: int = 64):
    """The model's outputs over `split`, in its order (run in batches of similar length: `EncodedSplit.by_length`)."""
    model.eval()
    device = next(model.parameters()).device
    batches, back = split.by_length(batch_size)
    outs = []
    for indices in batches:
        b = split.batch(indices)
        outs.append(model(b["input_ids"].to(device), b["attention_mask"].to(device),
                          b["token_type_ids"].to(device)))
    if isinstance(outs[0], tuple):  # QA: start and end logits per position, each batch as wide as its longest
        width = split.arrays["input_ids"].shape[1]  # window, padded back to the split's width (never chosen there)
        return tuple(torch.cat([torch.nn.functional.pad(o[i], (0, width - o[i].shape[1]), value=-1e4) for o in outs])
                     .float().cpu().numpy()[back] for i in range(2))
    return torch.cat(outs).float().cpu().numpy()[back]


def write_predictions(out: Path, predictions: dict, qa: bool = False, prefix: str = "") -> None:
    """Each split's predictions as OUT/<prefix><split>_predictions.tsv (source, label, prediction), or .json for
    QA answers."""
    for name, rows in predictions.items():
        if qa:
            write_json(out / f"{prefix}{name}_predictions.json", rows)
            continue
        with atomic_path(out / f"{prefix}{name}_predictions.tsv") as tmp:
            tmp.write_text("source\tlabel\tprediction\n" + "".join(f"{s}\t{l}\t{p}\n" for s, l, p in rows))


class DevEvaluator:
    """Scores every dev split; keeps the best model (by the task's first metric) and its predictions in OUT.
    With `save_model=False` (evaluation only) it writes results and predictions but no copy of the weights;
    `save(model, out, tokenizer)` writes the model (default: `save_pretrained`). Every evaluation of a training run,
    best or not, is appended to OUT/history.json (step, the `extra` it was given, e.g. wall_seconds, and the
    metrics): a run's score against its training time (docs/quality.md's cost curves); an evaluation at a step
    the history already passed (a run restarted from scratch in the same OUT) drops the entries from there on."""

    def __init__(self, task: Task, dev: dict, out: Path, tokenizer, save_model: bool = True, save=save_pretrained):
        self.task, self.dev, self.out, self.tokenizer, self.save_model = task, dev, out, tokenizer, save_model
        self.save = save
        best = out / "results.json"
        self.best = kept_score(read_json(best), task) if best.is_file() and save_model else None
        self.history_path = out / "history.json"

    def score(self, model) -> tuple[dict, dict]:
        metrics, predictions = {}, {}
        for name, (examples, split, meta) in self.dev.items():
            out = predict(model, split)
            if self.task.head == "qa":
                answers = decode_answers(examples, meta, out[0], out[1], self.task.version == "2.0")
                metrics[name] = squad_metrics(examples, answers)
                predictions[name] = answers
            else:
                if self.task.is_regression:
                    pred = out[:, 0]
                    shown = [f"{v:.4f}" for v in pred]
                else:
                    pred = out.argmax(-1)
                    shown = [self.task.labels[i] for i in pred]
                if "labels" in split.arrays:
                    metrics[name] = classification_metrics(self.task.metrics, split.arrays["labels"], pred)
                predictions[name] = [(e.source, e.label, p) for e, p in zip(examples, shown)]
        return metrics, predictions

    def __call__(self, model, step: int, extra: dict | None = None) -> dict:
        metrics, predictions = self.score(model)
        first = next(iter(metrics.values()), {})
        score = selection_score(self.task.selection_metric, first)  # the first split's: what the run chooses on
        print(f"step {step}: " + ", ".join(f"{s} {k} {v:.4f}" for s, m in metrics.items() for k, v in m.items()))
        if self.save_model:
            history = read_json(self.history_path) if self.history_path.is_file() else []
            write_json(self.history_path, [h for h in history if h["step"] < step] + [
                {"step": step, "wall_seconds": (extra or {}).get("wall_seconds"), "metrics": metrics,
                 "score": score}])
        # no metrics: nothing to choose on, so the latest model is the one kept (--select-on none); a NaN best (a
        # Pearson of constant predictions) is beaten by any score, or no later model could ever be kept
        if metrics and self.best is not None and not math.isnan(self.best) and not score > self.best:
            return metrics
        self.best = score
        if self.save_model:
            self.save(model, self.out, self.tokenizer)
        write_predictions(self.out, predictions, qa=self.task.head == "qa")
        metric = self.task.metrics[0]  # what the kept model is reported by; `selection_score`: what chose it
        write_json(self.out / "results.json", {"task": self.task.name, "metrics": metrics, "best_step": step,
                                               "best_metric": metric, "best_score": first.get(metric, float("nan")),
                                               "selection_metric": self.task.selection_metric, "selection_score": score,
                                               **(extra or {})})
        return metrics


def kept_score(result: dict, task: Task) -> float | None:
    """The score the model a run kept was chosen by, from its results.json (what a resumed run's later evaluations
    must beat): its `selection_score`; a results.json written before that field holds only its first metric's, which
    is that score only where the task chooses on its first metric (else None: the next evaluation is kept)."""
    name, score = chosen_by(result)
    return score if name == task.selection_metric else None


def chosen_by(result: dict) -> tuple[str | None, float | None]:
    """What a run's kept model was chosen by: (the score's name, its value); a results.json written before
    `selection_metric` chose on its `best_metric`."""
    return (result.get("selection_metric", result.get("best_metric")),
            result.get("selection_score", result.get("best_score")))


def score_once(task, out: Path, tokenizer, encode, device) -> dict:
    """The dev metrics of the model a run chose on its validation split, as saved in OUT: the first and only time
    the run reads dev (its predictions written beside the model). `encode(examples)` -> (split, meta), the run's
    own encoding."""
    model = build_model(out, task).to(device)
    try:
        dev = {name: (examples, *encode(examples)) for name, examples in task.dev.items()}
    except UserError as err:  # a bad dev file is found only now: the model it would score is complete
        raise UserError(f"{err} (the model chosen on validation is complete in {out}; score it with --eval-only "
                        f"--model {out} once dev is fixed)") from None
    metrics, predictions = DevEvaluator(task, dev, out, tokenizer, save_model=False).score(model)
    write_predictions(out, predictions, qa=task.head == "qa")
    return metrics
