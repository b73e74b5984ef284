"""Results as data: the rows a fine-tuning run contributes to a results file, the hosts the rows name (kept once,
in hosts.json beside the results), and the merge of new rows into what a results file already holds (a rerun
replaces its own rows; another host's stay beside them)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from filelock import FileLock
from safetensors import safe_open

from mobilekd.data.candidate_store import RECORD_KEYS
from mobilekd.fileio import RECORDED, read_json, record_keys, write_json
from mobilekd.host import UNKNOWN, identity
from mobilekd.models.heads import HEADS
from mobilekd.models.hf import load_config, transformers_extras
from mobilekd.rundir import HELD_OUT, dev_scores, finished_results, trained_on

# a run's record of the cached files it shared (`Made.record`): its training set and the teacher's outputs over it
SHARED_RECORD = tuple(k for kind in RECORDED for k in record_keys(kind)) + RECORD_KEYS  # and the candidates' store


def parameters(model_dir: Path) -> int:
    """The numbers a model directory's weights file holds; where the weights stayed on another machine (a run on a
    lent GPU, its results and config brought back without them), those of its config's model, built on no device."""
    if not (model_dir / "model.safetensors").is_file() and (model_dir / "config.json").is_file():
        config, head = load_config(model_dir)
        with torch.device("meta"):
            model = HEADS[head].model_class(config)
            return sum(t.numel() for t in {**model.state_dict(), **transformers_extras(model)}.values())
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def finetune_rows(run_dir: Path, metrics: dict | None = None, **identity) -> list[dict]:
    """A finished fine-tuning run's rows, one per dev metric (the task's official one first, e.g. MRPC's F1 then its
    accuracy): its dev scores (of the model it kept; `val_value`: that model's validation score where it chose on
    one), or `metrics` ({split: {metric: value}}, e.g. one evaluation of its history) where given (no rows while
    unfinished)."""
    r = finished_results(run_dir)
    if r is None:
        return []
    dev = dev_scores(metrics or r["metrics"])
    if dev is None:  # an unlabelled dev set: no scores
        return []
    shared = {"params": parameters(run_dir), "train_seconds": r["wall_seconds"], "steps": r["steps"], "lr": r["lr"],
              **trained_on(r), **{k: r[k] for k in SHARED_RECORD if k in r}}
    names = [r["best_metric"]] + [m for m in dev if m != r["best_metric"]]
    taught = {k: r[k] for k in ("teacher_digest",) if k in r}  # the teacher that taught it (`teacher_record`)
    validation = (r["metrics"].get(HELD_OUT[0]) or {}) if metrics is None else {}
    return [{**identity, "metric": m, "value": round(dev[m], 4), **shared, **taught,
             **({"val_value": round(validation[m], 4)} if m in validation else {}),
             **({"teacher_value": round(r["teacher_dev"][m], 4)} if m in r.get("teacher_dev", {}) else {})}
            for m in names]


def baseline_rows(run_dir: Path, task: str, seed: int, metric: str) -> list[dict]:
    """The TF-IDF + LR baseline and the majority class a finished fine-tuning run scored on its own training
    examples (its results.json "baseline" and "majority", `mobilekd.finetune.baseline`), as rows of method "tfidf"
    and "majority" in `metric`; none where it has none (a regression task has no majority row)."""
    done = finished_results(run_dir) or {}
    return [{"task": task, "method": method, "seed": seed, "metric": metric,
             "value": round(b["metrics"][metric], 4), "train_examples": b["train_examples"]}
            for method, b in (("tfidf", done.get("baseline")), ("majority", done.get("majority"))) if b]


ROW_KEY = ("task", "method", "seed", "metric", "threshold", "model", "threads")
HOSTS = "hosts.json"  # beside the results files: {host id: its fields (`mobilekd.host.identity`)}


def register_hosts(folder: Path, rows: list[dict]) -> list[dict]:
    """`rows` ready to write into a results file in `folder`: each row's "host_fields" (`trained_on`) moved into
    the folder's hosts file under its id, as are this machine's fields where a row names its id; the rows keep the
    id alone."""
    here = identity()
    found = {r["host"]: r["host_fields"] for r in rows if isinstance(r.get("host_fields"), dict)}
    if any(r.get("host") == here["id"] for r in rows):
        found.setdefault(here["id"], here)
    if found:
        path = folder / HOSTS
        with FileLock(f"{path}.lock"):
            known = read_json(path) if path.is_file() else {}
            fresh = {k: {f: v for f, v in fields.items() if f != "id"} for k, fields in found.items() if k not in known}
            if fresh:
                write_json(path, dict(sorted({**known, **fresh}.items())))
    return [{k: v for k, v in r.items() if k != "host_fields"} for r in rows]


