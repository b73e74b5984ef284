"""Turning start/end logits of SQuAD windows into answer strings (BERT's n-best span search)."""

from __future__ import annotations

import numpy as np


def decode_answers(examples, meta: dict, start_logits: np.ndarray, end_logits: np.ndarray, v2: bool,
                   n_best: int = 20, max_answer_len: int = 30) -> dict[str, str]:
    """Best span per question over all its windows; with v2, the empty answer when the [CLS] ("no answer")
    score beats the best span."""
    best = {}  # example index -> (score, text)
    null = {}
    for w in range(len(start_logits)):
        ex_i = int(meta["example_index"][w])
        offsets = meta["offsets"][w]
        s, e = start_logits[w], end_logits[w]
        null[ex_i] = min(null.get(ex_i, np.inf), float(s[0] + e[0]))
        context = offsets[:, 0] >= 0
        starts = [i for i in np.argsort(s)[::-1][:n_best] if context[i]]
        ends = [i for i in np.argsort(e)[::-1][:n_best] if context[i]]
        for i in starts:
            for j in ends:
                if j < i or j - i + 1 > max_answer_len:
                    continue
                score = float(s[i] + e[j])
                if ex_i not in best or score > best[ex_i][0]:
                    text = examples[ex_i].context[offsets[i, 0]:offsets[j, 1]]
                    best[ex_i] = (score, text)
    answers = {}
    for ex_i, example in enumerate(examples):
        score, text = best.get(ex_i, (-np.inf, ""))
        answers[example.qid] = "" if v2 and null.get(ex_i, -np.inf) > score else text
    return answers
