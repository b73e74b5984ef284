"""A fine-tuned teacher's outputs over a training split, computed once and stored: its logits and every layer's
[CLS] vector (what logit distillation and BERT-PKD's patience loss read; BERT-PKD precomputes the same,
run_glue_benchmark.py via `eval_model_dataloader` in src/utils.py). The teacher runs in eval mode, so the stored
values are exactly what it would give during training (in fp32; under bf16, below, to bf16's rounding).

The store, `<teacher>/outputs/<key>-outputs/`, is keyed by the teacher's weights (and whether it keeps the [CLS]
vectors) and holds each example's outputs under a digest of its tokens (`mobilekd.finetune.example_store`): every
method, seed, validation carve and trial fine-tuning on examples already stored reads them, a run adds a segment
for the examples it does not find, and a retrained teacher gets a new store. The pass runs under bf16 autocast
where this host runs the teacher's forward faster in it (`outputs_precision`, `--mixed-precision auto`); those
outputs are stored under a key of their own (`-bf16`), which every run on such a host reads. A lock beside the
store lets one run compute a segment: runs started together (benchmarks run two at a time) wait for it and read
it, instead of computing the same outputs again.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from tqdm.auto import tqdm

from mobilekd.data.tasks import INPUTS, length_batches
from mobilekd.fileio import Made, cached_file, file_digest, timed
from mobilekd.finetune.example_store import stored
from mobilekd.bf16 import decide_inference_precision, read_only_flag
from mobilekd.train.precision import median_window, parameters


def outputs_key(teacher_dir: Path, with_cls: bool = True, precision: str = "no") -> str:
    """The store's folder name: the teacher's weights, whether it keeps the [CLS] vectors, the pass's precision."""
    h = hashlib.sha256(file_digest(Path(teacher_dir) / "model.safetensors").encode() + (b"" if with_cls else b"logits"))
    return h.hexdigest()[:20] + ("-bf16" if precision == "bf16" else "") + "-outputs"


def _forward(teacher, b: dict, with_cls: bool):
    device = next(teacher.parameters()).device
    return teacher.logits_and_encoder(*(b[k].to(device) for k in INPUTS), output_feature_maps=with_cls)


def outputs_precision(teacher, split, flag: str = "auto", cache: Path | None = None, batch_size: int = 64,
                      with_cls: bool = True) -> dict:
    """The precision of `compute` over `split` by `--mixed-precision` `flag` (bf16, else fp32; `pass_flag`); with
    auto, bf16 where the teacher's forward over `batch_size` examples of the split's median length runs faster in
    it on this host, the choice kept in `cache` (`mobilekd.train.precision.decide_inference_precision`; its timings
    are in the kept choice and the run's log)."""
    teacher.eval()

    @functools.cache
    def median_batch() -> dict:  # built at the probe's first pass: not at all for a kept choice or another flag
        return split.batch(median_window(split.lengths, batch_size))

    return decide_inference_precision("teacher-outputs", parameters(teacher),
                                      lambda: _forward(teacher, median_batch(), with_cls),
                                      next(teacher.parameters()).device, read_only_flag(flag), cache)


@torch.no_grad()
def compute(teacher, split, batch_size: int = 64, with_cls: bool = True,
            precision: str = "no") -> dict[str, np.ndarray]:
    """`teacher_logits` (N, C, float32) and, with `with_cls`, `teacher_cls` (N, layers, width, float16) over the
    split, in order; `precision` bf16 runs the teacher under bf16 autocast (its outputs read in float32): a
    departure from BERT-PKD's fp32 `eval_model_dataloader` where this host runs it faster (`outputs_precision`), at
    the cost of bf16's rounding (8 significant bits, 2-3 decimal digits, at each product) in the logits a student
    fits. The examples run in
    batches of similar length (`EncodedSplit.by_length`), so the teacher reads little padding: over SST-2's 67,349
    training sentences (all-MiniLM-L6-v2, one thread, AMD EPYC) the split's order was on course for 22 minutes (7%
    done), length order took 7.6 with a third process on the two cores."""
    teacher.eval()
    device = next(teacher.parameters()).device
    batches, back = split.by_length(batch_size)
    logits, cls = [], []
    for indices in tqdm(batches, desc="teacher outputs", leave=False):
        b = split.batch(indices)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out, enc = _forward(teacher, b, with_cls)
        logits.append(out.float().cpu().numpy())
        if with_cls:
            cls.append(torch.stack([h[:, 0] for h in enc.feature_maps], 1).half().cpu().numpy())
    # the [CLS] vectors in half precision: the patience loss compares their directions, and they are the bulk
    return {"teacher_logits": np.concatenate(logits)[back],
            **({"teacher_cls": np.concatenate(cls)[back]} if with_cls else {})}


