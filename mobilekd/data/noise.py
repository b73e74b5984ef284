"""Seeded, documented noise for the text-correction task (`mobilekd.data.pairs`, task `correction`): a keyboard's
typos, dropped and swapped words, applied to a clean sentence that is then the target.

Word by word, each independent draw from the sentence's own generator (`numpy.random.default_rng((seed, index))`,
so a sentence's noise is the same whatever else is read):
- with P_DROP the word is left out (never the sentence's only word);
- with P_SWAP it changes place with the next word;
- with P_TYPO one edit is made inside it, chosen uniformly among: a letter deleted, a letter doubled, two
  neighbouring letters transposed, a letter replaced by a neighbour on a QWERTY keyboard. Words of one character,
  and characters that are not letters, are left as they are.
A sentence that came out unchanged gets one typo in a random word of two letters or more, where it has one, so
that copying the source is never the answer by construction.

No published noise model is followed. At these rates 14.3% of a dev target's words are missing from its noisy
source, and copying the source scores 61.42 BLEU (chrF 83.97) against the clean sentences (sacrebleu, as
`mobilekd.finetune.generation` scores; paraphrase's copy scores 46.62, entailment's 6.13).
"""

from __future__ import annotations

import numpy as np

P_DROP = 0.04
P_SWAP = 0.04
P_TYPO = 0.12

_ROWS = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
_PLACE = {c: (r, k) for r, row in enumerate(_ROWS) for k, c in enumerate(row)}
# a letter's QWERTY neighbours: the keys one row and one column away at most
NEIGHBOURS = {c: "".join(d for d, (r2, k2) in _PLACE.items() if d != c and abs(r2 - r) <= 1 and abs(k2 - k) <= 1)
              for c, (r, k) in _PLACE.items()}


def typo(word: str, rng: np.random.Generator) -> str:
    """One edit inside `word` (see the module's docstring); words without two letters come back unchanged."""
    letters = [i for i, c in enumerate(word) if c.isalpha()]
    if len(letters) < 2:
        return word
    i = int(rng.choice(letters))
    kind = int(rng.integers(4))
    if kind == 0:
        return word[:i] + word[i + 1:]
    if kind == 1:
        return word[:i] + word[i] + word[i:]
    if kind == 2:
        j = i + 1 if i + 1 < len(word) and word[i + 1].isalpha() else i - 1
        if j < 0 or not word[j].isalpha():
            return word[:i] + word[i] + word[i:]
        a, b = min(i, j), max(i, j)
        return word[:a] + word[b] + word[a] + word[b + 1:]
    near = NEIGHBOURS.get(word[i].lower())
    if not near:
        return word[:i] + word[i] + word[i:]
    c = near[int(rng.integers(len(near)))]
    return word[:i] + (c.upper() if word[i].isupper() else c) + word[i + 1:]


def add_noise(sentence: str, seed: int, index: int) -> str:
    """`sentence` with its noise: a pure function of (sentence, seed, index)."""
    rng = np.random.default_rng((seed, index))
    words = sentence.split()
    clean = " ".join(words)
    out, i = [], 0
    while i < len(words):
        w = words[i]
        if rng.random() < P_DROP and len(words) > 1:
            i += 1
            continue
        if rng.random() < P_SWAP and i + 1 < len(words):
            w, words[i + 1] = words[i + 1], w
        if rng.random() < P_TYPO:
            w = typo(w, rng)
        out.append(w)
        i += 1
    noisy = " ".join(out)
    if noisy == clean:
        candidates = [k for k, w in enumerate(out) if sum(c.isalpha() for c in w) >= 2]
        if candidates:
            k = int(rng.choice(candidates))
            out[k] = typo(out[k], rng)
            noisy = " ".join(out)
    return noisy
