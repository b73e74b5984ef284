"""Classification tasks a user might bring, built from text the repo ships (and, for docstring-library, the text of
installed packages), as CSVs `mobilekd ship --data` reads; and the table of the rows `ship` made on them before its
search (issue 34, item 5: one fixed recipe, the teacher's layers 0 and 5 with logit KD, docs/results/custom.json),
kept as the reference of the cost of honesty. `python -m benchmarks.ship` runs today's `ship` on them.

    python -m benchmarks.custom --table [--write]       # the earlier rows' table (docs/ship_runs.md)

The tasks (CSV files written to DATA/TASK/{train,dev}.csv with a `text,label` header; labels are words):
  stsb-genre    STS-B's first sentences -> their genre (news, captions, forum): 3 classes, short texts; train and
                dev are GLUE's splits, dev sentences also in train removed
  austen-novel  a paragraph of Jane Austen -> its novel (6 classes), long texts (paragraphs of 8 words or more);
                dev is the last tenth of each novel's paragraphs, train 3,000 of the others drawn with seed 0
                (neighbouring paragraphs straddle the split at one point a novel)
  brown-genre   a Brown corpus sentence (5 words or more) -> its document's category: the nine informative prose
                categories (press reportage, editorial, reviews, religion, skills and hobbies, popular lore, belles
                lettres, government documents, learned) and fiction (the six imaginative ones merged): 10 classes;
                dev is every tenth document, train 6,000 sentences of the others drawn with seed 0
  cola-source   a linguistics example sentence -> the book or article it comes from (CoLA's eight largest sources):
                8 classes, 7,308 / 458 short sentences, GLUE's splits (issue 74, item 5)
  docstring-library  the first paragraph of a public function's or class's docstring -> its library (numpy, scipy,
                scikit-learn, torch, matplotlib, transformers, as constraints.txt pins them): 6 classes, 2,160
                training examples, long texts; dev from other source files (issue 74, item 5)
The Brown documents' categories follow from their order in the corpus (corpus/brown.txt.gz holds the 500 documents
in the standard order ca01..cr09, a blank line between documents) and the standard counts per category.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks.command import show_table, table_flags
from benchmarks.stats import judged_cell, mean_std_cell, paired_differences
from mobilekd.fileio import REPO_ROOT, atomic_path

BROWN_CATEGORIES = [("press reportage", 44), ("editorial", 27), ("reviews", 17), ("religion", 17),
                    ("skills and hobbies", 36), ("popular lore", 48), ("belles lettres", 75),
                    ("government documents", 30), ("learned", 80), ("fiction", 29 + 24 + 6 + 29 + 29 + 9)]
TRAIN = {"austen-novel": 3_000, "brown-genre": 6_000}  # training examples drawn (seed 0): the
# whole sets (8,470 and 46,130) cost hours of teacher fine-tuning on 2 cores at `mobilekd ship`'s budgets


def _split_blocks(path: Path) -> list[list[str]]:
    """A shipped corpus's blocks (documents or books: the lines between blank lines)."""
    blocks, block = [], []
    for line in gzip.open(path, "rt", encoding="utf-8"):
        if line.strip():
            block.append(line.strip())
        elif block:
            blocks.append(block)
            block = []
    return blocks + ([block] if block else [])


def stsb_genre() -> dict[str, list[tuple[str, str]]]:
    def read(split):
        rows = list(csv.reader(gzip.open(REPO_ROOT / f"data/glue/STS-B/{split}.tsv.gz", "rt", encoding="utf-8"),
                               delimiter="\t", quoting=csv.QUOTE_NONE))
        head = rows[0]
        text, genre = head.index("sentence1"), head.index("genre")
        return [(r[text], {"forums": "forum"}.get(g, g)) for r in rows[1:]  # dev says forums, train forum
                for g in [r[genre].removeprefix("main-")]]
    train = read("train")
    seen = {t for t, _ in train}
    return {"train": train, "dev": [(t, g) for t, g in read("dev") if t not in seen]}


def austen_novel() -> dict[str, list[tuple[str, str]]]:
    train, dev = [], []
    for book in _split_blocks(REPO_ROOT / "data/corpus/austen.txt.gz"):
        title = book[0].title().replace(" And ", " and ")
        paragraphs = [p for p in book[1:] if len(p.split()) >= 8]
        cut = len(paragraphs) - len(paragraphs) // 10
        train += [(p, title) for p in paragraphs[:cut]]
        dev += [(p, title) for p in paragraphs[cut:]]
    return {"train": _draw(train, TRAIN["austen-novel"]), "dev": dev}


def _draw(examples: list, n: int) -> list:
    """`n` of the examples, drawn with seed 0, in their order."""
    keep = np.random.default_rng(0).choice(len(examples), n, replace=False)
    return [examples[i] for i in sorted(keep)]


def brown_genre() -> dict[str, list[tuple[str, str]]]:
    documents = _split_blocks(REPO_ROOT / "data/corpus/brown.txt.gz")
    labels = [name for name, count in BROWN_CATEGORIES for _ in range(count)]
    if len(documents) != len(labels):
        raise ValueError(f"data/corpus/brown.txt.gz: {len(documents)} documents, expected {len(labels)}")
    train, dev = [], []
    for i, (document, label) in enumerate(zip(documents, labels)):
        (dev if i % 10 == 9 else train).extend((s, label) for s in document if len(s.split()) >= 5)
    return {"train": _draw(train, TRAIN["brown-genre"]), "dev": dev}


