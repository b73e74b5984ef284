"""`mobilekd <verb> [flags]`: the one command-line front over the recipes in mobilekd/recipes/.

    mobilekd models | init | train-teacher | distill | finetune | ship | fastbert | bilstm | cmlm | seq2seq | multitask
             | qat | export | latency | host-bench | kernels | adb | report | run-config
    mobilekd VERB --help

scripts/*.sh are thin wrappers that set up the environment and call a verb. Under `accelerate launch`, name the
recipe module itself (e.g. `accelerate launch -m mobilekd.recipes.distill ...`).
"""

from __future__ import annotations

import importlib
import os
import sys

# verb -> (recipe module, function, what it does)
VERBS = {
    "models": ("presets", "models", "print the model presets with parameters and FLOPs beside the paper's"),
    "init": ("presets", "init", "write a model directory: a preset's random start, a model's layers, or a preset "
                                "started from a teacher"),
    "train-teacher": ("train_teacher", "main", "pre-train the IB-BERT teacher (MLM + NSP)"),
    "distill": ("distill", "main", "distill a teacher into a MobileBERT student (AKT / JKT / PKT)"),
    "finetune": ("finetune", "main", "fine-tune and evaluate on GLUE, SQuAD or your own data"),
    "ship": ("ship", "main", "your BERT and your CSV to a .tflite: the teacher fine-tuned, the most accurate student "
                             "within a Pixel latency budget searched on a split of train, exported and checked"),
    "fastbert": ("fastbert", "main", "self-distil early-exit branches into a fine-tuned classifier (FastBERT)"),
    "bilstm": ("bilstm", "main", "distil a fine-tuned teacher into a BiLSTM over a transfer set (Tang et al.)"),
    "cmlm": ("cmlm", "main", "fine-tune a BERT teacher as a conditional masked LM on (source, target) pairs (C-MLM)"),
    "seq2seq": ("seq2seq", "main", "train a small encoder-decoder on pairs, alone or distilled from a C-MLM teacher"),
    "multitask": ("multitask", "main", "multi-task fine-tuning (MT-DNN), with knowledge distillation from ensembles"),
    "qat": ("qat", "main", "quantization-aware fine-tuning of a classifier, to a full-integer .tflite"),
    "export": ("export", "main", "export to .tflite (and ONNX) with metadata, checked against PyTorch"),
    "latency": ("latency", "main", "latency report: host-measured, Pixel-class estimate, the paper's claims"),
    "host-bench": ("host_bench", "main", "time .tflite files on this host, interleaved"),
    "kernels": ("kernels", "main", "where .tflite files' time goes on this host, kernel by kernel (perf samples)"),
    "adb": ("adb", "main", "time a .tflite on a phone over adb with benchmark_model"),
    "report": ("demo_report", "main", "the end-to-end report of a demo run (reads its JSON)"),
    "run-config": ("run_config", "main", "a run configuration's settings as shell arrays (configs/demo.json)"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    return ("usage: mobilekd VERB [flags]   (mobilekd VERB --help for the flags)\n\n" +
            "\n".join(f"  {verb:<{width}}  {what}" for verb, (_, _, what) in VERBS.items()))


def main(argv=None):
    try:
        return _dispatch(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:
        if not _stdout_gone():  # another pipe (a subprocess's): a real error
            raise
        # stdout's reader closed first (`mobilekd models | head`): no traceback, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on its write end)."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no file behind it (captured): not a pipe of ours
        return False
    poller = select.poll()
    poller.register(fd, 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _dispatch(argv: list[str]):
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    if argv[0] not in VERBS:
        print(f"error: unknown verb {argv[0]!r}\n{usage()}", file=sys.stderr)
        sys.exit(2)
    module, function, _ = VERBS[argv[0]]
    return getattr(importlib.import_module(f"mobilekd.recipes.{module}"), function)(argv[1:])


if __name__ == "__main__":
    main()
