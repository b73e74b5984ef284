"""A user's own data, the default path (issue 34, item 5): `mobilekd ship` run on classification tasks built from
text the repo ships, each against TF-IDF + logistic regression and the majority class on the same examples; rows
to docs/results/custom.json, the table into docs/quality.md.

    python -m benchmarks.custom                         # build the tasks' CSVs, run `mobilekd ship` on each, table
    python -m benchmarks.custom --tasks stsb-genre --seeds 0 1 2
    python -m benchmarks.custom --table [--write]       # the table from the results file only

The tasks (CSV files written to OUT/data/TASK/{train,dev}.csv with a `text,label` header; labels are words):
  stsb-genre    STS-B's first sentences -> their genre (news, captions, forum): 3 classes, short texts; train and
                dev are GLUE's splits, dev sentences also in train removed
  austen-novel  a paragraph of Jane Austen -> its novel (6 classes), long texts (paragraphs of 8 words or more);
                dev is the last tenth of each novel's paragraphs, train 3,000 of the others drawn with seed 0
                (neighbouring paragraphs straddle the split at one point a novel)
  brown-genre   a Brown corpus sentence (5 words or more) -> its document's category: the nine informative prose
                categories (press reportage, editorial, reviews, religion, skills and hobbies, popular lore, belles
                lettres, government documents, learned) and fiction (the six imaginative ones merged): 10 classes;
                dev is every tenth document, train 6,000 sentences of the others drawn with seed 0
The Brown documents' categories follow from their order in the corpus (corpus/brown.txt.gz holds the 500 documents
in the standard order ca01..cr09, a blank line between documents) and the standard counts per category.

Each run is `mobilekd ship --teacher all-minilm-l6-v2` (the packaged BERT, as a user's) with its defaults: budgets
picked from the data, the teacher's layers 0 and 5 distilled, the last models scored on the whole dev set.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.runner import (Job, comparison, comparison_flags, judged_cell, mean_std_cell,
                               paired_differences, recorded_host)
from mobilekd.data.custom import read_custom
from mobilekd.fileio import REPO_ROOT, atomic_path, read_json

TEACHER = "all-minilm-l6-v2"
BROWN_CATEGORIES = [("press reportage", 44), ("editorial", 27), ("reviews", 17), ("religion", 17),
                    ("skills and hobbies", 36), ("popular lore", 48), ("belles lettres", 75),
                    ("government documents", 30), ("learned", 80), ("fiction", 29 + 24 + 6 + 29 + 29 + 9)]
TRAIN = {"austen-novel": 3_000, "brown-genre": 6_000}  # training examples drawn (seed 0): the
# whole sets (8,470 and 46,130) cost hours of teacher fine-tuning on 2 cores at `mobilekd ship`'s budgets
METHODS = ("teacher", "ship", "tfidf", "majority")  # ship: the student `mobilekd ship` exports


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


TASKS = {"stsb-genre": stsb_genre, "austen-novel": austen_novel, "brown-genre": brown_genre}


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


def run_dir(out: Path, task: str, seed: int) -> Path:
    return out / task / f"seed{seed}"


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    return [Job(f"{task}/ship/{seed}", ["ship", "--teacher", TEACHER, "--data", str(write_task(task, out / "data")),
                                       "--seed", str(seed), "--out", str(run_dir(out, task, seed))],
                run_dir(out, task, seed))
            for seed in seeds for task in tasks]


def majority(data: Path) -> float:
    """Dev accuracy of always answering the training set's most frequent label."""
    def labels(split):
        return [e.label for e in read_custom(data / f"{split}.csv")]
    top = Counter(labels("train")).most_common(1)[0][0]
    dev = labels("dev")
    return sum(label == top for label in dev) / len(dev)


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        for seed in seeds:
            path = run_dir(out, task, seed) / "ship.json"
            if not path.is_file():
                continue
            s = read_json(path)
            b = s["budget"]
            metric = s["metric"]
            shared = {"task": task, "seed": seed, "metric": metric, "classes": b["classes"],
                      "train_examples": b["train_examples"], "dev_examples": b["dev_examples"],
                      "max_len": b["max_len"]}
            int8 = s["tflite"].get("model_dynamic_int8.tflite", {})
            found += [
                {**shared, "method": "teacher", "value": round(s["teacher"]["dev"][metric], 4),
                 "train_seconds": s["teacher"]["train_seconds"],
                 "cpu": s["teacher"].get("cpu"), "epochs": b["teacher_epochs"], **recorded_host(s["teacher"])},
                {**shared, "method": "ship", "value": round(s["student"]["dev"][metric], 4),
                 "params": s["student"]["params"], "train_seconds": s["student"]["train_seconds"],
                 "cpu": s["student"].get("cpu"), **recorded_host(s["student"]),
                 "epochs": b["student_epochs"], "lr": b["student_lr"], "layers": b["layers"],
                 "tflite_bytes": int8.get("size_bytes")},
                {**shared, "method": "tfidf", "value": round(s["baseline"]["metrics"][metric], 4),
                 "train_seconds": s["baseline"]["seconds"], "cpu": s["student"].get("cpu"),
                 **recorded_host(s["student"])},
                {**shared, "method": "majority", "value": round(majority(out / "data" / task), 4)}]
    return found


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
    comparison_flags(p, "runs/custom", "docs/results/custom.json", list(TASKS), TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    tasks = list(TASKS)
    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (tasks.index(r["task"]), METHODS.index(r["method"]), r["seed"]), table)


if __name__ == "__main__":
    sys.exit(main())
