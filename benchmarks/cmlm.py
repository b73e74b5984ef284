"""BERT's knowledge into a text generator (issue 36; C-MLM, Chen et al. 2020): per task, the demo's adapted teacher
fine-tuned once as a conditional MLM, then per seed the same student trained with cross-entropy alone (`ce`) and
with C-MLM distillation (`cmlm`), beside copying the source unchanged (`copy`); rows to docs/results/cmlm.json, a
table, the issue's goals as measured, and a sample of generations.

    python -m benchmarks.cmlm                          # everything, resumable
    python -m benchmarks.cmlm --tasks paraphrase --seeds 0
    python -m benchmarks.cmlm --collect                # rows of the finished runs, run nothing
    python -m benchmarks.cmlm --table --write          # the table into docs/seq2seq.md

Budgets (TASKS: the pairs, the teacher's epochs, the students' epochs) are fields of the rows. The teacher starts
from benchmarks.quality's adapted teacher (the same command and directory: built once for both). A seed draws the
student's start, dropout and data order, and the teacher's masks are the teacher run's own (seed 0): the teacher
and its soft targets are computed once per task and shared by the seeds, as the paper's are.

Rows: `cmlm` and `ce` carry BLEU and chrF of beam search (5, GNMT penalty 0.6: `bleu`, `chrf`) and of greedy
decoding (`bleu_greedy`, `chrf_greedy`), params, train_seconds (the student's training loop alone, its dev
evaluations included, whole across resumes), on `cmlm` rows soft_target_seconds (the teacher's pass over the
training pairs, the teacher's cost: computed once, shared by the seeds), steps and the budget; `copy` its BLEU
and chrF (seed by seed, the same value: it has no seed); `teacher` the C-MLM teacher's token accuracy and
perplexity on the dev targets; `cmlm-vs-ce` sacrebleu's paired bootstrap (1,000 resamples) p-value of
each seed's two beam outputs on BLEU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.quality import stage_dirs as quality_stages
from benchmarks.runner import RESUMABLE, VERDICTS, Job, by_seed, comparison, comparison_flags, mean_std_cell, \
    paired_by_seed, paired_differences, verdict
from benchmarks import teacher_value
from mobilekd.fileio import REPO_ROOT, read_json, write_json
from mobilekd.rundir import finished_results, training_cpu

# task -> (training pairs (None: all), the C-MLM teacher's epochs, the students' epochs)
TASKS = {"paraphrase": (None, "3", "10"), "correction": ("10000", "1", "4")}
PRESET = "seq2seq_tiny"
METHODS = ("cmlm", "ce")
ORDER = ("teacher", "cmlm", "ce", "copy", "cmlm-vs-ce")
METRICS = ("bleu", "chrf", "bleu_greedy", "chrf_greedy", "token_accuracy", "perplexity", "bootstrap_p")
SAMPLES = 5  # generations shown per task
BEAM_FILE = "dev_generations_beam.jsonl"  # a student run's beam-search outputs (none with --beam 1)
EVAL_POINTS = 5  # greedy dev evaluations per student run (history.json: BLEU against training time)


def adapt_dir() -> Path:
    """benchmarks.quality's adapted teacher (its default OUT): one run serves both benchmarks."""
    return quality_stages(REPO_ROOT / "runs" / "quality")["adapt"]


def run_dir(out: Path, task: str, method: str, seed: int | None = None) -> Path:
    return out / task / (method if seed is None else f"{method}/seed{seed}")


def subset(task: str) -> list[str]:
    return ["--max-train-examples", TASKS[task][0]] if TASKS[task][0] else []


