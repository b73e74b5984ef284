"""A fine-tuned teacher's layer features over a training split, computed once and read from disk by every seed,
trial and method that matches them: the embeddings, hidden states, attention distributions, attention scores and
value vectors that layer matching (TinyBERT's intermediate step, MobileBERT's PKT over a task) compares a student
with. TinyBERT's task_distill.py runs the teacher at every step of every epoch (`main`: `teacher_model(input_ids,
...)` inside the step loop); the features do not change, so here the teacher runs once per split.

The store (`mobilekd.finetune.example_store`: segments of examples, each example known by its tokens, so every
seed's carve, every trial and every sequence length reads what another run stored) is a folder
`<teacher>/outputs/<key>-features/`, keyed (`store_key`) by the teacher's weights, the features kept and the
pass's precision (bf16 where this host's probe chose it, `outputs_precision`). A segment keeps one `.npy` file per
feature and layer, each example at its own length, back to back (no padding is stored): `hidden_3.npy` (tokens,
width), `scores_3.npy` (the examples' heads x length x length blocks, flat), `values_3.npy` (tokens, heads, head
size), in float16 (11 significant bits).

A batch read from the store holds zeros at its padded positions; the features a run compares are the same with
or without the store (to the store's precision: a bf16 pass where the host's probe chose it, float16 on disk)
because the matches read padded positions as zero on both sides (`Features.zero_padding`). A feature past
float16's range (a teacher without LayerNorm can reach one) keeps the teacher running at every step.
Before a segment is built, its size is estimated from its examples' lengths: where the store would grow over
`--teacher-store-gb`, or the segment over the disk's free space, the run says so in one line and runs the teacher at
every step instead.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from mobilekd.data.tasks import INPUTS
from mobilekd.fileio import file_digest
from mobilekd.finetune.example_store import ExampleStore, stored
from mobilekd.models.mobilebert import EncoderOutput
from mobilekd.transfer.objectives import LAYERED, Features, Match

TOKEN_FEATURES = ("embeddings", "hidden", "values")  # one row per token
PAIR_FEATURES = ("attention", "scores")  # one heads x length x length block per example
STORED = TOKEN_FEATURES + PAIR_FEATURES
BUDGET_GB = 20.0  # `--teacher-store-gb`'s default: all SST-2 under TinyBERT's matches of a 4-layer student, 5.2


def needed(matches: list[Match]) -> list[tuple[str, int | None]]:
    """The teacher's (feature, layer) pairs that `matches` read, in a stable order (the layer None for the
    embeddings); empty when one reads something the store does not keep (then the teacher runs as before)."""
    if any(m.feature not in STORED for m in matches):
        return []
    return sorted({(m.feature, m.teacher_layer if m.feature in LAYERED else None) for m in matches},
                  key=lambda f: (f[0], -1 if f[1] is None else f[1]))


def file_name(feature: str, layer: int | None) -> str:
    return feature if layer is None else f"{feature}_{layer}"


def store_key(teacher_dir: Path, features: list[tuple[str, int | None]], precision: str) -> str:
    """The store's folder name: the teacher's weights, the features kept and the pass's precision (the examples
    are not in it: each segment lists its own)."""
    h = hashlib.sha256(file_digest(Path(teacher_dir) / "model.safetensors").encode())
    h.update(repr(features).encode())
    return h.hexdigest()[:20] + ("-bf16" if precision == "bf16" else "") + "-features"


def estimated_bytes(lengths: np.ndarray, features: list[tuple[str, int | None]], config) -> int:
    """The store's size: float16 per token and width for the token features, per head and pair of positions for
    the attention blocks."""
    tokens, pairs = int(lengths.sum()), int((lengths.astype(np.int64) ** 2).sum())
    per = {"embeddings": tokens * config.hidden_size, "hidden": tokens * config.hidden_size,
           "values": tokens * config.true_hidden_size, "attention": pairs * config.num_attention_heads,
           "scores": pairs * config.num_attention_heads}
    return 2 * sum(per[f] for f, _ in features)


def held_bytes(outputs: Path) -> int:
    """What every feature store of a teacher (`outputs`, its folder of stores) holds: one budget for them all."""
    return sum(p.stat().st_size for p in outputs.glob("*-features/**/*") if p.is_file())


def refusal(size: int, held: int, where: Path, budget_gb: float) -> str | None:
    """Why a segment of `size` bytes will not be added to a teacher's feature stores, which already hold `held`
    (a line for the run's log), or None."""
    free = shutil.disk_usage(next(p for p in (where, *where.parents) if p.exists())).free
    if held + size > budget_gb * 1e9:
        return (f"teacher store: {(held + size) / 1e9:.1f} GB needed, over --teacher-store-gb {budget_gb:g}; the "
                f"teacher runs at every step instead")
    if size > 0.9 * free:
        return (f"teacher store: {size / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free at {where}; the teacher runs "
                f"at every step instead")
    return None


@torch.no_grad()
def build(folder: Path, teacher, split, features: list[tuple[str, int | None]], precision: str,
          batch_size: int = 64) -> dict:
    """Run the teacher over `split` once (batches of similar length, under bf16 autocast with `precision` bf16)
    and write each example's `features` at its own length into `folder`, a segment of the store: one `.npy` per
    feature, written through memory maps (a segment never needs to fit in memory); its manifest entries."""
    teacher.eval()
    device = next(teacher.parameters()).device
    cfg = teacher.config
    lengths = split.lengths.astype(np.int64)
    token_at, pair_at = offsets(lengths, cfg.num_attention_heads)
    depth = max((l for _, l in features if l is not None), default=-1) + 1
    head = cfg.true_hidden_size // cfg.num_attention_heads  # a bottleneck teacher's attention is narrower
    arrays = {}
    for f, l in features:
        shape = ((int(token_at[-1]), cfg.hidden_size) if f in ("embeddings", "hidden") else
                 (int(token_at[-1]), cfg.num_attention_heads, head) if f == "values" else (int(pair_at[-1]),))
        arrays[(f, l)] = np.lib.format.open_memmap(folder / f"{file_name(f, l)}.npy", "w+", np.float16, shape)
    batches, _ = split.by_length(batch_size)
    for indices in tqdm(batches, desc="teacher store", leave=False):
        b = split.batch(indices)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = teacher.mobilebert(*(b[k].to(device) for k in INPUTS), num_layers=max(depth, 1),
                                     output_feature_maps=True, output_attentions=True)
        for (f, l), target in arrays.items():
            x = _select(out, f, l).float().cpu().numpy()
            if np.abs(x).max(initial=0.0) >= np.finfo(np.float16).max or not np.isfinite(x).all():
                raise Overflow(f"the teacher's {file_name(f, l)} reaches {np.abs(x).max():.3g}, past float16's range")
            x = x.astype(np.float16)
            for row, i in enumerate(indices):
                n = lengths[i]
                if f in PAIR_FEATURES:
                    target[pair_at[i]:pair_at[i + 1]] = x[row, :, :n, :n].reshape(-1)
                elif f == "values":
                    target[token_at[i]:token_at[i + 1]] = x[row, :, :n].transpose(1, 0, 2)
                else:
                    target[token_at[i]:token_at[i + 1]] = x[row, :n]
    for target in arrays.values():
        target.flush()
    return {"features": features, "heads": cfg.num_attention_heads, "precision": precision}


class Overflow(ValueError):
    """A feature the store's float16 cannot hold (a teacher without LayerNorm, as MobileBERT's NoNorm, can reach
    such values): the run keeps the teacher running at every step."""


def offsets(lengths: np.ndarray, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each example starts among a segment's token rows and among its attention blocks' values."""
    lengths = lengths.astype(np.int64)
    return (np.concatenate([[0], np.cumsum(lengths)]), np.concatenate([[0], np.cumsum(heads * lengths ** 2)]))


def _select(out: EncoderOutput, feature: str, layer: int | None) -> torch.Tensor:
    return {"embeddings": lambda: out.embeddings, "hidden": lambda: out.feature_maps[layer],
            "attention": lambda: out.attentions[layer], "scores": lambda: out.attention_scores[layer],
            "values": lambda: out.values[layer]}[feature]()


class TeacherStore(ExampleStore):
    """The store's segments, opened for one split: `features(batch, wanted)` gives the teacher's `Features` for a
    batch of the split's examples (by its `example_index`), padded with zeros to the batch's width."""

    def __init__(self, folder: Path, keys: np.ndarray, heads: int):
        super().__init__(folder, keys)
        self.heads = heads
        self.offsets = [offsets(seg.lengths, heads) for seg in self.segments]

    def features(self, batch: dict, wanted: list[tuple[str, int | None]]) -> Features:
        index = batch["example_index"].cpu().numpy()
        mask = batch["attention_mask"]
        width, heads = mask.shape[1], self.heads
        enc = EncoderOutput(None)
        depth = max((l for _, l in wanted if l is not None), default=-1) + 1
        enc.feature_maps, enc.attentions, enc.attention_scores, enc.values = ([None] * depth for _ in range(4))
        placed = [(*self.where[i], int(self.segments[self.where[i][0]].lengths[self.where[i][1]])) for i in index]
        for f, l in wanted:
            x = None
            for row, (s, j, n) in enumerate(placed):  # each example's segment, row there and length
                kept, (token_at, pair_at) = self.segments[s].arrays[file_name(f, l)], self.offsets[s]
                if f in PAIR_FEATURES:
                    part = np.asarray(kept[pair_at[j]:pair_at[j + 1]], np.float32).reshape(heads, n, n)
                    x = torch.zeros(len(index), heads, width, width) if x is None else x
                    x[row, :, :n, :n] = torch.from_numpy(part)
                else:
                    part = np.asarray(kept[token_at[j]:token_at[j + 1]], np.float32)
                    x = torch.zeros(len(index), width, *part.shape[1:]) if x is None else x
                    x[row, :n] = torch.from_numpy(part)
            if f == "values":
                x = x.transpose(1, 2)  # (B, heads, T, head size), as the encoder gives them
            x = x.to(mask.device)
            if f == "embeddings":
                enc.embeddings = x
            else:
                {"hidden": enc.feature_maps, "attention": enc.attentions, "scores": enc.attention_scores,
                 "values": enc.values}[f][l] = x
        return Features(enc, attention_mask=mask, zero_padding=True)


def teacher_store(teacher_dir, teacher, split, matches: list[Match], precision: str, budget_gb: float) -> \
        tuple[TeacherStore | None, dict]:
    """The store of the teacher's features that `matches` read, opened for `split`: the examples no segment holds
    yet are computed into a new segment first (`build`), or None with the reason where they will not be (a match
    reads a feature the store does not keep, or the store would grow over the budget or the free disk). The
    record says which, for the run's results: `teacher_store` (its name, or why none), `teacher_store_bytes`,
    `teacher_store_hit_rate` (the share of the split's examples found stored) and `teacher_store_made_seconds`
    (the teacher's passes over the split's examples, whichever run made them: `ExampleStore.made_seconds`)."""
    features = needed(matches)
    if not features:
        return None, {"teacher_store": "none: a match reads a feature the store does not keep"}
    if budget_gb <= 0:
        return None, {"teacher_store": "none: --teacher-store-gb 0"}
    folder = Path(teacher_dir) / "outputs" / store_key(teacher_dir, features, precision)
    heads = teacher.config.num_attention_heads
    try:
        store, why = stored(folder, split, lambda part, tmp: build(tmp, teacher, part, features, precision),
                            refusal=lambda missing: refusal(estimated_bytes(split.lengths[missing], features,
                                                                            teacher.config),
                                                            held_bytes(folder.parent), folder, budget_gb),
                            opener=lambda f, keys: TeacherStore(f, keys, heads))
    except Overflow as err:
        store, why = None, f"teacher store: {err}; the teacher runs at every step instead"
    if store is None:
        print(why)
        return None, {"teacher_store": "none: " + why.split(": ", 1)[1]}
    return store, {"teacher_store": store.name, "teacher_store_bytes": store.bytes(),
                   "teacher_store_hit_rate": round(store.hit_rate, 4),
                   "teacher_store_made_seconds": store.made_seconds(), "teacher_store_precision": precision}
