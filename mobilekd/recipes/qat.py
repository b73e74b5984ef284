"""Quantization-aware fine-tuning of a fine-tuned classifier, ending in a full-integer `.tflite` whose ranges come
from training.

    mobilekd qat --model runs/sst2-student --task sst2 --out runs/sst2-qat
    mobilekd qat --model M --task mrpc --epochs 1 --lr 1e-5 --max-len 128

The classifier's app-facing graph (the one `mobilekd export` writes), its attention to padding in the official
masked form (--masked-score), gets fake quantization on every activation (`mobilekd.export.qat.prepare_qat`) and
is fine-tuned on the task's labels with cross-entropy, as the official code fine-tunes a trained model with
`--use_quantized_training=true` (google-research mobilebert/README.md, run_squad.py); ranges are tracked while it
trains and frozen for evaluation. OUT holds `model_qat_int8.tflite` (with the metadata `mobilekd export`
attaches) and results.json: dev metrics of the float model it started from, of its fake-quantized twin and of the
int8 file run by the LiteRT interpreter, the file's agreement with the twin and its float islands. Resumable
(--resume) on the shared loop. XNNPACK, LiteRT's CPU delegate, takes an int8 product of two activations only when
the second operand's zero point is 0, and no int8 softmax (results.json lists what it leaves to the builtin
kernels, `xnnpack_undelegated`): --symmetric-attention quantizes K^T and V so (with --float-softmax the masking and
softmax between the two products run in float), --float-attention keeps each attention's core float;
--int8-embeddings stores the lookup tables in int8 too; --score-clip is the official clip of the attention scores.
A regression model (STS-B) trains on the squared error of its score, which its file returns (no TextClassifier
metadata then: the app reads the number).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mobilekd.data.tasks import encode_classification, load_task, task_data, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry, located
from mobilekd.export.graph import float_islands, read_graph
from mobilekd.export.signatures import INPUT_NAMES
from mobilekd.export.parity import gate_failures, run_tflite, xnnpack_undelegated
from mobilekd.export.qat import convert_qat, freeze_ranges, int8_lookup_tables, prepare_qat, quantization
from mobilekd.fileio import write_json
from mobilekd.finetune.evaluation import fine_tuned_classifier, predict
from mobilekd.finetune.metrics import classification_metrics
from mobilekd.flags import add_flags, take_flags
from mobilekd.train.common import add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.task_training import TaskTraining, add_task_flags, task_training

FILE = "model_qat_int8.tflite"


class QatClassifier(torch.nn.Module):
    """The prepared graph behind the loop's interface: batches (int64, padded to their longest row) in, padded to
    the file's `seq_len` and cast to its int32, as the app feeds it; probabilities (or a regression score) out."""

    def __init__(self, prepared: torch.fx.GraphModule, seq_len: int):
        super().__init__()
        self.prepared, self.seq_len = prepared, seq_len

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.prepared(**{name: F.pad(x, (0, self.seq_len - x.shape[1])).int() for name, x in
                                zip(INPUT_NAMES, (input_ids, attention_mask, token_type_ids))})


def qat_loss(regression: bool):
    """Cross-entropy on the labels through the fake quantization (the graph ends in its softmax); for regression
    the squared error of the score."""

    def loss(model: QatClassifier, batch: dict) -> dict[str, torch.Tensor]:
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).float()
        if regression:
            return {"loss": F.mse_loss(out, batch["labels"])}
        return {"loss": F.nll_loss(out.clamp_min(1e-12).log(), batch["labels"])}

    return loss


