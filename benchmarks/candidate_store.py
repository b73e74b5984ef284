"""TinyBERT's augmentation for a second seed, with and without the word candidates' store (issue 76: never
compute the teacher twice; `mobilekd/data/candidate_store.py`). `ship` carves another validation split for each
seed, so each seed augments another training set; the masked-LM pass that finds each word's candidates is most of
the cost, and a sentence's candidates do not depend on the seed.

    python -m benchmarks.candidate_store                  # about 20 minutes: 1 thread, then 2 processes of 1
    python -m benchmarks.candidate_store --table --write  # the table into docs/throughput_runs.md from the rows

On the task's training examples (SST-2: the 8,000 the teacher store's benchmark uses), each seed's training split as
`ship` carves it (`mobilekd.finetune.selection.carve`), augmented with 4 new copies an example by the adapted
teacher (`--teacher`, made by `python -m benchmarks.teacher_store`), its masked-LM pass in the precision this host's
probe chooses (decided before the timed passes; the run of 16:10 timed it in its first pass). Three passes, in
this order, one thread: seed 1's split into an empty cache (`cold`), seed 0's into a second empty cache, then seed
1's split again into that second cache (`warm`: its sentences that seed 0's split held are read from the store).
Rows (docs/results/candidate_store.json, every run kept, with the store's VERSION): each pass's seconds and the
share of its sentences the store had, with the host and the 1-minute load when it started; and the share of seed
1's augmented examples found in both passes (100% when the store gives what a fresh run computes).

Then the claims (`CandidateStore.claim`): two runs started together over the same sentences (seed 1's split), each
a process of one thread as `ship`'s two workers are, timed from a barrier both pass once their model is loaded to
the later one's end: with their own empty stores (`own-stores`: both compute every sentence, as two trials did
before the claims) and with one empty store between them (`shared-store`: each computes the chunks it claims and
reads the other's), alternating, `--repeats` times each. Rows: each pair's wall seconds, each run's seconds and the
sentences it computed, and the share of sentences whose candidates each shared store holds as both own stores of
its repeat do.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows
from mobilekd.data.augment import Augmentor, augment_precision, augmented
from mobilekd.data.candidate_store import VERSION, CandidateStore
from mobilekd.data.tasks import default_data, load_task, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT
from mobilekd.finetune.selection import carve
from mobilekd.host import identity
from mobilekd.models.hf import load_pretrained

RESULTS = "docs/results/candidate_store.json"
KEY = ("task", "method", "seed", "metric", "version", "started", "repeat")  # no run replaces another
TASK, EXAMPLES, COPIES = "sst2", 8000, 4  # the teacher store's benchmark's examples; ship's --augment choice
PASSES = (("cold", 1, "a"), ("seed0", 0, "b"), ("warm", 1, "b"))  # (method, carve seed, cache)
PAIRS = ("own-stores", "shared-store")  # two runs at once over the same sentences: each its own store, or one
PAIR_HOURS = 1  # a pair not done in this long has hung


def load(model_dir):
    return load_pretrained(model_dir, "pretraining", require_head=True), load_tokenizer(model_dir)


def one_of_two(index: int, teacher: Path, precision: str, sentences: list[str], store: Path, barrier,
               results) -> None:
    """One of two runs started together: its model loaded, then, past the barrier, its sentences' candidates
    through `store` (one thread, as each of `ship`'s workers)."""
    torch.set_num_threads(1)
    augmentor = Augmentor(*load(teacher), precision=precision)
    kept = CandidateStore(store)
    barrier.wait()
    start = time.perf_counter()
    augmentor.candidates(sentences, kept)
    results.put({"index": index, "seconds": round(time.perf_counter() - start, 1), **kept.record()})


def pair(method: str, teacher: Path, precision: str, sentences: list[str], paths: list[Path]) -> list[dict]:
    """Two runs at once (`one_of_two`), their results in the order of `paths`; ends the benchmark in one line
    where a run fails or PAIR_HOURS pass (the other would wait at the barrier, or for a chunk, for ever)."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    runs = [context.Process(target=one_of_two, args=(i, teacher, precision, sentences, path, barrier, results))
            for i, path in enumerate(paths)]
    for run in runs:
        run.start()
    got, deadline = [], time.monotonic() + PAIR_HOURS * 3600
    while len(got) < len(runs):
        try:
            got.append(results.get(timeout=10))
        except queue.Empty:  # a run that ended without its result (it would have been read by now), or a hang
            reported = {g["index"] for g in got}
            if any(run.exitcode is not None and i not in reported for i, run in enumerate(runs)) or \
                    time.monotonic() > deadline:
                for run in runs:
                    run.kill()
                raise SystemExit(f"benchmarks.candidate_store: a run of {method} ended with "
                                 f"{[run.exitcode for run in runs]} before both reported")
    for run in runs:
        run.join()
    return sorted(got, key=lambda g: g["index"])


def pairs(teacher: Path, precision: str, sentences: list[str], scratch: Path, repeats: int, shared: dict, keep):
    """`repeats` pairs of each of PAIRS, alternating, each from empty stores: the rows of their seconds, each
    pair's kept (`keep`) as it ends; then the share of sentences whose candidates every shared store holds as both
    own stores of its repeat do."""
    alike = set(sentences)
    for repeat in range(repeats):
        stores = {}
        for method in PAIRS:
            folder = scratch / f"{method}-{repeat}"
            stores[method] = [folder / "shared.sqlite"] * 2 if method == "shared-store" else [
                folder / f"own{i}.sqlite" for i in range(2)]
            load_1min = round(os.getloadavg()[0], 2)
            got = pair(method, teacher, precision, sentences, stores[method])
            wall = max(g["seconds"] for g in got)
            keep([{**shared, "method": method, "seed": 1, "repeat": repeat, "sentences": len(set(sentences)),
                   "load_1min": load_1min, "metric": "pair_seconds", "value": wall,
                   "runs": [{"seconds": g["seconds"], "computed": g["candidates_computed"]} for g in got]}])
            print(f"{method} (repeat {repeat}): both done in {wall} s; each run " + ", ".join(
                f"{g['seconds']} s computing {g['candidates_computed']} sentences" for g in got))
        one = CandidateStore(stores["shared-store"][0]).read(sentences)
        for path in stores["own-stores"]:
            own = CandidateStore(path).read(sentences)
            alike = {s for s in alike if s in one and own.get(s) == one[s]}
    keep([{**shared, "method": "shared-own", "seed": 1, "metric": "identical_share",
           "value": round(len(alike) / len(set(sentences)), 4)}])


def measure(teacher: Path, repeats: int, keep) -> None:
    """The three passes, their rows kept (`keep`) once all are done; then `repeats` pairs of each arrangement."""
    task = load_task(TASK, default_data(TASK))
    examples = training_subset(task.train, EXAMPLES, 0)
    host, rows, sets = identity(), [], {}
    started = time.strftime("%Y-%m-%dT%H:%M:%S")  # each run's rows stay beside the others' (KEY)
    # the precision this host's probe chooses, decided before the timed passes (none of them pays for the probe)
    flag = augment_precision(lambda: load(teacher), teacher, examples, "auto")["precision"]
    with tempfile.TemporaryDirectory(prefix="candidate-store-") as scratch:
        for method, seed, cache in PASSES:
            split = carve(task, examples, seed).train
            load_1min = round(os.getloadavg()[0], 2)
            start = time.perf_counter()
            out, _, found = augmented(split, teacher, COPIES, seed, Path(scratch) / cache, load, flag)
            seconds = round(time.perf_counter() - start, 1)
            sets[method] = out
            shared = {"task": TASK, "method": method, "seed": seed, "examples": len(split),
                      "augmented": len(out), "precision": found["precision"], "host": host["id"],
                      "host_fields": host, "load_1min": load_1min, "version": VERSION, "started": started}
            rows += [{**shared, "metric": "augment_seconds", "value": seconds},
                     {**shared, "metric": "candidates_stored_share", "value": found["candidates_stored_share"],
                      "sentences": found["candidate_sentences"]}]
            print(f"{method} (seed {seed}'s split, {len(split)} examples -> {len(out)}): {seconds} s, "
                  f"{found['candidates_stored_share']:.0%} of its {found['candidate_sentences']} sentences stored")
        cold, warm = (Counter((e.text_a, e.text_b, e.label) for e in sets[m]) for m in ("cold", "warm"))
        shared = {"task": TASK, "host": host["id"], "host_fields": host, "version": VERSION, "started": started}
        rows.append({**shared, "method": "warm-cold", "seed": 1, "metric": "identical_share",
                     "value": round(sum((cold & warm).values()) / max(len(sets["cold"]), len(sets["warm"])), 4)})
        keep(rows)
        if repeats:
            sentences = [e.text_a for e in carve(task, examples, 1).train]
            pairs(teacher, flag, sentences, Path(scratch), repeats, {**shared, "precision": flag}, keep)


def table(rows: list[dict]) -> str:
    lines = ["| run | candidates (store version) | pass | training examples -> augmented | read from the store | "
             "seconds | precision | host | 1-min load at start |", "|---|---|---|---|---|---|---|---|---|"]
    names = {"cold": "seed 1, empty store", "seed0": "seed 0, empty store", "warm": "seed 1, after seed 0"}
    notes = []
    for started in dict.fromkeys(r["started"] for r in rows):
        run, seconds = [r for r in rows if r["started"] == started], {}
        for method in names:
            got = {r["metric"]: r for r in run if r["method"] == method}
            if "augment_seconds" not in got:
                continue
            t, share = got["augment_seconds"], got.get("candidates_stored_share", {}).get("value")
            seconds[method] = t["value"]
            lines.append(f"| {started[:16]}{' *' if 'note' in t else ''} | {t['version']} | {names[method]} "
                         f"| {t['examples']:,} -> {t['augmented']:,} | "
                         f"{'-' if share is None else format(share, '.0%')} | {t['value']:.1f} | {t['precision']} | "
                         f"{t['host']} | {t.get('load_1min', '-')} |")
        if {"cold", "warm"} <= set(seconds):
            same = next((r["value"] for r in run if r["metric"] == "identical_share" and r["method"] == "warm-cold"),
                        None)
            notes.append(f"{started[:16]}: seed 1's augmentation {seconds['cold'] / seconds['warm']:.1f}x as fast "
                         f"with the store ({seconds['cold']:.0f} s against {seconds['warm']:.0f} s)" +
                         (f", {same:.2%} of its augmented examples the same in both passes" if same is not None
                          else ""))
    rebuilt = any("note" in r for r in rows)
    return "\n".join(lines) + "\n\n" + "; ".join(notes) + ".\n" + (
        "\n\\* rows rebuilt from that run's log (the next run wrote over them).\n" if rebuilt else "") + claims(rows)


def claims(rows: list[dict]) -> str:
    """The pairs' table: two runs at once over the same sentences, their own stores or one shared."""
    timed = [r for r in rows if r["metric"] == "pair_seconds"]
    if not timed:
        return ""
    names = {"own-stores": "each its own store", "shared-store": "one store, chunks claimed"}
    lines = ["\nTwo runs started together over seed 1's split (one thread each, from empty stores):\n",
             "| run | store between them | repeat | sentences | both done (s) | each run: seconds, sentences computed "
             "| precision | host | 1-min load at start |", "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for started in dict.fromkeys(r["started"] for r in timed):
        run = [r for r in timed if r["started"] == started]
        for r in run:
            each = "; ".join(f"{x['seconds']:.1f} s, {x['computed']:,}" for x in r["runs"])
            lines.append(f"| {started[:16]} | {names[r['method']]} | {r['repeat']} | {r['sentences']:,} | "
                         f"{r['value']:.1f} | {each} | {r['precision']} | {r['host']} | {r['load_1min']} |")
        times = {m: [r["value"] for r in run if r["method"] == m] for m in names}
        if not all(times.values()):  # a run cut before both arrangements were timed: its rows, no ratio
            continue
        mean = {m: statistics.mean(t) for m, t in times.items()}
        same = next((r["value"] for r in rows if r["started"] == started and r["metric"] == "identical_share"
                     and r["method"] == "shared-own"), None)
        notes.append(f"{started[:16]}: the pair done {mean['own-stores'] / mean['shared-store']:.2f}x as fast with "
                     f"one store ({mean['shared-store']:.0f} s against {mean['own-stores']:.0f} s, means of "
                     f"{' and '.join(str(len(t)) for t in times.values())})" +
                     (f"; {same:.2%} of the sentences' candidates the same in the shared store as in the own stores "
                      "compared (before 37a400a: one)"
                      if same is not None else ""))
    return "\n".join(lines) + "\n\n" + ("; ".join(notes) + ".\n" if notes else "")


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.candidate_store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="runs/teacher_store/teacher",
                   help="the adapted teacher, with its masked-LM head (default runs/teacher_store/teacher)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of the three passes (default 1; each run of a pair has one)")
    p.add_argument("--repeats", type=int, default=2,
                   help="pairs of two runs at once timed per store arrangement (default 2; 0: none)")
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        torch.set_num_threads(args.threads)
        measure((REPO_ROOT / args.teacher).resolve(), args.repeats, lambda rows: merge_rows(
            path, rows, lambda r: (r.get("started", ""), r["method"], r.get("repeat", -1)), KEY))
    return show_table(args, path, table)


if __name__ == "__main__":
    sys.exit(main())
