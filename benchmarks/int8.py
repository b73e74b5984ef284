"""Integer models (issue 20): per task, the distilled MobileBERT student fine-tuned (fp32, 3 seeds) and its files in
dynamic-range int8, post-training full int8 (ptq-int8) and quantization-aware full int8 (qat-int8, `mobilekd qat`,
3 seeds) with issue 35's attention forms XNNPACK takes, qat-int8-sym and qat-int8-sym-float-softmax
(mobilekd.export.qat.ATTENTION); on SST-2 also with the official clip of the attention scores to [-6, 60],
qat-int8-clip, with the embedding tables in int8 too, qat-int8-emb, and with the attention cores in float,
which XNNPACK runs, qat-int8-fa;
and full-size MobileBERT and MobileBERT_TINY (random weights, for speed) in the same four forms. One row
per file and measurement to docs/results/int8.json, a Markdown table and the issue's goals as measured.

    python -m benchmarks.int8                   # SST-2, MRPC, STS-B; seeds 0-2; the variants on SST-2 (~5 h)
    python -m benchmarks.int8 --tasks sst2 --methods qat-int8 qat-int8-sym   # those QAT runs only, no timing
    python -m benchmarks.int8 --collect         # rows of the finished runs, run nothing
    python -m benchmarks.int8 --table
    python -m benchmarks.int8 --table --write   # and put it between its markers in its page

The student is the demo's PKT-distilled mobilebert_h384 (`--student`, default runs/demo/student: scripts/demo.sh
makes it), fine-tuned with issue 13's settings (benchmarks.teacher_value.TASKS, lr 2e-4) once per seed, and QAT
seed S quantizes the fp32 model of seed S, so the fp32 and QAT scores are paired over the same seeds (issue 35; QAT
rows name the fp32 seed they quantized, `fp32_seed`; QAT runs made before were all of seed 0's). fp32 rows are the
PyTorch model's dev scores (every metric of the task); seed 0's model is exported and timed. Its rows carry
`student_digest`, the first 12 hex digits of its weights' SHA-256 (recorded in OUT/TASK/student_digest when the
task's fp32 run is planned; a later run from another student is refused), and compare only with rows of the same
student (rows without one are of a demo student made before the digest was recorded). Each file's dev
score (QAT: every metric of the task; the post-training files: accuracy, STS-B Pearson of the score the file
returns; the fp32 file: its agreement only, none on STS-B, where parity.json holds its score; the earlier
student's fp32 rows are its file's score) is the LiteRT interpreter's on the full dev set; its agreement is with
the fp32 PyTorch model's predictions. QAT fine-tunes the fp32 model for about 200 steps of 32 at lr 1e-5 (SST-2:
6,400 training sentences once; MRPC: its 3,668 pairs twice; STS-B: its 5,749 pairs once). Every file is timed at
1 and 2 threads in one interleaved run (`mobilekd latency`) beside the host's own fp32 and int8 matrix-product
peaks, and estimated on a Pixel 4 (not with --methods: a part of the methods is not timed; issue 35's forms are
timed by benchmarks.kernels). The latency run is made once, with the tasks of its invocation (a later `--tasks
stsb` adds STS-B's scores, not its timings: its graph is SST-2's but for the output layer). Then the files of
full-size MobileBERT that run exported are profiled kernel by kernel at 1 thread (`mobilekd kernels`: perf samples
of where each file's CPU time goes, runs/int8/kernels/kernels.json; left out, with a note, on a machine where perf
cannot sample).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from android_bench.kernels import FAMILIES, OTHER, unavailable
from android_bench.models import CACHE, preset_path
from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import ROW_KEY, host_fields, host_of, recorded_host
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import WITHIN, mean_std_cell, within
from mobilekd.rundir import finished_results
from benchmarks.teacher_value import STUDENT_LR
from benchmarks.teacher_value import TASKS as FINETUNE
from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import REPO_ROOT, file_digest, read_json
from mobilekd.models.flops import model_stats
from mobilekd.models.presets import get_preset

TASKS = {"sst2": "64", "mrpc": "128", "stsb": "64"}  # --max-len, as fine-tuned
QAT = {"sst2": ["--max-train-examples", "6400", "--epochs", "1"], "mrpc": ["--epochs", "2"], "stsb": ["--epochs", "1"]}
SCORE = {"sst2": "accuracy", "mrpc": "accuracy", "stsb": "pearson"}  # the dev score each task's rows report
FILES = {"fp32": "model_none.tflite", "dynamic-int8": "model_dynamic_int8.tflite", "ptq-int8": "model_int8.tflite"}
# QAT as issue 20 first measured it; with the official clip of the attention scores; with int8 embedding tables;
# with float attention cores (the variants on SST-2 only: the budget). method -> (its runs' folder, its flags, its
# tasks: None for all)
QAT_VARIANTS = {"qat-int8": ("qat", [], None), "qat-int8-clip": ("qat_clip", ["--score-clip", "-6", "60"], ["sst2"]),
                "qat-int8-emb": ("qat_emb", ["--int8-embeddings"], ["sst2"]),
                "qat-int8-fa": ("qat_fa", ["--float-attention"], ["sst2"]),
                # issue 35: K^T and V symmetric per tensor (XNNPACK's int8 BATCH_MATMUL), and that with the masking
                # and softmax between the products in float (mobilekd.export.qat.ATTENTION); on every task
                "qat-int8-sym": ("qat_sym", ["--symmetric-attention"], None),
                "qat-int8-sym-float-softmax": ("qat_sym_float_softmax", ["--symmetric-attention", "--float-softmax"],
                                               None)}
METHODS = [*FILES, *QAT_VARIANTS]
PRESETS = {"mobilebert": "MobileBERT", "mobilebert_tiny": "MobileBERT_TINY"}  # random weights, timed only
QUANTIZE = {"fp32": "none", "dynamic-int8": "dynamic-int8", "ptq-int8": "int8", "qat-int8": "qat-int8",
            "qat-int8-fa": "qat-int8-float-attention"}
THREADS = ["1", "2"]
SEQ_LEN = 128  # the presets' files, as `mobilekd latency` exports them by default
PROFILED = "mobilebert"  # the preset whose files are profiled kernel by kernel
PROFILE_SECONDS = "10"
PROFILE_METRICS = ("cpu_ms", "profiled_wall_ms")  # the kernel profile's, in their own table
STUDENT = "student"  # the rows' model name for the fine-tuned students
KEY = (*ROW_KEY, "student_digest")  # a row of another distilled student is another row


def recorded_digest(out: Path, task: str) -> str | None:
    """The digest of the student OUT/TASK's runs were fine-tuned from, as `record_student` wrote it (None: none)."""
    path = out / task / "student_digest"
    return path.read_text().strip() if path.is_file() else None


