"""Where PKT's compute goes: each layer-wise stage run naively (teacher and student at full depth every step)
against the truncated path (both only up to the stage's layer), on the paper's 24-layer configs, measured in
one run; and the cost of a pre-training-distillation step against a plain student MLM step.

    python -m benchmarks.transfer_step --threads 1 --every 6     # rows to docs/results/step_time.json
    python -m benchmarks.transfer_step --table [--write]         # its step-time table (--write: into its pages)

The losses of the two paths must agree (they compute the same layer). The two paths of a stage, and the PD and
MLM steps, are timed interleaved (one step of each in turn, after one warm-up round), so their ratio holds on a
shared machine. The rows (seconds per step, and the ratios) are merged into docs/results/step_time.json: a re-run
of one configuration (benchmark, models, batch, sequence length, thread counts) replaces its rows. Each row
names the CPU, threads and OMP_WAIT_POLICY (PASSIVE unless set otherwise).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import statistics
import sys
import time

import torch

from mobilekd.host import cpu_model, identity
from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows
from mobilekd.fileio import REPO_ROOT
from mobilekd.models.heads import MobileBertForPreTraining, pretraining_loss
from mobilekd.models.presets import get_preset
from mobilekd.train.loop import freeze_for_stage
from mobilekd.transfer.strategies import Distiller, PlanSettings, copy_shared_weights, plan
from mobilekd.errors import cli_entry

RESULTS = "docs/results/step_time.json"
CONFIG = ("benchmark", "model", "batch", "seq_len", "thread_counts")  # a re-run of these replaces their rows
BENCHMARKS = ("transfer_step", "teacher_step", "teacher_pass", "matching_step", "seq2seq_step")


def host() -> dict:
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "host": identity()["id"],
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def interleaved(steps: dict, rounds: int, threads: dict | None = None) -> dict:
    """Median seconds and last loss of each of `steps` (name -> callable returning a loss tensor after its
    backward pass): one step of each in turn for `rounds` rounds after one warm-up round, the order rotated every
    round; `threads` (name -> count) sets torch's threads before each of its steps."""
    names = list(steps)
    times, losses = {n: [] for n in names}, {}
    for r in range(rounds + 1):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            if threads:
                torch.set_num_threads(threads[name])
            start = time.perf_counter()
            losses[name] = float(steps[name]())
            if r:
                times[name].append(time.perf_counter() - start)
    return {n: (statistics.median(times[n]), losses[n]) for n in names}


def merge(path, found: list[dict], key=CONFIG) -> list[dict]:
    """Write `found` into the rows at `path`, replacing the rows of the same configuration (`key`: CONFIG)."""
    return merge_rows(path, found, key=key, order=lambda r: (BENCHMARKS.index(r["benchmark"]), r["model"],
                                                             r["batch"], r["seq_len"], r["thread_counts"],
                                                             r["metric"] != "ratio"))


def ratio_row(identity: dict, times: dict, path: str, numerator: str, denominator: str, reading: str,
              threads: int, **more) -> dict:
    """time(numerator) / time(denominator) as a row; `reading` says what the number means ({:.2f} gets it)."""
    value = round(times[numerator] / times[denominator], 3)
    return {**identity, "path": path, "variant": f"{numerator} / {denominator}", "threads": threads,
            "metric": "ratio", "value": value, "numerator_s": round(times[numerator], 4),
            "denominator_s": round(times[denominator], 4), "reading": reading.format(value), **more}


def table(rows: list[dict]) -> str:
    """The step-time table: one line per ratio row, with the two times behind it."""
    if not rows:
        return ("no step-time rows yet (run python -m benchmarks.transfer_step / benchmarks.teacher_step / "
                "benchmarks.teacher_pass / benchmarks.matching_step)\n")
    cpus = sorted({f"{r['cpu']} [{r['host']}]" if r.get("host") else r["cpu"] for r in rows})
    lines = ["| benchmark | model | batch x seq | threads | step | A / B | A (ms) | B (ms) | ratio | reading |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["metric"] != "ratio":
            continue
        lines.append(f"| {r['benchmark']} | {r['model']} | {r['batch']} x {r['seq_len']} | {r['threads']} | "
                     f"{r['path']} | {r['variant']} | {1000 * r['numerator_s']:,.0f} | "
                     f"{1000 * r['denominator_s']:,.0f} | {r['value']:.2f}x | {r['reading']} |")
    policies = sorted({str(r.get("omp_wait_policy")) for r in rows})
    return "\n".join(lines) + (f"\n\nCPU: {'; '.join(cpus)} ({rows[0]['cpu_count']} cores); OMP_WAIT_POLICY="
                               f"{', '.join(policies)}. A and B: median milliseconds per step of the two, timed "
                               f"interleaved in one run.\n")


def finish(args, found: list[dict], key=CONFIG, started: float | None = None) -> int:
    """Merge this run's rows (unless --table; `key`: what makes a configuration, `merge`; `started`: the run's
    `time.time()` at its start, its seconds then printed and put on every row as `run_seconds`), print the table of
    this benchmark's rows in the file, and with --write put it into its pages' blocks (benchmarks.pages.write_block)."""
    path = REPO_ROOT / args.results
    if started is not None:
        wall = round(time.time() - started)
        print(f"took {wall} s")
        found = [{**r, "run_seconds": wall} for r in found]
    if not args.table:
        merge(path, found, key)
        print(f"{len(found)} rows of this run in {path}")
    return show_table(args, path, lambda rows: table([r for r in rows if r["benchmark"] == args.benchmark]))


def shared_flags(p) -> None:
    """--results, --table and --write (`command.table_flags`) into the step-time rows."""
    table_flags(p, RESULTS)


def _batch(config, batch: int, seq_len: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (batch, seq_len), generator=g)
    n = round(seq_len * 0.15)
    positions = torch.stack([torch.randperm(seq_len - 2, generator=g)[:n] + 1 for _ in range(batch)])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
            "masked_positions": positions, "masked_labels": torch.gather(ids, 1, positions),
            "nsp_labels": torch.zeros(batch, dtype=torch.long)}


