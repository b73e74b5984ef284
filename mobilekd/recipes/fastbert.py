"""FastBERT (Liu et al. 2020): self-distil early-exit branches into a fine-tuned classifier, then score adaptive
inference on dev at each speed threshold.

    mobilekd fastbert --model runs/sst2-teacher --task sst2 --out runs/sst2-fastbert
    mobilekd fastbert --model M --task mrpc --max-train-examples 2000 --epochs 3 --thresholds 0 0.2 0.5
    mobilekd export --model runs/sst2-fastbert --max-len 64     # + model_early_exit.tflite, one signature per layer

The fine-tuned model and its classifier are frozen; a branch classifier after each layer but the last learns
KL(final || branch) on the task's training text (labels unused), as fastbert.py `self_distillation` does: its
defaults are 10 epochs, batch 16, learning rate 10 x fine-tuning's 2e-5 = 2e-4, warm-up 0.1, and so are ours.
On dev an input leaves at the first layer whose uncertainty (normalised entropy) is below the threshold;
threshold 0 is the fine-tuned model itself. OUT holds the model (an ordinary classifier directory plus
branches.safetensors and early_exit.json) and results.json: per threshold the task's metrics, the average
layers executed and GFLOPs at --max-len (what the exported file computes), and each layer's classifier alone.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from mobilekd.data.tasks import classification_task, encode_classification, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.export.early_exit import segment_flops
from mobilekd.fileio import write_json
from mobilekd.finetune.evaluation import fine_tuned_classifier, predict
from mobilekd.finetune.metrics import classification_metrics
from mobilekd.finetune.self_distillation import self_distillation_loss
from mobilekd.flags import at_least
from mobilekd.models.early_exit import THRESHOLDS, EarlyExitClassifier, predictions_at, save_early_exit
from mobilekd.train.common import add_task_flags, add_training_flags, check_task_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd fastbert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a classifier fine-tuned on --task (mobilekd finetune's OUT)")
    add_task_flags(p, epochs=10, lr=2e-4, what="self-distillation", source=", fastbert.py's")
    p.add_argument("--width", type=int, default=128, help="branch classifier width (default 128, FastBERT's)")
    p.add_argument("--heads", type=int, default=2, help="branch self-attention heads (default 2, FastBERT's)")
    p.add_argument("--thresholds", type=float, nargs="+", default=THRESHOLDS,
                   help="speed thresholds scored on dev, in [0, 1] (default 0 0.1 ... 0.9; 0 = the full model)")
    add_training_flags(p, out="runs/fastbert", batch_size=16, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    check_task_flags(args)
    at_least("--width", args.width, 1)
    at_least("--heads", args.heads, 1)
    if args.width % args.heads:
        raise UserError(f"--width {args.width} is not divisible by --heads {args.heads}")
    if not all(0 <= t <= 1 for t in args.thresholds):
        raise UserError(f"--thresholds must lie in [0, 1], got {args.thresholds}")
    train_config(args)  # bad training flags are refused before any work
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run)


def run(args, accelerator):
    start = time.time()
    task, data = classification_task(args.task, args.data, "early exits need a classifier's uncertainty")
    tokenizer = load_tokenizer(args.model)
    model = EarlyExitClassifier(fine_tuned_classifier(args.model, task), args.width, args.heads).to(accelerator.device)
    if model.config.num_hidden_layers < 2:
        raise UserError(f"{args.model}: a 1-layer model has no layer to exit early at")
    examples = training_subset(task.train, args.max_train_examples, args.subset_seed)
    train = encode_classification(task, examples, tokenizer, args.max_len)
    steps = args.max_steps or max(1, round(args.epochs * math.ceil(len(train) / args.batch_size)))
    stage = Stage(name="self-distillation", steps=steps, loss=self_distillation_loss, lr=args.lr, warmup=args.warmup,
                  trainable=lambda name: name.startswith("branches."))
    cfg = train_config(args, eval_every=0, run={"model": str(args.model), "task": task.name, "lr": args.lr,
                                                "max_len": args.max_len, "train_examples": len(train),
                                                "subset_seed": args.subset_seed, "width": args.width,
                                                "heads": args.heads})
    run_plan([stage], model, train, cfg, accelerator, resume=args.resume)
    if not accelerator.is_main_process:
        return
    out = Path(args.out)
    save_early_exit(model, out, tokenizer)
    result = {"task": task.name, "model": str(args.model), "data": str(data), "method": "fastbert",
              "train_examples": len(train), "steps": steps, "max_len": args.max_len,
              **evaluate(model, task, tokenizer, args.max_len, args.thresholds),
              "wall_seconds": round(time.time() - start, 1), "complete": True}
    write_json(out / "results.json", result)
    for row in result["thresholds"]:
        print(f"threshold {row['threshold']:.2f}: " + ", ".join(f"{k} {v:.4f}" for k, v in row["metrics"].items()) +
              f", {row['avg_layers']:.2f} layers, {row['gflops']:.3f} GFLOPs")
    print(f"model in {out}")


def evaluate(model: EarlyExitClassifier, task, tokenizer, max_len: int, thresholds) -> dict:
    """Dev metrics per threshold (and of each layer's classifier alone), average layers and GFLOPs per input."""
    name, examples = next(iter(task.dev.items()))
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
    return {"split": name, "dev_examples": len(split), "thresholds": rows, "layers": per_layer}


if __name__ == "__main__":
    main()
