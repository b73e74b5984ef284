"""Tasks: which reader, which head, which labels and metrics, and the encoded splits that training, evaluation
and export's parity check draw from."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mobilekd.data.custom import read_custom
from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.data.glue import find_split, read_glue
from mobilekd.data.squad import read_squad, squad_features
from mobilekd.errors import UserError, located
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import flag_text

SHIPPED = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}
TASK_NAMES = list(GLUE_TASKS) + ["squad1", "squad2", "custom"]

# Defaults per task (printed by --help): the paper's SQuAD settings (lr 4e-5, batch 32, sequence 384, stride
# 128, 5 epochs); for GLUE, BERT's usual choice of batch 32, sequence 128, lr 5e-5 and 3 epochs, 5 epochs for
# the small tasks (CoLA, MRPC, STS-B, RTE, WNLI).
BERT_LR = 5e-5  # BERT's fine-tuning learning rate (Devlin et al. 2019, Appendix A.3: the largest of 5e-5, 3e-5, 2e-5)
DEFAULTS = {
    **{t: dict(lr=BERT_LR, batch_size=32, epochs=3, max_len=128) for t in GLUE_TASKS},
    **{t: dict(lr=BERT_LR, batch_size=32, epochs=5, max_len=128) for t in ("rte", "mrpc", "stsb", "cola", "wnli")},
    "squad1": dict(lr=4e-5, batch_size=32, epochs=5, max_len=384),
    "squad2": dict(lr=4e-5, batch_size=32, epochs=5, max_len=384),
    "custom": dict(lr=BERT_LR, batch_size=32, epochs=3, max_len=128),
}
# Below SMALL_MODEL_PARAMS parameters fine-tuning defaults to SMALL_MODEL_LR: distilled students (the demo's,
# TinyBERT- and MobileBERT-shaped ones, up to 4 of all-MiniLM-L6-v2's layers), and also a small pre-trained BERT
# (BERT-mini, 11M: pass --lr for it); the packaged all-MiniLM-L6-v2 (22.7M) and larger keep the task's rate. At 5e-5
# a 2.3M-parameter demo student stayed near chance on a 6-class task, and the README's MobileBERT path
# (mobilebert_h384, 14.8M, over the former 10M threshold, so at 5e-5) reached 0.43 on a 10-class task where ship's
# student reached 0.75 (issue 74). Every learning rate ship's searches chose on validation for students of 6-15M
# parameters (layer subsets, TinyBERT's shape) lies between 1.2e-4 and 1e-3 (the space's cap), median about 5e-4
# (30 runs, docs/results/ship.json); benchmarks.readme_path measures the path at both rates. With DEFAULTS, the one
# home of fine-tuning's default learning rate (`default_lr`).
SMALL_MODEL_PARAMS = 20_000_000
SMALL_MODEL_LR = 5e-4


def default_lr(task: str, params: int) -> float:
    """Fine-tuning's default learning rate: the task's (DEFAULTS) for models of SMALL_MODEL_PARAMS parameters and
    more, SMALL_MODEL_LR below."""
    return DEFAULTS[task]["lr"] if params >= SMALL_MODEL_PARAMS else SMALL_MODEL_LR


def defaults_text() -> str:
    """DEFAULTS and the small-model rule in words, tasks with equal defaults together (finetune's --help)."""
    groups = {}
    for task, d in DEFAULTS.items():
        groups.setdefault(tuple(d.items()), []).append(task)
    return "; ".join(f"{', '.join(tasks)}: lr {flag_text(d['lr'])}, batch {d['batch_size']}, sequence {d['max_len']}, "
                     f"{d['epochs']:g} epochs" for d, tasks in ((dict(k), v) for k, v in groups.items())) + \
        f"; models under {SMALL_MODEL_PARAMS / 1e6:g}M parameters (distilled students): lr {flag_text(SMALL_MODEL_LR)}"


class LazySplits(Mapping):
    """Split name -> examples, read on the first access to any split's examples; the names are known without
    reading. A run that selects on a validation split (`mobilekd.finetune.selection`) reads its dev files only when
    it scores its final model, so nothing that chooses can have seen them."""

    def __init__(self, names: list[str], read):
        self._names, self._read, self._loaded = list(names), read, None

    def _splits(self) -> dict[str, list]:
        if self._loaded is None:
            self._loaded = {name: self._read(name) for name in self._names}
        return self._loaded

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, name: str) -> list:
        return self._splits()[name]