def record_student(out: Path, task: str, student: Path) -> None:
    """Write the distilled student's identity for TASK's runs (the first 12 hex digits of its weights' SHA-256),
    refusing runs made from another student, or from one not recorded, which their rows would misname."""
    path, weights = out / task / "student_digest", student / "model.safetensors"
    if not weights.is_file():
        raise UserError(f"{weights}: no such file (the distilled student the runs start from; --student)")
    digest, before = file_digest(weights)[:12], recorded_digest(out, task)
    if before not in (None, digest):
        raise UserError(f"{path}: the runs there were fine-tuned from another student ({before}, not {digest} of "
                        f"{student}): move {out / task} away or pass another --out")
    if before is None and finished_results(fp32_dir(out, task, 0)) is not None:
        raise UserError(f"{fp32_dir(out, task, 0)}: fine-tuned from a student no digest records: move it away")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(digest + "\n")


def fp32_dir(out: Path, task: str, seed: int) -> Path:
    """TASK's student fine-tuned with SEED; seed 0's is the one exported and timed."""
    return out / task / ("fp32" if seed == 0 else f"fp32_seed{seed}")


def qat_dir(out: Path, task: str, seed: int, method: str = "qat-int8") -> Path:
    return out / task / QAT_VARIANTS[method][0] / f"seed{seed}"


