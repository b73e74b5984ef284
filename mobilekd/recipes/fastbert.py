"""FastBERT (Liu et al. 2020): self-distil early-exit branches into a fine-tuned classifier, then score adaptive
inference on dev at each speed threshold.

    mobilekd fastbert --model runs/sst2-teacher --task sst2 --out runs/sst2-fastbert
    mobilekd fastbert --model M --task mrpc --max-train-examples 2000 --epochs 3 --thresholds 0 0.2 0.5
    mobilekd export --model runs/sst2-fastbert --max-len 64     # + model_early_exit.tflite, one signature per layer

The fine-tuned model and its classifier are frozen; a branch classifier after each layer but the last learns
KL(final || branch) on the task's training text (labels unused), as fastbert.py `self_distillation` does: its
defaults are 10 epochs, batch 16, learning rate 10 x fine-tuning's 2e-5 = 2e-4, warm-up 0.1, and so are ours.
An input leaves at the first layer whose uncertainty (normalised entropy) is below the threshold; threshold 0 is
the fine-tuned model itself. The threshold to ship is chosen on a validation split carved from the training
examples (`--validation-fraction`, seeded by --seed; the branches self-distil over the rest): the fastest one whose
validation score (the task's official metric) is within `--max-drop` points of threshold 0's. Dev is read after,
and only to score: every threshold's curve, the chosen one marked. OUT holds the model (an ordinary classifier
directory plus branches.safetensors and early_exit.json, which names the chosen threshold for an app) and
results.json: per threshold the task's metrics on validation and on dev, the average layers executed and GFLOPs
at --max-len (what the exported file computes), and each layer's classifier alone.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mobilekd.data.tasks import classification_task, encode_classification, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.export.early_exit import segment_flops
from mobilekd.fileio import write_json
from mobilekd.finetune.evaluation import fine_tuned_classifier, predict
from mobilekd.finetune.metrics import classification_metrics, selection_score
from mobilekd.finetune.selection import CAP, FRACTION, VALIDATION, carve
from mobilekd.finetune.self_distillation import self_distillation_loss
from mobilekd.flags import add_flags, take_flags
from mobilekd.models.early_exit import (HEADS, MAX_DROP, THRESHOLDS, WIDTH, EarlyExitClassifier, predictions_at,
                                        save_early_exit)
from mobilekd.train.common import add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.task_training import TaskTraining, add_task_flags, task_training


@dataclass
class FastBertConfig:
    model: str = field(default=None, metadata={
        "required": True, "help": "a classifier fine-tuned on --task (mobilekd finetune's OUT)"})
    width: int = field(default=WIDTH, metadata={"min": 1, "help": "branch classifier width (FastBERT's)"})
    heads: int = field(default=HEADS, metadata={"min": 1, "help": "branch self-attention heads (FastBERT's)"})
    thresholds: list[float] = field(default_factory=lambda: list(THRESHOLDS), metadata={
        "nargs": "+", "type": float, "default_help": "0 0.1 ... 0.9; 0 = the full model",
        "help": "speed thresholds scored, in [0, 1]"})
    max_drop: float = field(default=MAX_DROP, metadata={
        "min": 0, "help": "the threshold chosen is the fastest whose validation score is at most this many points "
                          "(hundredths of the metric) under threshold 0's"})
    validation_fraction: float = field(default=FRACTION, metadata={
        "help": f"the share of training examples held out to choose the threshold (at most {CAP:,})"})
    training: TaskTraining = None  # the task, its data and the schedule (`add_task_flags`)


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `FastBertConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd fastbert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, FastBertConfig)
    add_task_flags(p, epochs=10, lr=2e-4, what="self-distillation", source=", fastbert.py's")
    add_training_flags(p, out="runs/fastbert", batch_size=16, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    c = take_flags(FastBertConfig, args, training=task_training(args))
    if c.width % c.heads:
        raise UserError(f"--width {c.width} is not divisible by --heads {c.heads}")
    if not all(0 <= t <= 1 for t in c.thresholds):
        raise UserError(f"--thresholds must lie in [0, 1], got {c.thresholds}")
    train_config(args)  # bad training flags are refused before any work
    args.recipe = c
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    c, t = args.recipe, args.recipe.training  # the recipe's settings; args holds the training loop's
    start = time.time()
    task, data = classification_task(t.task, t.data, "early exits need a classifier's uncertainty")
    tokenizer = load_tokenizer(c.model)
    model = EarlyExitClassifier(fine_tuned_classifier(c.model, task), c.width, c.heads).to(accelerator.device)
    if model.config.num_hidden_layers < 2:
        raise UserError(f"{c.model}: a 1-layer model has no layer to exit early at")
    examples = training_subset(task.train, t.max_train_examples, t.subset_seed)
    carved = carve(task, examples, args.seed, c.validation_fraction)
    train = encode_classification(task, carved.train, tokenizer, t.max_len)
    steps = t.steps(len(train), args.batch_size)
    stage = Stage(name="self-distillation", steps=steps, loss=self_distillation_loss, lr=t.lr, warmup=t.warmup,
                  trainable=lambda name: name.startswith("branches."))
    cfg = train_config(args, eval_every=0, run={"model": str(c.model), "task": task.name, "lr": t.lr,
                                                "max_len": t.max_len, "train_examples": len(train),
                                                "subset_seed": t.subset_seed, "width": c.width,
                                                "heads": c.heads, "validation_split": carved.record})
    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume)
    if not accelerator.is_main_process:
        return
    out = Path(args.out)
    metric = task.selection_metric  # MRPC's F1 and accuracy's mean: F1 alone rewards the majority answer
    validation = evaluate(model, task, carved.validation, tokenizer, t.max_len, c.thresholds)
    chosen = choose_threshold(validation["thresholds"], metric, c.max_drop)
    save_early_exit(model, out, tokenizer, threshold=chosen)
    name, dev_examples = next(iter(task.dev.items()))  # now, and only now, dev is read: to score
    dev = evaluate(model, task, dev_examples, tokenizer, t.max_len, c.thresholds)
    result = {"task": task.name, "model": str(c.model), "data": str(data), "method": "fastbert",
              "train_examples": len(train), "steps": steps, "max_len": t.max_len, "split": name,
              "dev_examples": dev["examples"], "thresholds": dev["thresholds"], "layers": dev["layers"],
              "chosen_threshold": chosen, "chosen_on": VALIDATION, "max_drop": c.max_drop,
              "rule": f"the fastest threshold whose validation {metric} is within {c.max_drop:g} points of "
                      f"threshold 0's", "validation_split": carved.record,
              "validation": validation["thresholds"],
              "wall_seconds": wall_seconds(start, summaries), "complete": True}
    write_json(out / "results.json", result)
    for row in result["thresholds"]:
        print(f"threshold {row['threshold']:.2f}: dev " +
              ", ".join(f"{k} {v:.4f}" for k, v in row["metrics"].items()) +
              f", {row['avg_layers']:.2f} layers, {row['gflops']:.3f} GFLOPs" +
              ("  <- chosen on validation" if row["threshold"] == chosen else ""))
    print(f"threshold {chosen:g} chosen on validation ({result['rule']}); model in {out}")


def choose_threshold(rows: list[dict], metric: str, max_drop: float) -> float:
    """The fastest threshold (fewest layers on average, then the larger) whose score in `rows` (one split's, as
    `evaluate` gives them) is at most `max_drop` points (hundredths of `metric`, one of the metrics or a selection
    score such as `acc_and_f1`: `selection_score`) under threshold 0's; threshold 0 where none is scored or none
    qualifies. FastBERT's paper reports the speed-accuracy curve and leaves the choice
    to the user (Liu et al. 2020, Section 4.3); the rule is ours, on validation."""
    full = next((r for r in rows if r["threshold"] == 0), None)
    if full is None:
        return 0.0
    floor = selection_score(metric, full["metrics"]) - max_drop / 100
    fit = [r for r in rows if selection_score(metric, r["metrics"]) >= floor]
    return min(fit, key=lambda r: (r["avg_layers"], -r["threshold"]))["threshold"]


def evaluate(model: EarlyExitClassifier, task, examples, tokenizer, max_len: int, thresholds) -> dict:
    """Metrics on `examples` per threshold (and of each layer's classifier alone), average layers and GFLOPs per
    input."""
    split = encode_classification(task, examples, tokenizer, max_len)
    logits = torch.from_numpy(predict(model, split))  # (N, layers, labels)
    labels = split.arrays["labels"]
    cumulative = np.cumsum(segment_flops(model, max_len)) / 1e9
    rows = []
    for threshold, (pred, layers) in predictions_at(logits, thresholds).items():
        layers = layers.numpy()
        rows.append({"threshold": threshold, "metrics": classification_metrics(task.metrics, labels, pred.numpy()),
                     "avg_layers": float(np.mean(layers + 1)), "gflops": float(np.mean(cumulative[layers])),
                     "exits": np.bincount(layers, minlength=logits.shape[1]).tolist()})
    per_layer = [{"layer": k + 1, "gflops": float(cumulative[k]),
                  "metrics": classification_metrics(task.metrics, labels, logits[:, k].argmax(-1).numpy())}
                 for k in range(logits.shape[1])]
    return {"examples": len(split), "thresholds": rows, "layers": per_layer}


if __name__ == "__main__":
    main()
