"""What layer matching adds when the teacher is a transformers encoder of another architecture (issue 75, item 3).

No pre-trained RoBERTa, DeBERTa or ELECTRA can be installed here (no model hub), so the foreign teacher is built:
the demo's teacher body, all-MiniLM-L6-v2, fine-tuned on SST-2 by `mobilekd finetune` as a BERT classifier
(`teacher`), then copied weight for weight into transformers' RoBERTa layout (`teacher-roberta`, `to_roberta`):
RoBERTa's classification head is BERT's pooler and classifier (dense, tanh, out_proj on the first token), its
positions start after the padding id (the table shifted by one row) and its config keeps BERT's two token types.
The copy's logits equal the BERT's (the `roberta_parity` row), so the toolkit reads the same function through two
paths: its own BERT classes, or transformers' `AutoModel` (`mobilekd/models/foreign.py`).

The same randomly initialised TinyBERT-shaped student (`tinybert4_h156`, the shipped vocabulary: the teacher's)
then learns SST-2 three ways, seeds 0-2 declared here:
- `kd-roberta`: logit distillation from the RoBERTa copy (all a foreign teacher gave before this issue);
- `tinybert-roberta`: TinyBERT's intermediate step from the RoBERTa copy, then its prediction step: hidden states
  and attention probabilities through transformers' outputs, the attention term MobileBERT's KL (no scores there);
- `tinybert-bert`: the same from the BERT teacher through our classes, TinyBERT's own MSE on attention scores.
`tinybert-roberta - kd-roberta` is what layer matching gives a foreign teacher; `tinybert-roberta - tinybert-bert`
is what the departure (probabilities and KL for scores and MSE) costs.

    python -m benchmarks.foreign_layers                    # about 15 minutes on 2 cores; resumable
    python -m benchmarks.foreign_layers --table --write    # the table into docs/teachers.md from the rows

Every run: the same 8,000 SST-2 training examples (drawn once, `--subset-seed 0`), 64 tokens, its step chosen on a
validation split of them, dev scored once; the students in fp32 (the teachers' passes too), 3 epochs (TinyBERT: 3 of
the intermediate step, then 3 of the prediction step). Rows (docs/results/foreign_layers.json): each student's dev
and validation scores, the teacher's, TF-IDF + LR's on the same examples, the copy's parity, and the paired
intervals (mobilekd/finetune/intervals.py) of the two differences.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import baseline_rows, finetune_rows, paired_runs
from benchmarks.runner import Job
from benchmarks.stats import values, paired_cells
from benchmarks.teacher_value import STUDENT_LR, TEACHER_LR
from mobilekd.fileio import REPO_ROOT, read_json, write_json

TASK = "sst2"
STUDENT = "tinybert4_h156"
DATA = ["--task", TASK, "--max-train-examples", "8000", "--subset-seed", "0", "--max-len", "64",
        "--select-on", "validation", "--threads", "1", "--resume"]
TEACHER = ["--model", "all-minilm-l6-v2", *DATA, "--epochs", "2", "--lr", TEACHER_LR, "--seed", "0"]
# fp32 throughout: a BERT teacher's store pass would take bf16 where this host's probe chose it, a foreign one's
# stays fp32, and the pair must differ in the attention term alone
STUDENTS = [*DATA, "--epochs", "3", "--lr", STUDENT_LR, "--mixed-precision", "no"]
METHODS = {"kd-roberta": ("kd", "teacher-roberta"), "tinybert-roberta": ("tinybert", "teacher-roberta"),
           "tinybert-bert": ("tinybert", "teacher")}
PAIRS = (("tinybert-roberta", "kd-roberta"), ("tinybert-roberta", "tinybert-bert"))
PARITY_EXAMPLES = 256  # dev sentences the copy's logits are compared on


def to_roberta(bert_dir: Path, out: Path) -> float:
    """Copy a BERT sequence classifier (transformers' layout, as `mobilekd finetune` saves it) into
    `RobertaForSequenceClassification`, the same function: encoder weights by name; RoBERTa's positions count from
    padding id + 1 (transformers' `create_position_ids_from_input_ids`), so the position table gains one row in
    front; two token types kept; BERT's pooler (dense + tanh) and classifier become RoBERTa's classification head
    (`RobertaClassificationHead`: dense, tanh, out_proj on the first token). Returns the largest logit difference
    over PARITY_EXAMPLES dev sentences; the copy is written only when it is within 1e-4."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification, RobertaConfig, \
        RobertaForSequenceClassification

    from mobilekd.data.tasks import load_task, task_data

    bert = BertForSequenceClassification.from_pretrained(bert_dir, use_safetensors=True).eval()
    c = bert.config
    config = RobertaConfig(**{**c.to_dict(), "model_type": "roberta", "architectures": None,
                              "max_position_embeddings": c.max_position_embeddings + c.pad_token_id + 1})
    roberta = RobertaForSequenceClassification(config).eval()
    state = {k.replace("bert.", "roberta.", 1): v for k, v in bert.state_dict().items()
             if k.startswith("bert.") and ".pooler." not in k}
    pos = state["roberta.embeddings.position_embeddings.weight"]
    state["roberta.embeddings.position_embeddings.weight"] = torch.cat([pos.new_zeros(c.pad_token_id + 1, pos.shape[1]),
                                                                        pos])
    state.update({"classifier.dense.weight": bert.bert.pooler.dense.weight,
                  "classifier.dense.bias": bert.bert.pooler.dense.bias,
                  "classifier.out_proj.weight": bert.classifier.weight,
                  "classifier.out_proj.bias": bert.classifier.bias})
    missing, unexpected = roberta.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if "position_ids" not in k]:
        raise RuntimeError(f"the RoBERTa copy misses {missing} and leaves {unexpected}")
    tokenizer = AutoTokenizer.from_pretrained(bert_dir)
    dev = next(iter(load_task(TASK, task_data(TASK)).dev.values()))[:PARITY_EXAMPLES]
    enc = tokenizer([e.text_a for e in dev], truncation=True, max_length=64, padding=True, return_tensors="pt")
    with torch.no_grad():
        gap = float((bert(**enc).logits - roberta(**enc).logits).abs().max())
    if gap > 1e-4:
        raise RuntimeError(f"the RoBERTa copy's logits differ from the BERT's by {gap:.2e}")
    roberta.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(out / "parity.json", {"max_logit_difference": gap, "examples": len(dev)})
    return gap


def jobs(out: Path, seeds: list[int]) -> list[Job]:
    """The teacher and the start; once the teacher is done, its RoBERTa copy (made here, in seconds) and the
    students' runs."""
    teacher, start = out / "teacher", out / "start"
    plan = [Job("teacher", ["finetune", *TEACHER, "--out", str(teacher)], teacher),
            Job("start", ["init", STUDENT, str(start), "--seed", "0"], start)]
    if not plan[0].done():
        return plan
    if not (out / "teacher-roberta" / "parity.json").is_file():
        to_roberta(teacher, out / "teacher-roberta")
    return plan + [Job(f"{m}/{seed}", ["finetune", "--model", str(start), "--teacher", str(out / source),
                                       "--method", method, *STUDENTS, "--seed", str(seed),
                                       "--out", str(out / TASK / m / f"seed{seed}")],
                       out / TASK / m / f"seed{seed}", needs=["start"])
                   for seed in seeds for m, (method, source) in METHODS.items()]


def rows(out: Path, seeds: list[int]) -> list[dict]:
    found = finetune_rows(out / "teacher", task=TASK, method="teacher", seed=0)
    # the bag-of-words baseline each run fits on the same training examples (the teacher's, seed 0)
    found += baseline_rows(out / "teacher", TASK, 0, "accuracy")
    if (out / "teacher-roberta" / "parity.json").is_file():
        p = read_json(out / "teacher-roberta" / "parity.json")
        found.append({"task": TASK, "method": "roberta_parity", "seed": 0, "metric": "max_logit_difference",
                      "value": p["max_logit_difference"], "examples": p["examples"]})
    return found + paired_runs(out, TASK, seeds, list(METHODS), PAIRS)


def table(results: list[dict]) -> str:
    metric = "accuracy"
    if not values(results, TASK, metric, "kd-roberta"):
        return "(no rows yet)\n"
    cells = paired_cells(results, TASK, metric, ("teacher", "tfidf", *METHODS), PAIRS)
    parity = [r for r in results if r["method"] == "roberta_parity"]
    seeds = sorted({r["seed"] for r in results if r["method"] == "kd-roberta" and r["metric"] == metric})
    return "\n".join([
        "| task (metric) | teacher (BERT; its RoBERTa copy) | TF-IDF + LR | KD from the RoBERTa copy | TinyBERT from "
        "the RoBERTa copy | TinyBERT from the BERT | TinyBERT - KD (RoBERTa) | TinyBERT: RoBERTa copy - BERT |",
        "|---|---|---|---|---|---|---|---|",
        f"| {TASK} ({metric}) | " + " | ".join(cells) + " |"]) + (
        f"\n\nSeeds {', '.join(map(str, seeds))}; the student `{STUDENT}`, started at random; dev scored once per "
        "model. Differences in points with their paired 95% bootstrap intervals over dev examples and seeds "
        "(mobilekd/finetune/intervals.py)." + (f" The RoBERTa copy's logits differ from the BERT's by at most "
                                        f"{parity[0]['value']:.1e} on {parity[0]['examples']} dev sentences."
                                        if parity else "") + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.foreign_layers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/foreign_layers", "docs/results/foreign_layers.json")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    order = ["teacher", "tfidf", "roberta_parity", *METHODS]
    return comparison(args, lambda: jobs(out, args.seeds), lambda: rows(out, args.seeds),
                      lambda r: (order.index(r["method"]) if r["method"] in order else len(order), r["method"],
                                 r.get("seed") or 0, r["metric"]), table)


if __name__ == "__main__":
    sys.exit(main())
