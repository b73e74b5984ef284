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
from mobilekd.flags import add_flags, at_least
from mobilekd.models.bilstm import BiLSTMConfig, from_teacher, save_bilstm
from mobilekd.rundir import teacher_record
from mobilekd.train.common import PRECISION_FILE, add_task_flags, add_training_flags, check_task_flags, run_owned, \
    train_config
from mobilekd.train.loop import Stage, run_plan
from mobilekd.train.precision import describe, pass_flag, pass_setting

# the CE term's weight: Tang et al.'s base.json weighs CE and MSE 1 and 1 (alpha 0.5 up to a factor 2); equal to
# Distillation's default for logit KD by coincidence, not taken from it
KD_ALPHA = 0.5


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd bilstm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True, help="a model fine-tuned on --task (mobilekd finetune's OUT)")
    add_task_flags(p, epochs=10, lr=1e-3, warmup=0.0, what="transfer-set")
    p.add_argument("--regression", action="store_true", help="custom task: numeric labels")
    p.add_argument("--loss", choices=["kd", "ce"], default="kd",
                   help="kd: alpha x CE + (1 - alpha) x the mean squared difference of the logits to the teacher's "
                        "(default); ce: the labels alone")
    p.add_argument("--alpha", type=float, default=KD_ALPHA, help=f"with --loss kd: the CE term's weight (default "
                                                                 f"{KD_ALPHA:g})")
    p.add_argument("--augment", type=int, default=0,
                   help=f"transfer set: up to N new samples per training example (the paper's N: {N_ITER}; "
                        f"default 0: the training examples alone)")
    p.add_argument("--augment-seed", type=int, default=0, help="the transfer set's seed (default 0)")
    p.add_argument("--p-mask", type=float, default=P_MASK, help=f"masking probability per word (default {P_MASK})")
    p.add_argument("--p-pos", type=float, default=P_POS,
                   help=f"POS-guided replacement probability per word (default {P_POS})")
    p.add_argument("--p-ng", type=float, default=P_NG, help=f"n-gram sampling probability per sample (default {P_NG})")
    add_flags(p, BiLSTMConfig)  # --hidden-size, --classifier-size, --pooling, --dropout
    p.add_argument("--embedding-size", type=int,
                   help="embedding width: the teacher's table projected onto this many principal components "
                        "(default: the teacher's width, its table as it is)")
    p.add_argument("--select-on", choices=["none", "validation"], default="none",
                   help="none (default): the last step's model, all of the training examples, dev scored once; "
                        "validation: a split carved from the training examples picks the best evaluation's model")
    p.add_argument("--validation-fraction", type=float, default=FRACTION,
                   help=f"with --select-on validation: the share of training examples held out (default {FRACTION:g}, "
                        f"at most {CAP:,})")
    p.add_argument("--eval-every", type=int, help="with --select-on validation: evaluate every N steps (default: once "
                                                 "per epoch of the transfer set)")
    p.add_argument("--skip-dev", action="store_true",
                   help="never read dev (a search's trial, scored later, once, if chosen: finetune --eval-only)")
    add_training_flags(p, out="runs/bilstm", batch_size=50, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    check_task_flags(args)
    for flag in ("--hidden-size", "--classifier-size", "--embedding-size"):
        at_least(flag, getattr(args, flag[2:].replace("-", "_")), 1)
    at_least("--augment", args.augment, 0)
    at_least("--augment-seed", args.augment_seed, 0)
    if args.augment and args.loss == "ce":
        raise UserError("--augment needs --loss kd: the transfer set's new samples are labelled by the teacher")
    for flag in ("--alpha", "--p-mask", "--p-pos", "--p-ng", "--dropout"):
        value = getattr(args, flag[2:].replace("-", "_"))
        if not 0 <= value <= 1:
            raise UserError(f"{flag} must lie in [0, 1], got {value}")
    at_least("--eval-every", args.eval_every, 1)
    if not 0 < args.validation_fraction < 1:
        raise UserError(f"--validation-fraction must be between 0 and 1, got {args.validation_fraction}")
    if args.skip_dev and args.select_on != "validation":
        raise UserError("--skip-dev needs --select-on validation: without it nothing is chosen and dev is the score")
    if args.p_mask + args.p_pos > 1:
        raise UserError(f"--p-mask + --p-pos must be at most 1, got {args.p_mask + args.p_pos}")
    train_config(args)  # bad training flags are refused before any work
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
    start = time.time()
    data = task_data(args.task, args.data)
    task = load_task(args.task, data, regression=args.regression)
    teacher = fine_tuned_classifier(args.teacher, task, "teacher").to(accelerator.device).eval()
    tokenizer = load_tokenizer(args.teacher)
    examples = training_subset(task.train, args.max_train_examples, args.subset_seed)
    carved = carve(task, examples, args.seed, args.validation_fraction) if args.select_on == "validation" else None
    if carved:  # held out before the transfer set is made, so no copy of a validation example trains
        examples = carved.train
        print(f"validation split: {carved.record['size']} of {carved.record['size'] + carved.record['train_size']} "
              f"training examples held out ({carved.record['rule']})" +
              ("; dev is never read (--skip-dev)" if args.skip_dev else "; dev is read once, after training"))
    originals, shared = len(examples), {}  # shared: the transfer set's and outputs' records (`Made.record`)
    if args.augment:
        (examples, made), got = timed(lambda: cached_transfer_set(
            examples, args.augment, args.augment_seed, Path(args.cache_dir), p_mask=args.p_mask, p_pos=args.p_pos,
            p_ng=args.p_ng))
        shared = made.record(got)
        print(f"transfer set: {originals} -> {len(examples)} examples" + (" (cached)" if made.cached else ""))
    train = encode_classification(task, examples, tokenizer, args.max_len)
    kd, outputs_pass = None, None
    if args.loss == "kd":
        outputs_pass = outputs_precision(teacher, train, pass_flag(args, "teacher_outputs_precision"),
                                         Path(args.cache_dir) / PRECISION_FILE, with_cls=False)
        (outputs, made), got = timed(lambda: teacher_outputs(args.teacher, teacher, train, with_cls=False,
                                                             precision=outputs_pass["precision"]))
        shared = {**shared, **made.record(got, "outputs")}
        train.arrays["teacher_logits"] = outputs["teacher_logits"]
        train.arrays["labels"] = transfer_labels(task, train.arrays["labels"], outputs["teacher_logits"], originals)
        print(f"teacher logits over {len(train)} examples: " +
              ("from the cache" if made.cached else "computed and cached") +
              f"; the teacher's pass {describe(outputs_pass)}")
        kd = Distillation(alpha=args.alpha, logits="mse")
    pair = examples[0].text_b is not None
    model = from_teacher(teacher.cpu(), tokenizer, pair, task.id2label, args.embedding_size,
                         hidden_size=args.hidden_size,
                         classifier_size=args.classifier_size, pooling=args.pooling, dropout=args.dropout)
    del teacher
    model.to(accelerator.device)
    steps = args.max_steps or max(1, round(args.epochs * math.ceil(len(train) / args.batch_size)))
    stage = Stage(name="bilstm", steps=steps, loss=task_loss(task, None, kd), lr=args.lr, warmup=args.warmup)
    per_epoch = math.ceil(len(train) / args.batch_size)
    cfg = train_config(args, eval_every=(args.eval_every or per_epoch) if carved else 0, run={
        "teacher": str(args.teacher), "task": task.name, "loss": args.loss, "alpha": args.alpha, "lr": args.lr,
        "max_len": args.max_len, "train_examples": len(train), "subset_seed": args.subset_seed,
        "augment": args.augment, "augment_seed": args.augment_seed, "config": model.config.to_dict(),
        "teacher_outputs_precision": pass_setting(outputs_pass),
        **({"select_on": "validation", "validation_fraction": args.validation_fraction} if carved else {})})

    def encode(ex):
        return encode_classification(task, ex, tokenizer, args.max_len), None

    scored = {VALIDATION: carved.validation} if carved else task.dev
    out = Path(args.out)
    evaluator = DevEvaluator(task, {name: (ex, *encode(ex)) for name, ex in scored.items()}, out, tokenizer,
                             save=save_bilstm)
    taught = teacher_record(args.teacher, task.name)  # restated at the end, as a resumed run's best may be older
    extra = {"model": "bilstm", "task": task.name, "data": str(data), "method": f"bilstm-{args.loss}",
             "teacher": str(args.teacher), "steps": steps, "train_examples": len(train),
             "original_examples": originals, "augment": args.augment, "lr": args.lr,
             "selected_on": VALIDATION if carved else "none (the last step: dev is scored once, after training)",
             **({"validation_split": carved.record} if carved else {}),
             **({"teacher_outputs_precision": outputs_pass["precision"]} if outputs_pass else {}),
             **taught, **shared}
    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume,
                         on_eval=lambda m, step: evaluator(m, step, {**extra,
                                                                      "wall_seconds": round(time.time() - start, 1)}))
    if accelerator.is_main_process:
        result = read_json(out / "results.json")
        wall = round(time.time() - start, 1)  # training and selection; dev's one scoring is not a training cost
        if carved and args.skip_dev:
            result["dev_scored"] = "never (--skip-dev)"
        elif carved:  # every choice is made: now, and only now, dev is read and scored once
            result["metrics"] = {**score_once(task, out, tokenizer, encode, accelerator.device),
                                 VALIDATION: result["metrics"][VALIDATION]}
            result["dev_scored"] = "once, the model chosen on validation"
        result.update(wall_seconds=wall, complete=True, training=summaries,  # CPU, precision
                      **taught, **shared)  # this attempt's seconds, a resumed run's too
        write_json(out / "results.json", result)
        metric, shown = result["best_metric"], next(iter(result["metrics"]))  # dev where it was scored
        print(f"{task.name}: {shown} {metric} {result['metrics'][shown][metric]:.4f} after {steps} steps; BiLSTM "
              f"in {out}")


if __name__ == "__main__":
    main()
