"""The README's headline table: one line per comparison page, every figure read from that page's rows in
docs/results/ (no benchmark is run).

    python -m benchmarks.summary --table            # print it
    python -m benchmarks.summary --table --write    # and replace its block in README.md

Each line names its rows' file and its page; a file that is missing leaves its line out rather than inventing it.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.demo import shipped
from benchmarks.pages import write_pages
from benchmarks.stats import mean_std_cell, metric_rank, values, within
from mobilekd.errors import cli_entry
from mobilekd.fileio import REPO_ROOT, read_json

RESULTS = REPO_ROOT / "docs" / "results"


def _rows(name: str) -> list[dict]:
    path = RESULTS / f"{name}.json"
    return read_json(path) if path.is_file() else []


def _official(rows: list[dict], task: str) -> str:
    """The task's official metric among those its rows have (MRPC F1, STS-B Pearson, CoLA Matthews, ...)."""
    return min({r["metric"] for r in rows if r["task"] == task}, key=lambda m: metric_rank(task, m))


def _hosts(rows: list[dict]) -> str:
    """The hosts (ids, `docs/results/hosts.json`) that measured these rows, for a line that quotes their times."""
    found = sorted({str(r.get("host", "unknown")) for r in rows}) or ["unknown"]
    return " and ".join(f"`{h}`" for h in found)


def _cell(rows, task, metric, method) -> str:
    found = values(rows, task, metric, method)
    return mean_std_cell(found) if found else "-"


def demo() -> list[str]:
    """The demo: its wall time as a new user runs it (the newest `benchmarks.wall` row: a fresh clone, set-up
    included) where one exists, and its distilled student's SST-2 score from the demo's own run (one run, seed 0)."""
    rows = _rows("demo")
    name = shipped(rows)
    student = [r for r in rows if (r["task"], r["method"], r["metric"]) == ("sst2", name, "accuracy")]
    if not student:
        return []
    wall = [r for r in _rows("wall") if r["task"] == "demo" and r["exit_code"] == 0]
    if wall:
        w = wall[-1]
        timed = (f"| `scripts/demo.sh` on a fresh clone, set-up included (commit {w['commit']}, `{w['host']}`, "
                 f"one run) "
                 f"| {w['value'] / 60:.1f} min; ")
    else:
        w = next((r for r in rows if (r["task"], r["metric"]) == ("demo", "wall_seconds")), None)
        if w is None:  # a demo collected from its report alone (--from-report): no wall time of its own
            return []
        timed = (f"| `scripts/demo.sh` end to end, set-up not counted (commit {w.get('commit') or 'unrecorded'}, "
                 f"`{w.get('host', 'unknown')}`, one run) | {w['value'] / 60:.1f} min; ")
    return [timed + f"the student it ships ({name}) {student[0]['value']:.4f} SST-2 accuracy [n=1] "
            f"(the demo's run of commit {student[0].get('commit') or 'unrecorded'}) | - | [demo](docs/demo.md) |"]


