"""Intervals that count the dev set's own sampling noise as well as the seeds': a paired bootstrap over both.

Two methods scored on the same dev examples over the same seeds are compared by the difference of their metric.
Each replicate draws seeds with replacement and, independently, dev examples with replacement (one draw of
examples shared by both methods and every seed drawn: the pairing), and computes the mean over the drawn seeds of
metric(method a) - metric(method b) on the drawn examples; the interval is the replicates' 2.5th and 97.5th
percentiles. Seeds and examples are crossed factors (every seed scores every example), and resampling both
independently is the "pigeonhole" bootstrap of Owen, "The pigeonhole bootstrap" (Annals of Applied Statistics,
2007), which is conservative (its variance errs high by the interaction term) where a naive bootstrap over
examples alone would ignore the seeds. Over examples it is the paired bootstrap Koehn, "Statistical Significance
Tests for Machine Translation Evaluation" (EMNLP 2004), Section 4, uses for two systems. With one seed only the
dev examples vary: the interval then says nothing of another seed's noise, and the table says [n=1]. `mobilekd ship`
reports its student against its teacher and the bag-of-words baseline this way; the benchmarks, their methods over
seeds.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

REPLICATES = 2000


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    return float(np.mean(labels == predictions))


def metric_function(task: str, metric: str):
    """`metric(labels, predictions)` over a task's label names (or, for a regression task, scores written as text),
    as the bootstrap resamples them: accuracy, MRPC's F1 (its positive class GLUE's label 1, "equivalent" here),
    CoLA's Matthews correlation, or STS-B's Pearson and Spearman correlations."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    if metric in ("pearson", "spearman"):
        correlation = pearsonr if metric == "pearson" else spearmanr
        return lambda labels, predictions: float(correlation(labels.astype(float), predictions.astype(float))[0])
    if metric not in ("f1", "matthews_corr", "accuracy"):
        raise ValueError(f"no bootstrap metric for {metric!r}")
    if metric == "f1":
        from mobilekd.data.tasks import default_data, load_task
        positive = load_task(task, default_data(task), eval_only=True).labels[1]
        return lambda labels, predictions: float(f1_score(labels, predictions, pos_label=positive))
    if metric == "matthews_corr":
        return lambda labels, predictions: float(matthews_corrcoef(labels, predictions))
    return accuracy


def prediction_rows(path: Path) -> list[dict]:
    """A predictions file's rows (`mobilekd finetune`'s dev_ or validation_predictions.tsv: source, label where
    known, prediction), as text."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def read_predictions(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A dev_predictions.tsv (`mobilekd finetune`'s, or ship's baseline_dev_predictions.tsv): its labels (None where
    the file has none) and predictions, as arrays of text."""
    got = prediction_rows(path)
    labels = np.array([r["label"] for r in got]) if got and "label" in got[0] else None
    return labels, np.array([r["prediction"] for r in got])


def paired_bootstrap(labels: np.ndarray, a: np.ndarray, b: np.ndarray, metric=accuracy, replicates: int = REPLICATES,
                     seed: int = 0) -> dict:
    """`a` and `b`: predictions, shape (seeds, dev examples), of two methods on the same examples (`labels`) and
    seeds (a method with one run for every seed, such as TF-IDF, repeats its row). Returns the observed mean
    difference and its 95% interval."""
    a, b, labels = np.atleast_2d(a), np.atleast_2d(b), np.asarray(labels)
    if a.shape != b.shape or a.shape[1] != len(labels):
        raise ValueError(f"paired predictions differ in shape: {a.shape}, {b.shape}, {len(labels)} labels")
    rng = np.random.default_rng(seed)
    seeds, n = a.shape

    def diff(rows, cols):
        return float(np.mean([metric(labels[cols], a[r, cols]) - metric(labels[cols], b[r, cols]) for r in rows]))

    observed = diff(range(seeds), np.arange(n))
    draws = [diff(rng.integers(0, seeds, seeds), rng.integers(0, n, n)) for _ in range(replicates)]
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"mean": round(observed, 4), "low": round(float(low), 4), "high": round(float(high), 4), "seeds": seeds,
            "examples": n}


def side(interval: dict) -> str:
    """Where a difference's interval lies against zero: "above" or "below" where it excludes zero, else "tie"."""
    return "above" if interval["low"] > 0 else "below" if interval["high"] < 0 else "tie"


def cell(interval: dict | None, scale: float = 100.0) -> str:
    """A table cell: the difference in points with its interval, and its `side` of zero."""
    if not interval:
        return "-"
    return (f"{interval['mean'] * scale:+.1f} [{interval['low'] * scale:+.1f}, {interval['high'] * scale:+.1f}] "
            f"{side(interval)} [n={interval['seeds']}]")