def quantized(qat: dict, out: Path, task: str, seed: int) -> bool:
    """Whether a finished QAT run quantized TASK's fp32 model of SEED: its `model`'s task folder and name, so that
    a runs folder moved or copied elsewhere still matches."""
    return Path(qat["model"]).parts[-2:] == fp32_dir(out, task, seed).parts[-2:]


def label(task: str, method: str) -> str:
    """A file's name in the latency report."""
    return f"{task} {method}"


def jobs(out: Path, student: Path, tasks: list[str], seeds: list[int], methods=tuple(QAT_VARIANTS)) -> list[Job]:
    """The runs: per task and seed the fp32 fine-tuning, seed 0's export, and the QAT runs of `methods`, seed S
    quantizing the fp32 model of seed S (so fp32 and QAT are paired over the same seeds); with every QAT method, the
    latency run and the kernel profile after them. A finished QAT run of another fp32 model is refused."""
    plan, timed = [], {}
    for task in tasks:
        record_student(out, task, student)
        tflite = out / task / "tflite"
        for seed in dict.fromkeys([0, *seeds]):  # seed 0's is the one exported
            fp32 = fp32_dir(out, task, seed)
            plan.append(Job(f"{task}/fp32/{seed}", ["finetune", "--task", task, *FINETUNE[task], "--model",
                                                    str(student), "--lr", STUDENT_LR, "--seed", str(seed),
                                                    "--eval-every", "0", "--out", str(fp32), *RESUMABLE], fp32))
        plan.append(Job(f"{task}/export", ["export", "--model", str(fp32_dir(out, task, 0)), "--max-len", TASKS[task],
                                           "--quantize", "none", "dynamic-int8", "int8", "--parity-examples", "2000",
                                           "--min-agreement", "0",  # post-training int8's loss is what it measures
                                           "--out", str(tflite)], tflite, [f"{task}/fp32/0"]))
        for method, (_, flags, only) in QAT_VARIANTS.items():
            for seed in seeds if method in methods and (only is None or task in only) else []:
                d, fp32 = qat_dir(out, task, seed, method), fp32_dir(out, task, seed)
                done = finished_results(d)
                if done is not None and not quantized(done, out, task, seed):
                    raise UserError(f"{d}: quantized {done['model']}, not the fp32 model of seed {seed} ({fp32}): "
                                    f"move it away")
                plan.append(Job(f"{task}/{method}/{seed}", ["qat", "--model", str(fp32), "--task", task, "--max-len",
                                                            TASKS[task], *QAT[task], *flags, "--seed", str(seed),
                                                            "--out", str(d), *RESUMABLE], d, [f"{task}/fp32/{seed}"]))
        timed.update({label(task, m): tflite / name for m, name in FILES.items()})
        timed.update({label(task, m): qat_dir(out, task, seeds[0], m) / "model_qat_int8.tflite"
                      for m, (_, _, only) in QAT_VARIANTS.items() if only is None or task in only})
    if set(methods) != set(QAT_VARIANTS):
        return plan
    # alone, after every other run: timings share the machine with nothing of ours
    plan.append(Job("latency", ["latency", "--models", *PRESETS, "--quantize", *QUANTIZE.values(), "--threads",
                                *THREADS, "--devices", "pixel4", "--out", str(out / "latency"), "--tflite",
                                *(f"{k}={v}" for k, v in timed.items())],
                    out / "latency", [j.name for j in plan]))
    why = unavailable()
    if why:
        print(f"no kernel profile: {why}")
        return plan
    plan.append(Job("kernels", ["kernels", *(f"{m}={p}" for m, p in profiled_files().items()), "--seconds",
                                PROFILE_SECONDS, "--out", str(out / "kernels")], out / "kernels",
                    ["latency"]))
    return plan


