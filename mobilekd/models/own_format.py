"""Model directories of our own formats, for models transformers has no class for (the BiLSTM's `bilstm.json`, the
seq2seq student's `seq2seq.json`): the weights in model.safetensors beside the tokenizer's files
(`mobilekd.models.hf.save_weights`), the configuration a JSON file written last (atomically), so that a directory
holding it is whole. Read back with the file at fault named, in one line, when a configuration or a weights file
does not fit."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from mobilekd.errors import located
from mobilekd.fileio import read_json, write_json
from mobilekd.models.hf import save_weights


def save_own(model: torch.nn.Module, out_dir, config_file: str, tokenizer=None) -> Path:
    """`save_weights` (model.safetensors, the tokenizer's files), then `config_file` from `model.config`."""
    out_dir = save_weights(model, out_dir, tokenizer)
    write_json(out_dir / config_file, model.config.to_dict())
    return out_dir


def load_own_config(model_dir, config_file: str, config_class, what: str):
    """`config_class.from_dict` of MODEL/config_file; missing or unfit, one line naming the file."""
    path = Path(model_dir) / config_file
    if not path.is_file():
        raise located(path, f"missing: not a {what} model directory")
    try:
        return config_class.from_dict(read_json(path))
    except (TypeError, ValueError, AttributeError) as err:
        raise located(path, f"not a {what} configuration: {err}") from None


def load_own(model_dir, config_file: str, config_class, model_class, what: str) -> torch.nn.Module:
    """The saved model in eval mode: its configuration (`load_own_config`) built, then its weights loaded, each of
    them required, none unknown, every shape the configuration's; otherwise one line naming the file."""
    config_path = Path(model_dir) / config_file
    config = load_own_config(model_dir, config_file, config_class, what)
    try:
        model = model_class(config)
    except (ValueError, RuntimeError) as err:
        raise located(config_path, f"not a {what} configuration: {err}") from None
    weights = Path(model_dir) / "model.safetensors"
    if not weights.is_file():
        raise located(weights, f"missing: the {what} model's weights")
    try:
        state = load_file(str(weights))
    except Exception as err:  # safetensors' header errors
        raise located(weights, f"not a readable safetensors file ({str(err)[:200]})") from None
    own = model.state_dict()
    wrong = ([f"lacks {k}" for k in own if k not in state] + [f"has an unknown {k}" for k in state if k not in own] +
             [f"{k} is {tuple(state[k].shape)}, not {tuple(v.shape)}" for k, v in own.items()
              if k in state and state[k].shape != v.shape])
    if wrong:
        raise located(weights, f"does not hold this {config_file}'s weights: {'; '.join(wrong[:3])}"
                               f"{f' (and {len(wrong) - 3} more)' if len(wrong) > 3 else ''}")
    model.load_state_dict(state)
    return model.eval()
