"""The baselines beside the fine-tuning benchmarks: for each task and seed of `benchmarks.teacher_value` and
`benchmarks.methods`, the TF-IDF bag-of-words baseline every fine-tuning run computes (`mobilekd.finetune.baseline`:
word unigrams and bigrams, logistic regression for classes, ridge regression for STS-B's scores) and the majority
class of the training examples (classification only: a constant score has no correlation), each trained on exactly
the examples that benchmark's fine-tuning runs of that task and seed train on, and scored on the whole dev set with
the task's metrics. Rows (method `tfidf` or `majority`, task, seed, metric, value, train_examples) are merged into
docs/results/teacher_value.json and docs/results/methods.json. No model is trained: seconds a run.

    python -m benchmarks.baselines                            # both benchmarks, their tasks, seeds 0-2
    python -m benchmarks.baselines --benchmarks methods --seeds 0
    python -m benchmarks.baselines --table                    # print the rows' means from the results files only

The training examples come from `mobilekd finetune`'s own code: its argument parser reads the benchmark's flags
(teacher_value's `TASKS[task]`: SST-2's 10,000 examples drawn with the run's seed, the whole training set
elsewhere; methods' `STUDENT_FT`: 1,000 examples drawn with --subset-seed 0 for every seed), and the task's
`training_subset` draws them. The tasks are those the results file has fine-tuning rows for (--tasks to choose).
"""

from __future__ import annotations

import argparse
import sys
import time


from benchmarks import methods, teacher_value
from benchmarks.rows import merge_rows
from benchmarks.stats import BASELINES, mean_std_cell, row_order, values
from mobilekd.data.tasks import load_task, task_data, training_subset
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.finetune.baseline import bag_of_words_baseline, majority_baseline
from mobilekd.recipes import finetune
from mobilekd.host import cpu_model, identity

# benchmark -> (its results file, its fine-tuning flags per task (the students' where teacher and students differ),
# its order of tasks (None: by name) and of methods, as the benchmark sorts its file)
BENCHMARKS = {
    "teacher_value": ("docs/results/teacher_value.json", lambda task: teacher_value.TASKS[task], None,
                      list(teacher_value.METHODS)),
    "methods": ("docs/results/methods.json", lambda task: [*methods.STUDENT_FT, "--max-len", methods.TASKS[task]],
                list(methods.TASKS), list(methods.METHODS)),
}


def examples(task_name: str, flags: list[str], seed: int):
    """The task, and the training and dev examples `mobilekd finetune --task TASK FLAGS --seed SEED` trains and
    scores on (the same parser, data directory and subset draw as finetune.run)."""
    args = finetune.parse_args(["--model", "-", "--task", task_name, *flags, "--seed", str(seed)])
    c = args.recipe
    task = load_task(c.task, task_data(c.task, c.data))
    train = training_subset(task.train, c.max_train_examples, args.seed if c.subset_seed is None else c.subset_seed)
    return task, train, next(iter(task.dev.values()))


def baseline_rows(task_name: str, flags: list[str], seed: int) -> list[dict]:
    """One row per baseline and dev metric of the task (its official metric first)."""
    task, train, dev = examples(task_name, flags, seed)
    tfidf, cpu = bag_of_words_baseline(task, train, dev, seed), cpu_model()
    found = [{"task": task_name, "method": "tfidf", "seed": seed, "metric": m, "value": round(v, 4),
              "train_examples": len(train), "train_seconds": tfidf["seconds"], "cpu": cpu, "host": identity()["id"]}
             for m, v in tfidf["metrics"].items()]
    always = majority_baseline(task, train, dev)
    found += [{"task": task_name, "method": "majority", "seed": seed, "metric": m, "value": round(v, 4),
               "train_examples": len(train)} for m, v in (always["metrics"] if always else {}).items()]
    return found


def report(name: str, rows: list[dict]) -> str:
    cols = list(dict.fromkeys((r["task"], r["metric"]) for r in rows if r["method"] in BASELINES))
    lines = [f"{name}: mean ± std over seeds [n runs], dev set", "| baseline | train examples | " +
             " | ".join(f"{t} ({m})" for t, m in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for method in BASELINES:
        n = sorted({r["train_examples"] for r in rows if r["method"] == method and "train_examples" in r})
        cells = [mean_std_cell(values(rows, *c, method)) if values(rows, *c, method) else "-" for c in cols]
        lines.append(f"| {method} | {', '.join(f'{k:,}' for k in n)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.baselines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchmarks", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    p.add_argument("--tasks", nargs="+", help="default: the tasks the benchmark's results file has runs of")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--table", action="store_true", help="only print the baselines' means from the results files")
    args = p.parse_args(argv)
    for name in args.benchmarks:
        results, flags, task_order, method_order = BENCHMARKS[name]
        path = REPO_ROOT / results
        rows = read_json(path) if path.is_file() else []
        if not args.table:
            ran = list(dict.fromkeys(r["task"] for r in rows if r["method"] not in BASELINES))
            tasks = [t for t in (args.tasks or ran) if task_order is None or t in task_order]
            if not tasks:
                print(f"{name}: no tasks to run ({path} has no runs yet; name them with --tasks)", file=sys.stderr)
                continue
            start, found = time.time(), []
            for task in tasks:
                for seed in args.seeds:
                    found += baseline_rows(task, flags(task), seed)
            rows = merge_rows(path, found, row_order(method_order, task_order))
            print(f"{len(found)} rows in {path} ({', '.join(tasks)}; seeds {', '.join(map(str, args.seeds))}); "
                  f"it took {time.time() - start:.0f} s")
        print(report(name, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