def teacher_value() -> list[str]:
    rows = _rows("teacher_value")
    if not rows:
        return []
    against = [f"teacher {_cell(rows, 'sst2', 'accuracy', 'teacher')}",
               f"same student from random init {_cell(rows, 'sst2', 'accuracy', 'scratch')}"]
    if values(rows, "sst2", "accuracy", "tfidf"):
        against.append(f"TF-IDF + LR on the same examples {_cell(rows, 'sst2', 'accuracy', 'tfidf')}")
    pkt = next(r for r in rows if r["method"] == "pkt")
    lines = [f"| PKT student (`{pkt['student']}`, {pkt['params'] / 1e6:.1f}M) at the demo's budget, SST-2 accuracy | "
             f"{_cell(rows, 'sst2', 'accuracy', 'pkt')} | {'; '.join(against)} | [teachers](docs/teachers.md) |"]
    # the shipped student under today's configs/demo.json where it was measured apart (its own results file)
    now = _rows("teacher_value_demo_now")
    shipped_rows, when = (now, "under today's `configs/demo.json`") if now else (rows, "at its budget")
    shipped = next((r for r in shipped_rows if r["method"] == "subset_task_kd"), None)
    if shipped:
        beside = [f"teacher {_cell(shipped_rows, 'sst2', 'accuracy', 'teacher')}"]
        if values(shipped_rows, "sst2", "accuracy", "tfidf"):
            beside.append(f"TF-IDF + LR on the same examples {_cell(shipped_rows, 'sst2', 'accuracy', 'tfidf')}")
        lines.append(f"| the demo's shipped student (teacher layers 0, 5 + task KD, {shipped['params'] / 1e6:.1f}M) "
                     f"{when}, SST-2 accuracy | {_cell(shipped_rows, 'sst2', 'accuracy', 'subset_task_kd')} | "
                     f"{'; '.join(beside)} | [teachers](docs/teachers.md) |")
    return lines


def _task_cells(rows, tasks, method) -> str:
    """A method's accuracy cell on each task of `rows` (the CSV tasks' rows, custom's and ship's)."""
    return "; ".join(f"{t} {_cell(rows, t, 'accuracy', method)}" for t in tasks)


def custom() -> list[str]:
    """`mobilekd ship` before its search (one fixed recipe) on the custom CSV tasks: its student against TF-IDF."""
    rows = _rows("custom")
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    if not tasks:
        return []

    return [f"| `mobilekd ship` before its search (one recipe) on your own CSV ({len(tasks)} tasks built from shipped "
            f"text), accuracy | {_task_cells(rows, tasks, 'ship')} | TF-IDF + LR {_task_cells(rows, tasks, 'tfidf')}; "
            f"teacher {_task_cells(rows, tasks, 'teacher')} | "
            f"[ship](docs/ship_runs.md#before-its-search-one-fixed-recipe) |"]


def ship() -> list[str]:
    """Today's `mobilekd ship` (its search, dev scored once) on the CSV tasks: its student against TF-IDF; on each
    task the runs whose teacher ship chose on validation where there are any, else those of its earlier fixed
    teacher (benchmarks.ship keeps both)."""
    from mobilekd.finetune.intervals import cell
    from benchmarks.ship import CUSTOM, current

    rows = current([r for r in _rows("ship") if r["task"] in CUSTOM])
    chosen = {r["task"] for r in rows if r.get("teacher_choice") == "validation"}
    tasks = list(dict.fromkeys(r["task"] for r in rows if r["method"] == "ship"))
    if not tasks:
        return []

    gaps = "; ".join(f"{t} {cell(r['interval'])}" for t in tasks for r in rows
                     if r["task"] == t and r["method"] == "ship-tfidf-interval")
    return [f"| `mobilekd ship` on your own CSV ({len(tasks)} task{'s' * (len(tasks) > 1)} built from shipped text), "
            f"accuracy, dev scored "
            f"once after a search on validation | {_task_cells(rows, tasks, 'ship')} | TF-IDF + LR "
            f"{_task_cells(rows, tasks, 'tfidf')} (ship - TF-IDF: "
            f"{gaps}); teacher {_task_cells(rows, tasks, 'teacher')}"
            + (f" (chosen on validation: {', '.join(t for t in tasks if t in chosen)}; on the others ship's earlier "
               f"fixed teacher)" if chosen else "") + " | [ship](docs/ship.md) |"]