def profiled_files() -> dict[str, Path]:
    """method -> the file of PROFILED that the latency run exported (`mobilekd latency` keeps it in its cache)."""
    return {m: preset_path(PROFILED, q, SEQ_LEN, CACHE) for m, q in QUANTIZE.items()}


def kernel_rows(out: Path) -> list[dict]:
    """PROFILED's CPU milliseconds per invocation by kernel family (1 thread), and the wall time they came from."""
    path = out / "kernels" / "kernels.json"
    if not path.is_file():
        return []
    found = []
    for profile in read_json(path):
        identity = {"model": PROFILED, "task": None, "method": profile["name"], "seed": 0,
                    "threads": profile["threads"], **recorded_host(profile)}
        found += [{**identity, "metric": PROFILE_METRICS[0], "kernel_family": f["name"], "value": f["cpu_ms"]}
                  for f in profile["families"]]
        found.append({**identity, "metric": PROFILE_METRICS[1], "value": profile["wall_ms_per_invocation"]})
    return found


def timing_rows(report: dict, key: str, **identity) -> list[dict]:
    """A timed file's rows: host latency per thread count (with the host that timed it), the Pixel 4 estimate, its
    GFLOPs in the graph."""
    r = report["rows"].get(key)
    if r is None:
        return []
    found = [{**identity, "metric": "host_ms", "value": r["host"][t]["p50_ms"], "threads": int(t),
              "fraction_of_peak": r["host"][t]["fraction_of_peak"], **host_of(report["host"])}
             for t in THREADS if t in r["host"]]
    found.append({**identity, "metric": "pixel4_ms", "value": r["estimate_ms"]["pixel4"]})
    found.append({**identity, "metric": "gflops", "value": r["gflops"]})
    return [{**f, "tflite_bytes": round(r["size_mb"] * 1e6)} for f in found]


def rows(out: Path, tasks: list[str], seeds: list[int]) -> list[dict]:
    report_path = out / "latency" / "report.json"
    report = read_json(report_path) if report_path.is_file() else {"rows": {}, "host": {}}
    found = []
    for task in tasks:
        parity_path = out / task / "tflite" / "parity.json"
        parity = read_json(parity_path) if parity_path.is_file() else {}
        base = {"model": STUDENT, "task": task, "student_digest": recorded_digest(out, task)}
        exported = parity.get(FILES["fp32"])
        for seed in seeds:  # the fp32 models' dev scores in PyTorch, every metric of the task; seed 0's rows carry
            r = finished_results(fp32_dir(out, task, seed))  # the size of its exported file
            size = {"tflite_bytes": exported["size_bytes"]} if seed == 0 and exported else {}
            found += [{**base, "method": "fp32", "seed": seed, "metric": m, "value": round(v, 4),
                       "train_seconds": r["wall_seconds"], **size, **host_fields(r)}
                      for m, v in (r["metrics"]["dev"] if r else {}).items()]
        for method, name in FILES.items():  # seed 0's files, scored by the LiteRT interpreter (fp32: agreement only)
            if name not in parity:
                continue
            p = parity[name]
            identity = {**base, "method": method, "seed": 0}
            shared = {"tflite_bytes": p["size_bytes"], "float_islands": (p.get("float_islands") or {}).get("islands")}
            if method != "fp32":
                found.append({**identity, "metric": SCORE[task], "value": round(p[f"{SCORE[task]}_exported"], 4),
                              **shared})
            if "agreement" in p:
                found.append({**identity, "metric": "agreement_fp32", "value": round(p["agreement"], 4), **shared})
            found += timing_rows(report, label(task, method), **identity)
        for method, seed in ((m, s) for m in QAT_VARIANTS for s in seeds):
            r = finished_results(qat_dir(out, task, seed, method))
            if r is None:
                continue
            # the fp32 model of this seed, or (runs made before the pairing) seed 0's
            source = next((s for s in (seed, 0) if quantized(r, out, task, s)), None)
            if source is None:
                raise UserError(f"{qat_dir(out, task, seed, method)}: quantized {r['model']}, none of {task}'s fp32 "
                                f"models: move it away")
            identity = {**base, "method": method, "seed": seed, "fp32_seed": source}
            shared = {"tflite_bytes": r["tflite_bytes"], "float_islands": (r["float_islands"] or {}).get("islands"),
                      "train_seconds": r["wall_seconds"], "steps": r["steps"], **host_fields(r)}
            found += [{**identity, "metric": m, "value": round(v, 4), **shared} for m, v in r["metrics_int8"].items()]
            found += [{**identity, "metric": f"{m}_fake_quant", "value": round(v, 4), **shared}
                      for m, v in r["metrics_fake_quant"].items()]
            if "agreement_int8_float" in r:
                found.append({**identity, "metric": "agreement_fp32", "value": round(r["agreement_int8_float"], 4),
                              **shared})
            if seed == seeds[0]:
                found += timing_rows(report, label(task, method), **identity)
    for preset in PRESETS:
        for method, quantize in QUANTIZE.items():
            key = preset + ("" if quantize == "none" else f" {quantize}")
            found += timing_rows(report, key, model=preset, task=None, method=method, seed=0)
    for kind, by_threads in report["host"].get("peak_gflops", {}).items():
        found += [{"model": "host", "task": None, "method": f"{kind}-peak", "seed": 0, "metric": "gop_s",
                   "value": v, "threads": int(t), **host_of(report["host"])} for t, v in by_threads.items()]
    return found + kernel_rows(out)