def teacher_outputs(teacher_dir, teacher, split, with_cls: bool = True, precision: str = "no") -> \
        tuple[dict[str, np.ndarray], Made]:
    """The teacher's outputs over `split` (its logits alone without `with_cls`) in `precision` (`compute`), and how
    this run got them: all from the store or not, the seconds computing them took whichever runs did
    (`ExampleStore.made_seconds`), and the set's name in the store (`outputs/<key>/<examples>`, what the runs over
    the same examples share: `ExampleStore.set_name`)."""
    names = ["teacher_logits", *(["teacher_cls"] if with_cls else [])]

    def make(part, tmp: Path) -> dict:
        for name, values in compute(teacher, part, with_cls=with_cls, precision=precision).items():
            np.save(tmp / f"{name}.npy", values)
        return {"precision": precision}

    folder = Path(teacher_dir) / "outputs" / outputs_key(teacher_dir, with_cls, precision)
    store, _ = stored(folder, split, make)
    return store.rows(names), Made(store.hit_rate == 1, store.made_seconds(), store.set_name)


def cached_arrays(path: Path, n: int, make) -> tuple[dict[str, np.ndarray], bool, float | None]:
    """The arrays (each of `n` rows) in the safetensors file `path`, or `make()`'s, written there atomically while
    holding `path`'s lock; whether they came from the file; and the seconds `make()` took (kept in the file's
    metadata, so a benchmark can charge the cache to the teacher whichever run computed it; None for a file
    written before mobilekd recorded it). Runs started together compute it once (`cached_file`)."""
    return cached_made(path, n, lambda: timed(make))


def cached_made(path: Path, n: int, make) -> tuple[dict[str, np.ndarray], bool, float | None]:
    """`cached_arrays` where `make()` gives (arrays, the seconds making them cost) itself: arrays put together from
    parts made elsewhere, charged what the parts cost."""
    def write(value, tmp):
        save_file(value[0], str(tmp), metadata={"seconds": str(value[1])})

    (arrays, seconds), cached = cached_file(path, lambda p: _cached(p, n), make, write)
    return arrays, cached, seconds


def read_arrays(path: Path) -> tuple[dict[str, np.ndarray], float | None]:
    """A cache file's arrays and the seconds making them took (None where not recorded)."""
    arrays = load_file(str(path))
    with safe_open(str(path), "np") as f:
        seconds = (f.metadata() or {}).get("seconds")
    return arrays, float(seconds) if seconds else None


def _cached(path: Path, n: int) -> tuple[dict[str, np.ndarray], float | None] | None:
    arrays, seconds = read_arrays(path)
    return (arrays, seconds) if all(len(v) == n for v in arrays.values()) else None


def foreign_key(teacher_dir: Path, examples, max_len: int) -> str:
    """The cache key of a foreign teacher's logits (`foreign_outputs`): its weights, the examples' text, and the
    length its tokenizer truncates to."""
    h = hashlib.sha256(file_digest(Path(teacher_dir) / "model.safetensors").encode() + f"|{max_len}".encode())
    for e in examples:
        h.update(f"{e.text_a}\x1f{e.text_b}\x1e".encode())
    return h.hexdigest()[:20] + "-foreign"


@torch.no_grad()
def foreign_compute(teacher, examples, max_len: int, batch_size: int = 64) -> dict[str, np.ndarray]:
    """`teacher_logits` (N, C, float32) of a transformers classifier of another architecture
    (`mobilekd.models.foreign.ForeignTeacher`) over `examples`, each read through the teacher's own tokenizer, in
    fp32; batches of similar text length, as `compute`'s."""
    lengths = np.array([len(e.text_a) + len(e.text_b or "") for e in examples])
    batches, back = length_batches(lengths, batch_size)
    pairs = examples[0].text_b is not None
    logits = []
    for indices in tqdm(batches, desc="teacher outputs", leave=False):
        part = [examples[i] for i in indices]
        logits.append(teacher.logits([e.text_a for e in part], [e.text_b for e in part] if pairs else None,
                                     max_len).float().cpu().numpy())
    return {"teacher_logits": np.concatenate(logits)[back]}


def foreign_outputs(teacher_dir, teacher, examples, max_len: int) -> tuple[dict[str, np.ndarray], Made]:
    """`foreign_compute`'s logits, cached beside the teacher in one file per set of examples
    (`outputs/<key>-foreign.safetensors`): a foreign teacher reads text through its own tokenizer, so its examples
    have no key of our tokens."""
    path = Path(teacher_dir) / "outputs" / f"{foreign_key(teacher_dir, examples, max_len)}.safetensors"
    arrays, cached, seconds = cached_arrays(path, len(examples), lambda: foreign_compute(teacher, examples, max_len))
    return arrays, Made(cached, seconds, f"outputs/{path.stem}")
