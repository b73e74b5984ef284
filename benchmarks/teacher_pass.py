"""Seconds of the passes that only read a teacher, fp32 against bf16 autocast, measured in one run and read as
ratios: the fine-tuned teacher's outputs over a training set (`mobilekd.finetune.teacher_outputs.compute`: logits
and every layer's [CLS], what task distillation caches) and TinyBERT augmentation's masked-LM candidates
(`mobilekd.data.augment.Augmentor.candidates`), each over the first SST-2 training sentences (shipped).

    python -m benchmarks.teacher_pass --threads 1                  # rows to docs/results/step_time.json
    python -m benchmarks.teacher_pass --table [--write]            # its table (--write: into its pages)

The teacher is all-MiniLM-L6-v2's shape (the packaged checkpoint's encoder, fresh heads: weights do not change a
pass's cost). Each pass runs whole in each precision in turn, for --rounds rounds after one warm-up round, the
order rotated every round; the median is its time, so the ratio holds on a shared machine. Where a host's bf16
matrix product is not faster than fp32's, `--mixed-precision auto` never chooses bf16 for these passes, and the
ratio says what it would cost. Rows are merged into docs/results/step_time.json beside the training-step rows; a
re-run of one configuration replaces its rows. Each row names the CPU, threads and OMP_WAIT_POLICY.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import sys
import time

import torch

from benchmarks.transfer_step import finish, host, interleaved, ratio_row, shared_flags
from mobilekd.data.augment import Augmentor
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import cli_entry
from mobilekd.finetune.teacher_outputs import compute
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import load_config
from mobilekd.models.pretrained import model_dir

TEACHER = "all-minilm-l6-v2"
MAX_LEN = 64  # the quality benchmark's SST-2 length


def passes(sentences: int, queries: int) -> dict:
    """name -> (precision -> a callable running the whole pass in it), over the first SST-2 training sentences."""
    config, _ = load_config(model_dir(TEACHER))
    tokenizer = load_tokenizer(model_dir(TEACHER))
    task = load_task("sst2", default_data("sst2"))
    torch.manual_seed(0)
    classifier = MobileBertForSequenceClassification(config.replace(id2label=task.id2label)).eval()
    split = encode_classification(task, task.train[:sentences], tokenizer, MAX_LEN)
    mlm = MobileBertForPreTraining(config).eval()
    words = [e.text_a for e in task.train[:queries]]
    return {f"teacher outputs over {sentences} sentences":
            {p: (lambda p=p: compute(classifier, split, precision=p)) for p in ("no", "bf16")},
            f"masked-LM candidates of {queries} sentences":
            {p: (lambda p=p: Augmentor(mlm, tokenizer, precision=p).candidates(words)) for p in ("no", "bf16")}}


def timed(run):
    """`run` as `interleaved` takes a step: a callable returning a number (no loss here)."""
    def step():
        run()
        return 0.0
    return step


def name(precision: str) -> str:
    return "bf16" if precision == "bf16" else "fp32"


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.teacher_pass", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=2048, help="SST-2 sentences of the teacher-outputs pass")
    p.add_argument("--queries", type=int, default=256, help="SST-2 sentences of the masked-LM candidates' pass")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds (after one warm-up round; default 2)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's threads (default: its own)")
    shared_flags(p)
    args = p.parse_args(argv)
    if args.table:
        return finish(args, [])
    torch.set_num_threads(args.threads)
    start = time.time()
    print(f"{args.threads} thread(s), median of {args.rounds} rounds, {host()['cpu']}")
    found = []
    for path, runs in passes(args.sentences, args.queries).items():
        measured = interleaved({name(k): timed(run) for k, run in runs.items()}, args.rounds)
        times = {n: s for n, (s, _) in measured.items()}
        identity = {"benchmark": "teacher_pass", "model": TEACHER, "batch": 64, "seq_len": MAX_LEN,
                    "thread_counts": [args.threads], "steps": args.rounds, **host()}
        for n, seconds in times.items():
            found.append({**identity, "path": path, "variant": n, "threads": args.threads, "precision": n,
                          "metric": "seconds_per_pass", "value": round(seconds, 3)})
        found.append(ratio_row(identity, times, path, "fp32", "bf16", "bf16 autocast {:.2f}x as fast as fp32",
                               args.threads))
        print(f"{path}: fp32 {times['fp32']:.1f} s, bf16 {times['bf16']:.1f} s: {found[-1]['reading']}")
    return finish(args, found, started=start)


if __name__ == "__main__":
    sys.exit(main())
