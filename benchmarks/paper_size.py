"""The paper-size presets' training speed on the machine at hand, and the paper's schedule projected onto it: the
IB-BERT_LARGE teacher's pre-training step and MobileBERT's progressive knowledge transfer (PKT: 24 layer-wise
stages, then pre-training distillation), each a short run of the toolkit's own recipes (`mobilekd train-teacher
--preset ib_bert_large`, `mobilekd distill --student mobilebert`) at sequence length 128, under bf16 autocast where
a GPU runs them.

    python -m benchmarks.paper_size                          # on a GPU: about 5 minutes
    python -m benchmarks.paper_size --teacher-batch 2 --distill-batch 2 --teacher-steps 3 --layer-steps 2 \\
        --pd-steps 3 --precision no                          # the same on a CPU (minutes; the projection is years)
    python -m benchmarks.paper_size --table [--write]        # the table from docs/results/paper_size.json

Each stage's first step pays for allocation and kernel selection, so a step's time is the stage's seconds less its
first step's, over its other steps (`first_step_seconds` in the training summaries). Examples a second = batch /
that time; the paper's schedule in hours = its steps x its batch / examples a second, on this one device (the paper
spreads it over many TPU chips; what is projected is the work, not the paper's wall time). The schedule is the
preset's (teacher_ib_bert/configs/ib_bert_large.json: 125,000 steps at batch 4096) and docs/guide.md's paper-size
PKT command (24 stages x 24,000 steps, 500,000 pre-training distillation steps, batch 2048).

The distillation runs with --no-keep-layer-inputs: at the paper's 24,000 steps a stage, the layer inputs of its
batches outgrow any device's memory, so every batch runs both models from their embeddings, as measured here.
Rows (task `pretraining`, method `teacher` / `pkt-layerwise` / `pkt-pd`, metric, value, and the device, batch,
steps and precision they were measured with) are merged into docs/results/paper_size.json, one set per device.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from benchmarks.command import show_table, table_flags
from benchmarks.rows import host_fields, merge_rows
from benchmarks.runner import Job, run_all
from mobilekd.errors import UserError
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.host import cpu_model

TEACHER_SCHEDULE = {"steps": 125_000, "batch": 4096}  # teacher_ib_bert/configs/ib_bert_large.json
LAYERS = 24  # MobileBERT's blocks, one PKT stage each
LAYER_SCHEDULE = {"steps": LAYERS * 24_000, "batch": 2048}  # docs/guide.md, "Paper-size runs on GPUs"
PD_SCHEDULE = {"steps": 500_000, "batch": 2048}
METHODS = ("teacher", "pkt-layerwise", "pkt-pd")
SEQ_LEN = 128


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else cpu_model()


def run_dirs(args, out: Path) -> tuple[Path, Path]:
    """The teacher's and the distillation's directories, named by their budgets: a finished run is reused only
    for the batch and steps it was measured at."""
    teacher = out / f"teacher_b{args.teacher_batch}_s{args.teacher_steps}_{args.precision}"
    return teacher, out / f"pkt_b{args.distill_batch}_l{args.layer_steps}_pd{args.pd_steps}_{teacher.name}"


def jobs(args, out: Path) -> list[Job]:
    teacher, pkt = run_dirs(args, out)
    common = ["--max-len", str(SEQ_LEN), "--mixed-precision", args.precision, "--eval-examples", "256", "--resume",
              "--optimizer", "lamb", "--lr", "1.5e-3", "--cache-dir", str(out / "cache")]
    return [Job("teacher", ["train-teacher", "--preset", "ib_bert_large", "--steps", str(args.teacher_steps),
                            "--batch-size", str(args.teacher_batch), *common, "--out", str(teacher)],
                teacher),
            Job("pkt", ["distill", "--teacher", str(teacher), "--student", "mobilebert", "--strategy", "pkt",
                        "--layer-steps", str(args.layer_steps), "--pd-steps", str(args.pd_steps),
                        "--no-keep-layer-inputs", "--batch-size", str(args.distill_batch), *common,
                        "--out", str(pkt)],
                pkt, needs=["teacher"])]


def steady(stages: list[dict]) -> tuple[float, int]:
    """Seconds and steps of `stages` without each stage's first step (of a run not resumed: a resumed stage's
    seconds hold time before the resume, and its first step is the resumed one's)."""
    run = [s for s in stages if "first_step_seconds" in s and "resumed_at_step" not in s]
    if len(run) < len(stages):
        raise UserError("a stage of these runs was resumed: its step time is not steady; remove the run and measure "
                        "again")
    return sum(s["seconds"] - s["first_step_seconds"] for s in run), sum(s["steps"] - 1 for s in run)


