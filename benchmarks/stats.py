"""The statistics every comparison table shares: a method's values by seed (a seed run on several hosts counts
once), paired differences, mean ± std cells, and the one verdict every goal table gives a difference (`verdict`,
`within`: judged against the seeds' noise)."""

from __future__ import annotations

import math
import statistics

from mobilekd.data.glue import TASKS as GLUE_TASKS


def metric_rank(task: str, metric: str) -> int:
    """Where a metric stands among its GLUE task's official metrics (0: the one the task is ranked by)."""
    return GLUE_TASKS[task].metrics.index(metric)


def columns(results: list[dict]) -> list[tuple[str, str]]:
    """The (task, metric) pairs of a results file, in its order."""
    return list(dict.fromkeys((r["task"], r["metric"]) for r in results))


def values(results: list[dict], task: str, metric: str, method: str) -> list[float]:
    """A method's values in a (task, metric) column, one per seed (`by_seed`: a seed run on two hosts is the mean
    of its runs)."""
    return list(by_seed(results, task, metric, method).values())


def by_seed(results: list[dict], task: str, metric: str, method: str) -> dict[int, float]:
    """A method's values in a (task, metric) column, by seed, in the rows' order; where a seed was run on several
    hosts (`merge_rows` keeps each), the mean of its runs, so every run counts and none outweighs a seed."""
    runs: dict[int, list[float]] = {}
    for r in results:
        if (r["task"], r["metric"], r["method"]) == (task, metric, method):
            runs.setdefault(r["seed"], []).append(r["value"])
    return {seed: v[0] if len(v) == 1 else statistics.fmean(v) for seed, v in runs.items()}


def paired_by_seed(results: list[dict], task: str, metric: str, method: str, base: str) -> dict[int, float]:
    """`method` - `base`, seed by seed over the seeds both have, in seed order (a seed gives both the same
    fine-tuning data order and classifier start, so the pairs vary less than the two means)."""
    mine, theirs = by_seed(results, task, metric, method), by_seed(results, task, metric, base)
    return {s: mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))}


def paired_differences(results: list[dict], task: str, metric: str, method: str, base: str) -> list[float]:
    """`paired_by_seed`'s differences."""
    return list(paired_by_seed(results, task, metric, method, base).values())


def mean_std_cell(values: list[float], note: str = "", signed: bool = False, digits: int = 4, runs: bool = True) -> str:
    """A table cell: mean +- std over seeds, a note, and (`runs`) the number of runs (a single run: its value, no
    spread)."""
    mean = f"{statistics.mean(values):{'+' if signed else ''}.{digits}f}"
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{mean}{spread}{note}" + (f" [n={len(values)}]" if runs else "")


NOT_JUDGED = "not judged (n=1)"
VERDICTS = ("Verdicts judge the seed-by-seed differences against their noise: *holds* when their mean is above the "
            "target by more than two standard errors (std / √n), *fails* when below it by as much, *tie* in between.")
WITHIN = ("*Within* ±bound: the whole of mean ± 2 standard errors inside the bound; *undecided* when it straddles "
          "one, *fails* when it lies beyond one.")


def paired_cells(results: list[dict], task: str, metric: str, methods, pairs) -> list[str]:
    """A table row's cells: each method's mean and standard deviation over seeds of `metric` on `task`, then each
    pair (a, b)'s paired interval as stored (a row of method "a-b", `benchmarks.rows.paired_runs`); "-" where none."""
    from mobilekd.finetune.intervals import cell

    cells = [mean_std_cell(v) if (v := values(results, task, metric, m)) else "-" for m in methods]
    for a, b in pairs:
        stored = [r for r in results if r["task"] == task and r["method"] == f"{a}-{b}"]
        cells.append(cell(stored[0]["interval"]) if stored else "-")
    return cells


def verdict(differences: list[float], above: float = 0.0) -> str:
    """Whether seed-by-seed differences (or per-seed values) stand above `above` beyond their own noise: "holds"
    when their mean exceeds `above` by more than two standard errors (SE = sample std / sqrt(n)), "fails" when it
    falls below `above` by more than two, "tie" otherwise; a single difference has no spread to judge by (NOT_JUDGED).

    Two standard errors of three seeds is a loose bar (a t-distribution with 2 degrees of freedom puts about 82% of
    its mass within it, not 95%): a "tie" says the seeds cannot tell, and a "holds" is the least a claim needs."""
    if not differences:
        raise ValueError("no differences to judge")
    if len(differences) < 2:
        return NOT_JUDGED
    gap = round(statistics.mean(differences) - above, 10)  # the values carry 4 digits: no float dust decides
    bar = round(2 * statistics.stdev(differences) / math.sqrt(len(differences)), 10)
    return "holds" if gap > bar else "fails" if gap < -bar else "tie"


def within(differences: list[float], bound: float) -> str:
    """Two-sided: whether the mean difference lies within ±`bound` beyond its noise. "holds" when the whole interval
    mean ± 2 standard errors is inside [-bound, +bound] (both `verdict(bound - d)` and `verdict(d + bound)` hold),
    "fails" when the interval lies wholly beyond one bound, "undecided" when it straddles one; NOT_JUDGED for n=1.
    (Not merely the mean inside the bound: +1.26 ± 0.46 points is not shown to be within 1 point.)"""
    sides = [verdict([bound - d for d in differences]), verdict([d + bound for d in differences])]
    if NOT_JUDGED in sides:
        return NOT_JUDGED
    return "holds" if sides == ["holds", "holds"] else "fails" if "fails" in sides else "undecided"


def judged_cell(differences: list[float], above: float = 0.0) -> str:
    """A table cell for paired differences: mean +- std [n] and their verdict against `above`."""
    return f"{mean_std_cell(differences, signed=True)} {verdict(differences, above)}"


BASELINES = ("tfidf", "majority")  # the baseline rows beside a fine-tuning benchmark's methods


def row_order(methods: list[str], tasks: list[str] | None = None):
    """A fine-tuning benchmark's sort of its file: task (in `tasks`' order, else by name), the metric's rank, the
    method (in `methods`' order, the baselines after them), seed."""
    known = list(methods) + [b for b in BASELINES if b not in methods]
    return lambda r: (r["task"] if tasks is None else tasks.index(r["task"]), metric_rank(r["task"], r["metric"]),
                      known.index(r["method"]), r["seed"])
