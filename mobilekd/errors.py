"""One clear line for bad input: every user-facing failure is a `UserError` naming the file and the problem."""

from __future__ import annotations

import functools
import sys


class UserError(Exception):
    """A problem with the user's input (file, config, checkpoint): printed as one line, exit code 2."""

    exit_code = 2


def located(path, problem: str, line: int | None = None) -> UserError:
    """`path[:line]: problem`, the one format every reader uses."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return UserError(f"{where}: {problem}")


def last_line(*outputs: str) -> str:
    """The last line of the first non-empty output of a child process: its error, for one line of ours."""
    return next((o.strip().splitlines()[-1] for o in outputs if o and o.strip()), "no output")


def cli_entry(main):
    """Wrap a `main(argv)` so that a UserError ends the program with one line on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapped(argv=None):
        try:
            return main(argv)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(err.exit_code)

    return wrapped