def quality() -> list[str]:
    """Per task, the student on the full training set that the retired benchmarks.quality picked on dev
    (`benchmarks.ship.DEV_PICKED`: the best dev mean within a third of the teacher's Pixel 4 estimate), against the
    teacher and the baselines."""
    from benchmarks.ship import DEV_PICKED
    rows = _rows("quality")
    teacher_ms = next((r["pixel4_ms"] for r in rows if r["method"] == "teacher" and r.get("pixel4_ms")), None)
    cells, against = [], []
    for task in dict.fromkeys(r["task"] for r in rows):
        metric = _official(rows, task)
        best = DEV_PICKED.get(task)
        if best is None:
            continue
        cells.append(f"{task} {metric}: {best} {_cell(rows, task, metric, best)}")
        against.append(f"{task}: " + ", ".join(f"{m} {_cell(rows, task, metric, m)}"
                                               for m in ("teacher", "tfidf", "majority", "model-maker")
                                               if values(rows, task, metric, m)))
    return [f"| best student on the full training sets within a third of the teacher's Pixel 4 estimate "
            f"({teacher_ms:.1f} ms), **picked on the dev set it is scored on** (an optimistic figure: the honest "
            f"one is `mobilekd ship`'s, next row) | {'; '.join(cells)} | {'; '.join(against)} | "
            f"[quality](docs/quality.md) |"] if cells else []


def glue_ship() -> list[str]:
    """`mobilekd ship` on the GLUE tasks it has run (its choices on validation, dev scored once), against the
    student benchmarks.quality picked on dev (`benchmarks.ship.dev_picked`), the teacher and the baselines."""
    from mobilekd.finetune.intervals import cell
    from benchmarks.ship import GLUE, current, dev_picked

    rows = [r for r in current(_rows("ship")) if r["task"] in GLUE and r.get("teacher_choice") == "validation"]
    tasks = list(dict.fromkeys(r["task"] for r in rows if r["method"] == "ship"))
    if not tasks:
        return []
    metric = {t: next(r["metric"] for r in rows if r["task"] == t and r["method"] == "ship") for t in tasks}
    measured = "; ".join(f"{t} {metric[t]} {_cell(rows, t, metric[t], 'ship')}" for t in tasks)
    picked = "; ".join(f"{t} {mean_std_cell(v)}" for t in tasks if (v := dev_picked(t, metric[t])))
    gaps, over_majority = ("; ".join(f"{t} {cell(r['interval'])}" for t in tasks for r in rows
                                     if r["task"] == t and r["method"] == f"ship-{other}-interval")
                           for other in ("tfidf", "majority"))
    return [f"| `mobilekd ship` on the GLUE tasks run so far, at a third of the teacher's Pixel 4 estimate: every "
            f"choice on a validation split of train, dev scored once | {measured} | picked on dev (row above) "
            f"{picked}; teacher " + "; ".join(f"{t} {_cell(rows, t, metric[t], 'teacher')}" for t in tasks)
            + "; TF-IDF + LR " + "; ".join(f"{t} {_cell(rows, t, metric[t], 'tfidf')}" for t in tasks)
            + "; majority " + "; ".join(f"{t} {_cell(rows, t, metric[t], 'majority')}" for t in tasks)
            + f" (ship - TF-IDF: {gaps}" + (f"; ship - majority, over the seeds that kept its label: {over_majority}"
                                            if over_majority else "") + ") | [ship](docs/ship.md) |"]


def methods() -> list[str]:
    """Per task, the student method with the best mean on the task's official metric."""
    rows = _rows("methods")
    students = sorted({r["method"] for r in rows} - {"teacher", "tfidf", "majority"})
    cells, teacher = [], []
    for task in dict.fromkeys(r["task"] for r in rows):
        metric = _official(rows, task)
        best = max(students, key=lambda m: statistics.mean(values(rows, task, metric, m) or [float("-inf")]))
        cells.append(f"{task} {metric}: {best} {_cell(rows, task, metric, best)}")
        teacher.append(f"{task} {_cell(rows, task, metric, 'teacher')}")
    if not cells:
        return []
    examples = {r["train_examples"] for r in rows if r["method"] == "tfidf"}
    budget = f" ({', '.join(f'{n:,}' for n in sorted(examples))} training examples a task)" if examples else ""
    return [f"| best of {len(students)} distillation methods per task{budget} | {'; '.join(cells)} | "
            f"teacher: {'; '.join(teacher)} | [methods](docs/methods.md) |"]