def students(results: list[dict]) -> list[tuple[str, str | None]]:
    """The (task, student_digest) pairs of the student rows, in their order."""
    return list(dict.fromkeys((r["task"], r.get("student_digest")) for r in results if r["model"] == STUDENT))


def _pick(results, **match) -> list[dict]:
    return [r for r in results if all(r.get(k) == v for k, v in match.items())]


def gaps(results, metric: str, method: str, **student) -> tuple[list[float], str]:
    """Points of METRIC by which METHOD's files stand above (+) or below (-) the fp32 model each was made from (its
    row's `fp32_seed`; seed 0 for the post-training files and for QAT runs made before fp32 was fine-tuned per seed),
    and what they are measured against: paired by seed, one fp32 run, or (a mix) fp32 models not paired by seed."""
    fp32 = {r["seed"]: r["value"] for r in _pick(results, **student, method="fp32", metric=metric)}
    made = [(r["seed"], r.get("fp32_seed", 0), r["value"]) for r in _pick(results, **student, method=method,
                                                                         metric=metric)]
    made = [(s, f, v) for s, f, v in made if f in fp32]
    bases = {f for _, f, _ in made}
    if len(bases) > 1 and all(s == f for s, f, _ in made):
        against = f"paired with fp32 fine-tuned over the same {len(bases)} seeds"
    else:
        against = "against one fp32 run" if len(bases) == 1 else f"against {len(bases)} fp32 models, not paired by seed"
    return [100 * (v - fp32[f]) for _, f, v in made], against


def _cell(results, digits=1, scale=1.0, **match) -> str:
    values = [r["value"] / scale for r in _pick(results, **match)]
    return f"{statistics.mean(values):.{digits}f}" if values else "-"


