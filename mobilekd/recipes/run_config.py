"""Print a run configuration's settings (configs/demo.json; `mobilekd.run_config`) as shell assignments: a
section of flags becomes an array (`train-teacher` -> TRAIN_TEACHER=(...), each task of `tasks` TASK_NAME=(...),
of `teacher-tasks` TEACHER_TASK_NAME=(...)), any other setting a variable (`student_lr` -> STUDENT_LR=2e-4).
scripts/demo.sh evaluates them; run it on your copy of the file to see what the demo will run with it.

    mobilekd run-config                                                     # configs/demo.json, its first mode
    mobilekd run-config my_demo.json --mode scratch-teacher --overlay micro
"""

from __future__ import annotations

import argparse
import re
import shlex

from mobilekd.errors import cli_entry, located
from mobilekd.fileio import REPO_ROOT
from mobilekd.flags import flag_text
from mobilekd.run_config import DEMO, flags, run_settings

PER_TASK = {"tasks": "task", "teacher-tasks": "teacher_task"}  # settings of a section per task -> their names' prefix


def shell_lines(settings: dict, where: str) -> list[str]:
    """The settings as bash assignments (names upper-cased, - to _), every value quoted for the shell."""
    lines = []
    for key, value in settings.items():
        if key == "description":
            continue
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key):
            raise located(where, f"{key!r}: a setting's name is letters, digits, - and _")
        name = key.upper().replace("-", "_")
        if key in PER_TASK:
            if not isinstance(value, dict):
                raise located(where, f'{key}: expected {{"TASK": {{"--flag": value}}, ...}}, got {value!r}')
            lines += [line for task, section in value.items()
                      for line in shell_lines({f"{PER_TASK[key]}_{task}": section}, f"{where}: {key}")]
        elif isinstance(value, dict):
            lines.append(f"{name}=({shlex.join(flags(value, f'{where}: {key}'))})")
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            lines.append(f"{name}={shlex.quote(flag_text(value))}")
        else:
            raise located(where, f"{key}: expected a flags object, a number or a string; got {value!r}")
    return lines


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd run-config", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    default = DEMO.relative_to(REPO_ROOT)
    p.add_argument("config", nargs="?", default=str(DEMO), help=f"the run configuration (default {default})")
    p.add_argument("--mode", help="which of its modes (default: its first)")
    p.add_argument("--overlay", action="append", default=[], help="an overlay to apply (repeatable), e.g. micro")
    p.add_argument("--keys", nargs="+", metavar="KEY",
                   help="the settings the caller reads, all required and no others allowed (scripts/demo.sh names "
                        "its own, so that no setting can overwrite another of its variables)")
    args = p.parse_args(argv)
    settings = run_settings(args.config, args.mode, args.overlay)
    if args.keys:
        have = set(settings) - {"description"}
        for problem, names in (("missing", set(args.keys) - have), ("not read here", have - set(args.keys))):
            if names:
                mode = f"mode {args.mode}" if args.mode else "its first mode"
                raise located(args.config, f"settings {problem} in {mode}: {', '.join(sorted(names))} (the settings "
                                           f"are: {', '.join(args.keys)})")
    print("\n".join(shell_lines(settings, args.config)))


if __name__ == "__main__":
    main()
