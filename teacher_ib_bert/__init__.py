"""The IB-BERT teacher's pre-training settings, as data: `configs/<preset>.json` per model preset (a name of
`mobilekd.models.presets.PRESETS`) holds the recipe defaults for that teacher (steps, learning rate, optimizer,
sequence length). `scripts/train_teacher.sh --preset NAME` (`mobilekd train-teacher`) reads them; a flag given on
the command line overrides its value. Add a file to add a teacher size. `adaptation.json` holds the defaults of
teacher adaptation (`--init-from`), which continues pre-training a checkpoint instead."""

from __future__ import annotations

from pathlib import Path

from mobilekd.errors import UserError
from mobilekd.fileio import read_json

CONFIGS = Path(__file__).resolve().parent / "configs"
TEACHER_PRESETS = sorted(p.stem for p in CONFIGS.glob("*.json"))


ADAPTATION = Path(__file__).resolve().parent / "adaptation.json"


def adaptation_defaults() -> dict:
    """The recipe defaults of teacher adaptation (without its description)."""
    return {k: v for k, v in read_json(ADAPTATION).items() if k != "description"}


def pretraining_defaults(preset: str) -> dict:
    """The recipe defaults of teacher `preset` (without its description)."""
    if preset not in TEACHER_PRESETS:
        raise UserError(f"unknown teacher preset {preset!r}; choose one of: {', '.join(TEACHER_PRESETS)}")
    return {k: v for k, v in read_json(CONFIGS / f"{preset}.json").items() if k != "description"}
