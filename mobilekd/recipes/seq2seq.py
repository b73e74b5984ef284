"""Train a small Transformer encoder-decoder on (source, target) pairs, with cross-entropy alone or with C-MLM's
word-level distillation from a C-MLM teacher (Chen et al. 2020, Section 3.2; the official student is
Distill-BERT-Textgen-ONMT's `BertKDLossCompute`), and score its dev generations against copying the source.

    mobilekd seq2seq --task paraphrase --method ce --out runs/cmlm/paraphrase-ce
    mobilekd seq2seq --task paraphrase --method cmlm --teacher runs/cmlm/paraphrase-teacher --out runs/cmlm/p-kd
    mobilekd seq2seq --task pairs --data my_pairs/ --method cmlm --teacher T --out runs/cmlm/mine

The student (`mobilekd.models.seq2seq`, a preset's shape) shares the teacher's WordPiece vocabulary: with --method
cmlm its tokenizer is the teacher's, with --method ce the shipped bert-base-uncased one unless --tokenizer names
another. Its loss per target token is (1 - alpha) x label-smoothed cross-entropy + alpha x the cross-entropy
against the teacher's top-k distribution at temperature T (`seq2seq_loss`); the teacher's top-k over the training
targets is computed once and cached in the teacher's directory (`mobilekd.finetune.cmlm.soft_targets`);
`--soft-targets-only` computes them alone (no student), for students of several seeds or alphas to read, and with
`--soft-targets-share I/N` one N-th of them, for N processes side by side.

Official settings and ours: alpha 0.5, T 10, top 8, label smoothing 0.1; dropout 0.1 (the official 0.3 is for
Transformer base on IWSLT); the loop's AdamW (betas 0.9 and 0.999, weight decay 0.01 off biases and LayerNorms)
where OpenNMT-py runs Adam(0.9, 0.98) without decay; a linear warm-up (default 10% of the steps) and a linear decay
where OpenNMT-py's noam schedule decays as 1/sqrt(step) (a peak of about 1e-3 for the official d_model 512, lr 2 and
8,000 warm-up steps: our default peak); batches of 32 pairs where the official counts 6,144 tokens; epochs where the
official counts steps. The model kept is the last, not one picked on dev. Dev generations are greedy at every
evaluation, and beam search (--beam, GNMT's length penalty at 0.6, as the official run_mt.sh) at the end. With
--validation-fraction, the evaluations read a validation split carved from the training pairs instead
(`carve_pairs`; its greedy and beam scores are what a choice of alpha, epochs or beam reads), and dev is scored
once, after training (the selection protocol, `mobilekd.finetune.selection`).

OUT holds the student (seq2seq.json, model.safetensors, the tokenizer), dev_generations.jsonl (greedy) and
dev_generations_beam.jsonl (validation_generations.jsonl with a validation split), history.json, and results.json:
greedy and beam BLEU / chrF (sacrebleu), copying's, steps, seconds.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mobilekd.data.cmlm import check_positions
from mobilekd.data.pairs import MAX_LEN, PAIR_TASKS, files_digest, load_pairs
from mobilekd.data.seq2seq import encode_pairs, encode_task
from mobilekd.data.tasks import training_subset
from mobilekd.data.tokenizer import DEFAULT_VOCAB, load_tokenizer
from mobilekd.errors import UserError, cli_entry, located
from mobilekd.fileio import file_digest, read_json, write_json
from mobilekd.finetune.cmlm import TOPK, pass_precision, soft_targets
from mobilekd.finetune.generation import GenerationEvaluator, copies, generate, references, scores, \
    write_generations
from mobilekd.finetune.objective import LABEL_SMOOTHING, CMLMDistillation, seq2seq_loss
from mobilekd.finetune.selection import VALIDATION, carve_pairs
from mobilekd.flags import add_flags, take_flags
from mobilekd.models.hf import load_config, load_pretrained
from mobilekd.models.kinds import require
from mobilekd.models.seq2seq import SEQ2SEQ_PRESETS, new_seq2seq, save_seq2seq
from mobilekd.models.word_table import teacher_table
from mobilekd.recipes.cmlm import LENGTHS
from mobilekd.train.common import PRECISION_FILE, add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.precision import describe
from mobilekd.train.task_training import (PairValidation, TaskTraining, add_task_flags, add_validation_flags,
                                          pair_validation, task_training)

DEFAULT_KD = CMLMDistillation()
BEAM = 5


@dataclass
class Seq2SeqConfig:
    preset: str = field(default="seq2seq_tiny", metadata={
        "choices": list(SEQ2SEQ_PRESETS), "default_help": "seq2seq_tiny: 2 + 2 layers of 256",
        "help": "the student's shape"})
    method: str = field(default="cmlm", metadata={
        "choices": ["ce", "cmlm"], "help": "cmlm: label-smoothed CE mixed with C-MLM distillation from --teacher; "
                                           "ce: the targets alone"})
    teacher: str | None = field(default=None, metadata={
        "default_help": "none", "help": "with --method cmlm: a C-MLM teacher (mobilekd cmlm's OUT) fine-tuned on "
                                        "these pairs"})
    tokenizer: str | None = field(default=None, metadata={
        "default_help": f"{DEFAULT_VOCAB.name}, bert-base-uncased's", "help": "with --method ce: the vocabulary"})
    init_embeddings: str | None = field(default=None, metadata={
        "metavar": "BERT_DIR", "default_help": "random",
        "help": "start the student's word table from this BERT model's (its vocabulary must be the student's), "
                "projected onto the table's width by its principal components"})
    alpha: float = field(default=DEFAULT_KD.alpha, metadata={
        "default_help": f"{DEFAULT_KD.alpha}, the official --kd_alpha", "help": "the distillation term's weight"})
    temperature: float = field(default=DEFAULT_KD.temperature, metadata={
        "above": 0, "default_help": f"{DEFAULT_KD.temperature:g}, --kd_temperature",
        "help": "the teacher's temperature"})
    topk: int = field(default=TOPK, metadata={"min": 1, "default_help": f"{TOPK}, --kd_topk",
                                              "help": "the teacher's top-k kept"})
    label_smoothing: float = field(default=LABEL_SMOOTHING, metadata={"help": "label smoothing of the CE term"})
    eval_every: int = field(default=0, metadata={
        "min": 0, "default_help": "0: once, at the end",
        "help": "decode dev greedily every N steps, into history.json"})
    beam: int = field(default=BEAM, metadata={
        "min": 1, "help": "beam size of the final dev decoding (1: greedy only)"})
    soft_targets_only: bool = field(default=False, metadata={
        "help": "with --method cmlm: compute the teacher's soft targets over the training pairs, cache them in the "
                "teacher's directory and stop (no student): students of every seed and alpha then read them from "
                "the cache, and a plan runs this as soon as the teacher exists"})
    soft_targets_share: str | None = field(default=None, metadata={
        "metavar": "I/N", "default_help": "the whole pass",
        "help": "with --soft-targets-only: share I of N of the teacher's pass alone (every N-th batch), for N "
                "processes to run side by side; the first student to read the soft targets puts the N shares "
                "together"})
    training: TaskTraining = None  # the task, its data and the schedule (`add_task_flags`)
    validation: PairValidation = None  # the training pairs held out (`add_validation_flags`)


def share(text: str) -> tuple[int, int]:
    """--soft-targets-share I/N as (i, n), i 0-based; refused in one line unless 1 <= I <= N."""
    found = re.fullmatch(r"(\d+)/(\d+)", text)
    if not found or not 1 <= int(found[1]) <= int(found[2]):
        raise UserError(f"--soft-targets-share takes I/N with 1 <= I <= N (such as 1/2), got {text!r}")
    return int(found[1]) - 1, int(found[2])


def teacher_split(teacher) -> dict | None:
    """The validation split a C-MLM teacher held out (its results.json's record), or None: trained on every pair."""
    path = Path(teacher) / "results.json"
    return read_json(path).get("validation_split") if path.is_file() else None


def check_teacher_split(teacher, carved) -> None:
    """A student's validation split must be the pairs its C-MLM teacher held out too: otherwise the teacher trained
    on pairs the student's choices are scored on, and its soft targets carry them (refused in one line)."""
    held = teacher_split(teacher)
    if held != carved.record:
        fix = (f"pass --validation-seed {held['seed']} --validation-fraction {held['fraction']} (the teacher's), or "
               f"train a teacher with this split" if held else "train the teacher with --validation-fraction too")
        raise located(Path(teacher) / "results.json", f"the teacher held out {'no pairs' if held is None else held}, "
                                                      f"not this student's validation split ({carved.record}): {fix}")


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `Seq2SeqConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd seq2seq", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_task_flags(p, epochs=20, lr=1e-3, tasks=list(PAIR_TASKS), lengths=LENGTHS)
    add_flags(p, Seq2SeqConfig)
    add_validation_flags(p, reads="every evaluation and the final scores a choice reads (alpha, epochs, beam) are")
    add_training_flags(p, out="runs/seq2seq", batch_size=32, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    if args.method == "cmlm" and args.teacher and args.validation_fraction and args.validation_seed is None:
        args.validation_seed = (teacher_split(args.teacher) or {}).get("seed")  # its held-out pairs, by default
    c = take_flags(Seq2SeqConfig, args, training=task_training(args, MAX_LEN), validation=pair_validation(args))
    if c.method == "cmlm" and not c.teacher:
        raise UserError("--method cmlm needs --teacher (a C-MLM teacher: mobilekd cmlm's OUT)")
    if c.method == "ce" and c.teacher:
        raise UserError("--teacher is for --method cmlm")
    if c.soft_targets_only and c.method != "cmlm":
        raise UserError("--soft-targets-only needs --method cmlm (the soft targets are a C-MLM teacher's)")
    if c.soft_targets_share is not None:
        if not c.soft_targets_only:
            raise UserError("--soft-targets-share needs --soft-targets-only")
        share(c.soft_targets_share)
    if c.method == "cmlm" and c.tokenizer:
        raise UserError("--tokenizer is for --method ce (with --method cmlm the student reads the teacher's)")
    for flag, value in (("--alpha", c.alpha), ("--label-smoothing", c.label_smoothing)):
        if not 0 <= value <= 1:
            raise UserError(f"{flag} must lie in [0, 1], got {value}")
    train_config(args)
    args.recipe = c
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def load_cmlm_teacher(path):
    require(path, "the teacher is a C-MLM teacher (mobilekd cmlm's OUT)", "bert")
    _, head = load_config(path)
    if head != "cmlm":
        raise located(path, f"holds a {head} model, not a C-MLM teacher: fine-tune one with mobilekd cmlm")
    return load_pretrained(path, "cmlm", require_head=True).eval(), load_tokenizer(path)


def start_table(model, bert_dir, tokenizer) -> None:
    """The student's shared word table from `bert_dir`'s (`teacher_table`), scaled to the student's own
    initial scale (each entry's std width^-1/2, so that x sqrt(width) gives unit variance as at random start)."""
    _, head = load_config(bert_dir)
    bert = load_pretrained(bert_dir, head)
    if load_tokenizer(bert_dir).get_vocab() != tokenizer.get_vocab():
        raise located(bert_dir, "has another vocabulary than the student's tokenizer: --init-embeddings needs the same "
                                "word pieces")
    table = teacher_table(bert, model.config.width)
    with torch.no_grad():
        model.embeddings.weight.copy_(table * (model.config.width ** -0.5 / table.std()))


def run(args, accelerator):
    c, t, v = args.recipe, args.recipe.training, args.recipe.validation  # args: the training loop's
    start = time.time()
    task = load_pairs(t.task, t.data)
    teacher = None
    if c.method == "cmlm":
        teacher, tokenizer = load_cmlm_teacher(c.teacher)
        check_positions(c.teacher, teacher.config.max_position_embeddings, t.max_len)
        teacher.to(accelerator.device)
    else:
        tokenizer = load_tokenizer(c.tokenizer or DEFAULT_VOCAB)
    train_pairs = training_subset(task.train, t.max_train_examples, t.subset_seed)
    carved = (carve_pairs(train_pairs, v.validation_seed, v.validation_fraction) if v.validation_fraction
              else None)
    if carved and c.method == "cmlm":
        check_teacher_split(c.teacher, carved)
    train, train_pairs, dev, dev_pairs = encode_task(task, tokenizer, t.max_len,
                                                     carved.train if carved else train_pairs)
    if carved:  # what every evaluation reads; dev is scored once, after training
        held, held_pairs = encode_pairs(carved.validation, tokenizer, t.max_len, task.user_file,
                                        f"{task.name} validation")
        print(f"validation split: {len(held)} of {len(train) + len(held)} training pairs held out "
              f"({carved.record['rule']}); dev is read once, after training")
    kd, soft_seconds, soft_precision = None, None, None
    if teacher is not None:
        soft_precision = pass_precision(teacher, train, tokenizer, args.mixed_precision,
                                        Path(args.cache_dir) / PRECISION_FILE)
        shard = share(c.soft_targets_share) if c.soft_targets_share else None
        found, cached, soft_seconds = soft_targets(c.teacher, teacher, train, tokenizer, c.topk,
                                                   soft_precision["precision"], shard)
        if shard is None:
            train.arrays.update(found)
        print(f"C-MLM soft targets over {len(found['pairs']) if shard else len(train)} training pairs"
              + (f" (share {c.soft_targets_share})" if shard else "") + ": "
              + ("from the cache" if cached else "computed and cached") +
              f"; the teacher's pass {describe(soft_precision)}")
        kd = CMLMDistillation(c.alpha, c.temperature)
        del teacher
        if c.soft_targets_only:  # the teacher's part alone: OUT records what it cost
            if accelerator.is_main_process:
                write_json(Path(args.out) / "results.json", {
                    "task": task.name, "data": t.data, "method": "soft-targets", "teacher": c.teacher,
                    "train_pairs": len(train), **({"share": c.soft_targets_share, "share_pairs": len(found["pairs"])}
                                                  if shard else {}),
                    "max_len": t.max_len, "cached_before": cached,
                    "soft_target_seconds": soft_seconds, "soft_target_precision": soft_precision["precision"],
                    "wall_seconds": round(time.time() - start, 1), "complete": True})
            return
    model = new_seq2seq(c.preset, tokenizer, max_positions=t.max_len + 1)
    if c.init_embeddings:
        start_table(model, c.init_embeddings, tokenizer)
    model.to(accelerator.device)
    steps = t.steps(len(train), args.batch_size)
    stage = Stage(name="seq2seq", steps=steps, loss=seq2seq_loss(kd, c.label_smoothing), lr=t.lr,
                  warmup=t.warmup)
    cfg = train_config(args, eval_every=c.eval_every, run={
        "task": task.name, "data": files_digest(task), "method": c.method, "teacher": str(c.teacher),
        "teacher_weights": file_digest(Path(c.teacher) / "model.safetensors") if c.teacher else None,
        "preset": c.preset,
        "init_embeddings": c.init_embeddings,
        "alpha": c.alpha, "temperature": c.temperature, "topk": c.topk, "lr": t.lr,
        "label_smoothing": c.label_smoothing, "max_len": t.max_len, "train_pairs": len(train),
        "subset_seed": t.subset_seed, "validation_fraction": v.validation_fraction or None,
        **({"validation_seed": v.validation_seed} if v.validation_seed != args.seed else {})})
    out = Path(args.out)
    evaluator = (GenerationEvaluator(held, held_pairs, out, tokenizer, t.max_len, save_seq2seq, VALIDATION)
                 if carved else GenerationEvaluator(dev, dev_pairs, out, tokenizer, t.max_len, save_seq2seq))
    extra = {"task": task.name, "data": t.data, "method": c.method, "teacher": c.teacher, "preset": c.preset,
             "init_embeddings": c.init_embeddings,
             "params": sum(p.numel() for p in model.parameters()), "steps": steps, "train_pairs": len(train),
             "dev_pairs": len(dev), "max_len": t.max_len, "lr": t.lr,
             "evaluated_on": VALIDATION if carved else "dev", **({"validation_split": carved.record} if carved else {}),
             **({"alpha": c.alpha, "temperature": c.temperature, "topk": c.topk} if kd else {})}

    def on_eval(m, step):
        return evaluator(m, step, {**extra, "wall_seconds": round(time.time() - start, 1)})

    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume, on_eval=on_eval)
    if accelerator.is_main_process:
        result = read_json(out / "results.json")
        refs = references(tokenizer, dev)
        if carved:  # the last model, chosen by nothing that read dev: dev scored once, greedy, and put first among
            # the splits not held out, the one `rundir.dev_scores` (the model card, the rows) reads
            hyps = generate(model, dev, tokenizer, t.max_len)
            result["metrics"] = {"dev": scores(hyps, refs), **result["metrics"]}
            write_generations(out / "dev_generations.jsonl", dev_pairs, refs, hyps)
            if c.beam > 1:  # the beam's score where a choice of beam size reads it
                result["metrics"][f"{VALIDATION}_beam"] = scores(
                    generate(model, held, tokenizer, t.max_len, beam=c.beam), references(tokenizer, held))
        result["metrics"]["dev_copy"] = scores(copies(tokenizer, dev), refs)
        if c.beam > 1:
            hyps = generate(model, dev, tokenizer, t.max_len, beam=c.beam)
            result["metrics"]["dev_beam"] = scores(hyps, refs)
            write_generations(out / "dev_generations_beam.jsonl", dev_pairs, refs, hyps)
        # soft_target_seconds: the teacher's pass over the training pairs, whichever run computed the cache (the
        # teacher's cost); the training loop's own seconds, whole across resumes, are the summaries'
        result.update(wall_seconds=wall_seconds(start, summaries),
                      soft_target_seconds=soft_seconds,
                      soft_target_precision=soft_precision and soft_precision["precision"], beam=c.beam,
                      training=summaries, complete=True)
        write_json(out / "results.json", result)
        m = result["metrics"]
        print(f"{task.name}: dev BLEU greedy {m['dev']['bleu']:.2f}" +
              (f", beam {c.beam} {m['dev_beam']['bleu']:.2f}" if c.beam > 1 else "") +
              f"; copying the source {m['dev_copy']['bleu']:.2f}; student in {out}")


if __name__ == "__main__":
    main()
