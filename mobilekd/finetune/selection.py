"""The selection protocol: every choice a run makes (the checkpoint step here; in `ship`'s search the student, its
recipe, epochs, learning rate and KD settings) is made on a validation split carved from the training data, and the
dev set is scored once per final model, by nothing that chooses. GLUE's dev sets thereby serve as test sets: a dev
score picked as the best of several runs on that same dev set is optimistic (the maximum of noisy estimates), one
scored once after every choice is not.

The split (`carve`) is seeded, stratified where the task allows (by label for classification, by quantile bin of the
score for regression), for SQuAD drawn by paragraph (a paragraph's questions all on one side, so validation never
reads a context training saw), with a text that recurs in the training data kept on one side (so validation never
scores a sentence training saw: StratifiedGroupKFold's first fold), for one-text tasks a text found word for word
inside a longer training text kept on that text's side (`text_groups`: SST-2's training examples are the phrases of
its sentences' parse trees), for two-text tasks the pairs linked by a shared text on one side (14% of MRPC's
training pairs share a sentence with another pair, 23% of STS-B's, 30% of RTE's) unless the linked group is too large
for a validation split to hold it as a fair part of the task (`MAX_GROUP_SHARE`: it then trains), and capped in size,
and its rule
is recorded beside the results (`Carved.record`) so a reader knows what chose the model. Stratified splitting is
scikit-learn's `train_test_split`, the grouped one its `StratifiedGroupKFold` (`GroupKFold` unstratified;
`GroupShuffleSplit` for SQuAD's paragraphs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from sklearn.model_selection import GroupKFold, GroupShuffleSplit, StratifiedGroupKFold, train_test_split

from mobilekd.data.tasks import Task
from mobilekd.errors import UserError
from mobilekd.rundir import HELD_OUT

VALIDATION = HELD_OUT[0]  # the split's name in results.json, history.json and the rows
FRACTION, CAP = 0.1, 2000  # a tenth of the training examples, at most 2,000 (a GLUE dev set's size: 277-1,500)
SCORE_BINS = 5  # regression: stratified by the score's quintile
# how `carve` groups a task's examples, recorded in `ship`'s plan.json (a search carved otherwise is not resumed):
# GROUPING for a one-text task, PAIR_GROUPING for a two-text one (`grouping`); pair tasks' searches of before
# 2026-12-06 recorded GROUPING, when they grouped only a pair's exact copies
GROUPING = "a text's copies, and in a one-text task a text with the training texts holding it"
PAIR_GROUPING = ("a text's copies, and in a two-text task the pairs linked by a shared text unless one such group "
                 "outgrows the split")
LINKED = ", the pairs linked by a shared text on one side"  # in a carve's rule
# a linked group may hold at most this share of the validation split; the pairs of a larger one train. Linking by a
# shared sentence chains pairs into groups of any size: STS-B's largest, 245 video-caption pairs ("A man is playing
# a flute.") of 5,749, was 43% of the split of each of seeds 0-2 (StratifiedGroupKFold's first fold took it whatever
# the seed), so their searches chose on the same caption pairs for nearly half of every validation score
# (docs/ship_runs.md). Its next largest groups hold 13 and 12 pairs,
# MRPC's 5, RTE's 11: under the share of their splits (575, 368 and 249 pairs), whose carves it leaves unchanged.
MAX_GROUP_SHARE = 0.05
# a two-text task whose training data holds a group over that share records this after PAIR_GROUPING (`grouping`)
OVERSIZED = f", a linked group of over {MAX_GROUP_SHARE:.0%} of the validation split kept in training"


def grouping(examples: list) -> str:
    """How `carve` groups these training examples at its default fraction and cap (those of every run `ship`
    starts), for `ship`'s plan.json: PAIR_GROUPING for a two-text task (with OVERSIZED where a linked group over
    `MAX_GROUP_SHARE` of the split trains, which no seed changes), else GROUPING. Plain PAIR_GROUPING carves as
    before that rule: linked, or the links let go where one group outgrows the split."""
    if all(e.text_b is None for e in examples):
        return GROUPING
    groups, rule = text_groups(examples)
    return PAIR_GROUPING + (OVERSIZED if rule == LINKED and oversized(groups, validation_size(len(examples)))[0].any()
                            else "")


def oversized(groups: np.ndarray, size: int, share: float | None = MAX_GROUP_SHARE) -> tuple[np.ndarray, bool]:
    """For linked `groups` and a validation split of `size`: which examples belong to a group of more than `share`
    of the split (they train), and whether to let the links go (a group outgrows the split and the rest could not
    hold it: pairs sharing a prompt). Where the large groups would leave too few examples to hold the split out
    (small data: the share's floor is one pair), none trains and the groups stay whole, as before the share.
    `share=None`: the rule of 2026-12-06 to 2026-12-07, no group trains and the links go where one outgrows the
    split."""
    counts = np.bincount(groups)
    if share is None:
        return np.zeros(len(groups), dtype=bool), bool(counts.max() > size)
    large = counts[groups] > max(1, int(share * size))
    if len(groups) - int(large.sum()) > size:
        return large, False
    return np.zeros(len(groups), dtype=bool), bool(counts.max() > size)


@dataclass
class Carved:
    train: list
    validation: list
    record: dict  # the rule, its fraction, cap and seed, and the sizes: results.json's "validation_split"
    held: list[int]  # the validation examples' indices in the list carved, in order


def _strata(task: Task, examples: list) -> np.ndarray | None:
    """What the split is stratified by: the label, the score's quantile bin, or None (SQuAD, or a class too rare to
    appear on both sides)."""
    if task.head != "classification" or any(e.label is None for e in examples):
        return None
    if task.is_regression:
        scores = task.targets(examples)
        edges = np.quantile(scores, np.linspace(0, 1, SCORE_BINS + 1)[1:-1])
        strata = np.digitize(scores, edges)
    else:
        strata = task.targets(examples)
    return strata if np.unique(strata, return_counts=True)[1].min() >= 2 else None


def validation_size(n: int, fraction: float = FRACTION, cap: int = CAP) -> int:
    """How many of `n` training examples `carve` holds out: `fraction` of them, at most `cap`, at least 1."""
    return min(cap, max(1, round(fraction * n)))


def carve(task: Task, examples: list, seed: int, fraction: float = FRACTION, cap: int = CAP,
          linked_pairs: bool = True, max_group_share: float | None = MAX_GROUP_SHARE) -> Carved:
    """Hold out `fraction` of `examples` (at most `cap`, at least 1) as the validation split, drawn by `seed`,
    stratified where `_strata` allows; the rest trains. Refused in one line when too few examples are left to train
    on or to validate with. `linked_pairs=False`: a two-text task's split as carved before 2026-12-06, a pair's
    copies alone kept together (what a search of then was scored on); `max_group_share=None`: a linked group of any
    size kept on one side, as carved from 2026-12-06 to 2026-12-07 (`oversized`)."""
    if not 0 < fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1, got {fraction}")
    n = len(examples)
    size = validation_size(n, fraction, cap)
    if n - size < 1:
        raise UserError(f"{n} training examples leave none to train on once {size} are held out for validation "
                        f"(--select-on none keeps them all and the last step's model)")
    strata = _strata(task, examples)
    if strata is not None and size < len(np.unique(strata)):  # too small to hold every class: not stratified
        strata = None
    index = np.arange(n)
    if task.head == "qa":  # by paragraph: its questions share the context, so they stay on one side
        groups = np.unique([e.context for e in examples], return_inverse=True)[1]
        held = next(GroupShuffleSplit(1, test_size=size / n, random_state=seed).split(index, groups=groups))[1]
        if len(held) in (0, n):
            raise UserError(f"{n} training questions over {groups.max() + 1} paragraph(s) leave no paragraph to "
                            f"hold out for validation (--select-on none keeps them all)")
        rule = "random paragraphs"
    else:
        texts, grouping = text_groups(examples, linked_pairs)
        pool = index  # what the split is drawn from
        if grouping == LINKED:
            large, let_go = oversized(texts, size, max_group_share)
            if let_go:  # a text shared by too many pairs (a prompt)
                texts, grouping = text_groups(examples, linked_pairs=False)
                grouping += ", the pairs sharing a text not kept together (one such group would outgrow the split)"
            elif large.any():  # too large to be a fair part of validation: they train, the rest is stratified anew
                pool = index[~large]
                strata = _strata(task, [examples[i] for i in pool])
                if strata is not None and size < len(np.unique(strata)):
                    strata = None
                grouping += (f", {len(np.unique(texts[large]))} linked group(s) of over "
                             f"{max(1, int(max_group_share * size))} pairs ({int(large.sum())} pairs) kept in training")
        rule = ("stratified by label" if strata is not None and not task.is_regression else
                f"stratified by the score's {SCORE_BINS} quantile bins" if strata is not None else "random")
        if texts.max() == 0:
            raise UserError(f"the {n} training examples are one text repeated, or each inside another: nothing to "
                            f"hold out for validation that training does not see (--select-on none keeps them all)")
        if grouping:  # all of a group on one side
            folds = min(max(2, round(len(pool) / size)), len(np.unique(texts[pool])))  # no more folds than groups
            splitter = (StratifiedGroupKFold(folds, shuffle=True, random_state=seed) if strata is not None else
                        GroupKFold(folds, shuffle=True, random_state=seed))
            held = pool[next(splitter.split(pool, strata, groups=texts[pool]))[1]]
            rule += grouping
        else:
            rest, held = train_test_split(index, test_size=size, random_state=seed, shuffle=True, stratify=strata)
    held_set = set(held.tolist())
    order = sorted(held_set)
    return Carved(train=[e for i, e in enumerate(examples) if i not in held_set],
                  validation=[examples[i] for i in order],
                  record={"rule": rule, "fraction": fraction, "cap": cap, "seed": seed, "size": len(held_set),
                          "train_size": n - len(held_set)}, held=order)


def _normal(text: str) -> str:
    """A sentence as an uncased model reads it: lower-cased, spaces collapsed."""
    return " ".join(text.lower().split())


def sentence_components(firsts: list[str], seconds: list[str]) -> np.ndarray:
    """Each pair's group: its sentences' connected component in the graph whose nodes are the sentences (`_normal`)
    and whose edges are the pairs (scipy's `connected_components`), so pairs linked by a shared sentence, directly
    or through a chain, share a group. Numbered in no particular order."""
    sentences = {t: i for i, t in enumerate(dict.fromkeys(_normal(x) for pair in zip(firsts, seconds) for x in pair))}
    edges = np.array([[sentences[_normal(a)], sentences[_normal(b)]] for a, b in zip(firsts, seconds)]).T
    graph = coo_matrix((np.ones(len(firsts)), (edges[0], edges[1])), shape=(len(sentences), len(sentences)))
    return connected_components(graph, directed=False)[1][edges[1]]


def text_groups(examples: list, linked_pairs: bool = True) -> tuple[np.ndarray, str]:
    """Each example's group for `carve`, numbered from 0, and the rule's words ("" when every group is one example).
    A text's copies share a group. In a two-text task the pairs linked by a shared text (`sentence_components`)
    share one unless `linked_pairs` is False: MRPC, RTE and STS-B pair a sentence with several others (14-30% of
    their training pairs), and a validation pair whose sentence training read is not unseen. In a one-text task (no
    text_b), a text found word for word inside a longer
    training text (lower-cased, split on spaces) joins the group of the longest one holding it: SST-2's training set
    is the phrases of its 6,885 sentences' parse trees (Socher et al. 2013), and of a validation split drawn at
    random from it 88% stand inside a training phrase (1,751 of 1,981, seed 0; of dev's 872 sentences, 2), so it
    would score phrases of sentences training saw. Grouped, its 66,978 distinct texts fall into 6,885 groups.
    A text is looked for where its rarest word stands in the texts grouped before it (longest first), so the index
    is one entry a word of the training data."""
    one_text = all(e.text_b is None for e in examples)
    if not one_text and linked_pairs:
        groups = np.unique(sentence_components([e.text_a for e in examples], [e.text_b or "" for e in examples]),
                           return_inverse=True)[1]
        return groups, "" if groups.max() + 1 == len(examples) else LINKED
    distinct, of_example = np.unique([e.text_a if one_text else f"{e.text_a}\t{e.text_b}" for e in examples],
                                     return_inverse=True)
    parent = np.arange(len(distinct))
    inside = False
    if one_text:
        words = [tuple(k.lower().split()) for k in distinct]
        where: dict[str, list[tuple[int, int]]] = {}  # a word -> (text, position) of each of its occurrences
        for i, w in enumerate(words):
            for position, word in enumerate(w):
                where.setdefault(word, []).append((i, position))
        order = sorted(range(len(words)), key=lambda i: -len(words[i]))
        rank = np.empty(len(words), dtype=np.int64)
        rank[order] = np.arange(len(words))
        for i in order:  # a holder is grouped before it, so its group is final
            w = words[i]
            if not w:
                continue
            k = min(range(len(w)), key=lambda j: len(where[w[j]]))
            holders = [u for u, position in where[w[k]] if rank[u] < rank[i] and position >= k
                       and words[u][position - k:position - k + len(w)] == w]
            if holders:
                parent[i], inside = parent[max(holders, key=lambda u: (len(words[u]), -rank[u]))], True
    groups = np.unique(parent, return_inverse=True)[1][of_example]
    if groups.max() + 1 == len(examples):
        return groups, ""
    return groups, (", a text and the training texts holding it on one side" if inside else
                    ", a repeated text's copies on one side")


def whole_texts(examples: list) -> list:
    """One example of each of `text_groups`' groups, the one with the longest text, in the training data's order:
    the task's texts with a text found inside a longer training text counted as that one. What a task's
    inputs look like where its training set holds fragments of them: SST-2's training examples are the phrases of
    its sentences' parse trees (Socher et al. 2013), 95% of them within 32 word pieces under all-MiniLM-L6-v2's
    tokenizer, and its 6,885 groups' longest texts, the whole sentences, 95% within 45 (a quarter over 32). Where no
    text stands inside another, the distinct texts (a copy counted once)."""
    groups, _ = text_groups(examples, linked_pairs=False)
    size = [len(e.text_a.split()) + len((e.text_b or "").split()) for e in examples]  # words, as text_groups
    longest: dict[int, int] = {}  # group -> the index of its longest example
    for i, group in enumerate(groups.tolist()):
        if group not in longest or size[i] > size[longest[group]]:
            longest[group] = i
    return [examples[i] for i in sorted(longest.values())]


def carve_pairs(pairs: list, seed: int, fraction: float = FRACTION, cap: int = CAP) -> Carved:
    """`carve` for (source, target) pairs (`mobilekd.data.pairs.TextPair`): `fraction` of them (at most `cap`, at
    least 1) held out at random by `seed`, pairs linked by a shared sentence kept on one side (a paraphrase and its
    reverse, a chain of paraphrases, correction's noisy copies of one sentence: the connected components of the
    graph whose edges are the pairs, scipy's `connected_components`), so validation never reads a sentence
    training saw (sentences compared lower-cased, spaces collapsed, as an uncased student reads them). Whole
    components are drawn in a seeded random order and held out while they fit in the size asked, so the split
    never exceeds it however unequal the components. Refused in one line when no component fits or none would be
    left to train on."""
    if not 0 < fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1, got {fraction}")
    n = len(pairs)
    size = validation_size(n, fraction, cap)
    if n - size < 1:
        raise UserError(f"{n} training pairs leave none to train on once {size} are held out for validation")

    groups = sentence_components([p.source for p in pairs], [p.target for p in pairs])
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups.tolist()):
        members.setdefault(g, []).append(i)
    held = []
    for g in np.random.default_rng(seed).permutation(sorted(members)).tolist():
        if len(held) + len(members[g]) <= size:
            held += members[g]
        if len(held) == size:
            break
    if not held or len(held) == n:
        raise UserError(f"the {n} training pairs are linked by shared sentences into groups of which none fits a "
                        f"validation split of {size}: nothing to hold out that training does not see")
    held_set = set(held)
    order = sorted(held_set)
    return Carved(train=[p for i, p in enumerate(pairs) if i not in held_set],
                  validation=[pairs[i] for i in order],
                  record={"rule": "random, pairs linked by a shared sentence on one side", "fraction": fraction,
                          "cap": cap, "seed": seed, "size": len(held_set), "train_size": n - len(held_set)},
                  held=order)
