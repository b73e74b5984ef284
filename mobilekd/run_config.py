"""Run configurations: a whole pipeline's recipe flags as data, in one file that a user copies and edits
(configs/NAME.json). configs/demo.json is the demo's: scripts/demo.sh reads it (through `mobilekd run-config`)
and so does benchmarks.teacher_value, so that the demo's steps and learning rates have one home.

A file holds `modes` (alternative pipelines, e.g. packaged-teacher and scratch-teacher) and `overlays` (changes
applied on request, e.g. micro); every other key is shared by the modes. A mode's keys are merged over the
shared ones, then each overlay's over those, key by key into nested objects; a null removes a key. A section is
a flags object, {"--flag": value}: a number or a string is the flag's value, a list its values, true a switch
(false leaves it out); a key that is not a section is a scalar setting (e.g. a learning rate, a model preset).
`description` keys are for the reader.
"""

from __future__ import annotations

from pathlib import Path

from mobilekd.errors import located
from mobilekd.flags import flag_text
from mobilekd.fileio import REPO_ROOT, read_json

CONFIGS = REPO_ROOT / "configs"
DEMO = CONFIGS / "demo.json"
RESERVED = ("description", "modes", "overlays")


def _merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = _merged({}, value) if isinstance(value, dict) else value
    return out


def run_settings(path=DEMO, mode: str | None = None, overlays=()) -> dict:
    """The settings of `mode` (default: the file's first) with `overlays` applied, in that order."""
    path = Path(path)
    config = read_json(path)
    if not isinstance(config, dict) or not isinstance(config.get("modes"), dict) or not config["modes"]:
        raise located(path, 'expected a JSON object with "modes": {"NAME": {...}, ...}')
    modes, known = config["modes"], config.get("overlays") or {}
    if not isinstance(known, dict):
        raise located(path, 'expected "overlays": {"NAME": {...}, ...}')
    mode = mode or next(iter(modes))
    if mode not in modes:
        raise located(path, f"no mode {mode!r}; modes: {', '.join(modes)}")
    for kind, name, part in [("mode", mode, modes[mode]), *(("overlay", n, known.get(n)) for n in overlays)]:
        if part is None and kind == "overlay":
            raise located(path, f"no overlay {name!r}; overlays: {', '.join(known) or 'none'}")
        if not isinstance(part, dict):
            raise located(path, f"{kind} {name!r}: expected a JSON object of settings, got {part!r}")
    settings = _merged({k: v for k, v in config.items() if k not in RESERVED}, modes[mode])
    for name in overlays:
        settings = _merged(settings, known[name])
    return settings


def flags(section: dict, where: str = "flags") -> list[str]:
    """A flags object as an argument list: {"--steps": 6, "--threads": [1, 2], "--resume": true} -> --steps 6
    --threads 1 2 --resume. `where` names the section in an error."""
    if not isinstance(section, dict):
        raise located(where, f"expected a flags object {{\"--flag\": value}}, got {section!r}")
    argv = []
    for flag, value in section.items():
        if flag == "description":
            continue
        if not flag.startswith("--"):
            raise located(where, f"{flag!r} is not a flag (--name)")
        values = value if isinstance(value, list) else [value]
        if value is True:
            argv.append(flag)
        elif value is not False and values and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                   for v in values):
            argv += [flag, *map(flag_text, values)]
        elif value is not False:
            raise located(where, f"{flag}: expected a number, a string, a list of them, or true/false; got {value!r}")
    return argv
