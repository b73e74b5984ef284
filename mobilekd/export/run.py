"""Export a model directory to `.tflite` and check it against PyTorch.

    scripts/export_tflite.sh --model runs/demo/sst2/student            # checked on shipped SST-2 dev
    scripts/export_tflite.sh --model M --task qa --seq-len 384 --quantize dynamic-int8

Writes OUT/model_<quantize>.tflite (atomically), OUT/ops.json (operator histogram) and OUT/parity.json (max abs
difference, prediction agreement and, for a classifier of the parity task's labels, both dev accuracies).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.export.litert import QUANTIZATIONS, convert, op_histogram
from mobilekd.export.parity import parity_report
from mobilekd.fileio import write_json
from mobilekd.finetune.tasks import default_data, encode_classification, load_task
from mobilekd.models.hf import load_config, load_pretrained


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="export_tflite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--task", choices=["classification", "qa", "mlm"], help="default: the directory's own head")
    p.add_argument("--seq-len", type=int, default=128, help="static input length (default 128)")
    p.add_argument("--quantize", choices=QUANTIZATIONS, default="none")
    p.add_argument("--parity-task", default="sst2",
                   help="GLUE task whose dev sentences feed the check (default sst2); a classifier with that "
                        "task's labels is also scored on them")
    p.add_argument("--parity-data", help="task directory for --parity-task (default: the shipped copy)")
    p.add_argument("--parity-examples", type=int, default=200, help="dev examples to compare (default 200)")
    p.add_argument("--out", help="output directory (default: MODEL/tflite)")
    return p.parse_args(argv)


@cli_entry
def main(argv=None):
    args = parse_args(argv)
    config, saved_head = load_config(args.model)
    head = {"mlm": "pretraining"}.get(args.task, args.task) or saved_head
    if head == "classification" and not config.id2label:
        raise UserError(f"{args.model}: has no labels (not fine-tuned for classification); use --task mlm or "
                        f"fine-tune it first")
    model = load_pretrained(args.model, head)
    out = Path(args.out or Path(args.model) / "tflite")
    start = time.time()
    path = convert(model, head, args.seq_len, out / f"model_{args.quantize.replace('-', '_')}.tflite", args.quantize)
    seconds = time.time() - start
    ops = op_histogram(path)
    write_json(out / "ops.json", ops)
    tokenizer = load_tokenizer(args.model)
    data = Path(args.parity_data) if args.parity_data else default_data(args.parity_task)
    if data is None:
        raise UserError(f"--parity-data is required for --parity-task {args.parity_task} (it is not shipped)")
    task = load_task(args.parity_task, data, eval_only=True)
    examples = next(iter(task.dev.values()))[:args.parity_examples]
    split = encode_classification(task, examples, tokenizer, args.seq_len)
    same_labels = head == "classification" and list(config.id2label.values()) == task.labels
    labels = split.arrays.get("labels") if same_labels else None
    report = parity_report(model, head, path, split.arrays, labels)
    report.update(model=str(args.model), tflite=str(path), quantize=args.quantize, seq_len=args.seq_len,
                  convert_seconds=round(seconds, 1), size_bytes=path.stat().st_size,
                  flex_or_custom_ops=[op for op in ops if op.startswith("Flex") or op == "CUSTOM"])
    write_json(out / "parity.json", report)
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {seconds:.0f} s): max abs diff {report['max_abs_diff']:.2e}, "
          f"agreement {report['agreement']:.4f}" +
          (f", accuracy {report['accuracy_tflite']:.4f} (PyTorch {report['accuracy_torch']:.4f})" if labels is not None
           else ""))
    print("ops: " + ", ".join(f"{k} {v}" for k, v in ops.items()))


if __name__ == "__main__":
    main()