def eval_every(task: str) -> int:
    """Steps between a student's dev evaluations: EVAL_POINTS over its run (batches of 32 pairs)."""
    from mobilekd.data.pairs import load_pairs

    pairs = len(load_pairs(task).train)
    pairs = min(pairs, int(TASKS[task][0])) if TASKS[task][0] else pairs
    steps = round(float(TASKS[task][2]) * -(-pairs // 32))
    return max(1, -(-steps // EVAL_POINTS))  # rounded up: the last evaluation is the run's end, not one step before


def jobs(out: Path, tasks: list[str], seeds: list[int]) -> list[Job]:
    adapt = adapt_dir()
    plan = [Job("adapt", ["train-teacher", *teacher_value.ADAPT, "--out", str(adapt), *RESUMABLE], adapt)]
    for task in tasks:
        teacher = run_dir(out, task, "teacher")
        plan.append(Job(f"{task}/teacher", ["cmlm", "--teacher", str(adapt), "--task", task, "--epochs",
                                            TASKS[task][1], *subset(task), "--out", str(teacher), *RESUMABLE],
                        teacher, ["adapt"]))
    every = {task: eval_every(task) for task in tasks}
    for seed in seeds:
        for task in tasks:
            teacher = run_dir(out, task, "teacher")
            for method in METHODS:
                r = run_dir(out, task, method, seed)
                taught = ["--teacher", str(teacher)] if method == "cmlm" else []
                plan.append(Job(f"{task}/{method}/{seed}", [
                    "seq2seq", "--task", task, "--method", method, *taught, "--preset", PRESET, "--epochs",
                    TASKS[task][2], *subset(task), "--eval-every", str(every[task]), "--seed", str(seed), "--out",
                    str(r), *RESUMABLE], r,
                    [f"{task}/teacher"] if method == "cmlm" else []))
    return plan


def budget(task: str) -> dict:
    pairs, teacher_epochs, epochs = TASKS[task]
    return {"train_pairs": int(pairs) if pairs else None, "teacher_epochs": float(teacher_epochs),
            "epochs": float(epochs), "preset": PRESET}


def beam_generations(d: Path) -> list[dict]:
    """A student run's beam-search dev generations (source, reference, generated), in dev order."""
    with open(d / BEAM_FILE, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def bootstrap_p(cmlm: Path, ce: Path) -> float:
    """sacrebleu's paired bootstrap (1,000 resamples, its seed 12345) of C-MLM's beam outputs against CE's on BLEU."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    mine, theirs = beam_generations(cmlm), beam_generations(ce)
    test = PairedTest([("ce", [g["generated"] for g in theirs]), ("cmlm", [g["generated"] for g in mine])],
                      {"BLEU": BLEU()}, [[g["reference"] for g in mine]], test_type="bs", n_samples=1000)
    return float(test()[1]["BLEU"][1].p_value)


def seconds(result: dict) -> float:
    """A run's training seconds: its stages' (the loop's, dev evaluations included), whole across resumes since the
    loop carries them in its checkpoint; a run resumed before that counts from its last start only."""
    return round(sum(s["seconds"] for s in result["training"]), 1)


def gpu(result: dict) -> dict:
    """The GPU a run trained on, as its training loop recorded it ({} on a CPU)."""
    found = next((s["gpu"] for s in result.get("training") or [] if s.get("gpu")), None)
    return {"gpu": found} if found else {}


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    found = []
    for task in tasks:
        t = finished_results(run_dir(out, task, "teacher"))
        if t is not None:
            found += [{"task": task, "method": "teacher", "seed": 0, "metric": m, "value": round(v, 4),
                       "train_seconds": seconds(t), "cpu": training_cpu(t), **gpu(t), **budget(task), "lr": t.get("lr")}
                      for m, v in t["metrics"]["dev"].items()]
        for seed in seeds:
            runs = {m: finished_results(run_dir(out, task, m, seed)) for m in METHODS}
            for method, r in runs.items():
                if r is None:
                    continue
                m = r["metrics"]
                shared = {"task": task, "method": method, "seed": seed, "params": r["params"], "steps": r["steps"],
                          "train_seconds": seconds(r), "cpu": training_cpu(r), **gpu(r), **budget(task),
                          **({"soft_target_seconds": r["soft_target_seconds"]} if r.get("soft_target_seconds") else {})}
                found += [{**shared, "metric": f"{k}{suffix}", "value": v} for split, suffix in
                          (("dev_beam", ""), ("dev", "_greedy")) if split in m for k, v in m[split].items()]
                found += [{"task": task, "method": "copy", "seed": seed, "metric": k, "value": v}
                          for k, v in m["dev_copy"].items()] if method == "ce" else []
            if all(runs.values()) and all("dev_beam" in r["metrics"] for r in runs.values()):  # beam outputs
                p = bootstrap_p(run_dir(out, task, "cmlm", seed), run_dir(out, task, "ce", seed))
                found.append({"task": task, "method": "cmlm-vs-ce", "seed": seed, "metric": "bootstrap_p",
                              "value": round(p, 4)})
    return found


def order(r: dict):
    return (list(TASKS).index(r["task"]), ORDER.index(r["method"]), r["seed"], METRICS.index(r["metric"]))


def cell(results, task, metric, method) -> str:
    v = [r["value"] for r in results if (r["task"], r["metric"], r["method"]) == (task, metric, method)]
    return mean_std_cell(v, digits=2) if v else "-"


def table(results: list[dict]) -> str:
    """Per task: each method's BLEU and chrF (beam, then greedy), mean +- std over seeds; the teacher's score on the
    conditional MLM task; the goals, seed by seed; a sample of seed 0's generations."""
    tasks = list(dict.fromkeys(r["task"] for r in results))
    lines = ["| task | method | BLEU | chrF | BLEU greedy | chrF greedy | params | train s (one thread) |",
             "|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        for method in ("cmlm", "ce", "copy"):
            mine = [r for r in results if (r["task"], r["method"]) == (task, method)]
            if not mine:
                continue
            secs = [r["train_seconds"] for r in mine if r["metric"] == "bleu" and r.get("train_seconds")]
            params = f"{mine[0]['params'] / 1e6:.1f}M" if mine[0].get("params") else "-"
            lines.append(f"| {task} | {method} | " + " | ".join(cell(results, task, m, method) for m in METRICS[:4]) +
                         f" | {params} | {f'{statistics.mean(secs):.0f}' if secs else '-'} |")
    lines += ["", "| task | C-MLM teacher: dev token accuracy | perplexity | teacher's train s | its soft targets s |",
              "|---|---|---|---|---|"]
    for task in tasks:
        t = {r["metric"]: r for r in results if (r["task"], r["method"]) == (task, "teacher")}
        soft = [r["soft_target_seconds"] for r in results
                if (r["task"], r["method"]) == (task, "cmlm") and r.get("soft_target_seconds")]
        if t:
            lines.append(f"| {task} | {t['token_accuracy']['value']:.4f} | {t['perplexity']['value']:.1f} | "
                         f"{t['token_accuracy']['train_seconds']:.0f} | {f'{soft[0]:.0f}' if soft else '-'} |")
    lines += ["", "| goal | measured, seed by seed | target | verdict |", "|---|---|---|---|"]
    for task in tasks:
        for base in ("ce", "copy"):
            d = paired_differences(results, task, "bleu", "cmlm", base)
            if d:
                lines.append(f"| {task}: BLEU cmlm - {base} | {mean_std_cell(d, signed=True, digits=2)} | > 0 | "
                             f"{verdict(d)} |")
        p = by_seed(results, task, "bootstrap_p", "cmlm-vs-ce")
        gap = paired_by_seed(results, task, "bleu", "cmlm", "ce")
        if p:  # sacrebleu's p says whether the two differ, not which way: the sign is the BLEU difference's
            lines.append(f"| {task}: paired bootstrap p (cmlm against ce, BLEU), per seed | " +
                         ", ".join(f"{v:.3f} (cmlm {'higher' if gap.get(s, 0) > 0 else 'lower'})"
                                   for s, v in p.items()) + " | < 0.05, cmlm higher | "
                         f"{sum(v < 0.05 and gap.get(s, 0) > 0 for s, v in p.items())} of {len(p)} seeds |")
    return "\n".join(lines) + f"\n\n{VERDICTS}\n"


def collect_samples(out: Path, tasks: list[str], path: Path) -> None:
    """The first SAMPLES dev pairs of each task with seed 0's beam outputs of both students, into `path` (beside the
    rows, so that the table prints the same anywhere)."""
    found = read_json(path) if path.is_file() else {}
    for task in tasks:
        dirs = {m: run_dir(out, task, m, 0) for m in METHODS}
        if all(finished_results(d) and (d / BEAM_FILE).is_file() for d in dirs.values()):  # beam search was run
            gen = {m: beam_generations(d)[:SAMPLES] for m, d in dirs.items()}
            found[task] = [{"source": g["source"], "reference": g["reference"],
                            **{m: gen[m][i]["generated"] for m in METHODS}} for i, g in enumerate(gen["cmlm"])]
    write_json(path, found)


def samples_text(path: Path, tasks: list[str]) -> str:
    found = read_json(path) if path.is_file() else {}
    lines = []
    for task in [t for t in tasks if t in found]:
        lines += ["", f"{task}: the first dev pairs, seed 0, beam 5 (the text as the students write it: lower case, "
                      f"word pieces joined):", ""]
        for g in found[task]:
            lines += [f"- source: {g['source']}", f"  - reference: {g['reference']}",
                      *(f"  - {m}: {g[m]}" for m in METHODS)]
    return "\n".join(lines) + ("\n" if lines else "")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.cmlm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/cmlm", "docs/results/cmlm.json", list(TASKS), TASKS)
    p.add_argument("--samples", default="docs/results/cmlm_samples.json", help="seed 0's first dev generations")
    args = p.parse_args(argv)
    out, shown = (REPO_ROOT / args.out).resolve(), REPO_ROOT / args.samples

    def found():
        collect_samples(out, args.tasks, shown)
        return rows(out, args.tasks, args.seeds)

    return comparison(args, lambda: jobs(out, args.tasks, args.seeds), found, order,
                      lambda results: table(results) + samples_text(shown, args.tasks))


if __name__ == "__main__":
    sys.exit(main())