def table(results: list[dict]) -> str:
    lines = ["| model | method | dev score | vs fp32 (points) | agreement with fp32 | .tflite MB | float islands | "
             "host ms, 1 thr | host ms, 2 thr | Pixel 4 ms (est.) |", "|---|---|---|---|---|---|---|---|---|---|"]
    models = [(STUDENT, *s) for s in students(results)] + [(p, None, None) for p in PRESETS if _pick(results, model=p)]
    for model, task, digest in models:
        score = SCORE.get(task, "accuracy")
        for method in METHODS:
            mine = [r for r in _pick(results, model=model, task=task, student_digest=digest, method=method)
                    if r["metric"] not in PROFILE_METRICS]
            if not mine:
                continue
            accuracy = [r["value"] for r in mine if r["metric"] == score]
            acc, delta = "-", "-"
            if accuracy:
                acc = mean_std_cell(accuracy)
                gap = gaps(results, score, method, model=model, task=task, student_digest=digest)[0]
                delta = f"{statistics.mean(gap):+.2f}" if gap and method != "fp32" else "-"
            islands = next((r.get("float_islands") for r in mine if r.get("float_islands") is not None), None)
            size = next((r["tflite_bytes"] for r in mine if r.get("tflite_bytes")), None)
            name = PRESETS[model] + " (random weights)" if task is None else \
                f"{model} {digest or 'earlier'} ({task}, {score})"
            lines.append(f"| {name} | {method} | {acc} | {delta} | {_cell(mine, 4, metric='agreement_fp32')} | "
                         f"{f'{size / 1e6:.1f}' if size else '-'} | {'-' if islands is None else islands} | "
                         f"{_cell(mine, 2, metric='host_ms', threads=1)} | "
                         f"{_cell(mine, 2, metric='host_ms', threads=2)} | {_cell(mine, 1, metric='pixel4_ms')} |")
    hosts = ", ".join(f"`{h}`" for h in sorted({str(r.get("host")) for r in results if r.get("model") == "host"}))
    peaks = " · ".join(f"{kind} {_cell(results, 0, model='host', method=f'{kind}-peak', threads=t)} GOP/s at {t} thr"
                       for kind in ("fp32", "int8") for t in (1, 2))
    return "\n".join(lines) + (f"\n\nA student is named by its weights' digest (`student_digest`); *earlier* is the "
                               f"demo student of the rows before the digest was recorded. The matrix-product peaks "
                               f"of the host that timed them ({hosts}): {peaks}.\n")


def goals(results: list[dict]) -> str:
    """The issue's goals, each with its verdict and the figures. QAT within 1 point of fp32: two-sided, on the task's
    official metric, judged by `stats.within` over the differences of each QAT run to the fp32 model it quantized;
    with fp32 fine-tuned per seed (seed S quantizing fp32 seed S) they span the fine-tuning's spread too, and the line
    says over how many fp32 models."""
    out = []
    for task, digest in students(results):
        official, score = GLUE_TASKS[task].metrics[0], SCORE[task]
        mine = {"model": STUDENT, "task": task, "student_digest": digest}
        for method in QAT_VARIANTS:
            gap, against = gaps(results, official, method, **mine)
            judged = bool(gap)
            if not judged:  # rows from before they held every metric: the task's SCORE only
                gap, against = gaps(results, score, method, **mine)
            if not gap:
                continue
            what = f"{method} within ±1 point of fp32 on {task}, student {digest or 'earlier'}"
            measured = (f"{method} - fp32 = {mean_std_cell(gap, signed=True, digits=2)} points of "
                        f"{official if judged else score}, {against}")
            if judged:
                out.append(f"- {what} ({official}): {within(gap, 1.0)} ({measured})")
            else:
                out.append(f"- {what}: not judged: the rows hold {score}, not {task}'s official {official} "
                           f"({measured})")
    for t in (1, 2):
        ms = {m: _pick(results, model="mobilebert", method=m, metric="host_ms", threads=t) for m in QUANTIZE}
        peak = {k: _pick(results, model="host", method=f"{k}-peak", threads=t) for k in ("fp32", "int8")}
        full = [m for m in ("ptq-int8", "qat-int8") if ms[m]]
        if ms["qat-int8-fa"] and ms["dynamic-int8"]:  # not full-integer (its attention cores are float): beside
            fa, dyn = ms["qat-int8-fa"][0]["value"], ms["dynamic-int8"][0]["value"]
            out.append(f"- QAT with float attention cores (not full-integer) against dynamic-range int8 on MobileBERT, "
                       f"{t} thread{'s' * (t > 1)}: {fa:.1f} ms vs {dyn:.1f} ms ({dyn / fa:.2f}x)")
        if full and ms["dynamic-int8"] and all(peak.values()):
            best = min(full, key=lambda m: ms[m][0]["value"])
            dyn = ms["dynamic-int8"][0]["value"]
            faster = ms[best][0]["value"] < dyn
            out.append(f"- full int8 faster than dynamic-range int8 on MobileBERT, {t} thread{'s' * (t > 1)}, "
                       f"one timing run each (int8 peak {peak['int8'][0]['value']:.0f} vs fp32 "
                       f"{peak['fp32'][0]['value']:.0f} GOP/s): "
                       f"{'reached' if faster else 'MISSED'} ({best} {ms[best][0]['value']:.1f} ms vs dynamic "
                       f"{dyn:.1f} ms, {dyn / ms[best][0]['value']:.2f}x)")
    tiny = _pick(results, model="mobilebert_tiny", method="fp32", metric="gflops")
    if tiny:
        ours = model_stats(get_preset("mobilebert_tiny").config)["flops_seq128"] / 1e9
        graph = tiny[0]["value"]
        out.append(f"- MobileBERT_TINY's GFLOPs in the graph equal our count ({ours:.2f}; the graph adds the "
                   f"classifier): {'reached' if abs(graph - ours) / ours < 0.02 else 'MISSED'} ({graph:.2f})")
    return "\n".join(out) + f"\n\n{WITHIN}\n"


