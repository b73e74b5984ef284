"""Command-line flags from config dataclasses, so that a default lives in one place: the dataclass field.

A field becomes a flag when its metadata has a `help`; the flag is `--field-name` unless the metadata names
another (`flag`; former names in `aliases`), its type is the default's (or metadata `type` where the default is
None; a list's items: `type` or str), `choices`, `nargs`, `metavar` and `required` pass through, `hidden` keeps it
out of --help, `default_help` says in --help what a None default means, `min` (or `above`, strictly) bounds its
value, `length` makes it the sequence length's flag (`add_length_flag`), a boolean defaulting to False is a
switch, and one defaulting to True is a switch with a `--no-` twin. transformers' `HfArgumentParser` does the same
for whole parsers; ours adds fields to a parser that also has hand-made flags, and keeps nested configs apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from mobilekd.errors import UserError


def _flag(f: dataclasses.Field) -> tuple[str, str]:
    """The field's flag and the attribute argparse stores it under (`--batch-size` -> `batch_size`; the sequence
    length's, `--max-len`, under the field's own name)."""
    if f.metadata.get("length"):
        return LENGTH_FLAG, f.name
    flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
    return flag, flag[2:].replace("-", "_")


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls, shown: dict | None = None,
              meta: dict[str, dict] | None = None, **defaults) -> None:
    """Add one flag per documented field of dataclass `cls`; `defaults` override the field defaults (a recipe's
    own choice, e.g. a smaller batch; None where the recipe fills it in later, described by `shown`), and the
    help says which default applies; `meta` overrides a field's metadata for this parser (a recipe's own choices
    or help text)."""
    for f in dataclasses.fields(cls):
        m = {**f.metadata, **(meta or {}).get(f.name, {})}
        if "help" not in m:
            continue
        flag, dest = _flag(f)
        default = defaults.get(f.name, _default(f))
        described = (shown or {}).get(f.name, m.get("default_help", default))
        if m.get("length"):
            add_length_flag(parser, dest=dest, default=default, help=f"{m['help']} (default {described})")
            continue
        if default is False:
            parser.add_argument(flag, dest=dest, action="store_true", help=m["help"])
            continue
        if default is True:
            parser.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=True,
                                help=f"{m['help']} (default on)")
            continue
        kind = m.get("type", type(_default(f)) if _default(f) is not None else str)
        if isinstance(default, list):  # a list's items are of the type given, or str
            kind = m.get("type", str)
        common = dict(dest=dest, type=kind, choices=m.get("choices"), nargs=m.get("nargs"), metavar=m.get("metavar"))
        if m.get("required"):
            parser.add_argument(flag, *m.get("aliases", []), required=True, help=m["help"], **common)
            continue
        shown_help = argparse.SUPPRESS if m.get("hidden") else f"{m['help']} (default {described})"
        parser.add_argument(flag, *m.get("aliases", []), default=default, help=shown_help, **common)


def flag_values(cls, args: argparse.Namespace) -> dict:
    """The values of the flags that `add_flags` added for `cls`, by field name, taken off `args`; a field's metadata
    "min" (or "above", strictly) bounds its flag's value."""
    flagged = {}
    for f in dataclasses.fields(cls):
        flag, dest = _flag(f)
        if "help" not in f.metadata or not hasattr(args, dest):
            continue
        flagged[f.name] = getattr(args, dest)
        if "min" in f.metadata:
            at_least(flag, flagged[f.name], f.metadata["min"])
        if "above" in f.metadata:
            at_least(flag, flagged[f.name], f.metadata["above"], strictly=True)
        delattr(args, dest)
    return flagged


def from_flags(cls, args: argparse.Namespace, **values):
    """An instance of `cls` from the parsed flags that `add_flags` added, and `values` for the other fields; the
    flags stay on `args` (the training loop's, read by several helpers)."""
    return cls(**{**flag_values(cls, argparse.Namespace(**vars(args))), **values})


def take_flags(cls, args: argparse.Namespace, **values):
    """`from_flags`, the flags taken off `args`: a recipe then reads its own settings from the instance alone."""
    return cls(**{**flag_values(cls, args), **values})


def at_least(flag: str, value, minimum, *, strictly: bool = False) -> None:
    """Refuse a flag's value below `minimum` (or not above it, `strictly`) with one line; None passes (unset)."""
    if value is not None and (value <= minimum if strictly else value < minimum):
        raise UserError(f"{flag} must be {'greater than' if strictly else 'at least'} {minimum}, got {value}")


def pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    """NAME=VALUE arguments as a dict; a malformed one, or a name given twice, is refused with one line."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UserError(f"{flag} {item!r}: expected NAME=VALUE")
        if name in out:
            raise UserError(f"{flag}: {name} given twice")
        out[name] = value
    return out


def fill_unset(args: argparse.Namespace, defaults: dict) -> argparse.Namespace:
    """Give every flag the user left unset (None) its value from `defaults` (a preset's or a task's)."""
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def flag_text(value) -> str:
    """A setting as command-line text: 2e-4, not 0.0002 (floats under 1e-3 in short scientific notation)."""
    if isinstance(value, float) and 0 < abs(value) < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return str(value)


LENGTH_FLAG, OLD_LENGTH_FLAG = "--max-len", "--seq-len"  # the sequence length's one name, and its former one


class _Deprecated(argparse.Action):
    """Store the value, and say on stderr that the flag's name is the former one."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {OLD_LENGTH_FLAG} is deprecated, use {LENGTH_FLAG} (the same value)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_length_flag(parser, *, dest: str = "max_len", **kwargs) -> None:
    """The sequence length, --max-len in every verb (`dest` the recipe's own name for it); --seq-len, left out of
    --help, accepted as a deprecated alias that says so."""
    parser.add_argument(LENGTH_FLAG, dest=dest, type=int, metavar="N", **kwargs)
    parser.add_argument(OLD_LENGTH_FLAG, dest=dest, type=int, action=_Deprecated, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
