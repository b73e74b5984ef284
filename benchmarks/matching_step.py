"""Where a step of TinyBERT's layer matching (task distillation's step 1, `mobilekd.finetune.objective.
intermediate_loss`) goes: the whole step (the teacher's forward with its attention scores, the student's, the
matches' loss, backward and the optimizer) against the same step with the teacher's outputs given (computed once,
as a cache of them over the training set would give them after its first epoch), and the teacher's forward alone;
measured in one run, interleaved, and read as ratios: what caching the teacher's outputs could save a step.

    python -m benchmarks.matching_step --threads 1 --seq-len 64     # rows to docs/results/step_time.json
    python -m benchmarks.matching_step --table [--write]            # its step-time table (--write: into its pages)

The pair is the quality benchmark's: all-MiniLM-L6-v2's shape as the teacher (the packaged checkpoint's encoder,
a fresh head: weights do not change a step's cost) and `tinybert4_h156`, under bf16 autocast (where this host's
runs choose it, `--mixed-precision auto`) or fp32 (--precision no), TinyBERT's uniform layer map, batch 32 (the
quality runs'); every token real (the runs' batches are grouped by length: 1.3% padding). The step with the
teacher's outputs given runs the production loss with the teacher's forward replaced by returning its output;
before timing, both losses are computed on the same student and checked equal.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import sys
import time
from contextlib import nullcontext

import torch

from benchmarks.transfer_step import CONFIG, finish, host, interleaved, ratio_row, shared_flags
from mobilekd.data.tasks import INPUTS
from mobilekd.errors import cli_entry
from mobilekd.finetune.objective import intermediate_loss
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.hf import load_config
from mobilekd.models.presets import get_preset
from mobilekd.models.pretrained import model_dir
from mobilekd.transfer.layer_maps import layer_map
from mobilekd.transfer.objectives import projections_for, tinybert_matches

TEACHER, STUDENT = "all-minilm-l6-v2", "tinybert4_h156"
KEY = (*CONFIG, "precision")  # a run in one precision keeps the other's rows


class GivenOutputs:
    """A teacher whose forward returns outputs computed before: what a cache of them would hand the loss."""

    def __init__(self, outputs):
        self.outputs = outputs

    def mobilebert(self, *inputs, **flags):
        return self.outputs


def steps(batch_size: int, seq_len: int, precision: str) -> tuple[dict, dict]:
    """name -> a callable taking one step (returning its loss), for `interleaved`; and what the run measured."""
    torch.manual_seed(0)
    t_config, _ = load_config(model_dir(TEACHER))
    teacher = MobileBertForSequenceClassification(t_config.replace(id2label={0: "a", 1: "b"})).eval()
    s_config = get_preset(STUDENT).config
    student = MobileBertForSequenceClassification(s_config.replace(id2label={0: "a", 1: "b"})).train()
    n, m = t_config.num_hidden_layers, s_config.num_hidden_layers
    matches = tinybert_matches(layer_map("uniform", n, m), list(range(m)))
    student.add_module("projections", projections_for(matches, t_config, s_config))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, min(t_config.vocab_size, s_config.vocab_size), (batch_size, seq_len), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    inputs = [batch[k] for k in INPUTS]
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else nullcontext
    trained = [p for name, p in student.named_parameters() if not name.startswith("classifier")]
    optimizer = torch.optim.AdamW(trained, lr=1e-4, foreach=True)

    def step(loss_fn):
        def run():
            with autocast():
                loss = loss_fn(student, batch)["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()
        return run

    def teacher_forward():
        with torch.no_grad(), autocast():
            teacher.mobilebert(*inputs, output_feature_maps=True, output_attentions=True)
        return 0.0

    with torch.no_grad(), autocast():
        given = teacher.mobilebert(*inputs, output_feature_maps=True, output_attentions=True)
    whole, cached = intermediate_loss(teacher, matches), intermediate_loss(GivenOutputs(given), matches)
    losses = []
    for loss_fn in (whole, cached):  # the same student, the same dropout: the same loss
        torch.manual_seed(1)
        with torch.no_grad(), autocast():
            losses.append(float(loss_fn(student, batch)["loss"]))
    if abs(losses[0] - losses[1]) > 1e-5 * max(1.0, abs(losses[0])):
        raise AssertionError(f"the loss with the teacher's outputs given, {losses[1]}, is not the step's, {losses[0]}")
    return ({"whole step": step(whole), "step, teacher's outputs given": step(cached),
             "teacher's forward": teacher_forward},
            {"model": f"{TEACHER} -> {STUDENT}", "loss": losses[0]})


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.matching_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--precision", choices=("bf16", "no"), default="bf16", help="bf16 autocast or fp32 (no)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up round; default 5)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's threads (default: its own)")
    shared_flags(p)
    args = p.parse_args(argv)
    if args.table:
        return finish(args, [], KEY)
    torch.set_num_threads(args.threads)
    start = time.time()
    runs, about = steps(args.batch, args.seq_len, args.precision)
    precision = "bf16" if args.precision == "bf16" else "fp32"
    identity = {"benchmark": "matching_step", "model": about["model"], "batch": args.batch, "seq_len": args.seq_len,
                "thread_counts": [args.threads], "steps": args.rounds, "precision": precision, **host()}
    print(f"{about['model']}, batch {args.batch} x {args.seq_len}, {precision}, {args.threads} thread(s), median of "
          f"{args.rounds} rounds, {identity['cpu']}")
    measured = interleaved(runs, args.rounds)
    times = {name: seconds for name, (seconds, _) in measured.items()}
    path = f"TinyBERT layer matching ({precision})"
    found = [{**identity, "path": path, "variant": name, "threads": args.threads, "metric": "seconds_per_step",
              "value": round(seconds, 4)} for name, seconds in times.items()]
    found += [ratio_row(identity, times, path, "teacher's forward", "whole step",
                        "the teacher's forward is {:.2f} of a step", args.threads),
              ratio_row(identity, times, path, "whole step", "step, teacher's outputs given",
                        "with its outputs given a step is {:.2f}x as fast", args.threads)]
    for name, seconds in times.items():
        print(f"{name:32s} {1000 * seconds:8.0f} ms")
    print(f"{found[-2]['reading']}; {found[-1]['reading']} (both losses {about['loss']:.5f} before timing)")
    return finish(args, found, KEY, started=start)


if __name__ == "__main__":
    sys.exit(main())
