"""`mobilekd export`'s settings, one dataclass: each field with a help is a flag (`mobilekd.flags.add_flags`), its
default written here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field

from mobilekd.data.tasks import TASK_NAMES
from mobilekd.errors import UserError
from mobilekd.export.litert import QUANTIZATIONS
from mobilekd.export.parity import MIN_AGREEMENT, PARITY_ATOL
from mobilekd.models.heads import HEADS

SENTENCE_TASKS = [t for t in TASK_NAMES if not t.startswith("squad")]  # what the parity check can encode


@dataclass
class ExportConfig:
    model: str = field(default=None, metadata={"required": True, "help": "model directory"})
    head: str | None = field(default=None, metadata={
        "aliases": ["--task"], "choices": list(HEADS), "help": "what the file computes",
        "default_help": "the directory's own head"})
    seq_len: int = field(default=128, metadata={"length": True, "min": 1, "help": "static input length"})
    lengths: list[int] = field(default_factory=list, metadata={
        "nargs": "+", "type": int, "metavar": "N", "default_help": "none",
        "help": "also write model_<quantize>_lengths.tflite: serving_default at --max-len and a signature seq_N for "
                "each of these shorter lengths, over the same weights (fp32 ones stored once); an app runs the "
                "shortest that holds its text. The report adds each signature's parity, the parity task's dev "
                "lengths bucketed, and the host latency at --max-len and at those lengths (MediaPipe's text tasks "
                "read one-subgraph files only: model_<quantize>.tflite stays theirs)"})
    quantize: list[str] = field(default_factory=lambda: ["none"], metadata={
        "nargs": "+", "choices": list(QUANTIZATIONS), "default_help": "none",
        "help": "one or more of: " + "; ".join(f"{k} = {v}" for k, v in QUANTIZATIONS.items())})
    fused_lstm: bool = field(default=False, metadata={
        "help": "a BiLSTM: also write model_<quantize>_fused.tflite with TFLite's fused LSTM kernel, converted by "
                "TensorFlow in a venv of its own (made once under .cache/, minutes; or $MOBILEKD_TENSORFLOW_PYTHON); "
                "--quantize none and dynamic-int8"})
    fused_only: bool = field(default=False, metadata={
        "help": "with --fused-lstm: write the fused files alone, not the unrolled ones (the file an app ships is the "
                "fused one; litert-torch unrolls the LSTM over every position, which is slow to convert)"})
    onnx: bool = field(default=False, metadata={"help": "also export model.onnx and check it with onnxruntime"})
    onnx2tf: str | None = field(default=None, metadata={
        "metavar": "EXECUTABLE", "default_help": "none",
        "help": "also convert model.onnx to model_onnx2tf.tflite with this onnx2tf (implies --onnx; onnx2tf needs "
                "TensorFlow, so give the executable of its own environment)"})
    executorch: bool = field(default=False, metadata={
        "help": "also export model.pte for ExecuTorch with the XNNPACK delegate (fp32), checked through ExecuTorch's "
                "runtime and timed beside the .tflite files in the model card; the operators XNNPACK does not take "
                "are listed"})
    no_metadata: bool = field(default=False, metadata={"help": "leave TFLite metadata out"})
    parity_task: str | None = field(default=None, metadata={
        "choices": SENTENCE_TASKS, "help": "task whose dev sentences feed the check; a classifier with that task's "
                                           "labels is also scored on them",
        "default_help": "the task the model was fine-tuned on, from MODEL/results.json, with its data; else sst2"})
    parity_data: str | None = field(default=None, metadata={
        "help": "task directory for --parity-task", "default_help": "the model's own task data, or the shipped copy"})
    parity_examples: int = field(default=200, metadata={"min": 1, "help": "dev examples to compare"})
    parity_atol: float = field(default=PARITY_ATOL, metadata={
        "min": 0.0, "help": "a float32 file (--quantize none, --onnx, --executorch, --onnx2tf) whose largest output "
                            "differs from PyTorch's by more is removed and the export fails"})
    min_agreement: float = field(default=MIN_AGREEMENT, metadata={
        "min": 0.0, "help": "a file that answers as PyTorch does on a smaller share of the parity examples (a "
                            "classifier's predictions, a regression model's score correlation, an early-exit "
                            "file's exit layers, a seq2seq file's greedy outputs) is removed and the export fails; "
                            "0 keeps a lossy quantization"})
    calibration: str | None = field(default=None, metadata={
        "help": "int8 calibration text: CSV/TSV/JSONL with a 'text' (and optional 'text_pair') column",
        "default_help": "training examples of the parity task"})
    calibration_examples: int = field(default=200, metadata={"min": 1, "help": "int8 calibration examples"})
    single_task_files: bool = field(default=False, metadata={
        "help": "a multi-task model: also one file per task (fp32), to compare with the one shared file"})
    license: str | None = field(default=None, metadata={
        "help": "the model card's license (a Hugging Face license id, e.g. apache-2.0)",
        "default_help": "other: a student inherits its teacher's and its data's terms"})
    out: str | None = field(default=None, metadata={"help": "output directory", "default_help": "MODEL/tflite"})


def check(c: ExportConfig) -> ExportConfig:
    """Refuse, in one line, --lengths that the file cannot have, --fused-only without --fused-lstm, and a
    --min-agreement above 1."""
    if c.min_agreement > 1:
        raise UserError(f"--min-agreement {c.min_agreement:g}: a share of examples, at most 1")
    if c.fused_only and not c.fused_lstm:
        raise UserError("--fused-only needs --fused-lstm (it leaves out the unrolled files written beside the fused "
                        "ones)")
    for n in c.lengths:
        if not 1 <= n < c.seq_len:
            raise UserError(f"--lengths {n}: each length is between 1 and --max-len ({c.seq_len}), which the file "
                            f"has already")
    if len(set(c.lengths)) != len(c.lengths):
        raise UserError(f"--lengths {' '.join(map(str, c.lengths))}: a length given twice")
    return c
