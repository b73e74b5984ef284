"""The tasks' official metrics: scikit-learn / scipy for GLUE, the official SQuAD script's normalisation for
exact match and F1 (v2.0: an empty prediction is right exactly when there is no answer)."""

from __future__ import annotations

import collections
import re
import string

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from mobilekd.data.glue import ACC_AND_F1


def classification_metrics(names, labels, predictions) -> dict[str, float]:
    """`labels`/`predictions`: class indices, or floats for regression (STS-B and custom regression)."""
    out = {}
    for name in names:
        if name == "matthews_corr":
            out[name] = float(matthews_corrcoef(labels, predictions))
        elif name == "pearson":
            out[name] = float(pearsonr(labels, predictions)[0])
        elif name == "spearman":
            out[name] = float(spearmanr(labels, predictions)[0])
        elif name == "f1":
            out[name] = float(f1_score(labels, predictions))
        else:
            out[name] = float(accuracy_score(labels, predictions))
    return out


def selection_score(name: str, metrics: dict[str, float]) -> float:
    """The score a run chooses its checkpoint by (`Task.selection_metric`), from one evaluation's metrics: one of
    them, or `acc_and_f1`, the unweighted mean of accuracy and binary F1, GLUE's score for a task it reports with
    both (Wang et al. 2019, "GLUE": a task with several metrics is scored by their unweighted average; transformers'
    `acc_and_f1`, src/transformers/data/metrics/__init__.py, the same mean for MRPC and QQP). NaN where the
    evaluation lacks what it needs (an unlabelled split)."""
    if name == ACC_AND_F1:
        return (metrics["f1"] + metrics["accuracy"]) / 2 if {"f1", "accuracy"} <= set(metrics) else float("nan")
    return metrics.get(name, float("nan"))


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace (official SQuAD script)."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(examples, predictions: dict[str, str]) -> dict[str, float]:
    """Exact match and F1 in percent, the maximum over each question's gold answers."""
    em, f1 = [], []
    for ex in examples:
        golds = [a["text"] for a in ex.answers if normalize_answer(a["text"])] or [""]
        pred = predictions.get(ex.qid, "")
        em.append(max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds))
        f1.append(max(_f1(pred, g) for g in golds))
    return {"exact_match": 100 * float(np.mean(em)), "f1": 100 * float(np.mean(f1))}