# per task where BERT-PKD's students ran on the full training set (the retired `benchmarks.quality --methods
# family`), the run of that benchmark that stands for each method of the retired benchmarks.methods (its
# `family_method` at 3f31fc1)
BERT_PKD_RUNS = {"ft": "bert3-ft", "kd": "bert3-kd", "pkd-skip": "bert3-pkd-skip", "pkd-last": "bert3-pkd-last",
                 "distilbert": "distilbert-ft"}
FAMILY_RUNS = {"mrpc": {**BERT_PKD_RUNS, "tinybert-aug": "tinybert-td", "mobilebert": "pkt"},
               "stsb": {**BERT_PKD_RUNS, "tinybert-aug": "tinybert-td"},
               "cola": {**BERT_PKD_RUNS, "tinybert-aug": "tinybert-td-wide"}}


def family() -> list[str]:
    """Per task of FAMILY_RUNS, the method of the source documents' family with the best mean on the full training
    set, against the teacher."""
    rows = _rows("quality")
    cells, teacher = [], []
    for task, runs in FAMILY_RUNS.items():
        metric = _official(rows, task)
        ran = {m: run for m, run in runs.items() if values(rows, task, metric, run)}
        best = max(ran, key=lambda m: statistics.mean(values(rows, task, metric, ran[m])))
        cells.append(f"{task} {metric}: {best} (`{ran[best]}`) {_cell(rows, task, metric, ran[best])}")
        teacher.append(f"{task} {_cell(rows, task, metric, 'teacher')}")
    return [f"| best of the source documents' distillation methods per task, on the full training sets (picked on "
            f"dev) | {'; '.join(cells)} | teacher: {'; '.join(teacher)} | "
            f"[quality](docs/quality_runs.md#the-source-documents-family-at-these-budgets) |"] if cells else []


def fastest_within(results: list[dict], task: str, metric: str, bound: float = 0.01):
    """The fastest threshold whose seed-paired change from the full model (threshold 0) is within ±`bound`
    (`stats.within`), as (threshold, its measured speed-ups, its changes), or None: the retired
    benchmarks.early_exit's goal, read from its rows (docs/retired.md)."""
    best = None
    for threshold in sorted({r["threshold"] for r in results if r["task"] == task}):
        mine = [r for r in results if (r["task"], r["metric"], r["threshold"]) == (task, metric, threshold)]
        full = {r["seed"]: r["value"] for r in results if (r["task"], r["metric"], r["threshold"]) == (task, metric,
                                                                                                      0.0)}
        change = [r["value"] - full[r["seed"]] for r in mine if r["seed"] in full]
        speed = [r["full_host_ms"] / r["host_ms"] for r in mine]
        if change and within(change, bound) == "holds" and (best is None or statistics.mean(speed) >
                                                             statistics.mean(best[1])):
            best = (threshold, speed, change)
    return best


def early_exit() -> list[str]:
    """Per task, the fastest threshold within ±1 point of the full model, as the page's goal picks it."""
    rows = _rows("early_exit")
    cells = []
    for task in dict.fromkeys(r["task"] for r in rows):
        best = fastest_within(rows, task, _official(rows, task))
        if best:
            threshold, speed, change = best
            cells.append(f"{task}: {mean_std_cell(speed, digits=2)} faster at threshold {threshold:g} "
                         f"({mean_std_cell([100 * c for c in change], signed=True, digits=2)} points)")
    return [f"| FastBERT early exits: measured speed-up of the fastest threshold within ±1 point of the full model "
            f"(2 standard errors) | {'; '.join(cells)} | the same model without exits, same run | "
            f"[fastbert](docs/fastbert.md) |"] if cells else []


