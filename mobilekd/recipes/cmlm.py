"""Fine-tune a BERT teacher as a conditional masked language model on (source, target) pairs: C-MLM's teacher step
(Chen et al. 2020, "Distilling Knowledge Learned in BERT for Text Generation", Section 3.1; the official
run_cmlm_finetuning.py, cmlm/data.py and cmlm/model.py in ChenRocks/Distill-BERT-Textgen).

    mobilekd cmlm --teacher runs/demo/teacher --task paraphrase --out runs/cmlm/paraphrase-teacher
    mobilekd cmlm --teacher T --task pairs --data my_pairs/ --out runs/cmlm/my-teacher       # your TSV/JSONL
    mobilekd seq2seq --task paraphrase --method cmlm --teacher runs/cmlm/paraphrase-teacher   # then the student

The teacher (a masked LM: `mobilekd train-teacher`'s OUT, the demo's adapted all-MiniLM-L6-v2 among them) reads
`[CLS] source [SEP] target [SEP]` with only the target masked (`mobilekd.data.cmlm`) and learns to fill it in; its
masked-LM decoder becomes an output layer of its own (`MobileBertForConditionalMLM`). After training, every dev
target position is predicted once with its neighbours visible (the soft targets' pass) and OUT/results.json
records the teacher's token accuracy and perplexity there: how well it knows what the student will be taught.
With --validation-fraction the teacher trains without a validation split carved from the training pairs and is
scored on it too (what a choice of its learning rate or epochs reads); given the same fraction and
--validation-seed, `mobilekd seq2seq` holds out the same pairs, so the students' validation split is one their
teacher never trained on.

Official settings and ours: AdamW with linear warm-up and decay and weight decay 0.01 off biases and LayerNorms, as
there (BertAdam / FusedAdam with `warmup_linear`); lr 5e-5 (the README's command); 10% warm-up (the script's
default; the README's run 5%); batches of 32 pairs where the official batches count 16,384 tokens on a GPU
cluster over 100,000 steps of IWSLT; epochs instead of steps (default 10 over a few thousand pairs); dropout as the
teacher's config has it (0.1). OUT holds the C-MLM teacher (config.json, model.safetensors, the tokenizer) and
results.json.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from mobilekd.data.cmlm import CMLMSplit, check_positions
from mobilekd.data.pairs import MAX_LEN, PAIR_TASKS, files_digest, load_pairs
from mobilekd.data.seq2seq import encode_pairs, encode_task
from mobilekd.data.tasks import BERT_LR, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import cli_entry, located
from mobilekd.fileio import write_json
from mobilekd.finetune.cmlm import cmlm_loss, copies_pass, pass_precision, teacher_score
from mobilekd.finetune.selection import VALIDATION, carve_pairs
from mobilekd.models.hf import load_config, load_pretrained, save_pretrained, saved_names
from mobilekd.models.kinds import require
from mobilekd.models.pretrained import model_dir
from mobilekd.flags import add_flags, take_flags
from mobilekd.train.common import add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.precision import describe
from mobilekd.train.task_training import (PairValidation, TaskTraining, add_task_flags, add_validation_flags,
                                          pair_validation, task_training)

LENGTHS = "per task: " + ", ".join(f"{task} {n}" for task, n in MAX_LEN.items()) + " word pieces a side"


@dataclass
class CmlmConfig:
    teacher: str = field(default=None, metadata={
        "required": True, "help": "a pre-trained masked LM (mobilekd train-teacher's OUT, or a transformers BERT "
                                  "with its MLM head) whose vocabulary the student will share"})
    training: TaskTraining = None  # the task, its data and the schedule (`add_task_flags`)
    validation: PairValidation = None  # the training pairs held out (`add_validation_flags`)


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `CmlmConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd cmlm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, CmlmConfig)
    add_task_flags(p, epochs=10, lr=BERT_LR, tasks=list(PAIR_TASKS), lengths=LENGTHS)
    add_validation_flags(p, reads="the teacher is scored")
    add_training_flags(p, out="runs/cmlm-teacher", batch_size=32, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    args.recipe = take_flags(CmlmConfig, args, training=task_training(args, MAX_LEN), validation=pair_validation(args))
    train_config(args)
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def load_masked_lm(path):
    """A pre-trained masked LM (ours, or a transformers BERT with its MLM head, e.g. BertForMaskedLM) as a C-MLM
    teacher to fine-tune, or a C-MLM teacher to go on with; and its tokenizer. The encoder and the MLM head's
    transform must be in the file; a tied decoder (none of its own in the file) starts the output layer from the
    word embeddings."""
    path = model_dir(path)
    require(path, "the C-MLM teacher starts from a BERT masked LM (mobilekd train-teacher's OUT)", "bert")
    _, head = load_config(path)
    if head not in ("pretraining", "cmlm"):
        raise located(path, f"holds a {head} model; the C-MLM teacher starts from a masked LM (mobilekd "
                            f"train-teacher's OUT)")
    names = saved_names(path)
    if "cls.predictions.transform.dense.weight" not in names:
        raise located(path / "model.safetensors", "has no masked-LM head (cls.predictions.transform): fit one with "
                                                  f"scripts/train_teacher.sh --init-from {path}")
    model = load_pretrained(path, "cmlm")
    if "cls.predictions.decoder.weight" not in names:
        model.start_output_layer()
    return model, load_tokenizer(path)


def run(args, accelerator):
    c, t, v = args.recipe, args.recipe.training, args.recipe.validation  # args: the training loop's
    start = time.time()
    task = load_pairs(t.task, t.data)
    model, tokenizer = load_masked_lm(c.teacher)
    check_positions(c.teacher, model.config.max_position_embeddings, t.max_len)
    train_pairs = training_subset(task.train, t.max_train_examples, t.subset_seed)
    carved = (carve_pairs(train_pairs, v.validation_seed, v.validation_fraction) if v.validation_fraction
              else None)
    train, train_pairs, dev, _ = encode_task(task, tokenizer, t.max_len, carved.train if carved else train_pairs)
    scored = {"dev": dev}  # dev first: the score the model card and the rows read
    if carved:
        scored[VALIDATION] = encode_pairs(carved.validation, tokenizer, t.max_len, task.user_file,
                                          f"{task.name} validation")[0]
        print(f"validation split: {len(scored[VALIDATION])} of {len(train) + len(scored[VALIDATION])} training pairs "
              f"held out ({carved.record['rule']})")
    split = CMLMSplit(train, tokenizer, args.seed)
    steps = t.steps(len(split), args.batch_size)
    stage = Stage(name="cmlm", steps=steps, loss=cmlm_loss, lr=t.lr, warmup=t.warmup)
    cfg = train_config(args, eval_every=0, run={
        "teacher": str(c.teacher), "task": task.name, "data": files_digest(task), "lr": t.lr, "max_len": t.max_len,
        "train_pairs": len(train), "subset_seed": t.subset_seed,
        **({"validation_fraction": v.validation_fraction, "validation_seed": v.validation_seed} if carved
           else {})})
    model.to(accelerator.device)
    summaries = run_plan([stage], model, split, cfg, accelerator, resume=args.resume)
    if accelerator.is_main_process:
        out = Path(args.out)
        save_pretrained(model, out, tokenizer, "cmlm")
        precision = pass_precision(model, dev, tokenizer, args.mixed_precision, cfg.precision_cache)
        metrics = {name: teacher_score(copies_pass(model, pairs, tokenizer, precision=precision["precision"]), pairs)
                   for name, pairs in scored.items()}
        for name, score in metrics.items():
            print(f"{task.name}: C-MLM teacher on {name} targets: token accuracy {score['token_accuracy']:.4f}, "
                  f"perplexity {score['perplexity']:.2f}")
        print(f"(its pass {describe(precision)}); in {out}")
        chosen_on = VALIDATION if carved else "dev"  # the score a choice of teacher reads
        write_json(out / "results.json", {
            "task": task.name, "method": "cmlm-teacher", "teacher": str(c.teacher), "metrics": metrics,
            "best_metric": "token_accuracy", "best_score": metrics[chosen_on]["token_accuracy"], "steps": steps,
            **({"validation_split": carved.record} if carved else {}),
            "train_pairs": len(train), "dev_pairs": len(dev), "max_len": t.max_len, "lr": t.lr,
            "score_precision": precision["precision"],
            "wall_seconds": wall_seconds(start, summaries),  # a resume's earlier ones too
            "training": summaries, "complete": True})


if __name__ == "__main__":
    main()
