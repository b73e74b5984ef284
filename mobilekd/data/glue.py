"""Readers for the nine GLUE tasks in their own TSV layouts (Wang et al. 2019), and the label names users see
(the GLUE benchmark's own: SST-2 0/1 = negative/positive, CoLA unacceptable/acceptable, MRPC
not_equivalent/equivalent, QQP not_duplicate/duplicate, WNLI not_entailment/entailment).

CoLA has no header (source, label, original label, sentence); MRPC's label is its `Quality` column; STS-B's
is a float score; MNLI has matched and mismatched dev files. Test files, which have no label column, read with
label None.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from mobilekd.data.examples import TextExample
from mobilekd.errors import UserError, located
from mobilekd.fileio import read_lines

ACC_AND_F1 = "acc_and_f1"  # the mean of accuracy and F1 (mobilekd/finetune/metrics.py): what MRPC and QQP choose on


@dataclass(frozen=True)
class GlueTask:
    name: str
    text_a: str | int  # column name, or index for header-less files
    text_b: str | int | None
    label: str | int
    labels: tuple[str, ...] | None  # the label values in the files; None: regression
    header: bool = True
    dev_files: tuple[str, ...] = ("dev.tsv",)
    directory: str = ""
    metrics: tuple[str, ...] = ("accuracy",)  # the official GLUE metrics; the first is the one a table reports
    # the score a run picks its checkpoint (and `ship` its student) by; None: the first metric. MRPC and QQP choose on
    # the mean of F1 and accuracy: F1 alone rewards answering the majority class (MRPC is 68% paraphrases, so a
    # model that says "equivalent" to every pair scores F1 0.81 on dev, and its early checkpoints were chosen so)
    selection: str | None = None
    names: tuple[str, ...] | None = None  # what users see for `labels`, in the same order (default: the values)

    @property
    def label_names(self) -> tuple[str, ...] | None:
        return self.names or self.labels

    @property
    def is_regression(self) -> bool:
        return self.labels is None


TASKS = {t.name: t for t in [
    GlueTask("cola", 3, None, 1, ("0", "1"), header=False, directory="CoLA", metrics=("matthews_corr",),
             names=("unacceptable", "acceptable")),
    GlueTask("sst2", "sentence", None, "label", ("0", "1"), directory="SST-2", names=("negative", "positive")),
    GlueTask("mrpc", "#1 String", "#2 String", "Quality", ("0", "1"), directory="MRPC", metrics=("f1", "accuracy"),
             selection=ACC_AND_F1, names=("not_equivalent", "equivalent")),
    GlueTask("stsb", "sentence1", "sentence2", "score", None, directory="STS-B", metrics=("pearson", "spearman")),
    GlueTask("qqp", "question1", "question2", "is_duplicate", ("0", "1"), directory="QQP",
             metrics=("f1", "accuracy"), selection=ACC_AND_F1, names=("not_duplicate", "duplicate")),
    GlueTask("mnli", "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral"),
             dev_files=("dev_matched.tsv", "dev_mismatched.tsv"), directory="MNLI"),
    GlueTask("qnli", "question", "sentence", "label", ("entailment", "not_entailment"), directory="QNLI"),
    GlueTask("rte", "sentence1", "sentence2", "label", ("entailment", "not_entailment"), directory="RTE"),
    GlueTask("wnli", "sentence1", "sentence2", "label", ("0", "1"), directory="WNLI",
             names=("not_entailment", "entailment")),
]}


def get_task(name: str) -> GlueTask:
    if name not in TASKS:
        raise UserError(f"unknown GLUE task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name]


def find_split(directory, split: str) -> Path:
    """`split.tsv` or `split.tsv.gz` in a task directory."""
    for name in (f"{split}.tsv", f"{split}.tsv.gz"):
        if (Path(directory) / name).exists() and not (Path(directory) / name).is_dir():
            return Path(directory) / name
    raise located(Path(directory) / f"{split}.tsv", "no such file (nor .tsv.gz)")


def read_glue(task: GlueTask | str, path) -> list[TextExample]:
    """Read one split; every problem is reported as `path:line: problem`."""
    task = get_task(task) if isinstance(task, str) else task
    lines = read_lines(path)
    columns = None
    if task.header:
        first = next(lines, None)
        if first is None:
            raise located(path, "empty file (no header, no rows)")
        columns = first[1].split("\t")
        wanted = [c for c in (task.text_a, task.text_b) if c is not None]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise located(path, f"not a {task.name} file: header lacks the columns {missing} "
                                f"(has {columns[:6]}{'...' if len(columns) > 6 else ''})", 1)
        index = {c: columns.index(c) for c in wanted}
        has_label = task.label in columns
        if has_label:
            index[task.label] = columns.index(task.label)
        width = len(columns)
    else:
        index = {task.text_a: task.text_a, task.label: task.label}
        has_label, width = True, None
    examples = []
    for number, line in lines:
        if not line.strip():
            continue
        fields = next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE))
        if width is None:
            width = len(fields)
            if width <= max(index.values()):
                raise located(path, f"not a {task.name} file: {width} columns, expected at least "
                                    f"{max(index.values()) + 1}", number)
        if len(fields) != width:
            raise located(path, f"row has {len(fields)} columns, expected {width}", number)
        text_a = fields[index[task.text_a]].strip()
        text_b = fields[index[task.text_b]].strip() if task.text_b is not None else None
        if not text_a or (task.text_b is not None and not text_b):
            raise located(path, "empty text", number)
        label = fields[index[task.label]].strip() if has_label else None
        if label is not None:
            label = _check_label(task, label, path, number)
        examples.append(TextExample(text_a, text_b, label, f"{path}:{number}"))
    if not examples:
        raise located(path, "no examples (the split is empty)")
    return examples


def _check_label(task: GlueTask, label: str, path, number):
    if task.is_regression:
        try:
            return float(label)
        except ValueError:
            raise located(path, f"label {label!r} is not a number", number) from None
    if label not in task.labels:
        raise located(path, f"unknown label {label!r} for {task.name} (expected one of {list(task.labels)})", number)
    return label