def bilstm() -> list[str]:
    rows = _rows("bilstm")
    if not values(rows, "sst2", "accuracy", "bilstm-kd-aug"):
        return []
    timing = {r["method"]: r for r in rows if r["task"] == "sst2" and r.get("pixel4_ms")}
    student, teacher = timing.get("bilstm-kd-aug", {}), timing.get("teacher", {})
    now = next((r["pixel4_ms"] for r in _rows("quality") if r["method"] == "teacher" and r.get("pixel4_ms")), None)
    earlier = (f" (the estimator of these rows' day; the same file is {now} ms est. in quality.json)"
               if now is not None and now != teacher.get("pixel4_ms") else "")
    return [f"| BiLSTM (Tang et al., {student.get('params', 0) / 1e6:.1f}M) with KD and the transfer set, SST-2 "
            f"accuracy | {_cell(rows, 'sst2', 'accuracy', 'bilstm-kd-aug')}, Pixel 4 est. "
            f"{student.get('pixel4_ms', '-')} ms | teacher {_cell(rows, 'sst2', 'accuracy', 'teacher')}, Pixel 4 est. "
            f"{teacher.get('pixel4_ms', '-')} ms{earlier} | [bilstm](docs/bilstm.md) |"]


def multitask() -> list[str]:
    rows = _rows("multitask")
    tasks = list(dict.fromkeys(r["task"] for r in rows if r["method"] == "multi-task-ensemble-kd"))
    if not tasks:
        return []

    def average(method):  # the mean over tasks of each task's mean over seeds, official metrics
        return statistics.mean(statistics.mean(values(rows, t, _official(rows, t), method)) for t in tasks)

    one = next(r for r in rows if r["method"] == "multi-task-ensemble-kd" and r.get("tflite_bytes"))
    return [f"| one multi-task student for {len(tasks)} tasks (MT-DNN with ensemble KD), mean official metric | "
            f"{average('multi-task-ensemble-kd'):.4f}, one {one['tflite_bytes'] / 1e6:.0f} MB file | "
            f"{len(tasks)} single-task models {average('single-task'):.4f}, "
            f"{one['single_task_tflite_bytes'] / 1e6:.0f} MB | [multitask](docs/multitask.md) |"]


def cmlm() -> list[str]:
    """C-MLM's student against the same student without distillation and copying, per task, from the rows of the
    retired benchmarks.cmlm_validation (every choice on validation, dev scored once): the final runs at the largest
    budget (every pair before a subset) among those whose C-MLM students finished the most seeds, the student it
    shipped (its `at_largest_budget`, at 19fc398); BLEU of their final decoding (greedy at beam 1); copying's BLEU."""
    rows = _rows("cmlm_validation")
    found = {}  # task -> (its rows, its students' beam)
    for t in dict.fromkeys(r["task"] for r in rows if r["method"] == "cmlm"):
        seeds = {}
        for r in rows:
            if r["task"] == t and r["method"] == "cmlm":
                seeds.setdefault((r["train_pairs"], r["epochs"]), set()).add(r["seed"])
        most = max(map(len, seeds.values()))
        budget = max((b for b, done in seeds.items() if len(done) == most),
                     key=lambda b: (b[0] is None, b[0] or 0, b[1]))
        mine = [r for r in rows if r["task"] == t and (r["method"] == "copy" or r["method"] in ("cmlm", "ce")
                                                        and (r["train_pairs"], r["epochs"]) == budget)]
        found[t] = (mine, next(r["beam"] for r in mine if r["method"] == "cmlm"))
    if not found:
        return []

    def cell(method):
        return "; ".join(f"{t} " + mean_std_cell(values(mine, t, "bleu" if method == "copy" or beam > 1 else
                                                        "bleu_greedy", method), digits=2)
                         for t, (mine, beam) in found.items())

    decodings = ", ".join(f"{t} {f'beam {beam}' if beam > 1 else 'greedy'}, chosen on validation"
                          for t, (_, beam) in found.items())
    params = next(r["params"] for mine, _ in found.values() for r in mine if r["method"] == "cmlm" and r.get("params"))
    return [f"| BERT into a text generator (C-MLM), {params / 1e6:.1f}M encoder-decoder, dev BLEU ({decodings}) | "
            f"{cell('cmlm')} | cross-entropy alone {cell('ce')}; copying the source {cell('copy')} | "
            f"[seq2seq](docs/seq2seq.md) |"]


