"""The model card `mobilekd export` writes beside every file it exports: OUT/README.md in the Hugging Face format
(https://huggingface.co/docs/hub/model-cards: a YAML block, here made by `huggingface_hub.ModelCardData` with an
`EvalResult` per dev score, then Markdown).

Its metadata: the base model (the teacher that taught the model, else the model it started from), the task, the
dev score as `mobilekd` measured it and how the checkpoint was chosen (on a validation split carved from the
training data, on dev itself, or the last step), the license (`--license`; `other` where the user gave none: a
student inherits its teacher's and its data's terms, which the toolkit cannot know). Its numbers: each file's
size, its parity with PyTorch (max abs output difference, prediction agreement, the dev score in the file), its
host latency (measured in the export run, 1 thread, files interleaved, with the host's id) and its Pixel 4 latency
ESTIMATE (the cost model of `android_bench.estimate`, calibrated on the paper's MobileBERT, as `mobilekd latency`).
"""

from __future__ import annotations

from pathlib import Path

from mobilekd.fileio import read_json
from mobilekd.rundir import dev_scores

PIPELINES = {"classification": "text-classification", "qa": "question-answering", "pretraining": "fill-mask",
             "seq2seq": "text2text-generation", "multitask": "text-classification"}
CHOSEN = {"validation": "checkpoint chosen on a validation split of the training data; dev read once, after",
          "dev": "checkpoint chosen on this dev set: an optimistic, dev-set maximum",
          "none": "the last step's model; dev read once, after"}
VALIDATION_NAMES = ("validation", "selection", "train-slice")  # what runs have called the carved split


def how_chosen(selected_on: str | None) -> str:
    """A run's `selected_on` (results.json) in words: a validation split (under any name runs gave it), the last
    step ("none ..."), or a dev split's own name (dev, dev_matched, ...): chosen on dev."""
    if not selected_on:
        return "how its checkpoint was chosen is not recorded"
    first = selected_on.split()[0]
    return CHOSEN["validation" if first in VALIDATION_NAMES else "none" if first == "none" else "dev"]


def trained(model_dir) -> dict:
    """What the model's run recorded (results.json) with its dev scores: its own, or, for a model scored in a run
    of its own (`mobilekd ship`'s MODEL/dev), that run's."""
    model_dir = Path(model_dir)
    path = model_dir / "results.json"
    run = read_json(path) if path.is_file() else {}
    dev = dev_scores(run.get("metrics"))
    if dev is None and (model_dir / "dev" / "results.json").is_file():
        dev = dev_scores(read_json(model_dir / "dev" / "results.json").get("metrics"))
    return {**run, "dev": dev}