def method_rows(method: str, stages: list[dict], batch: int, schedule: dict, device: str) -> list[dict]:
    """A method's step time and throughput rows, with the host its stages recorded ("unknown" before hosts were)."""
    seconds, steps = steady(stages)
    per_step = seconds / steps
    per_second = batch / per_step
    identity = {"task": "pretraining", "method": method, "seed": 0, "device": device, "batch": batch,
                "seq_len": SEQ_LEN, "steps": sum(s["steps"] for s in stages), "precision": stages[0]["precision"],
                "threads": stages[0]["threads"], **host_fields({"training": stages}),
                "paper_steps": schedule["steps"], "paper_batch": schedule["batch"]}
    found = {"seconds_per_step": round(per_step, 4), "examples_per_second": round(per_second, 1),
             "first_step_seconds": round(max(s["first_step_seconds"] for s in stages), 2),
             "paper_schedule_hours": round(schedule["steps"] * schedule["batch"] / per_second / 3600, 1)}
    if all("peak_gpu_gib" in s for s in stages):
        found["peak_gpu_gib"] = max(s["peak_gpu_gib"] for s in stages)
    return [{**identity, "metric": k, "value": v} for k, v in found.items()]


def rows(args, out: Path) -> list[dict]:
    device = device_name()
    teacher_dir, pkt_dir = run_dirs(args, out)
    teacher = read_json(teacher_dir / "summary.json")["train"]
    stages = read_json(pkt_dir / "summary.json")["stages"]
    layerwise = [s for s in stages if s["stage"] != "pd"]
    pd = [s for s in stages if s["stage"] == "pd"]
    return (method_rows("teacher", [teacher], args.teacher_batch, TEACHER_SCHEDULE, device)
            + method_rows("pkt-layerwise", layerwise, args.distill_batch, LAYER_SCHEDULE, device)
            + method_rows("pkt-pd", pd, args.distill_batch, PD_SCHEDULE, device))


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def table(results: list[dict]) -> str:
    lines = ["| device | step | batch | precision | threads | s a step | examples/s | peak GPU GiB | the paper's schedule | "
             "its hours here |", "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"teacher": "IB-BERT_LARGE pre-training", "pkt-layerwise": "PKT layer-wise stage (mean of 24)",
             "pkt-pd": "PKT pre-training distillation"}
    for device in dict.fromkeys(r["device"] for r in results):
        for method in METHODS:
            got = {r["metric"]: r for r in results if (r["device"], r["method"]) == (device, method)}
            if not got:
                continue
            r = got["seconds_per_step"]
            peak = f"{got['peak_gpu_gib']['value']:.1f}" if "peak_gpu_gib" in got else "-"
            lines.append(f"| {device} | {names[method]} | {r['batch']} | {r['precision']} | {r.get('threads', '-')} | "
                         f"{r['value']:.3f} | "
                         f"{rate(got['examples_per_second']['value'])} | {peak} | {r['paper_steps']:,} x "
                         f"{r['paper_batch']} | {got['paper_schedule_hours']['value']:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.paper_size", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    table_flags(p, "docs/results/paper_size.json")
    p.add_argument("--out", default="runs/paper_size", help="where its runs go (default runs/paper_size)")
    p.add_argument("--teacher-batch", type=int, default=128, help="the teacher's batch (default 128)")
    p.add_argument("--distill-batch", type=int, default=256, help="the distillation's batch (default 256)")
    p.add_argument("--teacher-steps", type=int, default=60, help="teacher steps (default 60)")
    p.add_argument("--layer-steps", type=int, default=8, help="steps of each of the 24 PKT stages (default 8)")
    p.add_argument("--pd-steps", type=int, default=60, help="pre-training distillation steps (default 60)")
    p.add_argument("--precision", choices=("bf16", "no", "auto"), default="bf16",
                   help="--mixed-precision of both runs (default bf16)")
    args = p.parse_args(argv)
    if min(args.teacher_steps, args.layer_steps, args.pd_steps) < 2:
        p.error("every stage needs 2 steps or more: its first is left out of the timing")
    out = (REPO_ROOT / args.out).resolve()
    results_path = REPO_ROOT / args.results
    if not args.table:
        failed = run_all(jobs(args, out), 1, out / "logs")
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        merge_rows(results_path, rows(args, out), lambda r: (r["device"], METHODS.index(r["method"]), r["metric"]),
                   key=("task", "method", "metric", "device"))
    return show_table(args, results_path, table)


if __name__ == "__main__":
    sys.exit(main())