def int8() -> list[str]:
    """The demo student as a QAT full-integer file on SST-2 against fp32 (its PyTorch models' score over the seeds,
    seed 0's file's size): the rows of the newest student
    benchmarks.int8 (retired) measured (one with a recorded digest before the earlier rows without), the attention form
    XNNPACK takes (qat-int8-sym) where measured, else the asymmetric one."""
    rows = [r for r in _rows("int8") if r.get("model") == "student" and r["task"] == "sst2"]
    digests = list(dict.fromkeys(r.get("student_digest") for r in rows))  # the students measured, in order
    if not digests:
        return []
    digest = next((d for d in reversed(digests) if d), None)
    rows = [r for r in rows if r.get("student_digest") == digest]
    method = next((m for m in ("qat-int8-sym", "qat-int8") if values(rows, "sst2", "accuracy", m)), None)
    if method is None:
        return []
    size = {r["method"]: r["tflite_bytes"] for r in rows if r.get("tflite_bytes")}  # fp32's: on its file's rows
    return [f"| demo student as a full-integer file (QAT, `{method}`), SST-2 accuracy | "
            f"{_cell(rows, 'sst2', 'accuracy', method)}, {size[method] / 1e6:.1f} MB | "
            f"fp32 {_cell(rows, 'sst2', 'accuracy', 'fp32')}, {size['fp32'] / 1e6:.1f} MB | [int8](docs/int8.md) |"]


def latency() -> list[str]:
    """MobileBERT against BERT_BASE, from the latency benchmark's rows (one run: ratios, not milliseconds)."""
    rows = _rows("latency")
    p50 = {r["method"]: r["value"] for r in rows if r["metric"] == "p50_ms" and r.get("threads") == 1}
    pixel4 = {r["method"]: r["value"] for r in rows if r["metric"] == "pixel4_ms"}
    if not {"MobileBERT", "BERT_BASE"} <= set(p50) or not {"MobileBERT", "BERT_BASE"} <= set(pixel4):
        return []
    return [f"| MobileBERT against BERT_BASE, fp32 .tflite at sequence 128 (one run) | "
            f"{p50['BERT_BASE'] / p50['MobileBERT']:.2f}x faster on {_hosts(rows)} (1 thread); "
            f"Pixel 4 estimate {pixel4['MobileBERT']:.0f} ms against {pixel4['BERT_BASE']:.0f} ms | "
            f"the paper's 5.5x on a Pixel 4 | [latency](docs/latency.md) |"]


def kernels() -> list[str]:
    """The length-aware student file at SST-2's dev lengths against 128 (benchmarks.kernels, one run)."""
    rows = [r for r in _rows("kernels") if r.get("model") == "student" and r["seq"] == "dev"]
    speedup = {(r["form"], r.get("threads")): r["value"] for r in rows if r["metric"] == "speedup"}
    if ("fp32", 1) not in speedup or ("fp32", None) not in speedup:
        return []
    return [f"| the demo-shaped student as a length-aware file, at SST-2's dev lengths against 128 tokens (one run) | "
            f"{speedup['fp32', 1]:.2f}x faster on "
            f"{_hosts([r for r in rows if r['metric'] == 'speedup' and r.get('threads')])} "
            f"(fp32, 1 thread), "
            f"{speedup.get(('dynamic-int8', 1), float('nan')):.2f}x in dynamic-range int8; Pixel 4 estimate "
            f"{speedup['fp32', None]:.2f}x | the same file at 128 | [export](docs/export.md#length-aware-files-the-"
            f"sentences-own-length---lengths) |"] + fused_bilstm() + qat_attention()


