"""From your BERT and your data to a phone-ready `.tflite`, in one command: fine-tune the BERT on your task (the
teacher), take a student of its own layers, fine-tune the student with task distillation from the teacher, export
it with metadata and check it against PyTorch on your dev set.

    mobilekd ship --teacher path/to/your-bert --data my_data --out runs/my
    mobilekd ship --teacher all-minilm-l6-v2 --data my_data --out runs/my --dry-run   # the plan, nothing run

DATA holds train and dev files (.csv with a header `text,label` or `text,text_pair,label`, .tsv, or .jsonl with the
same keys; `--regression` for numeric labels), as `mobilekd finetune --task custom` reads them. The stages are
`mobilekd` recipes run one after another, each in its own process, each skipped when its output is complete and
resumed from its checkpoint when interrupted:

  OUT/teacher   finetune --model BERT                                   the teacher, fine-tuned on your task
  OUT/init      init BERT --layers spread:2                              the student: the BERT's layers 0 and last
  OUT/student   finetune --model OUT/init --teacher OUT/teacher --method kd   task distillation (Hinton et al.)
  OUT/student/tflite   export --quantize none dynamic-int8               .tflite files, parity on all of dev

and OUT/ship.json gathers the budgets, both models' dev scores, the TF-IDF + logistic regression baseline on the
same examples (which every fine-tuning run computes), and the files. Each model is scored after its last step
(--eval-every 0), not at a step picked on dev, so the dev score is an honest estimate.

Budgets from the data (`budget`), each from a measurement on this repo's shipped tasks (docs/quality.md):
  --max-len         the 95th percentile of the training texts' word pieces, rounded up to 32, 64 or 128
  teacher epochs    3 up to 20,000 training examples (GLUE's small tasks), else 1 (SST-2's 67,349: 0.8911)
  student epochs    enough for about 20,000 examples seen (2 epochs of 10,000), at most 10
  learning rates    the demo's (configs/demo.json): the teacher's teacher_lr, the student's finetune-subset --lr
  student layers    the demo's init-subset (spread:2: DistilBERT's initialisation, first and last layer)
The demo's shipped student (configs/demo.json) is this recipe on 10,000 SST-2 examples but for its teacher's
epochs, 2 there: on seeds 0-1 the 3-epoch teacher's students scored 0.8222 and 0.8291 against 0.8360 and 0.8257
(docs/teachers.md), a direction, not a verdict. The student trades the teacher's depth for speed: 2 of a 6-layer
teacher's layers run at about a third of its Pixel 4 latency.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from mobilekd.errors import UserError, cli_entry, located
from mobilekd.export.litert import QUANTIZATIONS, tflite_name
from mobilekd.fileio import read_json, write_json
from mobilekd.rundir import finished_results, training_cpu, training_host
from mobilekd.run_config import DEMO, run_settings

LENGTHS = (32, 64, 128)  # the --max-len choices
SMALL_TASK = 20_000  # up to this many training examples the teacher trains 3 epochs, above it 1
EXAMPLES_SEEN = 20_000  # the student's epochs: about this many examples seen, at least 1 epoch, at most 10
LENGTH_SAMPLE = 2_000  # training texts tokenized to measure the length distribution


def demo_settings() -> dict:
    """The learning rates and the student's layers, from the demo's run configuration (their one home)."""
    s = run_settings(DEMO, "packaged-teacher")
    return {"teacher_lr": float(s["teacher_lr"]), "student_lr": float(s["finetune-subset"]["--lr"]),
            "layers": s["init-subset"]["--layers"]}


def budget(train_examples: int, lengths: list[int]) -> dict:
    """Sequence length and epochs for a task of `train_examples` examples whose word-piece lengths (special tokens
    included) are `lengths` (a sample of them)."""
    p95 = float(np.percentile(lengths, 95))
    return {"max_len": next((l for l in LENGTHS if l >= p95), LENGTHS[-1]),
            "teacher_epochs": 3 if train_examples <= SMALL_TASK else 1,
            "student_epochs": min(10, max(1, math.ceil(EXAMPLES_SEEN / train_examples))),
            "length_p95": round(p95, 1), "train_examples": train_examples, **demo_settings()}


def measure(teacher: Path, data: Path, regression: bool) -> dict:
    """The budget of this data: its size, its classes and its texts' lengths under the teacher's tokenizer."""
    from mobilekd.data.tasks import load_task
    from mobilekd.data.tokenizer import load_tokenizer

    task = load_task("custom", data, regression=regression)
    tokenizer = load_tokenizer(teacher)
    rng = np.random.default_rng(0)
    sample = [task.train[i] for i in rng.choice(len(task.train), min(LENGTH_SAMPLE, len(task.train)), replace=False)]
    lengths = [len(tokenizer(e.text_a, e.text_b)["input_ids"]) for e in sample]
    return budget(len(task.train), lengths) | {"classes": len(task.labels) if task.labels else None,
                                               "dev_examples": len(task.dev["dev"])}


def stages(teacher: Path, data: Path, out: Path, b: dict, seed: int, regression: bool, quantize: list[str]):
    """(name, mobilekd argv, done?) for each stage, in order."""
    task = ["--task", "custom", "--data", str(data), "--max-len", str(b["max_len"]), "--seed", str(seed),
            "--eval-every", "0", *(["--regression"] if regression else [])]

    def finished(d):
        return lambda: finished_results(d) is not None

    def exported():  # every file asked for is written and checked (export writes parity.json after each)
        parity = out / "student" / "tflite" / "parity.json"
        files = {tflite_name(q) for q in quantize}
        return parity.is_file() and files <= set(read_json(parity))

    return [
        ("teacher", ["finetune", *task, "--model", str(teacher), "--epochs", str(b["teacher_epochs"]),
                     "--lr", str(b["teacher_lr"]), "--out", str(out / "teacher"), "--resume"],
         finished(out / "teacher")),
        ("student init", ["init", str(teacher), str(out / "init"), "--layers", b["layers"]],
         lambda: (out / "init" / "config.json").is_file()),
        ("student", ["finetune", *task, "--model", str(out / "init"), "--teacher", str(out / "teacher"),
                     "--method", "kd", "--epochs", str(b["student_epochs"]), "--lr", str(b["student_lr"]),
                     "--out", str(out / "student"), "--resume"],
         finished(out / "student")),
        ("export", ["export", "--model", str(out / "student"), "--quantize", *quantize, "--seq-len",
                    str(b["max_len"]), "--parity-examples", str(b["dev_examples"]),
                    "--out", str(out / "student" / "tflite")],
         exported),
    ]


def keep_plan(out: Path, commands: list[list[str]]) -> None:
    """OUT/plan.json records the stages' commands: a later run into OUT with other settings (data, layers, seed,
    budgets) would otherwise skip the stages it finds finished and report the old models under the new settings."""
    path = out / "plan.json"
    if path.is_file() and read_json(path) != commands:
        raise located(out, "holds a run with other settings (its plan.json); use another --out, or delete it")
    write_json(path, commands)


def summary(out: Path, b: dict) -> dict:
    """OUT/ship.json: the budgets, the dev scores of teacher, student and baseline, the files."""
    teacher, student = (read_json(out / name / "results.json") for name in ("teacher", "student"))
    parity = read_json(out / "student" / "tflite" / "parity.json")
    return {"budget": b, "metric": next(iter(student["metrics"]["dev"])),
            "teacher": {"dev": teacher["metrics"]["dev"], "train_seconds": teacher["wall_seconds"],
                        "cpu": training_cpu(teacher), "host": training_host(teacher)},
            "student": {"dev": student["metrics"]["dev"], "train_seconds": student["wall_seconds"],
                        "cpu": training_cpu(student), "host": training_host(student),
                        "params": student["training"][0]["trainable_params"]},
            "baseline": student["baseline"],
            "tflite": {name: {k: r[k] for k in ("size_bytes", "agreement", "accuracy_exported") if k in r}
                       for name, r in parity.items()}}


def report(s: dict) -> str:
    metric = s["metric"]
    t, st, base = s["teacher"]["dev"][metric], s["student"]["dev"][metric], s["baseline"]["metrics"][metric]
    files = "; ".join(f"{name} {r['size_bytes'] / 1e6:.1f} MB" for name, r in s["tflite"].items())
    lines = [f"| model | dev {metric} | training |", "|---|---|---|",
             f"| teacher (your BERT, fine-tuned) | {t:.4f} | {s['teacher']['train_seconds']:.0f} s |",
             f"| student ({s['budget']['layers']} of its layers + task distillation, "
             f"{s['student']['params'] / 1e6:.1f}M) | {st:.4f} | {s['student']['train_seconds']:.0f} s |",
             f"| bag of words ({s['baseline']['method']}, the same {s['baseline']['train_examples']} examples) | "
             f"{base:.4f} | {s['baseline']['seconds']:.0f} s |",
             "", f"files: {files}",
             f"the student is {'above' if st > base else 'NOT above'} the bag-of-words baseline by "
             f"{st - base:+.4f}" + ("" if st > base else " (try --layers spread:3: more of the teacher's layers)")]
    return "\n".join(lines)


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd ship", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True,
                   help="your BERT: a transformers BERT directory, one of ours, or all-minilm-l6-v2 (packaged)")
    p.add_argument("--data", required=True, help="directory with train and dev files (.csv, .tsv or .jsonl)")
    p.add_argument("--out", required=True, help="output directory (teacher/, init/, student/, ship.json)")
    p.add_argument("--regression", action="store_true", help="numeric labels (scored by Pearson correlation)")
    p.add_argument("--layers", help="the student's layers of the teacher, e.g. spread:3 or 0,5 (default: the "
                                    "demo's init-subset)")
    p.add_argument("--quantize", nargs="+", choices=list(QUANTIZATIONS), default=["none", "dynamic-int8"],
                   help="the .tflite forms to export (default none dynamic-int8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the budgets and the stages, run nothing")
    args = p.parse_args(argv)
    from mobilekd.models.hf import load_config
    from mobilekd.models.pretrained import model_dir
    from mobilekd.recipes.presets import parse_layers

    teacher, data, out = model_dir(args.teacher), Path(args.data), Path(args.out)
    if not (teacher / "config.json").is_file():
        raise located(teacher, "not a model directory (no config.json)")
    config, _ = load_config(teacher)  # a BERT (ours or transformers'), or one line saying why not
    b = measure(teacher, data, args.regression)
    if args.layers:
        b["layers"] = args.layers
    depth = config.num_hidden_layers  # the layers are checked now, not after the teacher's fine-tuning
    if not all(0 <= l < depth for l in parse_layers(b["layers"], depth)):
        raise located(teacher, f"has layers 0-{depth - 1}; --layers {b['layers']} asks for others")
    print(f"budget from the data ({b['train_examples']} training examples, "
          + (f"{b['classes']} classes, " if b["classes"] else "")
          + f"95% of them within {b['length_p95']:.0f} word pieces): --max-len {b['max_len']}; teacher "
          f"{b['teacher_epochs']} epochs at lr {b['teacher_lr']:g}; student ({b['layers']}) {b['student_epochs']} "
          f"epochs at lr {b['student_lr']:g}")
    plan = stages(teacher, data, out, b, args.seed, args.regression, args.quantize)
    if not args.dry_run:
        keep_plan(out, [argv_ for _, argv_, _ in plan])
    for name, argv_, done in plan:
        print(f"== {name}: mobilekd {' '.join(argv_)}" + ("  (done already)" if done() else ""))
        if args.dry_run or done():
            continue
        code = subprocess.run([sys.executable, "-m", "mobilekd", *argv_], env=os.environ).returncode
        if code != 0:
            raise UserError(f"{out}: the {name} stage failed (exit {code}; its error is above); run the same "
                            f"command again to resume")
    if args.dry_run:
        return
    s = summary(out, b)
    write_json(out / "ship.json", s)
    print(report(s))
    print(f"summary: {out / 'ship.json'}; the app's file: {out / 'student' / 'tflite'}")


if __name__ == "__main__":
    main()