@dataclass
class QatConfig:
    model: str = field(default=None, metadata={
        "required": True, "help": "a classifier fine-tuned on --task (mobilekd finetune's OUT)"})
    masked_score: float | None = field(default=None, metadata={
        "type": float, "default_help": "the model's own M, else -6, the official code's",
        "help": "attention to padding in the official form, score x mask + (1 - mask) x M, whose int8 range the "
                "official QAT keeps"})
    score_clip: list[float] | None = field(default=None, metadata={
        "type": float, "nargs": 2, "metavar": ("LOW", "HIGH"), "default_help": "the model's own clip, if any",
        "help": "clip the masked attention scores to [LOW, HIGH] while training and in the file, as the official "
                "QAT does with -6 60"})
    float_attention: bool = field(default=False, metadata={
        "help": "keep each attention's core (Q K^T, masking, softmax, P V) in float: XNNPACK runs it, where it takes "
                "neither today's int8 attention products nor int8 softmax"})
    symmetric_attention: bool = field(default=False, metadata={
        "help": "quantize the second operand of each attention product (K^T, V) symmetric, zero point 0: the int8 "
                "BATCH_MATMUL XNNPACK takes (the softmax stays int8, outside it, unless --float-softmax)"})
    float_softmax: bool = field(default=False, metadata={
        "help": "with --symmetric-attention: run each attention's masking and softmax in float between its two "
                "int8 products (the official QAT leaves the probabilities float too), so that XNNPACK takes them"})
    int8_embeddings: bool = field(default=False, metadata={
        "help": "also store the embedding tables in int8 (per row; a third of the file's size): they are put on "
                "that grid before training and frozen, so the network learns against them"})
    training: TaskTraining = None  # the task, its data and the schedule (`add_task_flags`)


def parse_args(argv=None):
    """The parsed flags: the training loop's on the namespace, the recipe's own as one `QatConfig` in its
    `recipe`, checked."""
    p = argparse.ArgumentParser(prog="mobilekd qat", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, QatConfig)
    add_task_flags(p, epochs=1, lr=1e-5, what="QAT")  # lr: the model is trained already
    # fp32 by default: the fake quantization learns the scales the int8 file will use, under bf16 it would learn
    # them on rounded values (and its graph is padded to --max-len, so grouping saves nothing here)
    add_training_flags(p, out="runs/qat", batch_size=32, optimizer="adamw", with_seq_len=False, mixed_precision="no")
    args = p.parse_args(argv)
    c = take_flags(QatConfig, args, training=task_training(args))
    if c.score_clip and not c.score_clip[0] < c.score_clip[1]:
        raise UserError(f"--score-clip LOW HIGH needs LOW < HIGH, got {c.score_clip}")
    if c.float_attention and c.symmetric_attention:
        raise UserError("--float-attention and --symmetric-attention are two forms of the attention core: give one")
    if c.float_softmax and not c.symmetric_attention:
        raise UserError("--float-softmax goes with --symmetric-attention (the int8 attention products XNNPACK takes)")
    train_config(args)  # bad training flags are refused before any work
    args.recipe = c
    return args


