"""Atomic, exactly-resumable training checkpoints.

OUT/checkpoint/ holds model.safetensors (weights); the optimizer, scheduler and RNG state as
training_state.safetensors (its tensors) and training_state.json (everything else, with a reference where each
tensor was); and trainer.json (stage, step, the run's settings). Nothing is pickled, so nothing is unpickled. A
new checkpoint is written to a sibling directory and swapped in by rename, so a kill at any moment leaves the last
complete checkpoint readable.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from mobilekd.errors import UserError, located
from mobilekd.models.hf import load_state

NAME = "checkpoint"
STATE_TENSORS, STATE_JSON = "training_state.safetensors", "training_state.json"


def save_checkpoint(out_dir, model, optimizer, scheduler, trainer: dict) -> Path:
    """Weights, RNG and trainer.json, and the optimizer and schedule when given (mid-stage: at a stage boundary
    the next stage starts a fresh optimizer, so its state would be dead weight, twice the model's size for Adam)."""
    out_dir = Path(out_dir)
    final, new, old = out_dir / NAME, out_dir / f".{NAME}-new", out_dir / f".{NAME}-old"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    save_file(_unshared(model.state_dict()), str(new / "model.safetensors"))
    state = {"torch_rng": torch.get_rng_state()}
    if optimizer is not None:
        state.update(optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict())
    tensors = {}
    (new / STATE_JSON).write_text(json.dumps(_encode(state, tensors)))
    save_file(_unshared(tensors), str(new / STATE_TENSORS))
    (new / "trainer.json").write_text(json.dumps(trainer, indent=2))
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(new, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _encode(value, tensors: dict):
    """`value` (an optimizer's or scheduler's state dict) as JSON: each tensor put in `tensors` under a new key
    (not copied: `_unshared` copies only tensors that share storage) and replaced by {"tensor": key}; dicts whose
    keys are not all strings (an optimizer's state is keyed by parameter index) and tuples (Adam's betas) tagged,
    so `_decode` gives back exactly what `load_state_dict` expects."""
    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value
        return {"tensor": key}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"dict": {k: _encode(v, tensors) for k, v in value.items()}}
        if not all(isinstance(k, (str, int, float, bool)) for k in value):  # JSON could not give them back
            raise TypeError(f"cannot store a dict keyed by {sorted({type(k).__name__ for k in value})} in a "
                            "checkpoint's training state")
        return {"items": [[k, _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a checkpoint's training state")


def _decode(value, tensors: dict):
    """`_encode`'s inverse, with `tensors` the safetensors file it wrote."""
    if not isinstance(value, dict):
        return value
    (tag, inner), = value.items()
    if tag == "tensor":
        return tensors[inner]
    if tag == "dict":
        return {k: _decode(v, tensors) for k, v in inner.items()}
    if tag == "items":
        return {k: _decode(v, tensors) for k, v in inner}
    items = [_decode(v, tensors) for v in inner]
    return tuple(items) if tag == "tuple" else items


def _unshared(state: dict) -> dict:
    """The state's tensors, each with storage of its own: safetensors refuses tensors that share memory, as a
    module used twice has them (a QAT graph's shared observers); loading copies the one value into both."""
    out, seen = {}, set()
    for key, value in state.items():
        value = value.detach().contiguous().cpu()
        storage = value.untyped_storage().data_ptr()
        out[key] = value.clone() if storage in seen and value.numel() else value
        seen.add(storage)
    return out


def find_checkpoint(out_dir) -> Path | None:
    """The newest complete checkpoint (a kill between the two renames leaves only the old one)."""
    for path in (Path(out_dir) / NAME, Path(out_dir) / f".{NAME}-old"):
        if (path / "trainer.json").is_file():
            return path
    return None


def read_trainer_state(path: Path, run: dict) -> dict:
    """trainer.json of a checkpoint, refused when it belongs to another run (other settings or model)."""
    try:
        trainer = json.loads((path / "trainer.json").read_text())
        saved_run = trainer["run"]
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError, TypeError) as err:
        raise located(path / "trainer.json", f"not a mobilekd checkpoint ({err}){start_over(path)}") from None
    differences = setting_differences(saved_run, run)
    if differences:
        key, saved, now = differences[0]
        raise located(path / "trainer.json", f"checkpoint was made with {key}={saved!r}, this run has {key}={now!r}"
                                             f"{f' (and {len(differences) - 1} more)' if len(differences) > 1 else ''}"
                                             f"; use another --out or the same settings")
    return trainer


_ABSENT = object()


def setting_differences(saved: dict, now: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, saved value, current value) for every setting that differs, descending into nested dicts (a
    model config). A setting the checkpoint does not have, because it was added to mobilekd after the checkpoint
    was made, is no difference while it is None now (off, the behaviour the older run had)."""
    out = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key, _ABSENT), now.get(key, _ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            out += setting_differences(a, b, f"{prefix}{key}.")
        elif (a is _ABSENT and b is None) or (b is _ABSENT and a is None):
            continue
        elif a != b:
            out.append((f"{prefix}{key}", None if a is _ABSENT else a, None if b is _ABSENT else b))
    return out


def start_over(path: Path) -> str:
    """What a user can do about a checkpoint that cannot be resumed."""
    return f"; to start over, remove {path} (or run without --resume into another --out)"


def _read_tensors(path: Path, name: str) -> dict:
    """One safetensors file of the checkpoint at `path`; an unreadable one is a UserError saying how to start
    over."""
    try:
        return load_state(path / name)
    except UserError as err:
        raise UserError(f"{err}{start_over(path)}") from None


def load_checkpoint(path: Path, model, optimizer=None, scheduler=None) -> None:
    """Weights and RNG always; optimizer and scheduler state when given (mid-stage)."""
    state = _read_tensors(path, "model.safetensors")
    own = model.state_dict()
    if set(state) != set(own) or any(state[k].shape != own[k].shape for k in own):
        raise located(path / "model.safetensors", "weights do not fit this model (another architecture)"
                      + start_over(path))
    model.load_state_dict(state)
    if not (path / STATE_JSON).is_file():
        older = (path / "training_state.pt").is_file()
        raise located(path / STATE_JSON, "missing" + (" (an older mobilekd kept this state in a pickled "
                                                      "training_state.pt, which is not read)" if older else "")
                      + start_over(path))
    tensors = _read_tensors(path, STATE_TENSORS)
    try:
        extra = _decode(json.loads((path / STATE_JSON).read_text()), tensors)
        if optimizer is not None:
            optimizer.load_state_dict(extra["optimizer"])
            scheduler.load_state_dict(extra["scheduler"])
        torch.set_rng_state(extra["torch_rng"])
    except Exception as err:  # any failure here means the files are not what we wrote
        raise located(path / STATE_JSON, f"unreadable training state ({type(err).__name__}: {err})"
                      + start_over(path)) from None