def model_card(model_dir, head: str, reports: dict, license: str | None) -> str:
    """The card's text. `reports`: parity.json's (file -> report, with `timing` where the file was timed)."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    run = trained(model_dir)
    task = run.get("task") or ", ".join(run.get("tasks") or {}) or "unknown"  # a multi-task model's: its tasks
    dev = run.get("dev") or {}
    chosen = how_chosen(run.get("selected_on"))
    base = run.get("teacher") or run.get("model")
    name = Path(model_dir).resolve().name
    data = ModelCardData(
        license=license or "other", **({} if license else {"license_name": "inherited-from-teacher-and-data"}),
        # the Hub reads base_model as a repository id: a local directory is named in the text instead
        base_model=str(base) if base and not Path(base).exists() else None, pipeline_tag=PIPELINES.get(head),
        tags=["mobilekd", "knowledge-distillation", "tflite", "litert"], model_name=name,
        eval_results=[EvalResult(task_type=PIPELINES.get(head, head), dataset_type=task, dataset_name=task,
                                 dataset_split="dev", metric_type=metric, metric_value=round(float(value), 4),
                                 metric_name=f"dev {metric} ({chosen})")
                      for metric, value in dev.items() if isinstance(value, (int, float))] or None)
    lines = [f"# {name}: {task}, exported by mobilekd", "",
             f"`{Path(model_dir)}` exported to on-device files (LiteRT `.tflite`; ExecuTorch `.pte` where asked), "
             f"each checked against PyTorch on the task's dev examples." +
             (f" Taught by `{run['teacher']}`." if run.get("teacher") else "") +
             (f" Started from `{run['model']}`." if run.get("model") and not run.get("teacher") else ""), ""]
    if dev:
        lines += ["| dev | value | how it was chosen |", "|---|---|---|",
                  *[f"| {metric} | {value:.4f} | {chosen} |" for metric, value in dev.items()
                    if isinstance(value, (int, float))], ""]
    hosts = sorted({r["timing"]["host"]["id"] for r in reports.values() if r.get("timing")})
    lines += ["| file | MB | max abs diff vs PyTorch | agreement | dev score in the file | host ms "
              "(1 thread) | Pixel 4 ms (est., 4 threads) |", "|---|---|---|---|---|---|---|"]
    for file, r in reports.items():
        t, check = r.get("timing") or {}, r.get("parity_check") or {}
        shown = f"{file} (removed: {'; '.join(check['why'])})" if check.get("passed") is False else file
        lines.append(f"| {shown} | {r['size_bytes'] / 1e6:.1f} | {_diff(r)} | {agreement_cell(r)} | {score_cell(r)} | "
                     f"{_ms(t.get('host_ms_p50'))} | {_ms(t.get('pixel4_ms_est'))} |")
    left = [f"- {file}: " + ", ".join(f"{op} {n}" for op, n in r["xnnpack_undelegated"].items())
            for file, r in reports.items() if r.get("xnnpack_undelegated")]
    lines += ["", "Operators the XNNPACK delegate does not take (they run on the runtime's own kernels):", "",
              *left] if left else []
    lengths = sorted({str(r["seq_len"]) for r in reports.values() if r.get("seq_len")})
    estimated = any((r.get("timing") or {}).get("pixel4_ms_est") for r in reports.values())
    notes = [f"Host latency measured on `{', '.join(hosts)}` in the export run (median of 30 runs at 1 thread, the "
             f"files interleaved)." if hosts else "",
             "Pixel 4 figures are ESTIMATES of a cost model calibrated on the paper's MobileBERT (4 threads), not "
             "measurements on a phone." if estimated else "",
             f"Sequence length: {', '.join(lengths)}." if lengths else ""]
    lines += ["", " ".join(n for n in notes if n), ""]
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))


def _diff(r: dict) -> str:
    if "max_abs_diff" in r:
        return f"{r['max_abs_diff']:.2e}"
    if "tasks" in r:  # a multi-task file: its worst task
        return f"{max(t['max_abs_diff'] for t in r['tasks'].values()):.2e}"
    return "-"


def agreement_cell(r: dict) -> str:
    """A parity report's prediction agreement: a classifier's, a seq2seq file's share of greedy outputs identical
    to PyTorch's (and of beam search's, where the model was scored with a beam), a multi-task file's per task;
    '-' for a regression model, which predicts no class."""
    if "agreement" in r:
        return f"{r['agreement']:.4f}"
    if "identical" in r:
        beam = r.get("beam_search")
        return f"{r['identical']:.4f} identical" + (f" (beam {beam['beam']}: {beam['identical']:.4f})" if beam else "")
    if "tasks" in r:
        return ", ".join(f"{t} {x['agreement']:.4f}" for t, x in r["tasks"].items() if "agreement" in x) or "-"
    return "-"


def score_cell(r: dict) -> str:
    """A parity report's dev score in the file and in PyTorch: accuracy, Pearson for a regression model, BLEU for
    a seq2seq file."""
    for metric in ("accuracy", "pearson"):
        if f"{metric}_torch" in r:
            return f"{metric} {r[f'{metric}_exported']:.4f} (PyTorch {r[f'{metric}_torch']:.4f})"
    if "scores" in r:
        beam = r.get("beam_search")
        return f"BLEU {r['scores']['file']['bleu']:.2f} (PyTorch {r['scores']['pytorch']['bleu']:.2f})" + (
            f"; beam {beam['beam']} {beam['scores']['file']['bleu']:.2f} (PyTorch "
            f"{beam['scores']['pytorch']['bleu']:.2f})" if beam else "")
    return "-"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"
