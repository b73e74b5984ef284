"""The C-MLM teacher's side (Chen et al. 2020, Section 3.1-3.2): its fine-tuning loss, and one pass over a split's
copies (`mobilekd.data.cmlm.copy_masks`) that gives every target position's prediction with its neighbours
visible: the soft targets a student learns from, and the teacher's own score on the conditional MLM task.

The soft targets are the top-k logits and their token ids at every target position (dump_teacher_hiddens.py, then
dump_teacher_topk.py: the official code keeps 128 and its student reads the first 8, `bert_kd_dataset.py`; we keep
the k the student reads). They are computed once per teacher and split and cached like a classifier teacher's
outputs (`mobilekd.finetune.teacher_outputs.cached_arrays`, keyed by the teacher's weights, the split's word pieces
and k).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mobilekd.data.cmlm import copy_masks, inputs
from mobilekd.data.seq2seq import PairSplit
from mobilekd.errors import UserError
from mobilekd.fileio import file_digest
from mobilekd.finetune.teacher_outputs import cached_arrays, cached_made, read_arrays
from mobilekd.models.heads import mlm_loss
from mobilekd.bf16 import decide_inference_precision
from mobilekd.train.precision import median_window, parameters

TOPK = 8  # the soft targets' k: the official student's --kd_topk (Distill-BERT-Textgen README)
PAIRS_PER_BATCH = 16  # pairs a teacher batch of the copies' pass holds (x 7 copies)


def cmlm_loss(model, batch: dict) -> dict[str, torch.Tensor]:
    """The C-MLM fine-tuning loss: cross-entropy over the masked target positions, their mean (cmlm/model.py
    `BertForSeq2seq.forward`: `CrossEntropyLoss(ignore_index=-1)` over the masked positions; here over each
    micro-batch's masked positions across processes, as the loop normalises masked-LM losses: the global batch's
    at --grad-accum 1)."""
    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
    loss = mlm_loss(logits, batch)
    return {"loss": loss, "cmlm": loss.detach()}


def _copies_batch(split: PairSplit, indices, tokenizer) -> tuple[list, dict]:
    """The teacher's batch over the copies of the pairs `indices`: (rows, inputs), rows the (pair, masked
    positions) of each copy (`copy_masks`)."""
    rows = [(int(i), m) for i in indices for m in copy_masks(int(split.target_lengths[i]))]
    return rows, inputs(split, rows, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id)


def _masked_logits(teacher, b: dict) -> torch.Tensor:
    device = next(teacher.parameters()).device
    return teacher(*(b[key].to(device) for key in ("input_ids", "attention_mask", "token_type_ids",
                                                    "masked_positions"))).float().cpu()


def pass_precision(teacher, split: PairSplit, tokenizer, flag: str = "auto", cache: Path | None = None) -> dict:
    """The precision of `copies_pass` over `split` by `--mixed-precision` `flag`; with auto, bf16 where the
    teacher's forward over the copies of PAIRS_PER_BATCH pairs of median length runs faster in it on this host,
    the choice kept in `cache` (`mobilekd.train.precision.decide_inference_precision`)."""
    teacher.eval()

    @functools.cache
    def median_batch() -> dict:  # built at the probe's first pass: not at all for a kept choice or another flag
        return _copies_batch(split, median_window(split.lengths, PAIRS_PER_BATCH), tokenizer)[1]

    return decide_inference_precision("cmlm-copies", parameters(teacher),
                                      lambda: _masked_logits(teacher, median_batch()),
                                      next(teacher.parameters()).device, flag, cache)


@torch.no_grad()
def copies_pass(teacher, split: PairSplit, tokenizer, k: int = TOPK, pairs_per_batch: int = PAIRS_PER_BATCH,
                precision: str = "no", shard: tuple[int, int] = (0, 1)) -> dict[str, np.ndarray]:
    """Every target position's prediction by the teacher with that position masked (and every COPIES-th one beside
    it): `teacher_topk_logits` (N, T, k, float32) and `teacher_topk_ids` (N, T, k, int32) indexed like the split's
    `target_ids` (0 where padded), and per position the gold token's log-probability (`gold_logprob`) and whether
    it is the teacher's first choice (`gold_top1`). `precision` bf16 runs the teacher under bf16 autocast (its
    logits read in float32): a departure from the official fp32 dump (dump_teacher_hiddens.py) where this host
    runs it faster (`pass_precision`), at the cost of bf16's rounding in the logits and so of near-ties' order.
    `shard` (i, n): the i-th of n shares of the pass (`shard_batches`), the other pairs' rows left 0."""
    teacher.eval()
    device = next(teacher.parameters()).device
    n, width = split.arrays["target_ids"].shape
    out = {"teacher_topk_logits": np.zeros((n, width, k), np.float32),
           "teacher_topk_ids": np.zeros((n, width, k), np.int32),
           "gold_logprob": np.zeros((n, width), np.float32), "gold_top1": np.zeros((n, width), np.bool_)}
    batches = shard_batches(split, *shard, pairs_per_batch)
    for indices in tqdm(batches, desc="C-MLM teacher over the copies" + (f" (share {shard[0] + 1} of {shard[1]})"
                                                                          if shard[1] > 1 else ""), leave=False):
        rows, b = _copies_batch(split, indices, tokenizer)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = _masked_logits(teacher, b)
        where = np.concatenate([np.stack([np.full(len(m), i), m], 1) for i, m in rows])  # (masked, 2): pair, position
        values, ids = logits.topk(k, dim=-1)
        gold = b["masked_labels"][b["masked_labels"] >= 0]
        logp = logits.log_softmax(-1).gather(1, gold[:, None])[:, 0]
        out["teacher_topk_logits"][where[:, 0], where[:, 1]] = values.numpy()
        out["teacher_topk_ids"][where[:, 0], where[:, 1]] = ids.numpy()
        out["gold_logprob"][where[:, 0], where[:, 1]] = logp.numpy()
        out["gold_top1"][where[:, 0], where[:, 1]] = (ids[:, 0] == gold).numpy()
    return out


