"""Multi-task fine-tuning (MT-DNN) and its knowledge distillation from per-task ensembles (MT-DNN-KD): one shared
encoder, one output layer per task, trained on task-sampled mini-batches; with --teachers, each task's ensemble of
fine-tuned teachers gives soft targets (their averaged probabilities, cached once per teacher) learnt beside the
labels.

    mobilekd multitask --model runs/teacher --out runs/mt                                  # MT-DNN, 5 tasks
    mobilekd multitask --model runs/teacher --out runs/mt-kd \\
        --teachers sst2=runs/sst2/s0,runs/sst2/s1,runs/sst2/s2 mrpc=runs/mrpc/s0,runs/mrpc/s1 ...   # + ensemble KD
    mobilekd export --model runs/mt-kd --max-len 128          # one .tflite, one output per task

Each epoch every task's (subset of its) training set is shuffled and cut into mini-batches of --batch-size, and
all tasks' mini-batches are shuffled together (MT-DNN's sampler: a task is drawn in proportion to its mini-batches).
Loss per batch (`mobilekd.finetune.multitask`): the task's hard-label loss, plus, for a task with teachers, KL to the
ensemble's averaged probabilities (regression: MSE to its mean score), added as the official code does
(--kd-combine sum, the default) or averaged as the paper writes (--kd-combine mean). Both weigh a task's hard
and soft terms equally. When every task has teachers they differ by a factor of 2 on the whole loss, which AdamW's
update barely sees (only its epsilon and the gradient clipping do); when only some have, "mean" also halves the
taught tasks against the others. We default to the code that produced the published models. Departures from the
official settings (train.py: Adamax, lr 5e-5, batch 32 in its scripts, 5 epochs): AdamW, our loop's optimizer;
the epochs are a flag.

OUT holds the model (`mobilekd.models.multitask`: config.json, model.safetensors, multitask.json, tokenizer),
each task's dev predictions, and results.json: per task the dev metrics, training examples and sampling share;
with --teachers, each member's and the ensemble's dev metrics.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path


from mobilekd.data.multitask import MultiTaskSplit
from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.data.tasks import encode_classification, load_task, task_data, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import read_json, write_json
from mobilekd.finetune.ensemble import check_teacher, member_outputs, soft_targets
from mobilekd.finetune.evaluation import DevEvaluator, write_predictions
from mobilekd.finetune.metrics import classification_metrics
from mobilekd.finetune.multitask import COMBINE, multitask_loss
from mobilekd.flags import add_flags, pairs, take_flags
from mobilekd.models.hf import load_config, load_pretrained
from mobilekd.models.multitask import MultiTaskModel, TaskHead, save_multitask, single_task
from mobilekd.train.common import CLASSIFIER_DROPOUT, add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.task_training import Schedule, add_task_flags

SHIPPED = ["sst2", "mrpc", "stsb", "rte", "cola"]  # the GLUE tasks whose data the repository ships


@dataclass
class MultiTaskConfig:
    model: str = field(default=None, metadata={
        "required": True, "help": "the pre-trained (or fine-tuned) model whose encoder is shared"})
    tasks: list[str] = field(default_factory=lambda: list(SHIPPED), metadata={
        "nargs": "+", "choices": list(GLUE_TASKS), "default_help": f"the shipped {' '.join(SHIPPED)}",
        "help": "GLUE tasks, one output layer each (the others than the shipped need --data; MNLI is scored on its "
                "first dev split, matched)"})
    data: dict[str, str] = field(default=None, metadata={
        "nargs": "+", "metavar": "TASK=DIR", "default_help": "the shipped copy", "help": "a task's directory"})
    teachers: dict[str, list[Path]] = field(default=None, metadata={
        "nargs": "+", "metavar": "TASK=DIR[,DIR...]", "default_help": "none",
        "help": "a task's ensemble: classifiers fine-tuned on it (mobilekd finetune's OUT); tasks without teachers "
                "learn from their labels alone"})
    kd_combine: str = field(default="sum", metadata={
        "choices": COMBINE, "help": "hard and soft losses added (sum: the official code) or averaged (mean: the "
                                    "paper)"})
    regression_kd: bool = field(default=True, metadata={
        "help": "regression tasks learn from the ensemble's mean score as well as from their labels"})
    dropout: float = field(default=CLASSIFIER_DROPOUT, metadata={"help": "dropout before each task's layer"})
    keep_pooler: bool = field(default=False, metadata={
        "help": "start from the model's pooler dense (default: a fresh one, as mobilekd finetune does)"})
    schedule: Schedule = None  # epochs, learning rate, length, subsets: over every task (`add_task_flags`)


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `MultiTaskConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd multitask", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, MultiTaskConfig)
    add_task_flags(p, cls=Schedule, epochs=5, lr=5e-5, source=", MT-DNN's", max_len=128, lengths="128, for every task",
                   meta={"epochs": {"help": "epochs over every task's examples"},
                         "max_train_examples": {"help": "at most this many training examples per task (a seeded "
                                                        "random subset)"},
                         "subset_seed": {"help": "the seed that draws the subsets"}})
    add_training_flags(p, out="runs/multitask", batch_size=32, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    c = take_flags(MultiTaskConfig, args, schedule=take_flags(Schedule, args))
    if len(set(c.tasks)) != len(c.tasks):
        raise UserError(f"--tasks names a task twice: {' '.join(c.tasks)}")
    c.data, c.teachers = pairs(c.data, "--data"), pairs(c.teachers, "--teachers")
    for flag, given in (("--data", c.data), ("--teachers", c.teachers)):
        unknown = sorted(set(given) - set(c.tasks))
        if unknown:
            raise UserError(f"{flag}: {', '.join(unknown)} not among --tasks ({' '.join(c.tasks)})")
    c.teachers = {t: [Path(d) for d in dirs.split(",")] for t, dirs in c.teachers.items()}
    if not 0 <= c.dropout < 1:
        raise UserError(f"--dropout must be in [0, 1), got {c.dropout}")
    if args.grad_accum != 1:
        raise UserError("--grad-accum: a multi-task step is one task's mini-batch; use --batch-size instead")
    train_config(args)  # bad training flags are refused before any work
    args.recipe = c
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    c, t = args.recipe, args.recipe.schedule  # the recipe's settings; args holds the training loop's
    start = time.time()
    if accelerator.num_processes > 1:
        raise UserError("mobilekd multitask runs in one process (each step is one task's mini-batch)")
    config, _ = load_config(c.model)
    tokenizer = load_tokenizer(c.model)
    if t.max_len > config.max_position_embeddings:
        raise UserError(f"--max-len {t.max_len} exceeds the model's {config.max_position_embeddings} positions "
                        f"({c.model})")
    data = {name: task_data(name, c.data.get(name)) for name in c.tasks}
    tasks = {name: load_task(name, data[name]) for name in c.tasks}
    for name, dirs in c.teachers.items():  # every teacher checked before any work
        for d in dirs:
            check_teacher(d, tasks[name], tokenizer, c.model)
    heads = {name: TaskHead(None if t.is_regression else tuple(t.labels), tuple(t.metrics))
             for name, t in tasks.items()}
    model = MultiTaskModel(config, heads, c.dropout)
    model.mobilebert.load_state_dict(load_pretrained(c.model).mobilebert.state_dict())
    if not c.keep_pooler:
        model.mobilebert.pooler.reset()
    model.to(accelerator.device)

    splits, dev, teachers = {}, {}, {}
    for name, task in tasks.items():
        examples = training_subset(task.train, t.max_train_examples, t.subset_seed)
        splits[name] = encode_classification(task, examples, tokenizer, t.max_len)
        if "labels" not in splits[name].arrays:
            raise UserError(f"{data[name]}: the training split has unlabelled rows")
        dev_name, dev_examples = next(iter(task.dev.items()))
        dev[name] = {dev_name: (dev_examples, encode_classification(task, dev_examples, tokenizer, t.max_len),
                                None)}
        if name in c.teachers:
            teachers[name] = ensemble(c, task, splits[name], dev[name][dev_name][1], accelerator.device)
            splits[name].arrays["soft_targets"] = teachers[name].pop("train_targets")
    train = MultiTaskSplit(splits, args.batch_size, args.seed)
    steps = t.steps(len(train), 1)  # an epoch: `train`'s mini-batches
    shares = train.proportions()
    print(f"{len(train)} mini-batches per epoch: " + ", ".join(f"{t} {len(s)} examples ({shares[t]:.1%})"
                                                               for t, s in splits.items()) + f"; {steps} steps")
    method = "multi-task-ensemble-kd" if teachers else "multi-task"
    regression = {name: t.is_regression for name, t in tasks.items()}
    stage = Stage(name=method, steps=steps, loss=multitask_loss(list(splits), regression, c.kd_combine,
                                                                c.regression_kd), lr=t.lr, warmup=t.warmup)
    cfg = train_config(args, global_batch_size=1, eval_every=0, run={
        "model": str(c.model), "tasks": c.tasks, "batch_size": args.batch_size, "lr": t.lr,
        "max_len": t.max_len, "train_examples": {t: len(s) for t, s in splits.items()},
        "subset_seed": t.subset_seed, "dropout": c.dropout, "keep_pooler": c.keep_pooler,
        "teachers": {t: [str(d) for d in ds] for t, ds in c.teachers.items()}, "kd_combine": c.kd_combine,
        "regression_kd": c.regression_kd})
    out = Path(args.out)

    def on_eval(m, step):
        save_multitask(m, out, tokenizer)
        scores = {}
        for name, task in tasks.items():
            metrics, predictions = DevEvaluator(task, dev[name], out, tokenizer, save_model=False).score(
                single_task(m, name))
            scores[name] = {"metrics": metrics, "data": str(data[name]),
                            "train_examples": len(splits[name]), "share": shares[name], **teachers.get(name, {})}
            write_predictions(out, predictions, prefix=f"{name}_")
            print(f"{name}: " + ", ".join(f"{s} {k} {v:.4f}" for s, ms in metrics.items() for k, v in ms.items()))
        write_json(out / "results.json", {
            "method": method, "model": str(c.model), "tasks": scores, "steps": step, "batch_size": args.batch_size,
            "lr": t.lr, "max_len": t.max_len, "kd_combine": c.kd_combine if teachers else None,
            "regression_kd": c.regression_kd if teachers else None, "wall_seconds": round(time.time() - start, 1)})

    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume, on_eval=on_eval)
    # complete last, with the training summaries (the CPU, or GPU, it trained on: docs/results/multitask.json's rows)
    # its wall time, the earlier processes' training too where it resumed (`wall_seconds`)
    write_json(out / "results.json", {**read_json(out / "results.json"), "training": summaries, "complete": True,
                                      "wall_seconds": wall_seconds(start, summaries)})
    print(f"model in {out}")


def ensemble(c, task, train, dev, device) -> dict:
    """A task's ensemble: its soft targets over the training split (`train_targets`), each member's and the
    ensemble's dev metrics; every teacher's outputs from its cache where it has them."""
    dirs = c.teachers[task.name]
    (train_logits, dev_logits), cached = member_outputs(dirs, task, [train, dev], device)
    print(f"{task.name}: {len(dirs)} teachers' outputs over {len(train)} training and {len(dev)} dev examples "
          f"({cached} of {2 * len(dirs)} from their caches)")
    labels = dev.arrays["labels"]

    def metrics(out):  # logits or averaged probabilities, or scores
        return classification_metrics(task.metrics, labels, out[:, 0] if task.is_regression else out.argmax(-1))

    return {"train_targets": soft_targets(train_logits, task.is_regression),
            "teachers": [{"model": str(d), "metrics": metrics(x)} for d, x in zip(dirs, dev_logits)],
            "ensemble": metrics(soft_targets(dev_logits, task.is_regression))}


if __name__ == "__main__":
    main()