def attention_form(c: QatConfig) -> str:
    """The attention core's quantization (mobilekd.export.qat.ATTENTION) the flags ask for."""
    if c.float_attention:
        return "float"
    if c.symmetric_attention:
        return "int8-sym-float-softmax" if c.float_softmax else "int8-sym"
    return "int8"


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    c, t = args.recipe, args.recipe.training  # the recipe's settings; args holds the training loop's
    start = time.time()
    data = task_data(t.task, t.data)
    task = load_task(t.task, data)
    regression = task.is_regression
    tokenizer = load_tokenizer(c.model)
    float_model = fine_tuned_classifier(c.model, task)
    masked_score = next(m for m in (c.masked_score, float_model.config.masked_score, -6.0) if m is not None)
    vocab = Path(c.model) / "vocab.txt"
    if not vocab.is_file():
        raise located(vocab, "missing: the file's metadata packs the model's vocabulary")
    examples = training_subset(task.train, t.max_train_examples, t.subset_seed)
    train = encode_classification(task, examples, tokenizer, t.max_len)
    dev_name, dev_examples = next(iter(task.dev.items()))
    dev = encode_classification(task, dev_examples, tokenizer, t.max_len)
    score_clip = c.score_clip or float_model.config.score_clip  # the model's own clip unless one is given
    qat_model = fine_tuned_classifier(c.model, task, masked_score=masked_score, score_clip=score_clip)
    frozen = int8_lookup_tables(qat_model) if c.int8_embeddings else []
    model = QatClassifier(quantization(prepare_qat(qat_model, "classification", t.max_len,
                                                   attention_form(c)), True), t.max_len)
    steps = t.steps(len(train), args.batch_size)
    stage = Stage(name="qat", steps=steps, loss=qat_loss(regression), lr=t.lr, warmup=t.warmup,
                  trainable=lambda name: not name.endswith(tuple(frozen)))
    cfg = train_config(args, eval_every=0, run={"model": str(c.model), "task": task.name, "lr": t.lr,
                                                "max_len": t.max_len, "masked_score": masked_score,
                                                # None when off: a checkpoint from before these options resumes
                                                "score_clip": score_clip,
                                                "int8_embeddings": c.int8_embeddings or None,
                                                "float_attention": c.float_attention or None,
                                                "symmetric_attention": c.symmetric_attention or None,
                                                "float_softmax": c.float_softmax or None,
                                                "train_examples": len(train),
                                                "subset_seed": t.subset_seed})
    summaries = run_plan([stage], model, train, cfg, accelerator, resume=args.resume)
    if not accelerator.is_main_process:
        return
    out = Path(args.out)
    labels, names = dev.arrays["labels"], task.metrics
    freeze_ranges(model.prepared)
    twin = predict(model, dev)
    id2label = float_model.config.id2label
    path = convert_qat(model.prepared, t.max_len, out / FILE,
                       None if regression else (vocab, [id2label[i] for i in range(len(id2label))]),
                       int8_embeddings=c.int8_embeddings)
    exported = run_tflite(path, dev.arrays)[0]

    def predicted(out):  # scores (N,), or the class of a classifier's logits or probabilities (same order)
        return out.reshape(len(out)) if regression else out.argmax(-1)

    float_predictions, twin_predictions, int8_predictions = map(predicted, (predict(float_model, dev), twin, exported))
    agreement = {} if regression else {
        "agreement_int8_fake_quant": float((int8_predictions == twin_predictions).mean()),
        "agreement_int8_float": float((int8_predictions == float_predictions).mean())}
    result = {"task": task.name, "model": str(c.model), "data": str(data), "method": "qat-int8",
              "split": dev_name, "dev_examples": len(dev), "train_examples": len(train), "steps": steps,
              "max_len": t.max_len, "lr": t.lr, "masked_score": masked_score, "score_clip": score_clip,
              "int8_embeddings": c.int8_embeddings, "float_attention": c.float_attention,
              "symmetric_attention": c.symmetric_attention, "float_softmax": c.float_softmax,
              "metrics_float": classification_metrics(names, labels, float_predictions),
              "metrics_fake_quant": classification_metrics(names, labels, twin_predictions),
              "metrics_int8": classification_metrics(names, labels, int8_predictions), **agreement,
              "max_abs_diff_int8_fake_quant": float(np.abs(exported - twin).max()),
              "tflite_bytes": path.stat().st_size, "float_islands": float_islands(read_graph(path)),
              "xnnpack_undelegated": xnnpack_undelegated(path),
              "wall_seconds": wall_seconds(start, summaries), "complete": True}
    # the parity gate (export's): the file answers as its fake-quantized twin does, the model it was converted from
    check = {"finite": bool(np.isfinite(exported).all()), **(
        {"agreement": agreement["agreement_int8_fake_quant"]} if agreement else
        {"score_correlation": float(np.corrcoef(int8_predictions, twin_predictions)[0, 1])}
        if np.std(int8_predictions) > 0 and np.std(twin_predictions) > 0 else {})}
    why = gate_failures(check, "int8")
    result.update(parity_check={"passed": not why, **({"why": why} if why else {})}, complete=not why)
    write_json(out / "results.json", result)  # a file refused leaves a run no one reads as finished
    if why:
        path.unlink()
        raise located(path, f"fails its parity check against the fake-quantized model ({'; '.join(why)}): removed; "
                            f"the figures are in results.json")
    for kind in ("float", "fake_quant", "int8"):
        print(f"{kind}: " + ", ".join(f"{k} {v:.4f}" for k, v in result[f"metrics_{kind}"].items()))
    print(f"{path} ({result['tflite_bytes'] / 1e6:.1f} MB): " +
          ("" if regression else f"agreement with the fake-quantized model {result['agreement_int8_fake_quant']:.4f}, ")
          + f"max abs difference from it {result['max_abs_diff_int8_fake_quant']:.2e}, "
          f"float islands {result['float_islands']['islands']}")


if __name__ == "__main__":
    main()