def host_of(report_host: dict) -> dict:
    """A latency report's "host" (`android_bench.report`) as a row's fields: its id and fields ("unknown" for a
    report from before hosts were recorded)."""
    fields = report_host.get("identity")
    return {"host": fields["id"], "host_fields": fields} if fields else {"host": UNKNOWN}


def host_fields(results: dict) -> dict:
    """A row's host fields for a finished run's results (`trained_on`'s, less the CPU name)."""
    return {k: v for k, v in trained_on(results).items() if k in ("host", "host_fields")}


def recorded_host(result: dict) -> dict:
    """A row's host fields for a file that recorded `mobilekd.host.identity` under "host" ("unknown" for one
    from before hosts were recorded)."""
    fields = result.get("host")
    return {"host": fields["id"], "host_fields": fields} if isinstance(fields, dict) else {"host": UNKNOWN}


def write_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Write a results file (its hosts registered, `register_hosts`) and return the rows as written."""
    rows = register_hosts(path.parent, rows)
    write_json(path, rows)
    return rows


def merge_rows(path: Path, found: list[dict], order, key=ROW_KEY) -> list[dict]:
    """Write `found` into the results file at `path`, keeping its rows of other `key` (by default task, method,
    seed, metric and, where rows have them, threshold, model and thread count) or of another host: a row whose
    key and host are among the new rows' is replaced (the same run collected again), while a run on another
    machine stays beside it, so no host's run is lost to another's (the tables pool them: `by_seed`). Hosts that
    were never recorded, or back-filled from evidence (an "evidence" field in the hosts file), count as one: a run
    from before hosts were recorded, collected again, names none and replaces its own back-filled rows."""
    found = register_hosts(path.parent, found)
    hosts = read_json(path.parent / HOSTS) if (path.parent / HOSTS).is_file() else {}
    unrecorded = {None, UNKNOWN} | {h for h, fields in hosts.items() if "evidence" in fields}

    def ident(row):
        host = UNKNOWN if row.get("host") in unrecorded else row.get("host")
        return (*(tuple(v) if isinstance(v, list) else v for v in (row.get(k) for k in key)), host)

    new = {ident(f) for f in found}
    with FileLock(f"{path}.lock"):  # two invocations may end together
        kept = [r for r in (read_json(path) if path.is_file() else []) if ident(r) not in new]
        rows = sorted(kept + found, key=order)
        write_json(path, rows)
    return rows


def dev_predictions(run: Path):
    """A finished fine-tuning run's dev labels and predictions (dev_predictions.tsv), as arrays."""
    from mobilekd.finetune.intervals import read_predictions

    return read_predictions(run / "dev_predictions.tsv")


def paired_runs(out: Path, task: str, seeds: list[int], methods, pairs, metric: str | None = None) -> list[dict]:
    """Each method's fine-tuning rows on `task` (runs in OUT/TASK/METHOD/seedN), and over the seeds every method
    has finished, the paired interval (mobilekd/finetune/intervals.py: a bootstrap over dev examples and seeds) of each
    pair (a, b), a - b in `metric` (default: the GLUE task's official one), as a row of method "a-b"."""
    import numpy as np

    from mobilekd.finetune import intervals
    from mobilekd.data.tasks import GLUE_TASKS

    found = [r for m in methods for seed in seeds
             for r in finetune_rows(out / task / m / f"seed{seed}", task=task, method=m, seed=seed)]
    done = [s for s in seeds if all((out / task / m / f"seed{s}" / "dev_predictions.tsv").is_file() for m in methods)]
    if not done:
        return found
    got = {m: [dev_predictions(out / task / m / f"seed{s}") for s in done] for m in methods}
    labels, metric = got[methods[0]][0][0], metric or GLUE_TASKS[task].metrics[0]
    for a, b in pairs:
        found.append({"task": task, "method": f"{a}-{b}", "seed": None, "metric": metric, "value": None,
                      "seeds": done, "interval": intervals.paired_bootstrap(
                          labels, np.array([p for _, p in got[a]]), np.array([p for _, p in got[b]]),
                          metric=intervals.metric_function(task, metric))})
    return found