def teacher_score(found: dict[str, np.ndarray], split: PairSplit) -> dict[str, float]:
    """The teacher on the conditional MLM task, over every target position of `split` (`copies_pass`'s output):
    top-1 accuracy, and perplexity (exp of the mean negative log-probability of the gold token)."""
    real = split.arrays["target_ids"] != split.pad
    return {"token_accuracy": float(found["gold_top1"][real].mean()),
            "perplexity": float(math.exp(-found["gold_logprob"][real].mean()))}


def shard_batches(split: PairSplit, i: int, n: int, pairs_per_batch: int = PAIRS_PER_BATCH) -> list[np.ndarray]:
    """The batches of the copies' pass (pairs of similar length, shortest first) that share i of n takes: every
    n-th from the i-th, so each share holds short and long pairs alike and costs about 1/n of the pass. Each pair
    is in the same batch whatever the shares, so a share's soft targets are the whole pass's rows, bit for bit."""
    return split.by_length(pairs_per_batch)[0][i::n]


def soft_targets(teacher_dir, teacher, split: PairSplit, tokenizer, k: int = TOPK, precision: str = "no",
                 shard: tuple[int, int] | None = None) -> tuple[dict[str, np.ndarray], bool, float | None]:
    """The teacher's top-k logits and ids over `split`'s targets (`copies_pass` in `precision`), from
    `<teacher>/outputs/` or computed and cached there; whether they came from the cache; and the seconds they took
    (`cached_arrays`). Each precision's are cached apart.

    `shard` (i, n) computes and caches share i of n alone (`shard_batches`; its rows and their pair indices,
    `pairs`; the whole's rows where the whole is cached already), so n processes can make them side by side;
    without it, where every share of one n is cached and the whole is not, the whole is put together from them and
    cached (from the cache, then; its seconds the shares' sum: the pass's cost, not the merge's), else computed."""
    kind = f"cmlm-top{k}" + ("" if precision == "no" else f"-{precision}")
    h = hashlib.sha256(f"{kind}:{file_digest(Path(teacher_dir) / 'model.safetensors')}".encode())
    for key in ("source_ids", "target_ids"):
        h.update(np.ascontiguousarray(split.arrays[key]).tobytes())
    path = Path(teacher_dir) / "outputs" / f"cmlm_{h.hexdigest()[:20]}.safetensors"
    keep = ("teacher_topk_logits", "teacher_topk_ids")
    if shard is not None:
        i, n = shard
        batches = shard_batches(split, i, n)
        if not batches:
            raise UserError(f"share {i + 1} of {n} of the soft targets has no batch: the pass over {len(split)} "
                            f"pairs has {-(-len(split) // PAIRS_PER_BATCH)} batches of {PAIRS_PER_BATCH}")
        pairs = np.sort(np.concatenate(batches))
        if path.is_file():  # the whole pass already cached: the share is its rows
            whole, seconds = read_arrays(path)
            if all(len(v) == len(split) for v in whole.values()):
                return {**{key: whole[key][pairs] for key in keep}, "pairs": pairs}, True, seconds

        def make_share():
            found = copies_pass(teacher, split, tokenizer, k, precision=precision, shard=shard)
            return {**{key: found[key][pairs] for key in keep}, "pairs": pairs}

        return cached_arrays(_share_path(path, i, n), len(pairs), make_share)

    if (shares := _shares(path, len(split))) is not None:
        def assemble():
            whole = {key: np.zeros((len(split), *shares[0][key].shape[1:]), shares[0][key].dtype) for key in keep}
            for share in shares:
                for key in keep:
                    whole[key][share["pairs"]] = share[key]
            seconds = [share["seconds"] for share in shares]
            return whole, None if None in seconds else sum(seconds)

        whole, _, seconds = cached_made(path, len(split), assemble)
        return whole, True, seconds  # from the cache: its shares, put together here

    def make():
        found = copies_pass(teacher, split, tokenizer, k, precision=precision)
        return {key: v for key, v in found.items() if key in keep}

    return cached_arrays(path, len(split), make)


def _share_path(path: Path, i: int, n: int) -> Path:
    return path.with_name(f"{path.stem}.share{i + 1}of{n}{path.suffix}")


def _shares(path: Path, n_pairs: int) -> list[dict] | None:
    """Every share of the whole at `path`, for the first n whose shares are all there and hold each of the `n_pairs`
    pairs once between them (each with its `seconds`); None where there are none such (or the whole is there)."""
    if path.is_file():
        return None
    named = (re.fullmatch(r"share\d+of(\d+)", f.stem[len(path.stem) + 1:])
             for f in path.parent.glob(f"{path.stem}.share*{path.suffix}"))
    for n in sorted({int(m[1]) for m in named if m}):
        files = [_share_path(path, i, n) for i in range(n)]
        if all(f.is_file() for f in files):
            shares = [{**arrays, "seconds": seconds} for arrays, seconds in map(read_arrays, files)]
            if np.array_equal(np.sort(np.concatenate([share["pairs"] for share in shares])), np.arange(n_pairs)):
                return shares
    return None