def _step(model, loss_fn, batch):
    """One forward + backward of `loss_fn`: a callable for `interleaved`."""
    def step():
        loss = loss_fn(model, batch)["loss"]
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.detach()
    return step


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.transfer_step", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="ib_bert_large")
    p.add_argument("--student", default="mobilebert")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--every", type=int, default=4, help="time every N-th stage, and the last (default 4)")
    p.add_argument("--repeats", type=int, default=1, help="timed rounds (after one warm-up round; default 1)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    shared_flags(p)
    args = p.parse_args(argv)
    if args.table:
        return finish(args, [])
    start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t_cfg, s_cfg = get_preset(args.teacher).config, get_preset(args.student).config
    teacher = MobileBertForPreTraining(t_cfg.replace(hidden_dropout_prob=0.0))
    student = MobileBertForPreTraining(s_cfg).train()
    copy_shared_weights(teacher, student)
    n = s_cfg.num_hidden_layers
    distiller = Distiller(teacher, list(range(n)), PlanSettings(), s_cfg)
    projections = distiller.projections()  # none for the paper's pair (both 512 wide)
    if len(projections):
        student.add_module("projections", projections)
    stages = plan("pkt", distiller, n)
    batch = _batch(s_cfg, args.batch, args.seq_len)
    identity = {"benchmark": "transfer_step", "model": f"{args.teacher} -> {args.student}", "batch": args.batch,
                "seq_len": args.seq_len, "thread_counts": [args.threads], "repeats": args.repeats, **host()}
    print(f"{identity['model']}, batch {args.batch} x {args.seq_len}, threads {args.threads}, {identity['cpu']}")
    found, total = [], {"naive": 0.0, "truncated": 0.0}
    timed_stages = sorted(set(range(0, n, args.every)) | {n - 1})
    for l in timed_stages:
        freeze_for_stage(student, stages[l])
        matches = distiller.layer_matches([l])
        m = interleaved({"truncated": _step(student, lambda m, b: distiller.layer_terms(m, b, matches), batch),
                         "naive": _step(student, lambda m, b: distiller.layer_terms(m, b, matches, depth=n), batch)},
                        args.repeats)
        (trunc, loss_t), (naive, loss_n) = m["truncated"], m["naive"]
        assert abs(loss_t - loss_n) <= 1e-4 * max(1.0, abs(loss_n)), (l, loss_t, loss_n)
        total["naive"], total["truncated"] = total["naive"] + naive, total["truncated"] + trunc
        times = {"naive": naive, "truncated": trunc}
        found += [{**identity, "path": f"pkt_L{l}", "variant": v, "threads": args.threads,
                   "metric": "seconds_per_step", "value": round(t, 4)} for v, t in times.items()]
        found.append(ratio_row(identity, times, f"pkt_L{l}", "naive", "truncated",
                               "truncated path {:.2f}x as fast as naive", args.threads))
        print(f"stage pkt_L{l:<2}  naive {naive * 1000:8.0f} ms  truncated {trunc * 1000:8.0f} ms  "
              f"{naive / trunc:5.2f}x  (loss {loss_t:.5f} = {loss_n:.5f})")
    stages_timed = ", ".join(map(str, timed_stages))
    found.append(ratio_row(identity, total, f"pkt layer-wise stages {stages_timed} (sum)", "naive", "truncated",
                           "truncated path {:.2f}x as fast as naive over the layer-wise stages", args.threads,
                           stages=timed_stages))
    print(f"PKT layer-wise stages: truncated path {total['naive'] / total['truncated']:.2f}x faster than naive")
    freeze_for_stage(student, stages[-1])
    m = interleaved({"pd": _step(student, distiller.pd_terms, batch),
                     "student mlm": _step(student, pretraining_loss, batch)}, args.repeats)
    times = {k: v[0] for k, v in m.items()}
    found += [{**identity, "path": "pre-training distillation step", "variant": v, "threads": args.threads,
               "metric": "seconds_per_step", "value": round(t, 4)} for v, t in times.items()]
    found.append(ratio_row(identity, times, "pre-training distillation step", "pd", "student mlm",
                           "a PD step costs {:.2f}x a plain student MLM step (the teacher's forward pass)",
                           args.threads))
    print(f"pre-training distillation step {times['pd'] * 1000:.0f} ms vs plain student MLM step "
          f"{times['student mlm'] * 1000:.0f} ms: {times['pd'] / times['student mlm']:.2f}x (the teacher's forward "
          f"pass is the difference)")
    return finish(args, found, started=start)


if __name__ == "__main__":
    sys.exit(main())
