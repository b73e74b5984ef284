"""Distil a fine-tuned teacher into a single-layer BiLSTM (Tang et al. 2019, "Distilling Task-Specific Knowledge
from BERT into Simple Neural Networks"): the student of `mobilekd.models.bilstm` (siamese for sentence pairs),
trained on alpha x CE + (1 - alpha) x the squared distance of its logits to the teacher's, over a transfer set of
the training examples and their masked / POS-replaced / n-gram-sampled copies (`mobilekd.data.transfer_set`).

    mobilekd bilstm --teacher runs/sst2-teacher --task sst2 --out runs/sst2-bilstm              # + logit KD
    mobilekd bilstm --teacher T --task sst2 --augment 20 --out runs/sst2-bilstm-aug             # + transfer set
    mobilekd bilstm --teacher T --task mrpc --loss ce --out runs/mrpc-bilstm-ce                 # labels only
    mobilekd export --model runs/sst2-bilstm --max-len 64                                       # the .tflite

The teacher (a model fine-tuned on --task, `mobilekd finetune`'s OUT: a classifier, or STS-B's regressor) gives the
vocabulary and tokenizer, the starting embedding table (word2vec cannot be downloaded here) and, with --loss kd, the
logits over every transfer-set example (computed once and cached beside it). The distillation term is the squared
distance of the logits divided by the number of classes, as distill_birnn.py's `nn.MSELoss()` averages it. The CE
term reads the gold label of a training example and the teacher's argmax for a new sample, which carries no label of
its own (a one-word n-gram of a positive review is not positive; the official join_logits.py labels every row by the
teacher's argmax), so --augment needs --loss kd.

A regression task (STS-B) is ours, not the paper's (its tasks are SST-2, MNLI and QQP): the student has one output,
the CE term is the squared error to the gold score of a training example and to the teacher's score for a new
sample (a copied score would misdescribe a changed pair: on STS-B's augmented set, a student fitting copied scores
reached 0.37 dev Pearson against 0.74 fitting the teacher's, docs/quality.md), and the distillation term the
squared distance of the two scores.

The official code's settings, and where ours differ: one LSTM layer of 150 units per direction and a 200-unit ReLU
classifier with dropout 0.1 (confs/birnn_sst2.json); batch 50; alpha: the official loss is CE + MSE with weights 1
and 1 (base.json), i.e. alpha 0.5 up to a factor 2. Adadelta (rho 0.95) is replaced by AdamW at 1e-3 with a linear
decay, the optimizer our loop has; the default is 10 epochs, not the configs' 30 (a transfer set is 10-20 times the
training set); and the model kept is the last one, not the best epoch on dev (dev picks nothing here). With
--select-on validation (as `mobilekd ship`'s trials run it) a validation split is carved from the training examples
before the transfer set is made of the rest (`mobilekd.finetune.selection.carve`, as `mobilekd finetune` carves it
from the same examples: the same with no --max-train-examples, as ship's trials run it; this recipe's --subset-seed
defaults to 0, finetune's to --seed), the evaluations read it and keep the best model, and dev is scored once,
after (or never, --skip-dev). OUT holds the model (bilstm.json, model.safetensors, the tokenizer) and results.json,
as `mobilekd finetune` writes it.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from mobilekd.data.tasks import encode_classification, load_task, task_data, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.data.transfer_set import N_ITER, P_MASK, P_NG, P_POS, cached_transfer_set
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import read_json, timed, write_json
from mobilekd.finetune.evaluation import DevEvaluator, fine_tuned_classifier, score_once
from mobilekd.finetune.objective import Distillation, task_loss
from mobilekd.finetune.selection import CAP, FRACTION, VALIDATION, carve
from mobilekd.finetune.teacher_outputs import outputs_precision, teacher_outputs
from mobilekd.flags import add_flags, flag_values, take_flags
from mobilekd.models.bilstm import BiLSTMConfig, from_teacher, save_bilstm
from mobilekd.rundir import teacher_record
from mobilekd.train.common import PRECISION_FILE, add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.precision import describe, pass_flag, pass_setting
from mobilekd.train.task_training import TaskTraining, add_task_flags, task_training

# the CE term's weight: Tang et al.'s base.json weighs CE and MSE 1 and 1 (alpha 0.5 up to a factor 2); equal to
# Distillation's default for logit KD by coincidence, not taken from it
KD_ALPHA = 0.5


@dataclass
class BiLSTMRecipeConfig:
    teacher: str = field(default=None, metadata={
        "required": True, "help": "a model fine-tuned on --task (mobilekd finetune's OUT)"})
    regression: bool = field(default=False, metadata={"help": "custom task: numeric labels"})
    loss: str = field(default="kd", metadata={
        "choices": ["kd", "ce"], "help": "kd: alpha x CE + (1 - alpha) x the mean squared difference of the logits "
                                         "to the teacher's; ce: the labels alone"})
    alpha: float = field(default=KD_ALPHA, metadata={"help": "with --loss kd: the CE term's weight"})
    augment: int = field(default=0, metadata={
        "min": 0, "default_help": "0: the training examples alone",
        "help": f"transfer set: up to N new samples per training example (the paper's N: {N_ITER})"})
    augment_seed: int = field(default=0, metadata={"min": 0, "help": "the transfer set's seed"})
    p_mask: float = field(default=P_MASK, metadata={"help": "masking probability per word"})
    p_pos: float = field(default=P_POS, metadata={"help": "POS-guided replacement probability per word"})
    p_ng: float = field(default=P_NG, metadata={"help": "n-gram sampling probability per sample"})
    embedding_size: int | None = field(default=None, metadata={
        "type": int, "min": 1, "default_help": "the teacher's width, its table as it is",
        "help": "embedding width: the teacher's table projected onto this many principal components"})
    select_on: str = field(default="none", metadata={
        "choices": ["none", "validation"],
        "help": "none: the last step's model, all of the training examples, dev scored once; validation: a split "
                "carved from the training examples picks the best evaluation's model"})
    validation_fraction: float = field(default=FRACTION, metadata={
        "help": f"with --select-on validation: the share of training examples held out (at most {CAP:,})"})
    eval_every: int | None = field(default=None, metadata={
        "type": int, "min": 1, "default_help": "once per epoch of the transfer set",
        "help": "with --select-on validation: evaluate every N steps"})
    skip_dev: bool = field(default=False, metadata={
        "help": "never read dev (a search's trial, scored later, once, if chosen: finetune --eval-only)"})
    sizes: dict = field(default_factory=dict)  # the student's shape: BiLSTMConfig's flagged fields
    training: TaskTraining = None  # the task, its data and the schedule (`add_task_flags`)


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `BiLSTMRecipeConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd bilstm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, BiLSTMRecipeConfig)
    add_task_flags(p, epochs=10, lr=1e-3, warmup=0.0, what="transfer-set")
    add_flags(p, BiLSTMConfig)  # --hidden-size, --classifier-size, --pooling, --dropout
    add_training_flags(p, out="runs/bilstm", batch_size=50, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    c = take_flags(BiLSTMRecipeConfig, args, sizes=flag_values(BiLSTMConfig, args), training=task_training(args))
    if c.augment and c.loss == "ce":
        raise UserError("--augment needs --loss kd: the transfer set's new samples are labelled by the teacher")
    for flag, value in (("--alpha", c.alpha), ("--p-mask", c.p_mask), ("--p-pos", c.p_pos), ("--p-ng", c.p_ng),
                        ("--dropout", c.sizes["dropout"])):
        if not 0 <= value <= 1:
            raise UserError(f"{flag} must lie in [0, 1], got {value}")
    if not 0 < c.validation_fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1, got {c.validation_fraction}")
    if c.skip_dev and c.select_on != "validation":
        raise UserError("--skip-dev needs --select-on validation: without it nothing is chosen and dev is the score")
    if c.p_mask + c.p_pos > 1:
        raise UserError(f"--p-mask + --p-pos must be at most 1, got {c.p_mask + c.p_pos}")
    train_config(args)  # bad training flags are refused before any work
    args.recipe = c
    return args


def transfer_labels(task, labels, teacher_logits, originals: int):
    """The training targets: the first `originals` examples' gold labels, then for each new sample the teacher's
    class (its argmax, as the official join_logits.py) or, on a regression task, its score."""
    new = teacher_logits[originals:]
    labels = labels.copy()
    labels[originals:] = new[:, 0] if task.is_regression else new.argmax(-1)
    return labels


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    c, t = args.recipe, args.recipe.training  # the recipe's settings; args holds the training loop's
    start = time.time()
    data = task_data(t.task, t.data)
    task = load_task(t.task, data, regression=c.regression)
    teacher = fine_tuned_classifier(c.teacher, task, "teacher").to(accelerator.device).eval()
    tokenizer = load_tokenizer(c.teacher)
    examples = training_subset(task.train, t.max_train_examples, t.subset_seed)
    carved = carve(task, examples, args.seed, c.validation_fraction) if c.select_on == "validation" else None
    if carved:  # held out before the transfer set is made, so no copy of a validation example trains
        examples = carved.train
        print(f"validation split: {carved.record['size']} of {carved.record['size'] + carved.record['train_size']} "
              f"training examples held out ({carved.record['rule']})" +
              ("; dev is never read (--skip-dev)" if c.skip_dev else "; dev is read once, after training"))
    originals, shared = len(examples), {}  # shared: the transfer set's and outputs' records (`Made.record`)
    if c.augment:
        (examples, made), got = timed(lambda: cached_transfer_set(
            examples, c.augment, c.augment_seed, Path(args.cache_dir), p_mask=c.p_mask, p_pos=c.p_pos,
            p_ng=c.p_ng))
        shared = made.record(got)
        print(f"transfer set: {originals} -> {len(examples)} examples" + (" (cached)" if made.cached else ""))
    train = encode_classification(task, examples, tokenizer, t.max_len)
    kd, outputs_pass = None, None
    if c.loss == "kd":
        outputs_pass = outputs_precision(teacher, train, pass_flag(args, "teacher_outputs_precision"),
                                         Path(args.cache_dir) / PRECISION_FILE, with_cls=False)
        (outputs, made), got = timed(lambda: teacher_outputs(c.teacher, teacher, train, with_cls=False,
                                                             precision=outputs_pass["precision"]))
        shared = {**shared, **made.record(got, "outputs")}
        train.arrays["teacher_logits"] = outputs["teacher_logits"]
        train.arrays["labels"] = transfer_labels(task, train.arrays["labels"], outputs["teacher_logits"], originals)
        print(f"teacher logits over {len(train)} examples: " +
              ("from the cache" if made.cached else "computed and cached") +
              f"; the teacher's pass {describe(outputs_pass)}")
        kd = Distillation(alpha=c.alpha, logits="mse")
    pair = examples[0].text_b is not None
    model = from_teacher(teacher.cpu(), tokenizer, pair, task.id2label, c.embedding_size,
                         **c.sizes)
    del teacher
    model.to(accelerator.device)
    steps = t.steps(len(train), args.batch_size)
    stage = Stage(name="bilstm", steps=steps, loss=task_loss(task, None, kd), lr=t.lr, warmup=t.warmup)
    per_epoch = math.ceil(len(train) / args.batch_size)
    cfg = train_config(args, eval_every=(c.eval_every or per_epoch) if carved else 0, run={
        "teacher": str(c.teacher), "task": task.name, "loss": c.loss, "alpha": c.alpha, "lr": t.lr,
        "max_len": t.max_len, "train_examples": len(train), "subset_seed": t.subset_seed,
        "augment": c.augment, "augment_seed": c.augment_seed, "config": model.config.to_dict(),
        "teacher_outputs_precision": pass_setting(outputs_pass),
        **({"select_on": "validation", "validation_fraction": c.validation_fraction} if carved else {})})

    def encode(ex):
        return encode_classification(task, ex, tokenizer, t.max_len), None

    scored = {VALIDATION: carved.validation} if carved else task.dev
    out = Path(args.out)
    evaluator = DevEvaluator(task, {name: (ex, *encode(ex)) for name, ex in scored.items()}, out, tokenizer,
                             save=save_bilstm)
    taught = teacher_record(c.teacher, task.name)  # restated at the end, as a resumed run's best may be older
    extra = {"model": "bilstm", "task": task.name, "data": str(data), "method": f"bilstm-{c.loss}",
             "teacher": str(c.teacher), "steps": steps, "train_examples": len(train),
             "original_examples": originals, "augment": c.augment, "lr": t.lr,
             "selected_on": VALIDATION if carved else "none (the last step: dev is scored once, after training)",
             **({"validation_split": carved.record} if carved else {}),
             **({"teacher_outputs_precision": outputs_pass["precision"]} if outputs_pass else {}),
             **taught, **shared}
    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume,
                         on_eval=lambda m, step: evaluator(m, step, {**extra,
                                                                      "wall_seconds": round(time.time() - start, 1)}))
    if accelerator.is_main_process:
        result = read_json(out / "results.json")
        # training and selection, a resumed run's earlier processes' too; dev's one scoring is not a training cost
        wall = wall_seconds(start, summaries)
        if carved and c.skip_dev:
            result["dev_scored"] = "never (--skip-dev)"
        elif carved:  # every choice is made: now, and only now, dev is read and scored once
            result["metrics"] = {**score_once(task, out, tokenizer, encode, accelerator.device),
                                 VALIDATION: result["metrics"][VALIDATION]}
            result["dev_scored"] = "once, the model chosen on validation"
        result.update(wall_seconds=wall, complete=True, training=summaries,  # CPU, precision
                      **taught, **shared)
        write_json(out / "results.json", result)
        metric, shown = result["best_metric"], next(iter(result["metrics"]))  # dev where it was scored
        print(f"{task.name}: {shown} {metric} {result['metrics'][shown][metric]:.4f} after {steps} steps; BiLSTM "
              f"in {out}")


if __name__ == "__main__":
    main()
