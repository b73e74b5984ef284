"""The correction student's files (issue 79, items 3 and 4): each final C-MLM student of
`benchmarks.cmlm_validation` (the recipe its rows mark chosen on validation, at the task's final budget: FINAL),
seeds 0-2, exported with fp32, fp16 and dynamic-range int8 weights (`mobilekd export --quantize none fp16
dynamic-int8`), each file's app loop (encode, then the cached greedy `decode` step by step) run over every dev pair
and compared with PyTorch's greedy decoding; rows to docs/results/seq2seq_files.json, the table into
docs/seq2seq.md.

    python -m benchmarks.seq2seq_files                  # after cmlm_validation's final runs: minutes a seed
    python -m benchmarks.seq2seq_files --collect        # rows of the finished exports, run nothing
    python -m benchmarks.seq2seq_files --table --write

Rows, per task, seed and file (`quantize`: none, fp16, dynamic-int8): `identical` (the share of dev pairs whose
file output is PyTorch's, token for token), `bleu` and `chrf` (the file's outputs against the references; sacrebleu),
`bleu_pytorch` (PyTorch's greedy outputs, the same dev pairs), `size_mb`, `ms_per_token` and `ms_per_sentence`
(the file's host milliseconds, median over the dev pairs, 1 thread, with the host that measured them), and the
student's budget (`train_pairs`, None for every pair; `epochs`). The milliseconds are one run's beside whatever else
the host ran then: the sizes, agreements and BLEU are what the rows are for; per-token speed is
`benchmarks.decoding`'s, timed interleaved.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks import cmlm, cmlm_validation
from benchmarks.command import task_comparison
from benchmarks.rows import recorded_host
from benchmarks.runner import Job
from benchmarks.stats import mean_std_cell
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.recipes.export import SEQ2SEQ_QUANTIZE as QUANTIZE  # every weight format a seq2seq file exports in
from mobilekd.rundir import finished_results

TASKS = {"correction": "the correction student"}
STUDENTS = REPO_ROOT / "runs" / "cmlm_validation"  # benchmarks.cmlm_validation's default --out
CHOICES = REPO_ROOT / "docs" / "results" / "cmlm_validation.json"  # its rows: which recipe validation chose


def chosen(task: str) -> cmlm.Recipe | None:
    """The recipe cmlm_validation's rows mark chosen for `task`, at its declared final budget; None before the
    choice."""
    return cmlm_validation.recorded_recipe(read_json(CHOICES) if CHOICES.is_file() else [], task)


def student(task: str, seed: int, recipe: cmlm.Recipe) -> Path:
    """The final C-MLM student of `task` and seed at `recipe` (`chosen`)."""
    return cmlm.run_dir(cmlm_validation.final(STUDENTS, recipe, task), task, "cmlm", seed)


def files_dir(out: Path, task: str, seed: int, recipe: cmlm.Recipe) -> Path:
    """A student's files: OUT/TASK/<its final runs' folder>/seedS (one budget's exports never overwrite another's)."""
    return out / task / cmlm_validation.final(STUDENTS, recipe, task).name / f"seed{seed}"


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    """An export of every final student that has finished (one not yet trained is said, not waited on)."""
    plan = []
    for task in tasks:
        recipe = chosen(task)
        for seed in seeds:
            model = student(task, seed, recipe) if recipe else None
            if model is None or finished_results(model) is None:
                print(f"{task} seed {seed}: no finished final student of benchmarks.cmlm_validation yet"
                      + (f" ({model})" if model else ""))
                continue
            plan.append(Job(f"{task}/export/{seed}", [
                "export", "--model", str(model), "--quantize", *QUANTIZE, "--parity-examples", "100000",
                "--out", str(files_dir(out, task, seed, recipe))], files_dir(out, task, seed, recipe)))
    return plan


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    """The rows of each export of the student `chosen` and `student` name now (one of another model is left out)."""
    found = []
    for task in tasks:
        if (recipe := chosen(task)) is None:
            continue
        budget = {"train_pairs": int(recipe.pairs) if recipe.pairs else None, "epochs": float(recipe.epochs)}
        for seed in seeds:
            model, parity = student(task, seed, recipe), files_dir(out, task, seed, recipe) / "parity.json"
            if not parity.is_file():
                continue
            for name, r in read_json(parity).items():
                if Path(r["model"]).resolve() != model.resolve():
                    print(f"{parity}: {name} is of {r['model']}, not {model}: left out", file=sys.stderr)
                    continue
                values = {"identical": r["identical"], "bleu": r["scores"]["file"]["bleu"],
                          "chrf": r["scores"]["file"]["chrf"], "bleu_pytorch": r["scores"]["pytorch"]["bleu"],
                          "size_mb": round(r["size_bytes"] / 1e6, 2), "ms_per_token": r["host_ms"]["per_token"],
                          "ms_per_sentence": r["host_ms"]["per_sentence"]}
                timed = recorded_host(r)
                found += [{"task": task, "method": "cmlm", "seed": seed, "quantize": r["quantize"], "model": name,
                           "metric": m, "value": v, "dev_pairs": r["pairs"], **budget,
                           **(timed if m.startswith("ms_") else {})} for m, v in values.items()]
    return found


def table(results: list[dict]) -> str:
    """Per task and file: its size, the share of dev pairs decoded as PyTorch does (seed by seed), the file's and
    PyTorch's dev BLEU (mean +- std over seeds), the host milliseconds; then the issue's parity goal."""
    lines = ["| task | file | MB | greedy output identical to PyTorch's, whole dev set (per seed) | dev BLEU: file | "
             "PyTorch | host ms a token / a sentence (1 thread) | host |", "|---|---|---|---|---|---|---|---|"]
    goals = []
    for task in dict.fromkeys(r["task"] for r in results):
        for q in QUANTIZE:
            mine = [r for r in results if (r["task"], r["quantize"]) == (task, q)]
            if not mine:
                continue

            def by(metric):
                return {r["seed"]: r for r in mine if r["metric"] == metric}

            same, seeds = by("identical"), sorted(by("identical"))
            name = by("size_mb")[seeds[0]]["model"]
            hosts = sorted({r["host"] for r in by("ms_per_token").values()})
            lines.append(
                f"| {task} | `{name}` | {statistics.mean(r['value'] for r in by('size_mb').values()):.1f} | "
                + ", ".join(f"{same[s]['value']:.1%} ({same[s]['dev_pairs']})" for s in seeds)
                + f" | {cell(by('bleu'))} | {cell(by('bleu_pytorch'))} | "
                + f"{statistics.median(r['value'] for r in by('ms_per_token').values()):.2f} / "
                + f"{statistics.median(r['value'] for r in by('ms_per_sentence').values()):.1f} | {', '.join(hosts)} |")
            if q == "none":
                whole = all(r["value"] == 1.0 for r in same.values())
                goals.append(f"| {task}: the fp32 file's greedy output identical to PyTorch's on the whole dev set "
                             f"| {sum(r['value'] == 1.0 for r in same.values())} of {len(same)} seeds | every seed | "
                             f"{'holds' if whole else 'fails'} |")
    return "\n".join(lines + ["", "| goal | measured | target | verdict |", "|---|---|---|---|", *goals]) + \
        "\n\nHost milliseconds: one run each, the median over the dev pairs (the per-token speed-up of the cache is " \
        "`benchmarks.decoding`'s, timed interleaved). BLEU: greedy, sacrebleu, over the same dev pairs.\n"


def cell(per_seed: dict) -> str:
    """A metric's mean +- std over the seeds' rows."""
    return mean_std_cell([r["value"] for r in per_seed.values()], digits=2)


def main(argv=None) -> int:
    return task_comparison(argv, "seq2seq_files", __doc__, "runs/seq2seq_files", "docs/results/seq2seq_files.json",
                           TASKS, jobs, rows, table)


if __name__ == "__main__":
    sys.exit(main())