# cola-source's classes: the eight largest in-domain sources of CoLA (data/glue/CoLA/README.cola_public, section 6)
COLA_SOURCES = {"ks08": "Kim and Sells (2008)", "l-93": "Levin (1993)", "r-67": "Ross (1967)",
                "ad03": "Adger (2003)", "c_13": "Carnie (2013)", "bc01": "Baltin and Collins (2001)",
                "sks13": "Sportiche et al. (2013)", "m_02": "Miller (2002)"}


def cola_source() -> dict[str, list[tuple[str, str]]]:
    """A linguistics example sentence -> the book or article it was taken from: CoLA's train and dev splits, their
    sentences from the eight largest sources (a source is a topic: Levin's verb alternations, Ross's islands)."""
    def read(split):
        rows = csv.reader(gzip.open(REPO_ROOT / f"data/glue/CoLA/{split}.tsv.gz", "rt", encoding="utf-8"),
                          delimiter="\t", quoting=csv.QUOTE_NONE)
        return [(r[3], COLA_SOURCES[r[0]]) for r in rows if r[0] in COLA_SOURCES]
    train = read("train")
    seen = {t for t, _ in train}
    return {"train": train, "dev": [(t, g) for t, g in read("dev") if t not in seen]}


# docstring-library's classes: installed packages (their versions pinned in constraints.txt), read as text (ast),
# never imported
LIBRARIES = {"numpy": "numpy", "scipy": "scipy", "sklearn": "scikit-learn", "torch": "torch",
             "matplotlib": "matplotlib", "transformers": "transformers"}
DOCSTRINGS = 400  # drawn a library (seed 0): 2,400 examples in all, a tenth of them dev
SOURCE_FILES = 200  # files read a library, evenly spaced in path order (reading all of torch's and transformers'
# takes minutes)


def docstring_library() -> dict[str, list[tuple[str, str]]]:
    """The first paragraph of a public function's or class's docstring (8 words or more) -> the library it
    documents, from SOURCE_FILES of its files; dev is the docstrings of every tenth of them, train the others'."""
    import ast
    import importlib.util

    train, dev = [], []
    for module, label in LIBRARIES.items():
        root = Path(importlib.util.find_spec(module).origin).parent
        mine = {"train": [], "dev": []}
        files = [p for p in sorted(root.rglob("*.py")) if "test" not in p.relative_to(root).as_posix()]
        for i, path in enumerate(files[::max(1, len(files) // SOURCE_FILES)]):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                    text = " ".join((ast.get_docstring(node) or "").split("\n\n")[0].split())
                    if len(text.split()) >= 8:
                        mine["dev" if i % 10 == 9 else "train"].append((text, label))
        for split, n in (("train", DOCSTRINGS * 9 // 10), ("dev", DOCSTRINGS // 10)):
            pool = sorted(set(mine[split]))
            (train if split == "train" else dev).extend(_draw(pool, min(n, len(pool))))
    seen = {t for t, _ in train}
    return {"train": train, "dev": [(t, g) for t, g in dev if t not in seen]}


TASKS = {"stsb-genre": stsb_genre, "austen-novel": austen_novel, "brown-genre": brown_genre,
         "cola-source": cola_source, "docstring-library": docstring_library}


def write_task(name: str, data: Path) -> Path:
    """TASK's train.csv and dev.csv under `data` (written once: a finished task's files are kept)."""
    d = data / name
    if not all((d / f"{split}.csv").is_file() for split in ("train", "dev")):
        d.mkdir(parents=True, exist_ok=True)
        for split, examples in TASKS[name]().items():
            with atomic_path(d / f"{split}.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["text", "label"])
                writer.writerows(examples)
    return d


def table(results: list[dict]) -> str:
    lines = ["| task | classes | train / dev | --max-len | teacher | student (`mobilekd ship`) | TF-IDF + LR | "
             "majority | student - TF-IDF | int8 .tflite |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task]
        first, metric = mine[0], mine[0]["metric"]

        def cell(method):
            v = [r["value"] for r in mine if r["method"] == method]
            return mean_std_cell(v) if v else "-"
        size = [r["tflite_bytes"] for r in mine if r["method"] == "ship" and r.get("tflite_bytes")]
        lines.append(f"| {task} ({metric}) | {first['classes']} | {first['train_examples']:,} / "
                     f"{first['dev_examples']:,} | {first['max_len']} | {cell('teacher')} | {cell('ship')} | "
                     f"{cell('tfidf')} | {cell('majority')} | "
                     f"{judged_cell(paired_differences(results, task, metric, 'ship', 'tfidf'))} | "
                     + (f"{statistics.mean(size) / 1e6:.1f} MB |" if size else "- |"))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.custom", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, "docs/results/custom.json")
    args = p.parse_args(argv)
    return show_table(args, REPO_ROOT / args.results, table)


if __name__ == "__main__":
    sys.exit(main())
