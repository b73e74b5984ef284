"""Users' own classification data: CSV with a header, or JSON lines, with `text`, optional `text_pair`, and
`label` (a class name, or a number for regression)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mobilekd.data.examples import TextExample
from mobilekd.errors import located
from mobilekd.fileio import read_lines


def records(path):
    """Yield (line number, dict) from a .csv or .jsonl file (optionally gzipped)."""
    suffixes = Path(path).suffixes
    if ".jsonl" in suffixes or ".json" in suffixes:
        for number, line in read_lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise located(path, f"not a JSON object ({err.msg})", number) from None
            if not isinstance(record, dict):
                raise located(path, "not a JSON object", number)
            yield number, record
    elif ".csv" in suffixes or ".tsv" in suffixes:
        # A real CSV reader over the whole file: a quoted field may hold the delimiter or span lines. A TSV has no
        # quoting (GLUE's, a spreadsheet's export): a quote is text, a row is a line.
        tsv = ".tsv" in suffixes
        reader = csv.reader((line + "\n" for _, line in read_lines(path)), delimiter="\t" if tsv else ",",
                            quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
        try:
            columns = next(reader, None)
            if columns is None:
                raise located(path, "empty file (no header, no rows)")
            first = reader.line_num + 1  # the line where the next record starts
            for fields in reader:
                number, first = first, reader.line_num + 1
                if len(fields) <= 1 and not "".join(fields).strip():
                    continue  # a blank line
                if len(fields) != len(columns):
                    raise located(path, f"row has {len(fields)} columns, expected {len(columns)} ({columns})",
                                  number)
                yield number, dict(zip(columns, fields))
        except csv.Error as err:
            raise located(path, f"not valid CSV ({err})", reader.line_num) from None
    else:
        raise located(path, "unknown format: use .csv, .tsv or .jsonl (optionally .gz)")


def read_custom(path, labels: list[str] | None = None, regression: bool = False) -> list[TextExample]:
    """Read `text[, text_pair], label` records. With `labels`, any other label is an error. A file whose rows
    differ in having a `text_pair` or a `label` is refused, naming the first row without one: a blank second text
    would otherwise drop (or break) the pairs, and an unlabelled row among labelled ones cannot be scored."""
    examples, numbers = [], []
    for number, record in records(path):
        if "text" not in record:
            raise located(path, f"record has no 'text' field (fields: {sorted(record)})", number)
        text_a = str(record["text"]).strip()
        text_b = str(record.get("text_pair") or "").strip() or None  # a blank cell is no second text
        if not text_a:
            raise located(path, "empty text", number)
        label = record.get("label")
        if label is not None and label != "":
            if regression:
                try:
                    label = float(label)
                except (TypeError, ValueError):
                    raise located(path, f"label {label!r} is not a number", number) from None
            else:
                label = str(label)
                if labels is not None and label not in labels:
                    raise located(path, f"unknown label {label!r} (expected one of {labels})", number)
        else:
            label = None
        examples.append(TextExample(text_a, text_b, label, f"{path}:{number}"))
        numbers.append(number)
    if not examples:
        raise located(path, "no examples (the file is empty)")
    for field, has in (("text_pair", lambda e: e.text_b is not None), ("label", lambda e: e.label is not None)):
        if len({has(e) for e in examples}) > 1:  # a pair task's second text, or a label, missing on some rows
            lacking = next(n for e, n in zip(examples, numbers) if not has(e))
            other = next(n for e, n in zip(examples, numbers) if has(e))
            raise located(path, f"no {field} on this row, while line {other} has one: give every row one, or none",
                          lacking)
    return examples
