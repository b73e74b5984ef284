"""SetFit as a peer on the custom CSV tasks (issue 75, item 6): what a user with labelled sentences and the same
all-MiniLM-L6-v2 body would try instead of distilling. SetFit (Tunstall et al. 2022) fine-tunes the
sentence-transformers body contrastively on pairs of training sentences, then fits a logistic-regression head on its
embeddings. `setfit` 1.2.0 and its sentence-transformers and datasets live in a venv of their own (PINS, made once
under .cache/setfit): they are not ours.

    python -m benchmarks.setfit --tasks stsb-genre cola-source docstring-library --seeds 0     # resumable
    python -m benchmarks.setfit --table --write

Settings, declared before any run: SetFit's own defaults (batch 16, one epoch, its learning rates, its oversampling of
pairs) but for `max_steps` (MAX_STEPS): over thousands of training sentences its default draws hundreds of thousands
of pairs, hours on 2 cores; the body is the packaged all-MiniLM-L6-v2, the sentence-transformers checkpoint our
teacher starts from. Nothing is chosen, so no validation split is needed; dev is read once, to score. The same
CSVs as benchmarks.ship's (benchmarks.custom.write_task), the same seeds.

Rows (docs/results/setfit.json): task, method "setfit", seed, metric accuracy (dev), and method "setfit-train" with
metric seconds (its training's wall time, with the host and threads). Its phone cost is the body's: the table puts
the Pixel 4 ESTIMATE of all-MiniLM-L6-v2 at the task's sequence length (the teacher's, from ship.json: the same
6-layer, 384-wide BERT; the head is a matrix-vector product) beside ship's student's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.custom import TASKS, write_task
from benchmarks.command import comparison, comparison_flags
from benchmarks.stats import mean_std_cell
from benchmarks.ship import EARLIER, current, run_dir
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.host import identity

PINS = ["torch==2.13.0", "setfit==1.2.0", "sentence-transformers==6.2.0", "transformers==5.24.0", "datasets==5.2.0",
        "scikit-learn==1.9.1"]
MAX_STEPS = 500  # of the contrastive phase, batch 16: 8,000 pairs
THREADS = 2
WORKER = REPO_ROOT / "benchmarks" / "setfit_worker.py"
SHIP = "docs/results/ship.json"  # benchmarks.ship's rows, beside which SetFit stands


def venv() -> Path:
    from mobilekd.sidevenv import side_venv
    return side_venv(REPO_ROOT / ".cache" / "setfit", PINS, "SetFit", "SETFIT_PYTHON")


def run(out: Path, tasks: list[str], seeds: list[int]) -> list[str]:
    """Each (task, seed) without a result.json, one at a time (THREADS threads); the names that failed."""
    from mobilekd.models.pretrained import model_dir

    body, failed, python = model_dir("all-minilm-l6-v2"), [], None
    for task in tasks:
        for seed in seeds:
            folder = run_dir(out, task, seed)
            if (folder / "result.json").is_file():
                continue
            python = python or venv()
            data = write_task(task, out / "data")
            folder.mkdir(parents=True, exist_ok=True)
            print(f"{task} seed {seed}: SetFit, {MAX_STEPS} steps", flush=True)
            with open(folder / "log.txt", "w") as log:
                # -P: benchmarks/ not on the worker's sys.path, where our setfit.py would shadow the package
                code = subprocess.run([str(python), "-P", str(WORKER),
                                       "--body", str(body), "--data", str(data), "--out",
                                       str(folder), "--seed", str(seed), "--max-steps", str(MAX_STEPS), "--threads",
                                       str(THREADS)], stdout=log, stderr=log).returncode
            if code:
                failed.append(f"{task}/setfit/{seed}")
                continue
            result = read_json(folder / "result.json")
            (folder / "result.json").write_text(json.dumps({**result, "host": identity()}, indent=2))
    return failed


def ship_results() -> tuple[list[dict], list[dict]]:
    """Today's ship's rows (benchmarks.ship's `current`) and those of the ship of one fixed recipe before its search
    (EARLIER), read once for `beside`."""
    def read(name: str) -> list[dict]:
        return read_json(REPO_ROOT / name) if (REPO_ROOT / name).is_file() else []
    return current(read(SHIP)), read(EARLIER)


def beside(task: str, results: tuple[list[dict], list[dict]]) -> tuple[list[dict], bool]:
    """The ship rows SetFit stands beside on `task`, of `ship_results()`: today's ship's, else, where ship's search
    has not run on it, the rows of the ship of one fixed recipe before it with True."""
    ship, before = results
    mine = [r for r in ship if r["task"] == task]
    if mine:
        return mine, False
    earlier = [r for r in before if r["task"] == task]
    return earlier, bool(earlier)


def body_estimate(max_len: int, layers: int | None = None) -> dict:
    """The Pixel 4 ESTIMATE of all-MiniLM-L6-v2 as a classifier at `max_len`, or of its first-`layers`-deep shape
    (a student of that many of its layers)."""
    import dataclasses

    from android_bench.budget import estimate_shape
    from mobilekd.models.hf import load_config
    from mobilekd.models.pretrained import model_dir

    config = load_config(model_dir("all-minilm-l6-v2"))[0]
    return estimate_shape(config if layers is None else dataclasses.replace(config, num_hidden_layers=layers),
                          max_len)


def phone_cost(task: str) -> dict | None:
    """SetFit's body on a phone: `body_estimate` at the sequence length ship gave the task's students (`beside`'s
    rows; None before any ship ran on the task)."""
    max_len = next((r["max_len"] for r in beside(task, ship_results())[0] if r["method"] == "ship"), None)
    return None if max_len is None else body_estimate(max_len)


def fixed_recipe_cost(rows: list[dict]) -> float | None:
    """The Pixel 4 ESTIMATE of the ship of one fixed recipe's student (its rows, of `beside`, record none): the
    teacher's layers it kept (`init --layers spread:K`) at the task's sequence length."""
    shipped = [r for r in rows if r["method"] == "ship" and "layers" in r]
    if not shipped:
        return None
    return body_estimate(shipped[0]["max_len"], int(shipped[0]["layers"].removeprefix("spread:")))["ms"]


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        cost = phone_cost(task) if any((run_dir(out, task, s) / "result.json").is_file() for s in seeds) else None
        if cost is not None:
            found.append({"task": task, "method": "setfit-phone", "seed": None, "metric": "pixel4_ms_est",
                          "value": cost["ms"], "seq_len": cost["seq_len"], "params_m": cost["params_m"]})
        for seed in seeds:
            path = run_dir(out, task, seed) / "result.json"
            if not path.is_file():
                continue
            r = read_json(path)
            common = {"task": task, "seed": seed, "train_examples": r["train_examples"],
                      "dev_examples": r["dev_examples"], "max_steps": r["max_steps"]}
            found += [{**common, "method": "setfit", "metric": "accuracy", "value": r["accuracy"]},
                      {**common, "method": "setfit-train", "metric": "seconds", "value": r["train_seconds"],
                       "threads": r["threads"], "host": r["host"]["id"], "host_fields": r["host"]}]
    return found


def table(results: list[dict]) -> str:
    lines = ["| task | SetFit, dev | its training | ship's student, dev | TF-IDF + LR | teacher | SetFit on a phone "
             "(its body, Pixel 4 est.) | ship's student (Pixel 4 est.) |", "|---|---|---|---|---|---|---|---|"]
    shipped = ship_results()
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task]
        theirs, earlier = beside(task, shipped)

        def cell(method, rows=theirs):
            values = [r["value"] for r in rows if r["method"] == method]
            return mean_std_cell(values) if values else "-"
        seconds = [r["value"] for r in mine if r["method"] == "setfit-train"]
        phone = [r for r in mine if r["method"] == "setfit-phone"]
        student = [r["pixel4_ms_est"] for r in theirs if r["method"] == "ship" and "pixel4_ms_est" in r]
        if not student and earlier:
            student = [cost] if (cost := fixed_recipe_cost(theirs)) is not None else []
        lines.append(f"| {task} | {cell('setfit', mine)} | "
                     + (f"{statistics.mean(seconds) / 60:.1f} min ({mine[0]['max_steps']} steps) | " if seconds
                        else "- | ")
                     + f"{cell('ship')}{' (one fixed recipe)' if earlier else ''} | {cell('tfidf')} | "
                       f"{cell('teacher')} | "
                     + (f"{phone[0]['value']:.1f} ms ({phone[0]['params_m']:.1f}M, sequence {phone[0]['seq_len']}) | "
                        if phone else "- | ")
                     + (f"{statistics.mean(student):.1f} ms |" if student else "- |"))
    hosts = sorted({r["host"] for r in results if r.get("host")})
    return "\n".join(lines) + (
        f"\n\nSetFit 1.2.0 with its defaults but {MAX_STEPS} contrastive steps, on {', '.join(hosts)} at {THREADS} "
        f"threads; ship's columns are benchmarks.ship's rows ({SHIP}), or where its search has not run on a task "
        f"the ship of before it, one fixed recipe ({EARLIER}, marked; its student's Pixel figure estimated here "
        f"from the teacher layers it kept). Pixel figures are ESTIMATES of a cost model; SetFit's is its body's "
        f"(all-MiniLM-L6-v2, the teacher's shape; the head is a matrix-vector product) at the length ship priced "
        f"the task's students at.\n")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.setfit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/setfit", "docs/results/setfit.json", list(TASKS), TASKS)
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    failed = [] if args.table or args.collect else run(out, args.tasks, args.seeds)
    args.collect = True
    tasks = list(TASKS)
    code = comparison(args, lambda: [], lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (tasks.index(r["task"]), r["method"], r["seed"]), table)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else code


if __name__ == "__main__":
    sys.exit(main())