@dataclass
class Task:
    name: str
    head: str  # "classification" or "qa"
    labels: list[str] | None  # class names; None for regression and QA
    metrics: tuple[str, ...]
    train: list | None
    dev: Mapping[str, list]  # split name -> examples (MNLI has two dev sets), read when first used (`LazySplits`)
    version: str | None = None  # SQuAD 1.1 / 2.0
    file_labels: list[str] | None = None  # the label values in the files, where `labels` names them otherwise
    selection: str | None = None  # the score a run picks its checkpoint by (GlueTask.selection); None: metrics[0]

    @property
    def selection_metric(self) -> str:
        return self.selection or self.metrics[0]

    @property
    def is_regression(self) -> bool:
        return self.head == "classification" and self.labels is None

    @property
    def id2label(self) -> dict[int, str]:
        """What a model fine-tuned on this task has as `id2label`."""
        return {0: "score"} if self.is_regression else dict(enumerate(self.labels))

    def targets(self, examples) -> np.ndarray:
        """The examples' labels as training targets: scores (float32) for regression, else class ids in the
        order of `labels`."""
        if self.is_regression:
            return np.asarray([e.label for e in examples], dtype=np.float32)
        index = {label: i for i, label in enumerate(self.labels)}
        return np.asarray([index[e.label] for e in examples], dtype=np.int64)

    def fits(self, id2label: dict) -> bool:
        """A model's labels are this task's: its names, or the files' values (models fine-tuned before labels
        had names, e.g. SST-2's "0"/"1")."""
        return id2label in (self.id2label, dict(enumerate(self.file_labels or [])))


def default_data(task: str) -> Path | None:
    return REPO_ROOT / "data" / "glue" / SHIPPED[task] if task in SHIPPED else None


def task_data(task: str, data=None) -> Path:
    """The task directory: `data` (--data) when given, else the shipped copy."""
    if data:
        return Path(data)
    if default_data(task) is None:
        raise UserError(f"--data is required for task {task} (it is not shipped)")
    return default_data(task)


def classification_task(name: str, data, why: str) -> tuple["Task", Path]:
    """A classification task's splits and directory, read; a regression task is refused, saying `why`."""
    data = task_data(name, data)
    task = load_task(name, data)
    if task.is_regression:
        raise UserError(f"{task.name} is a regression task: {why}")
    return task, data


def training_subset(examples: list, n: int | None, seed: int) -> list:
    """`n` of the examples drawn at random with `seed`, in their order (all of them when n is None or larger)."""
    if not n or n >= len(examples):
        return examples
    keep = np.random.default_rng(seed).choice(len(examples), n, replace=False)
    return [examples[i] for i in sorted(keep)]


def _find(directory: Path, stem: str, suffixes) -> Path:
    for suffix in suffixes:
        for name in (f"{stem}{suffix}", f"{stem}{suffix}.gz"):
            if (directory / name).exists() and not (directory / name).is_dir():
                return directory / name
    raise located(directory / f"{stem}{suffixes[0]}", f"no such file (looked for {stem} with {', '.join(suffixes)})")