def qat_attention() -> list[str]:
    """Full-size MobileBERT's QAT int8 file with the attention XNNPACK takes (its masking and softmax float), against
    dynamic-range int8 at 128 tokens (benchmarks.kernels, one run)."""
    found = [r for r in _rows("kernels") if r["model"] == "mobilebert" and r["seq"] == "128"]
    rows = {(r["form"], r["metric"], r.get("threads")): r["value"] for r in found}
    mine, theirs = "qat-int8-sym-float-softmax", "dynamic-int8"
    if (mine, "host_ms", 1) not in rows or (theirs, "host_ms", 1) not in rows:
        return []
    ratio = {t: rows[mine, "host_ms", t] / rows[theirs, "host_ms", t] for t in (1, 2) if (mine, "host_ms", t) in rows}
    share = rows.get((mine, "attention_products_delegated", None), float("nan"))
    return [f"| full-size MobileBERT as a QAT int8 file, attention products int8 with symmetric second operands, "
            f"masking and softmax in float, "
            f"against dynamic-range int8 at 128 tokens (one run) | {ratio[1]:.2f}x its latency on "
            f"{_hosts([r for r in found if r['metric'] == 'host_ms'])} (1 thread)"
            + (f", {ratio[2]:.2f}x at 2 threads" if 2 in ratio else "") + f"; {share:.0%} of attention products "
            f"in XNNPACK | goal 0.8x at 1 thread | [int8](docs/int8.md) |"]


def fused_bilstm() -> list[str]:
    """The BiLSTM's fused-LSTM file against the teacher's, fp32 at 128 tokens (benchmarks.kernels, one run)."""
    found = [r for r in _rows("kernels") if r["seq"] == "128"]
    rows = {(r["model"], r["form"], r["metric"], r.get("threads")): r["value"] for r in found}
    mine, theirs = ("bilstm", "bilstm-fused"), ("teacher", "fp32")
    if (*mine, "host_ms", 1) not in rows or (*theirs, "host_ms", 1) not in rows:
        return []
    ratio = {m: rows[(*theirs, m, t)] / rows[(*mine, m, t)] for m, t in (("host_ms", 1), ("pixel4_ms", None))}
    ops = rows[(*mine, "ops", None)], rows[("bilstm", "bilstm-unrolled", "ops", None)]
    return [f"| the BiLSTM with TFLite's fused LSTM kernel ({ops[0]:g} operators, unrolled {ops[1]:g}), fp32 at 128 "
            f"tokens (one run) | {ratio['host_ms']:.1f}x faster than the teacher on "
            f"{_hosts([r for r in found if r['metric'] == 'host_ms' and r['model'] in ('bilstm', 'teacher')])} "
            f"(1 thread), "
            f"{ratio['pixel4_ms']:.1f}x on the Pixel 4 estimate | the teacher's file; goal 10x | "
            f"[export](docs/export.md#fused-lstms-the-bilstm-in-39-operators---fused-lstm) |"]


def table() -> str:
    lines = ["| result | measured | against | page |", "|---|---|---|---|"]
    for part in (demo, quality, glue_ship, ship, custom, teacher_value, methods, family, early_exit, bilstm, multitask,
                 cmlm, int8, latency, kernels):
        lines += part()
    return "\n".join(lines)


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="print the table (the default; nothing is run)")
    p.add_argument("--write", action="store_true", help="also replace the table's block in README.md")
    args = p.parse_args(argv)
    text = table()
    print(text)
    return write_pages("summary", text) if args.write else 0


if __name__ == "__main__":
    sys.exit(main())
