"""The one record every task reader returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TextExample:
    text_a: str
    text_b: str | None
    label: str | float | None  # a label name, a regression target, or None (unlabelled test data)
    source: str = ""  # file:line, for error messages and prediction files
