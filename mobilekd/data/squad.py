"""SQuAD v1.1 / v2.0: the JSON reader, and features with a document stride (Devlin et al. 2019, Section 4.2).

Long contexts are cut into windows of `max_len` tokens; consecutive windows share `stride` context tokens
(transformers' convention, as its run_qa.py with `--doc_stride 128`). A window that does not hold the whole
answer, and every window of an unanswerable v2.0 question, points at [CLS] (position 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mobilekd.errors import located
from mobilekd.fileio import read_json

STRIDE = 128  # context tokens consecutive windows share: run_qa.py's --doc_stride 128, BERT's (`mobilekd finetune`)


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[dict] = field(default_factory=list)  # [{"text": ..., "answer_start": char offset}]
    is_impossible: bool = False


def read_squad(path) -> tuple[list[SquadExample], str]:
    """Return the examples and the format version ("1.1" or "2.0", judged by `is_impossible` fields)."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise located(path, "not a SQuAD file: expected an object with a 'data' list")
    examples, v2 = [], False
    for a, article in enumerate(data["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str) or not context.strip():
                raise located(path, f"data[{a}].paragraphs[{p}]: empty or missing context")
            for q, qa in enumerate(para.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                if not qa.get("question", "").strip() or "id" not in qa:
                    raise located(path, f"{where}: missing id or empty question")
                impossible = bool(qa.get("is_impossible", False))
                v2 = v2 or "is_impossible" in qa
                answers = qa.get("answers", [])
                for ans in answers:
                    start = ans.get("answer_start")
                    if not isinstance(start, int) or context[start:start + len(ans.get("text", ""))] != ans["text"]:
                        raise located(path, f"{where}: answer {ans.get('text')!r} is not at answer_start {start}")
                examples.append(SquadExample(str(qa["id"]), qa["question"].strip(), context, answers, impossible))
    if not examples:
        raise located(path, "no questions (the file is empty)")
    return examples, "2.0" if v2 else "1.1"


def squad_features(examples: list[SquadExample], tokenizer, max_len: int, stride: int,
                   max_query_len: int = 64) -> dict[str, np.ndarray]:
    """Tokenize question + context windows. Returns arrays for the model and, for decoding answers,
    `example_index` and `offsets` (character spans of context tokens, (-1, -1) elsewhere)."""
    questions = [tokenizer.convert_tokens_to_string(tokenizer.tokenize(e.question)[:max_query_len])
                 for e in examples]
    enc = tokenizer(questions, [e.context for e in examples], truncation="only_second", max_length=max_len,
                    stride=stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding="max_length")
    n = len(enc["input_ids"])
    starts, ends = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    offsets = np.full((n, max_len, 2), -1, dtype=np.int64)
    for i in range(n):
        ex = examples[enc["overflow_to_sample_mapping"][i]]
        seq_ids = enc.sequence_ids(i)
        for t, (s, e) in enumerate(enc["offset_mapping"][i]):
            if seq_ids[t] == 1:
                offsets[i, t] = (s, e)
        if ex.answers and not ex.is_impossible:
            a_start = ex.answers[0]["answer_start"]
            a_end = a_start + len(ex.answers[0]["text"])
            ctx = [t for t in range(max_len) if seq_ids[t] == 1]
            if offsets[i, ctx[0], 0] <= a_start and offsets[i, ctx[-1], 1] >= a_end:
                starts[i] = next(t for t in ctx if offsets[i, t, 1] > a_start)
                ends[i] = next(t for t in reversed(ctx) if offsets[i, t, 0] < a_end)
    return {"input_ids": np.asarray(enc["input_ids"], dtype=np.int64),
            "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int64),
            "token_type_ids": np.asarray(enc["token_type_ids"], dtype=np.int64),
            "start_positions": starts, "end_positions": ends,
            "example_index": np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64), "offsets": offsets}
