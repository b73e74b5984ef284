"""The one record every task reader returns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TextExample:
    text_a: str
    text_b: str | None
    label: str | float | None  # a label name, a regression target, or None (unlabelled test data)
    source: str = ""  # file:line, for error messages and prediction files


def source_file(where: str) -> Path:
    """The file of a record's `file:line` (a TextExample's `source`, a TextPair's `origin`)."""
    return Path(where.rsplit(":", 1)[0])


def read_examples(path) -> list[TextExample] | None:
    """The examples a cache file holds (`write_examples`'s JSON), or None where it is damaged (made again)."""
    try:
        return [TextExample(**r) for r in json.loads(Path(path).read_text(encoding="utf-8"))]
    except (ValueError, TypeError):
        return None


def write_examples(examples: list[TextExample], path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump([e.__dict__ for e in examples], f)
