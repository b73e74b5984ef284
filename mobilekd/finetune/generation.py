"""A seq2seq student's dev generations and their scores: BLEU and chrF by sacrebleu (Post 2018; sacrebleu 2.6,
`corpus_bleu` / `corpus_chrf` with their defaults: 13a tokenization, chrF's character 6-grams at beta 2), beside
copying the source unchanged, the baseline every task reports.

Every text is scored in the student's own alphabet: hypothesis, reference and copied source alike are word pieces
decoded back to text by the tokenizer (`as_text`), so an uncased student is not charged for the capitals and
accents it cannot write, and copying is judged in the same space.
"""

from __future__ import annotations

import json
from pathlib import Path

import sacrebleu

from mobilekd.data.seq2seq import PairSplit
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.models.decoding import decode_split


def as_text(tokenizer, ids) -> str:
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True, clean_up_tokenization_spaces=True)


def references(tokenizer, split: PairSplit) -> list[str]:
    """The targets as text, [SEP] left out."""
    return [as_text(tokenizer, row[row != split.pad][:-1]) for row in split.arrays["target_ids"]]


def copies(tokenizer, split: PairSplit) -> list[str]:
    """The sources as text: the copying baseline's output."""
    return [as_text(tokenizer, row[row != split.pad]) for row in split.arrays["source_ids"]]


def scores(hypotheses: list[str], refs: list[str]) -> dict[str, float]:
    return {"bleu": round(sacrebleu.corpus_bleu(hypotheses, [refs]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hypotheses, [refs]).score, 2)}


def generate(model, split: PairSplit, tokenizer, max_len: int, beam: int = 1, batch_size: int = 32) -> list[str]:
    """Every source of `split` decoded (greedy at beam 1), in the split's order, as text."""
    return [as_text(tokenizer, t) for t in decode_split(model, split, max_len, beam, batch_size)]


class GenerationEvaluator:
    """Scores the generations (greedy) of a split (`name`: dev, or the validation split a run carved from its
    training pairs) at each evaluation, appends them to OUT/history.json, and saves the model, the split's
    generations (OUT/<name>_generations.jsonl) and OUT/results.json: the run's model is its last, and results.json's
    `best_step` / `best_score` (the shared results layout's keys) name that last evaluation."""

    def __init__(self, split: PairSplit, pairs, out: Path, tokenizer, max_len: int, save, name: str = "dev"):
        self.split, self.pairs, self.out, self.tokenizer, self.max_len, self.save = (split, pairs, out, tokenizer,
                                                                                    max_len, save)
        self.name = name
        self.refs = references(tokenizer, split)

    def __call__(self, model, step: int, extra: dict | None = None) -> dict:
        hyps = generate(model, self.split, self.tokenizer, self.max_len)
        metrics = scores(hyps, self.refs)
        print(f"step {step}: {self.name} greedy BLEU {metrics['bleu']:.2f}, chrF {metrics['chrf']:.2f}")
        history_path = self.out / "history.json"
        history = read_json(history_path) if history_path.is_file() else []
        write_json(history_path, [h for h in history if h["step"] < step] + [
            {"step": step, "wall_seconds": (extra or {}).get("wall_seconds"), "metrics": {self.name: metrics}}])
        self.save(model, self.out, self.tokenizer)
        write_generations(self.out / f"{self.name}_generations.jsonl", self.pairs, self.refs, hyps)
        write_json(self.out / "results.json", {"metrics": {self.name: metrics}, "best_step": step,
                                               "best_metric": "bleu", "best_score": metrics["bleu"], **(extra or {})})
        return metrics


def write_generations(path: Path, pairs, refs: list[str], hyps: list[str]) -> None:
    """One JSON object a line: the pair's origin, source, reference (as scored) and the generation."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for p, r, h in zip(pairs, refs, hyps):
                f.write(json.dumps({"origin": p.origin, "source": p.source, "reference": r, "generated": h}) + "\n")
