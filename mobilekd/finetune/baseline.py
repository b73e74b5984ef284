"""The bag-of-words baseline every fine-tuning run reports beside its model: TF-IDF over word unigrams and bigrams
(scikit-learn's `TfidfVectorizer`, sublinear term frequency) and a logistic regression for classes, a ridge
regression for scores, trained on the same training examples as the model and scored on the same dev split with
the task's own metrics. It takes about a second and answers "does the model add anything?"."""

from __future__ import annotations

import time

import numpy as np

from mobilekd.data.tasks import Task
from mobilekd.finetune.metrics import classification_metrics, selection_score
from mobilekd.finetune.selection import FRACTION, carve


def _texts(examples) -> list[str]:
    # sentence pairs: the two texts joined by a marker token, so the bag sees which side a word came from
    return [e.text_a if e.text_b is None else f"{e.text_a} [SEP] {e.text_b}" for e in examples]


def bag_of_words_baseline(task: Task, train, dev, seed: int = 0, keep_predictions: bool = False) -> dict:
    """Metrics of TF-IDF + logistic/ridge regression on `dev` after training on `train` (lists of examples); with
    `keep_predictions`, its prediction for each dev example too (a paired comparison's other side)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge

    start = time.time()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    x_train, x_dev = vectorizer.fit_transform(_texts(train)), vectorizer.transform(_texts(dev))
    y, labels = task.targets(train), task.targets(dev)
    if task.is_regression:
        model, method = Ridge(alpha=1.0), "tfidf+ridge"
    else:
        model, method = LogisticRegression(max_iter=1000, C=10.0, random_state=seed), "tfidf+logreg"
    if len(set(y.tolist())) < 2 and not task.is_regression:
        predictions = np.full(len(dev), y[0])  # one class in training: the majority answer
    else:
        predictions = model.fit(x_train, y).predict(x_dev)
    return {"method": method, "train_examples": len(train), "dev_examples": len(dev),
            "metrics": classification_metrics(task.metrics, labels, predictions),
            "seconds": round(time.time() - start, 2),
            **({"predictions": predictions.tolist()} if keep_predictions else {})}


def majority_baseline(task: Task, train, dev) -> dict | None:
    """Metrics on `dev` of answering every example with the most frequent class of `train` (on a tie, the first of
    the task's labels); None for a regression task (a constant score has no correlation). A student near it has
    learned nothing a phone needs."""
    if task.is_regression:
        return None
    top = int(np.bincount(task.targets(train)).argmax())
    return {"method": "majority", "label": task.labels[top], "train_examples": len(train), "dev_examples": len(dev),
            "metrics": classification_metrics(task.metrics, task.targets(dev), np.full(len(dev), top))}


def constant_on_validation(task: Task, seed: int, fraction: float = FRACTION, metric: str | None = None,
                           linked_pairs: bool = True) -> dict | None:
    """The best constant answer on the validation split a run with `seed` carves from the training data (`carve`,
    as `finetune --select-on validation`, `bilstm` and every trial of `ship` do): each class answered to every
    validation example, scored in the task's selection score (`Task.selection_metric`, MRPC's F1 and accuracy's
    mean; `metric`: another of its scores, for runs chosen on it), the best kept. Usually the majority class, but
    not where F1 counts and the majority is the negative class (QQP: always "duplicate" scores above always
    "not_duplicate" in F1 and accuracy's mean). What a chosen student's validation score must beat to be more than a
    constant answer: on MRPC the constant scores 0.81 F1, and students chosen on F1 were that constant
    (docs/ship_runs.md). None for regression, where a constant has no correlation. `linked_pairs`: as `carve`'s."""
    if task.is_regression or not task.labels:
        return None
    held = task.targets(carve(task, task.train, seed, fraction, linked_pairs=linked_pairs).validation)
    metric = metric or task.selection_metric
    scores = [selection_score(metric, classification_metrics(task.metrics, held, np.full(len(held), k)))
              for k in range(len(task.labels))]
    best = int(np.argmax(scores))
    return {"label": task.labels[best], "metric": metric, "value": scores[best], "examples": len(held)}