def kernels_table(results: list[dict]) -> str:
    """Where PROFILED's time goes: CPU ms per invocation by kernel family, one column per file."""
    profiled = {"model": PROFILED, "threads": 1}
    methods = [m for m in METHODS if _pick(results, **profiled, method=m, metric="cpu_ms")]
    if not methods:
        return ""
    lines = [f"| kernel family (CPU ms per invocation, 1 thread) | {' | '.join(methods)} |",
             "|---|" + "---|" * len(methods)]
    for name in dict.fromkeys([n for _, n in FAMILIES] + [OTHER]):
        cells = [_cell(results, 2, **profiled, method=m, metric="cpu_ms", kernel_family=name) for m in methods]
        if any(c != "-" for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [sum(r["value"] for r in _pick(results, **profiled, method=m, metric="cpu_ms")) for m in methods]
    lines.append("| **all (CPU)** | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    lines.append("| wall time while profiled | " + " | ".join(
        _cell(results, 2, **profiled, method=m, metric="profiled_wall_ms") for m in methods) + " |")
    return "\n".join(lines) + "\n"


def report(results: list[dict]) -> str:
    kernels = kernels_table(results)
    return table(results) + "\n" + goals(results) + (f"\n{kernels}" if kernels else "")


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.int8", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/int8", "docs/results/int8.json", list(TASKS), TASKS)
    p.add_argument("--methods", nargs="+", choices=list(QAT_VARIANTS), default=list(QAT_VARIANTS),
                   help="the QAT runs to make (default all; fp32 and its export always; the latency run and the "
                        "kernel profile only with all)")
    p.add_argument("--student", default="runs/demo/student",
                   help="the distilled (not fine-tuned) student (default runs/demo/student: scripts/demo.sh's)")
    args = p.parse_args(argv)
    out, student = (REPO_ROOT / args.out).resolve(), (REPO_ROOT / args.student).resolve()
    order = [None, *TASKS]
    return comparison(args, lambda: jobs(out, student, args.tasks, args.seeds, args.methods),
                      lambda: rows(out, args.tasks, args.seeds),
                      lambda r: (r["model"] != STUDENT, order.index(r["task"]), r.get("student_digest") or "",
                                 METHODS.index(r["method"])
                                 if r["method"] in METHODS else len(METHODS), r["seed"], r["metric"],
                                 r.get("threads") or 0),
                      report, key=KEY)


if __name__ == "__main__":
    sys.exit(main())