def load_task(name: str, data: Path, eval_only: bool = False, regression: bool = False,
              labels: list[str] | None = None) -> Task:
    """Read a task's train (unless eval_only) and dev splits from `data`, a directory. A custom classification
    task's labels are `labels` when given (a fine-tuned model's, in its order: scoring it on a dev set that lacks
    a class), else its training file's, else (evaluation only) its dev file's."""
    data = Path(data)
    if not data.is_dir():
        raise located(data, "no such data directory (it should hold the task's train and dev files)")
    if name in GLUE_TASKS:
        spec = GLUE_TASKS[name]
        named = dict(zip(spec.labels, spec.label_names)) if spec.labels else {}

        def read(split):  # the files' label values become the names users see
            return [dataclasses.replace(e, label=named.get(e.label, e.label)) for e in
                    read_glue(spec, find_split(data, split))]

        splits = [f.split(".")[0] for f in spec.dev_files]
        for split in splits:  # a missing file is named now; its rows are read when the split is first used
            find_split(data, split)
        dev = LazySplits(splits, read)
        train = None if eval_only else read("train")
        labels = list(spec.label_names) if spec.labels else None
        return Task(name, "classification", labels, spec.metrics, train, dev,
                    file_labels=list(spec.labels) if spec.names else None, selection=spec.selection)
    if name in ("squad1", "squad2"):
        dev_path = _find(data, "dev", [".json"])
        if eval_only:  # evaluation only: dev is what it reads, and its version is the data's
            dev, version = read_squad(dev_path)
            splits = LazySplits(["dev"], lambda _: dev)
        else:
            train, version = read_squad(_find(data, "train", [".json"]))
            splits = LazySplits(["dev"], lambda _: read_squad(dev_path)[0])
        if name == "squad1" and version == "2.0":
            raise located(data, "holds SQuAD v2.0 data (is_impossible fields); use --task squad2")
        return Task(name, "qa", None, ("exact_match", "f1"), None if eval_only else train, splits,
                    "2.0" if name == "squad2" else "1.1")
    if name == "custom":
        suffixes = [".csv", ".tsv", ".jsonl"]
        train_path = None if eval_only else _find(data, "train", suffixes)
        train = None if eval_only else read_custom(train_path, labels, regression)
        if regression:
            labels = None
        elif labels is None:
            labels = sorted({e.label for e in (train or []) if e.label is not None})
            if train and len(labels) == 1:  # found now, not after a whole run, when dev holds another label
                raise located(train_path, f"every example has the label {labels[0]!r}: a classifier needs two "
                                          f"classes or more (numeric labels: --regression)")
        dev_path = _find(data, "dev", suffixes)
        dev = LazySplits(["dev"], lambda _: read_custom(dev_path, labels if labels else None, regression))
        if not regression and not labels:  # evaluation only: the labels are dev's
            labels = sorted({e.label for e in dev["dev"] if e.label is not None})
        return Task(name, "classification", labels, ("pearson", "spearman") if regression else ("accuracy",), train,
                    dev)
    raise UserError(f"unknown task {name!r}; choose one of: {', '.join(TASK_NAMES)}")


INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # what a model takes, in its argument order


def length_batches(lengths: np.ndarray, batch_size: int) -> tuple[list[np.ndarray], np.ndarray]:
    """For a pass that only reads a split (prediction, a teacher's outputs, decoding): batches of indices of similar
    `lengths`, shortest first, so each batch pads little; and the permutation that puts outputs concatenated in
    that order back in the split's order (`np.concatenate(outputs)[back]`)."""
    order = np.argsort(lengths, kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)], back


class EncodedSplit:
    """Tokenized examples; `batch(indices, epoch)` pads to the longest sequence in the batch."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        if len(self) == 0:
            raise UserError("the split is empty")

    def __len__(self):
        return len(self.arrays["input_ids"])

    @property
    def lengths(self) -> np.ndarray:
        """Each example's tokens (the loop groups batches by them)."""
        return self.arrays["attention_mask"].sum(1)

    def by_length(self, batch_size: int) -> tuple[list[np.ndarray], np.ndarray]:
        """`length_batches` of this split's examples."""
        return length_batches(self.lengths, batch_size)

    def subset(self, indices) -> "EncodedSplit":
        """Examples `indices` as a split of their own."""
        idx = np.asarray(indices)
        return EncodedSplit({k: v[idx] for k, v in self.arrays.items()})

    def batch(self, indices, epoch=0) -> dict[str, torch.Tensor]:
        """Examples `indices` (the epoch does not change them)."""
        idx = np.asarray(list(indices))
        width = int(self.arrays["attention_mask"][idx].sum(1).max())
        out = {}
        for k, v in self.arrays.items():
            part = v[idx]
            out[k] = torch.from_numpy(part[:, :width] if part.ndim == 2 and part.shape[1] > width
                                      and k in INPUTS else part)
        return out


def encode_classification(task: Task, examples, tokenizer, max_len: int) -> EncodedSplit:
    a = [e.text_a for e in examples]
    b = [e.text_b for e in examples] if examples[0].text_b is not None else None
    enc = tokenizer(a, b, truncation=True, max_length=max_len, padding="max_length")
    # a tokenizer without token types (RoBERTa's, a foreign teacher's read by its student) gives every token type 0
    arrays = {k: np.asarray(enc[k] if k in enc else np.zeros_like(enc["input_ids"]), dtype=np.int64) for k in INPUTS}
    if all(e.label is not None for e in examples):
        arrays["labels"] = task.targets(examples)
    return EncodedSplit(arrays)


def encode_qa(examples, tokenizer, max_len: int, stride: int) -> tuple[EncodedSplit, dict]:
    """SQuAD windows for the model, plus what decoding answers needs (window -> example, offsets)."""
    feats = squad_features(examples, tokenizer, max_len, stride)
    keep = (*INPUTS, "start_positions", "end_positions")
    return EncodedSplit({k: feats[k] for k in keep}), {"example_index": feats["example_index"],
                                                        "offsets": feats["offsets"]}
