"""Training at the host's limit (issue 33): for each training path, real tokens per second and useful FLOP/s
against the host's matrix-product peaks, the padding share and the profiler's share of step time outside the
matrix products, for today's loop (`baseline`), each change on top of the one before, and `default` (what the
recipes now use); and the SST-2 accuracy of the loops, over seeds.

    python -m benchmarks.throughput --threads 1                    # rows to docs/results/throughput.json
    python -m benchmarks.throughput --accuracy --student runs/demo/student --seeds 0 1 2
    python -m benchmarks.throughput --table [--write]              # its tables (--write: into docs/throughput.md)

Paths (the demo's shapes: all-minilm-l6-v2 as the teacher, fresh heads; mobilebert_h384 as the student; the
shipped corpora and SST-2; weights do not change a step's cost): `adapt` (the teacher's continued MLM + NSP, word
table frozen as adaptation leaves it), `pkt_layer` (PKT's stage for student layer 2 at distill's --max-len 64),
`pd` (pre-training distillation), `finetune` and `finetune_kd` (SST-2, the latter with cached teacher logits as
`mobilekd finetune --teacher` has them), `bilstm` (Tang et al.'s BiLSTM, MSE on cached logits, batch 50) and
`qat` (quantization-aware training, its graph padded to its --max-len).

Variants, each on top of the one before (but for `lazy_embeddings`, which the others leave out): `baseline` (random
batches, AdamW's per-tensor loop, fp32, both models run from their embeddings in every distillation stage),
`length_grouped` (`--batch-order length-grouped`), `fused_adamw` (torch's fused AdamW), `lazy_embeddings`
(`--embedding-updates lazy`, opt-in: a classifier's word table updated on the batch's rows only), `layer_inputs`
(distillation paths: `--keep-layer-inputs`, the step starting from what the stage before kept for its batch, which
is run untimed first: for `pkt_layer` stage 1's step, for `pd` PKT's last stage's; a PD step on a batch no
layer-wise stage read costs what `fused_adamw` shows), `bf16` (bf16 autocast; not timed on a host whose bf16 matrix
product is not faster than fp32's, where the probe never chooses it), `default`: the recipes' defaults, whose
precision the loop's probe (`--mixed-precision auto`) chooses on three of the path's next 24 batches (QAT's default
is fp32, and it has no bf16 variant: its fake quantization has no bf16 kernels), and `torch_compile` (`default`
under `torch.compile(dynamic=True)`, on --compile-paths; its compilation time as `compile_seconds`). All variants of
a path start from the same weights and step in turn, one step each, after two warm-up steps each, so their ratios
hold on a shared machine.

Metrics per (path, variant): `real_tokens_per_second` (tokens that are not padding), `speedup` (over
`baseline`), `padding_share`, `useful_gflops` (the FLOPs the variant's step must compute on its real tokens,
counted by `mobilekd.models.flops`: encoder blocks and masked-LM heads, 3x the forward for weights that train,
2x for the output layer over the frozen word table, 1x for frozen blocks and the teacher; the blocks a kept
layer input spares are not counted; classifier heads and the BiLSTM are not counted), `peak_gflops` (a 1024^3
matrix product in the precision trained in, timed at the same thread count in the same run),
`fraction_of_peak`, and from torch's profiler over a few more steps `outside_matmul_share` (self time outside
matrix products) and `optimizer_share` (time in optimizer.step).
Each row names the CPU, threads and OMP_WAIT_POLICY (PASSIVE unless set otherwise).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

import argparse
import copy
import datetime
import functools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from accelerate import Accelerator
from torch.profiler import ProfilerActivity, profile

from mobilekd.host import cpu_model, identity
from benchmarks.command import show_table, table_flags
from benchmarks.rows import merge_rows
from benchmarks.stats import VERDICTS, WITHIN, mean_std_cell, verdict, within
from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.data.tasks import encode_classification, load_task, task_data, training_subset
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.flags import flag_text
from mobilekd.finetune.objective import Distillation, task_loss
from mobilekd.models.bilstm import from_teacher
from mobilekd.models.config import ModelConfig
from mobilekd.models.flops import count_flops, mlm_head_flops
from mobilekd.export.qat import prepare_qat, quantization
from mobilekd.models.heads import (WORD_EMBEDDINGS, MobileBertForPreTraining, MobileBertForSequenceClassification,
                                   pretraining_loss)
from mobilekd.models.hf import load_pretrained, save_pretrained
from mobilekd.models.mobilebert import MobileBert
from mobilekd.models.presets import get_preset
from mobilekd.models.pretrained import model_dir
from mobilekd.recipes import distill, finetune
from mobilekd.recipes.qat import QatClassifier, qat_loss
from mobilekd.run_config import flags, run_settings
from mobilekd.train.common import SHIPPED_CORPORA
from mobilekd.train.loop import (Batches, Stage, TrainConfig, freeze_for_stage, make_optimizer, make_schedule,
                                 probe_window, sparse_embeddings, train_step)
from mobilekd.bf16 import bf16_products_pay, matmul_peak
from mobilekd.train.precision import decide_precision
from mobilekd.transfer.strategies import Distiller, PlanSettings, copy_shared_weights, plan

RESULTS = "docs/results/throughput.json"
PATHS = ("adapt", "pkt_layer", "pd", "finetune", "finetune_kd", "bilstm", "qat")
TEACHER, STUDENT = "all-minilm-l6-v2", "mobilebert_h384"
PKT_LAYER = 2
DISTILL_SEQ_LEN = 64  # mobilekd distill's --max-len default
CLASSIC = ("baseline", "length_grouped", "fused_adamw", "kept_table_gradient", "lazy_embeddings", "bf16",
           "default")  # no layer inputs
TABLE_ONLY = ("kept_table_gradient", "lazy_embeddings")  # they change only a classifier's word table (its
# sparse_embeddings): left out on the paths without one, where they would time fused_adamw again
NO_TABLE = tuple(v for v in CLASSIC if v not in TABLE_ONLY)
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation",
              "mkldnn::_linear_pointwise")
BASELINE_LOOP = ["--batch-order", "random", "--no-fused-optimizer", "--no-kept-table-gradient", "--mixed-precision",
                 "no"]  # the loop before these changes
ACCURACY_LOOPS = {  # SST-2 accuracy: today's loop's math; the new defaults in fp32, with lazy rows, under bf16
    "baseline": [*BASELINE_LOOP, "--embedding-updates", "dense"],
    "default_fp32": ["--mixed-precision", "no"],
    "lazy_embeddings_fp32": ["--mixed-precision", "no", "--embedding-updates", "lazy"],
    "default_bf16": ["--mixed-precision", "bf16"]}
SCRATCH_LOOPS = ("default_fp32", "lazy_embeddings_fp32")  # also run on a randomly initialised student
DISTILL_LOOPS = {  # the demo's distillation by today's loop and by the defaults, each student then fine-tuned alike
    "distill_baseline": [*BASELINE_LOOP, "--no-keep-layer-inputs"],
    "distill_default": []}
ACCURACY_CHECKS = [(("finetune", a), ("finetune", b)) for a, b in (
    ("default_fp32", "baseline"), ("lazy_embeddings_fp32", "default_fp32"), ("default_bf16", "default_fp32"),
    ("default_bf16", "baseline"))] + [
    (("finetune_scratch", "lazy_embeddings_fp32"), ("finetune_scratch", "default_fp32")),
    (("distill", "distill_default"), ("distill", "distill_baseline"))]
ACCURACY_PATHS = {"finetune": "", "finetune_scratch": ", from random initialisation", "distill": ""}


def host(threads: int) -> dict:
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "host": identity()["id"], "threads": threads,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


@functools.lru_cache(maxsize=None)
def _encoder_flops(config_json: str) -> tuple[float, float, float]:
    """(c, a, b) with FLOPs(L) = c + a L + b L^2 for one sequence of L tokens through the encoder: the counts of
    `count_flops` at three lengths determine it exactly (linear layers grow with L, attention with L^2)."""
    config = ModelConfig.from_dict(json.loads(config_json))
    with torch.device("meta"):
        encoder = MobileBert(config).eval()
    lengths = np.array([8.0, 16.0, 32.0])
    counts = [count_flops(encoder, int(n)) for n in lengths]
    return tuple(np.linalg.solve(np.vander(lengths, 3, increasing=True), counts))


def encoder_flops(config: ModelConfig, lengths: np.ndarray, layers: int | None = None) -> float:
    """Forward FLOPs of the first `layers` blocks (all by default) over sequences of these real lengths."""
    if layers is not None:
        config = config.replace(num_hidden_layers=layers)
    c, a, b = _encoder_flops(json.dumps(config.to_dict(), sort_keys=True))
    lengths = np.asarray(lengths, dtype=np.float64)
    return float(np.sum(c + a * lengths + b * lengths ** 2))


def blocks_flops(config: ModelConfig, lengths: np.ndarray, first: int, last: int) -> float:
    """Forward FLOPs of blocks first..last-1 alone (no embeddings) over sequences of these lengths."""
    return encoder_flops(config, lengths, last) - encoder_flops(config, lengths, first) if last > first else 0.0


def pretraining_flops(config: ModelConfig, batch: dict, trained: bool) -> float:
    """Useful FLOPs of the encoder and the MLM head of a pre-training model on `batch`: the forward pass; with
    `trained` also the backward, 2x the forward for weights that train and 1x (the input's gradient) for the
    output layer over the frozen word table."""
    lengths = batch["attention_mask"].sum(1).numpy()
    masked = int((batch["masked_positions"] >= 0).sum())
    transform, output = (masked * f for f in mlm_head_flops(config))
    encoder = encoder_flops(config, lengths) + transform
    return 3 * encoder + 2 * output if trained else encoder + output


@dataclass
class Variant:
    """One way to run the loop: the loop's settings, and for the distillation paths whether stages keep layer
    inputs; `precision` None is the recipes' default (the probe's choice, or the path's own)."""

    name: str
    batch_order: str = "length-grouped"
    fused_optimizer: bool = True
    embedding_updates: str = "dense"
    kept_table_gradient: bool = True
    keep_layer_inputs: bool = True
    precision: str | None = "no"
    compiled: bool = False


# each on top of the one before, but for lazy_embeddings (opt-in: the rest leave it out); `default` is what the
# recipes now use
VARIANTS = (Variant("baseline", batch_order="random", fused_optimizer=False, kept_table_gradient=False,
                    keep_layer_inputs=False),
            Variant("length_grouped", fused_optimizer=False, kept_table_gradient=False, keep_layer_inputs=False),
            Variant("fused_adamw", kept_table_gradient=False, keep_layer_inputs=False),
            Variant("kept_table_gradient", keep_layer_inputs=False),
            Variant("lazy_embeddings", embedding_updates="lazy", keep_layer_inputs=False),
            Variant("layer_inputs"),
            Variant("bf16", precision="bf16"),
            Variant("default", precision=None),
            Variant("torch_compile", precision=None, kept_table_gradient=False, compiled=True))  # as measured before:
# inductor over a sparse embedding backward is not tried
DISTILLATION = tuple(v.name for v in VARIANTS if v.name not in TABLE_ONLY)  # pkt_layer and pd: no classifier's table


@dataclass
class Kept:
    """A distillation path's step with kept layer inputs: its loss over a Distiller that keeps them, what the
    stage before leaves for a batch (`prefill`, run untimed before the step) and the step's useful FLOPs."""

    loss: Callable
    prefill: Callable[[torch.nn.Module, dict], None]
    flops: Callable[[dict], float]


@dataclass
class TrainingPath:
    """One training path: the model to train (each variant trains its own copy), the split it reads, its stage,
    batch size, the recipes' default precision (None: the probe's), its useful FLOPs per batch and, for a
    distillation path, how its step runs with kept layer inputs (a factory: each variant its own Distiller)."""

    name: str
    model: torch.nn.Module
    split: object
    stage: Stage
    batch: int
    flops: Callable[[dict], float] | None
    default_precision: str | None = None
    kept: Callable[[], Kept] | None = None
    variants: tuple[str, ...] = DISTILLATION  # the variants that apply (by default every one but the table's)


def _sst2(tokenizer, examples: int, max_len: int):
    task = load_task("sst2", task_data("sst2", None))
    return task, encode_classification(task, training_subset(task.train, examples, 0), tokenizer, max_len)


def _lengths(batch: dict) -> np.ndarray:
    return batch["attention_mask"].sum(1).numpy()


def distillation_paths(names: list[str], teacher, corpus) -> list[TrainingPath]:
    """PKT's stage for student layer PKT_LAYER and pre-training distillation, as `mobilekd distill` runs them:
    the demo student, the teacher's layers spread over it, the shipped corpora at the recipe's --max-len."""
    s_cfg, t_cfg = get_preset(STUDENT).config, teacher.config
    student = MobileBertForPreTraining(s_cfg)
    copied = copy_shared_weights(teacher, student)
    layer_map = [int(x) for x in np.linspace(0, t_cfg.num_hidden_layers - 1, s_cfg.num_hidden_layers).round()]

    def distiller(keep: bool) -> Distiller:
        return Distiller(teacher.eval(), layer_map, PlanSettings(keep_layer_inputs=keep), s_cfg)

    projections = distiller(False).projections()
    if len(projections):
        student.add_module("projections", projections)
    l, last = PKT_LAYER, s_cfg.num_hidden_layers - 1
    stages = plan("pkt", distiller(False), s_cfg.num_hidden_layers, shared=copied)
    out = []
    if "pkt_layer" in names:
        t_depth = layer_map[l] + 1

        def pkt_flops(batch, t_first=0, s_first=0):  # the blocks each model runs; the trained one 3x
            n = _lengths(batch)
            teacher_part = (encoder_flops(t_cfg, n, t_depth) if t_first == 0 else
                            blocks_flops(t_cfg, n, t_first, t_depth))
            frozen = encoder_flops(s_cfg, n, l) if s_first == 0 else blocks_flops(s_cfg, n, s_first, l)
            return teacher_part + frozen + 3 * blocks_flops(s_cfg, n, l, l + 1)

        def pkt_kept() -> Kept:  # the stage before (layer l - 1) leaves both models' inputs
            d = distiller(True)
            before, now = d.layer_matches([l - 1]), d.layer_matches([l])
            return Kept(loss=lambda m, b: d.layer_terms(m, b, now, frozen_below=l),
                        prefill=lambda m, b: d.layer_terms(m, b, before, frozen_below=l - 1),
                        flops=lambda b: pkt_flops(b, layer_map[l - 1] + 1, l - 1))

        out.append(TrainingPath("pkt_layer", student, corpus, replace(stages[l], steps=10 ** 6), 32, pkt_flops,
                                kept=pkt_kept))
    if "pd" in names:
        def pd_kept() -> Kept:  # PKT's last stage leaves the teacher's last hidden state: no teacher block runs
            d = distiller(True)
            last_matches = d.layer_matches([last])
            return Kept(loss=d.pd_terms,
                        prefill=lambda m, b: d.layer_terms(m, b, last_matches, frozen_below=last),
                        flops=lambda b: pretraining_flops(s_cfg, b, True) +
                        pretraining_flops(t_cfg, b, False) - encoder_flops(t_cfg, _lengths(b)))

        out.append(TrainingPath("pd", student, corpus, replace(stages[-1], steps=10 ** 6), 32,
                                lambda b: pretraining_flops(s_cfg, b, True) + pretraining_flops(t_cfg, b, False),
                                kept=pd_kept))
    return out


def build_paths(names: list[str], examples: int) -> list[TrainingPath]:
    torch.manual_seed(0)
    teacher_dir = model_dir(TEACHER)
    tokenizer = load_tokenizer(teacher_dir)
    s_cfg = get_preset(STUDENT).config
    out = []
    pretraining = {}

    def corpus(seq_len):
        if seq_len not in pretraining:
            pretraining[seq_len] = load_pretraining_data([REPO_ROOT / c for c in SHIPPED_CORPORA], tokenizer,
                                                         seq_len).train
        return pretraining[seq_len]

    teacher = load_pretrained(teacher_dir, "pretraining")
    t_cfg = teacher.config
    if "adapt" in names:  # teacher_ib_bert/adaptation.json's shape: everything but the word table trains
        out.append(TrainingPath("adapt", copy.deepcopy(teacher), corpus(128),
                                Stage(name="adapt", steps=10 ** 6, loss=pretraining_loss, lr=5e-5,
                                      trainable=lambda n: n != WORD_EMBEDDINGS), 32,
                                lambda b: pretraining_flops(t_cfg, b, True), variants=NO_TABLE))
    if {"pkt_layer", "pd"} & set(names):
        out += distillation_paths(names, teacher, corpus(DISTILL_SEQ_LEN))
    task, split = _sst2(tokenizer, examples, 64)
    classifier = MobileBertForSequenceClassification(s_cfg.replace(id2label=task.id2label,
                                                                   problem_type="single_label_classification"))
    logits = torch.randn(len(split), 2, generator=torch.Generator().manual_seed(0)).numpy()
    with_logits = copy.copy(split)
    with_logits.arrays = {**split.arrays, "teacher_logits": logits}
    finetune = dict(trainable=lambda n: not n.startswith("projections."), lr=1e-4)
    student_flops = lambda b: 3 * encoder_flops(s_cfg, _lengths(b))  # noqa: E731
    if "finetune" in names:
        out.append(TrainingPath("finetune", copy.deepcopy(classifier), split,
                                Stage(name="finetune", steps=10 ** 6, loss=task_loss(task, None, None), **finetune),
                                32, student_flops, variants=(*CLASSIC, "torch_compile")))
    if "finetune_kd" in names:
        out.append(TrainingPath("finetune_kd", copy.deepcopy(classifier), with_logits,
                                Stage(name="finetune", steps=10 ** 6, loss=task_loss(task, None, Distillation()),
                                      **finetune), 32, student_flops, variants=CLASSIC))
    if "bilstm" in names:
        t_cls = load_pretrained(teacher_dir, "classification", t_cfg.replace(
            id2label=task.id2label, problem_type="single_label_classification"))
        bilstm = from_teacher(t_cls, tokenizer, False, task.id2label)
        out.append(TrainingPath("bilstm", bilstm, with_logits,
                                Stage(name="bilstm", steps=10 ** 6, loss=task_loss(task, None, Distillation(logits="mse")),
                                      lr=1e-3), 50, None, variants=CLASSIC))
    if "qat" in names:  # fp32 by default, and no bf16 variant: its fake quantization has no bf16 kernels
        prepared = quantization(prepare_qat(copy.deepcopy(classifier).eval(), "classification", 64), True)
        out.append(TrainingPath("qat", QatClassifier(prepared, 64), split,
                                Stage(name="qat", steps=10 ** 6, loss=qat_loss(False), lr=1e-5), 32, student_flops,
                                default_precision="no",
                                variants=tuple(v for v in NO_TABLE if v != "bf16")))
    return out


class Runner:
    """One variant of one path: its own copy of the model, optimizer, schedule and batches."""

    def __init__(self, path: TrainingPath, variant: Variant, accelerator: Accelerator, out_dir: Path):
        self.name, self.path, self.accelerator = variant.name, path, accelerator
        self.model = copy.deepcopy(path.model).train()
        freeze_for_stage(self.model, path.stage)
        self.cfg = TrainConfig(out_dir=out_dir, global_batch_size=path.batch, batch_order=variant.batch_order,
                               fused_optimizer=variant.fused_optimizer, embedding_updates=variant.embedding_updates,
                               kept_table_gradient=variant.kept_table_gradient,
                               mixed_precision=variant.precision or "auto")
        kept = path.kept() if path.kept and variant.keep_layer_inputs else None
        self.stage = replace(path.stage, loss=kept.loss) if kept else path.stage
        self.prefill, self.flops = (kept.prefill, kept.flops) if kept else (None, path.flops)
        sparse_embeddings(self.model, self.cfg, 1)
        self.optimizer = make_optimizer(self.model, self.stage, self.cfg)
        self.scheduler = make_schedule(self.optimizer, self.stage)
        self.batches = Batches(path.split, path.batch, accelerator, 1, 0, variant.batch_order)
        self.step_index = 0
        self.precision = variant.precision or path.default_precision
        self.probe = None
        if self.precision is None:
            chosen = probe_window(self.batches, 0)
            if self.prefill:  # as next_batches leaves them
                with torch.no_grad():
                    for b in chosen:
                        self.prefill(self.model, b)
            self.probe = decide_precision(path.stage.name, self.stage.loss, self.model, chosen, accelerator, None)
            self.precision = self.probe["precision"]
        self.compile_seconds = None
        if variant.compiled:
            self.model = torch.compile(self.model, dynamic=True)
            start = time.perf_counter()
            self.step(timed=False)  # compiles forward and backward
            self.compile_seconds = time.perf_counter() - start
        self.seconds = self.real = self.padded = self.useful = 0.0
        self.timed: list[tuple[float, int, float]] = []  # per timed step: seconds, real tokens, useful FLOPs

    def next_batches(self) -> list[dict]:
        """The next step's micro-batches, with what the stage before would have kept for them."""
        batches = list(self.batches.micro_batches(self.step_index))
        self.step_index += 1
        if self.prefill:
            with torch.no_grad():
                for b in batches:
                    self.prefill(self.model, b)
        return batches

    def run(self, batches: list[dict]) -> tuple[float, int, int]:
        start = time.perf_counter()
        _, real, padded = train_step(self.stage, self.model, self.optimizer, self.scheduler, batches,
                                     self.accelerator, self.cfg, self.precision)
        return time.perf_counter() - start, real, padded

    def step(self, timed: bool) -> None:
        batches = self.next_batches()
        seconds, real, padded = self.run(batches)
        if timed:
            useful = sum(self.flops(b) for b in batches) if self.flops else 0.0
            self.seconds += seconds
            self.real += real
            self.padded += padded
            self.useful += useful
            self.timed.append((seconds, real, useful))

    def blocks(self, n: int) -> list[tuple[float, float, float]]:
        """The timed steps in `n` consecutive blocks: each block's seconds, real tokens and useful FLOPs (the
        spread of a ratio over blocks is its timing noise; the variants step in turn, so block i of each variant
        ran at the same time)."""
        parts = np.array_split(np.array(self.timed), n)
        return [tuple(float(x) for x in part.sum(0)) for part in parts if len(part)]

    def shares(self, steps: int) -> dict:
        """From torch's profiler over `steps` more steps (their batches and prefill outside it): self time outside
        matrix products, time in the optimizer's step."""
        batches = [self.next_batches() for _ in range(steps)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in batches:
                self.run(b)
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
        optimizer = sum(e.cpu_time_total for e in events if e.key.startswith("Optimizer.step"))
        return {"outside_matmul_share": 1 - matmul / total, "optimizer_share": optimizer / total}


def measure(args) -> list[dict]:
    torch.set_num_threads(args.threads)
    accelerator = Accelerator(cpu=True)
    identity = host(args.threads)
    peaks = {"no": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"{identity['cpu']}, {args.threads} thread(s): matmul peak fp32 {peaks['no']:.1f} GFLOP/s, "
          f"bf16 {peaks['bf16']:.1f} GFLOP/s")
    found = [{**identity, "path": "host", "variant": f"matmul peak {p}", "precision": p, "metric": "peak_gflops",
              "value": round(v, 1), "task": None, "method": "host matmul peak", "seed": None}
             for p, v in (("fp32", peaks["no"]), ("bf16", peaks["bf16"]))]
    # where bf16's matrix product is not faster, the probe trains in fp32 at once: its variant would time nothing a
    # run does, at a fraction of fp32's speed (an AMD EPYC without bf16 units: an adapt step over a minute)
    bf16_pays = bf16_products_pay(peaks["no"], peaks["bf16"])
    with tempfile.TemporaryDirectory() as tmp:
        for path in build_paths(args.paths, args.examples):
            wanted = [v for v in VARIANTS if v.name in path.variants
                      and (v.name != "torch_compile" or path.name in args.compile_paths)
                      and (v.name != "bf16" or bf16_pays)]
            runners = [Runner(path, v, accelerator, Path(tmp)) for v in wanted]
            for r in range(args.warmup + args.steps):
                for i in range(len(runners)):
                    runners[(i + r) % len(runners)].step(timed=r >= args.warmup)
            base = runners[0].real / runners[0].seconds
            base_blocks = runners[0].blocks(args.blocks)
            for runner in runners:
                shares = runner.shares(args.profile_steps) if runner.name in ("baseline", "default") else {}
                tokens_s = runner.real / runner.seconds
                precision = "bf16" if runner.precision == "bf16" else "fp32"
                metrics = {"real_tokens_per_second": round(tokens_s, 1), "speedup": round(tokens_s / base, 3),
                           "padding_share": round(1 - runner.real / runner.padded, 4),
                           **{k: round(v, 4) for k, v in shares.items()}}
                if runner.compile_seconds is not None:
                    metrics["compile_seconds"] = round(runner.compile_seconds, 1)
                own_blocks = runner.blocks(args.blocks)
                spread = {"speedup": [round(r / s / (br / bs), 4)
                                      for (s, r, _), (bs, br, _) in zip(own_blocks, base_blocks)]}
                if runner.flops:
                    useful = runner.useful / runner.seconds / 1e9
                    peak = peaks[runner.precision if runner.precision == "bf16" else "no"]
                    metrics.update(useful_gflops=round(useful, 2), peak_gflops=round(peak, 1),
                                   fraction_of_peak=round(useful / peak, 4))
                    spread["fraction_of_peak"] = [round(u / s / 1e9 / peak, 4) for s, _, u in own_blocks]
                extra = {"probe": runner.probe} if runner.probe else {}
                found += [{**identity, "path": path.name, "variant": runner.name, "precision": precision,
                           "metric": k, "value": v, "steps": args.steps, "batch": path.batch, "task": path.name,
                           "method": runner.name, "seed": None, **extra,
                           **({"blocks": spread[k]} if k in spread else {})} for k, v in metrics.items()]
                print(f"{path.name:12} {runner.name:15} {precision:5} {tokens_s:8.0f} real tokens/s "
                      f"{tokens_s / base:5.2f}x  padding {metrics['padding_share']:.2f}" +
                      (f"  {metrics['useful_gflops']:6.1f} GFLOP/s = {metrics['fraction_of_peak']:.0%} of peak"
                       if runner.flops else "") +
                      (f"  outside matmul {shares['outside_matmul_share']:.0%}" if shares else ""))
    return found


def fine_tune_sst2(student: str, out: Path, seed: int, threads: int, loop_flags: list[str]) -> dict:
    """The demo's SST-2 fine-tuning (configs/demo.json: 10,000 examples, one epoch, --max-len 64, its student
    learning rate) of `student`; its results.json."""
    demo = run_settings(mode="packaged-teacher")
    finetune.main(["--model", student, "--task", "sst2", "--out", str(out), "--seed", str(seed),
                   "--lr", flag_text(demo["student_lr"]), "--eval-every", "0", "--threads", str(threads),
                   *flags(demo["tasks"]["sst2"]), *loop_flags])
    return read_json(out / "results.json")


def accuracy_row(args, result: dict, path: str, name: str, seed: int, **extra) -> dict:
    stage = result["training"][-1]
    return {**host(args.threads), "path": path, "task": "sst2", "variant": name, "method": name, "seed": seed,
            "metric": "accuracy", "value": round(result["metrics"]["dev"]["accuracy"], 4),
            "precision": "fp32" if stage["precision"] == "no" else stage["precision"],
            "train_seconds": stage["seconds"],
            "real_tokens_per_second": stage["tokens_per_second"], "train_examples": result["train_examples"], **extra}


def accuracy(args) -> list[dict]:
    """SST-2 dev accuracy of the demo's student fine-tuned by each loop (ACCURACY_LOOPS), over seeds, and of the
    demo's randomly initialised student by SCRATCH_LOOPS (path finetune_scratch); default_bf16 only on a host whose
    bf16 matrix product is faster than fp32's (elsewhere the default loop trains in fp32)."""
    for model, flag in ((args.student, "--student"), (args.scratch, "--scratch")):
        if not (Path(model) / "config.json").is_file():
            raise UserError(f"{model}: no model here (config.json); run scripts/demo.sh first or pass {flag}")
    torch.set_num_threads(args.threads)
    fp32, bf16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    loops = dict(ACCURACY_LOOPS)
    if not bf16_products_pay(fp32, bf16):  # no run here trains in bf16 (the probe picks fp32); it would take hours
        print(f"bf16 matrix product {bf16:.1f} GFLOP/s against fp32's {fp32:.1f}: default_bf16 not run on this host")
        del loops["default_bf16"]
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("finetune", args.student, name) for name in loops]
        runs += [("finetune_scratch", args.scratch, name) for name in SCRATCH_LOOPS]
        for seed in args.seeds:
            for path, model, name in runs:
                result = fine_tune_sst2(model, Path(tmp) / f"{path}-{name}-{seed}", seed, args.threads, loops[name])
                found.append(accuracy_row(args, result, path, name, seed, student=str(model)))
                print(f"seed {seed} {path:16} {name:22} accuracy {found[-1]['value']:.4f} "
                      f"({found[-1]['train_seconds']:.0f} s of training)")
    return found


def distill_accuracy(args) -> list[dict]:
    """The demo's distillation (configs/demo.json's distill flags and student, from --teacher) by each loop of
    DISTILL_LOOPS, over seeds; each student fine-tuned on SST-2 by the default loop with the same seed. Rows: its
    SST-2 dev accuracy (train_seconds: the distillation's) and held-out MLM accuracy."""
    if not (Path(args.teacher) / "config.json").is_file():
        raise UserError(f"{args.teacher}: no teacher here (config.json); run scripts/demo.sh first or pass --teacher")
    demo = run_settings(mode="packaged-teacher")
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name, loop_flags in DISTILL_LOOPS.items():
                out = Path(tmp) / f"{name}-{seed}"
                distill.main(["--teacher", args.teacher, "--student", demo["student"], "--out", str(out / "student"),
                              "--seed", str(seed), "--threads", str(args.threads), *flags(demo["distill"]),
                              *loop_flags])
                summary = read_json(out / "student" / "summary.json")
                seconds = round(sum(st["seconds"] for st in summary["stages"]), 1)
                result = fine_tune_sst2(str(out / "student"), out / "sst2", seed, args.threads, [])
                row = accuracy_row(args, result, "distill", name, seed, teacher=str(args.teacher))
                found += [{**row, "train_seconds": seconds},
                          {**row, "metric": "heldout_mlm_accuracy", "train_seconds": seconds,
                           "value": round(summary["heldout"]["mlm_accuracy"], 4)}]
                print(f"seed {seed} {name:22} SST-2 accuracy {row['value']:.4f}, held-out MLM accuracy "
                      f"{summary['heldout']['mlm_accuracy']:.4f} ({seconds:.0f} s of distillation)")
    return found


PRECISION_NAMES = {"no": "fp32"}  # a stage's --mixed-precision as the rows name it


def plan_rows(args) -> list[dict]:
    """`mobilekd distill`'s whole PKT plan at a small budget of the demo's shape (--plan-steps: steps per layer
    and of PD), by today's loop and by the defaults, the two alternating --plan-repeats times: its stages'
    seconds, real tokens per second and the speed-up, as a user running the recipe would see them."""
    runs = {name: [] for name in DISTILL_LOOPS}
    with tempfile.TemporaryDirectory() as tmp:
        teacher = Path(tmp) / "teacher"  # the packaged teacher with (fresh) heads, as the recipe needs
        save_pretrained(load_pretrained(model_dir(TEACHER), "pretraining"), teacher, load_tokenizer(model_dir(TEACHER)))
        layer_steps, pd_steps = args.plan_steps
        for repeat in range(args.plan_repeats):
            for name, loop_flags in DISTILL_LOOPS.items():
                out = Path(tmp) / f"{name}-{repeat}"
                distill.main(["--teacher", str(teacher), "--student", STUDENT, "--out", str(out), "--threads",
                              str(args.threads), "--layer-steps", str(layer_steps), "--pd-steps", str(pd_steps),
                              "--eval-examples", "32", *loop_flags])
                runs[name].append(read_json(out / "summary.json")["stages"])
    def rate(stages):  # real tokens per second of one run's stages
        return sum(st["seconds"] * st["tokens_per_second"] for st in stages) / sum(st["seconds"] for st in stages)

    found = []
    base = None
    base_runs = runs["distill_baseline"]
    for name, stage_lists in runs.items():
        seconds = sum(st["seconds"] for stages in stage_lists for st in stages)
        tokens = sum(st["seconds"] * st["tokens_per_second"] for stages in stage_lists for st in stages)
        kinds = {"pkt_seconds": [st for stages in stage_lists for st in stages if st["stage"].startswith("pkt")],
                 "pd_seconds": [st for stages in stage_lists for st in stages if st["stage"] == "pd"]}
        base = base or tokens / seconds
        metrics = {"real_tokens_per_second": round(tokens / seconds, 1), "speedup": round(tokens / seconds / base, 3),
                   "seconds": round(seconds / args.plan_repeats, 1),
                   **{k: round(sum(st["seconds"] for st in v) / args.plan_repeats, 1) for k, v in kinds.items()}}
        variant = name.removeprefix("distill_")
        repeats = [round(rate(own) / rate(b), 4) for own, b in zip(stage_lists, base_runs)]  # pairs run in turn
        trained_in = sorted({PRECISION_NAMES.get(st["precision"], st["precision"]) for stages in stage_lists
                             for st in stages})  # as each stage's probe chose (the defaults: bf16 where it pays)
        found += [{**host(args.threads), "path": "distill_plan", "variant": variant, "precision": "+".join(trained_in),
                   "metric": k, "value": v, "task": "distill_plan", "method": variant, "seed": None,
                   "plan_steps": [layer_steps, pd_steps], "repeats": args.plan_repeats,
                   **({"blocks": repeats} if k == "speedup" else {})} for k, v in metrics.items()]
        print(f"distill plan {variant:10} {metrics['seconds']:7.1f} s a run, {metrics['real_tokens_per_second']:.0f} "
              f"real tokens/s, {metrics['speedup']:.2f}x")
    return found


ACCURACY_METRICS = ("accuracy", "heldout_mlm_accuracy")


def _run_order(measured: str | None):  # a host's runs in the order they ran, the rows from before `measured` first
    return measured is not None, measured or ""


def _row_order(r):  # the rows' order in the results file
    return (r["metric"] in ACCURACY_METRICS, str(r["cpu"]), r["threads"], _run_order(r.get("measured")), r["path"],
            str(r["variant"]), r["metric"], str(r["seed"]), str(r["precision"]))


def _hosts(rows: list[dict]):
    """(the host as a table names it: its CPU and id, and when its run began, where the rows say; thread count;
    its rows) for each host, thread count and run: two machines of one CPU name (an AVX2-only AMD EPYC and one with
    avx512_bf16) are told apart by their ids, two runs on one machine by their start times."""
    for host in sorted({r["host"] for r in rows}):
        cpu = next(r["cpu"] for r in rows if r["host"] == host)
        for threads in sorted({r["threads"] for r in rows if r["host"] == host}):
            runs = {r.get("measured") for r in rows if r["host"] == host and r["threads"] == threads}
            for day in sorted(runs, key=_run_order):
                mine = [r for r in rows if r["host"] == host and r["threads"] == threads and r.get("measured") == day]
                yield f"{cpu} [{host}{'' if day is None else ', ' + day}]", threads, mine


def table(rows: list[dict]) -> str:
    speed = [r for r in rows if r["metric"] not in ACCURACY_METRICS and r["path"] not in ("host", "distill_plan")]
    if not speed:
        return "no throughput rows yet (run python -m benchmarks.throughput)\n"
    lines = []
    for cpu, threads, mine in _hosts(speed):
        peaks = {r["precision"]: r["value"] for r in rows if r["path"] == "host" and r["host"] == mine[0]["host"]
                 and r["threads"] == threads and r.get("measured") == mine[0].get("measured")}
        slow = not bf16_products_pay(peaks.get("fp32", 0), peaks.get("bf16", 0))
        whose = "the latest run's" if mine[0].get("measured") is None else "this run's"  # undated: runs together
        lines += [f"**{cpu}, {threads} thread(s)**; matmul peak, {whose}: fp32 {peaks.get('fp32', 0):.1f} "
                  f"GFLOP/s, "
                  f"bf16 {peaks.get('bf16', 0):.1f} GFLOP/s" +
                  (" (not faster: no bf16 variant timed, and --mixed-precision auto trains in fp32)" if slow else ""),
                  "",
                  "| path | variant | precision | real tokens/s | vs baseline | padding | useful GFLOP/s | peak | "
                  "of peak | outside matmuls | optimizer |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for path in [p for p in PATHS if any(r["path"] == p for r in mine)]:
            for name in [v.name for v in VARIANTS]:
                got = {r["metric"]: r for r in mine if r["path"] == path and r["variant"] == name}
                if not got:
                    continue

                def cell(metric, fmt):
                    return format(got[metric]["value"], fmt) if metric in got else "–"
                compiled = f" (compiled in {got['compile_seconds']['value']:.0f} s)" if "compile_seconds" in got else ""
                lines.append(f"| {path} | {name}{compiled} | {got['real_tokens_per_second']['precision']} | "
                             f"{cell('real_tokens_per_second', ',.0f')} | {cell('speedup', '.2f')}x | "
                             f"{cell('padding_share', '.0%')} | {cell('useful_gflops', '.1f')} | "
                             f"{cell('peak_gflops', '.1f')} | "
                             f"{cell('fraction_of_peak', '.0%')} | {cell('outside_matmul_share', '.0%')} | "
                             f"{cell('optimizer_share', '.0%')} |")
        lines.append("")
    steps = sorted({r["steps"] for r in speed})
    lines.append(f"Each variant: {', '.join(map(str, steps))} timed steps, the variants of a path stepping in turn; "
                 "*of peak*: useful FLOP/s over the matrix-product peak of the precision trained in (bf16's peak on "
                 "a host without bf16 matrix units is far below what autocast's mix of bf16 and fp32 operations "
                 "reaches, so its share can exceed 100%); *outside matmuls* and *optimizer*: shares of profiled step "
                 "time (baseline and default only); *peak*: the fp32 or bf16 peak of the run that measured the row "
                 "(a path's variants are timed in one run, and `--paths` reruns some).")
    return "\n".join(lines) + "\n"


def plan_table(rows: list[dict]) -> str:
    plan = [r for r in rows if r["path"] == "distill_plan"]
    if not plan:
        return "no distill_plan rows yet (run python -m benchmarks.throughput --plan)\n"
    lines = []
    for cpu, threads, mine in _hosts(plan):
        layer, pd = mine[0]["plan_steps"]
        lines += [f"**{cpu}, {threads} thread(s)**: `mobilekd distill` (PKT, {layer} steps per layer, {pd} PD "
                  f"steps), {mine[0]['repeats']} runs of each loop alternating; seconds per run", "",
                  "| loop | PKT stages s | PD s | all stages s | real tokens/s | vs baseline |",
                  "|---|---|---|---|---|---|"]
        for variant in ("baseline", "default"):
            got = {r["metric"]: r["value"] for r in mine if r["variant"] == variant}
            if got:
                lines.append(f"| {variant} | {got['pkt_seconds']:.1f} | {got['pd_seconds']:.1f} | "
                             f"{got['seconds']:.1f} | {got['real_tokens_per_second']:,.0f} | {got['speedup']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def accuracy_table(rows: list[dict]) -> str:
    """The accuracy rows' tables, one per host (a seed run again on another host stands beside the first)."""
    acc = [r for r in rows if r["metric"] in ACCURACY_METRICS]
    if not acc:
        return "no accuracy rows yet (run python -m benchmarks.throughput --accuracy / --distill-accuracy)\n"
    return "\n".join(f"**{cpu}**\n\n" + _accuracy_block(mine) for cpu, _, mine in _hosts(acc))


def _accuracy_block(acc: list[dict]) -> str:
    loops = [(path, name) for path in ACCURACY_PATHS for name in {**ACCURACY_LOOPS, **DISTILL_LOOPS}]
    by = {(loop, metric): {r["seed"]: r["value"] for r in acc if (r["path"], r["variant"]) == loop
                           and r["metric"] == metric} for loop in loops for metric in ACCURACY_METRICS}

    def label(loop):
        return loop[1] + ACCURACY_PATHS[loop[0]]
    lines = ["| loop | precision | SST-2 dev accuracy | held-out MLM accuracy | training s |", "|---|---|---|---|---|"]
    for loop in loops:
        if by[loop, "accuracy"]:
            mine = [r for r in acc if (r["path"], r["variant"]) == loop and r["metric"] == "accuracy"]
            mlm = by[loop, "heldout_mlm_accuracy"]
            lines.append(f"| {label(loop)} | {', '.join(sorted({r['precision'] for r in mine}))} | "
                         f"{mean_std_cell(list(by[loop, 'accuracy'].values()))} | "
                         f"{mean_std_cell(list(mlm.values())) if mlm else '–'} | "
                         f"{statistics.mean(r['train_seconds'] for r in mine):,.0f} |")
    lines += ["", "| comparison | metric | difference, seed by seed | the second's seed spread (std) | within it |",
              "|---|---|---|---|---|"]
    for first, second in ACCURACY_CHECKS:
        for metric in ACCURACY_METRICS:
            seeds = sorted(set(by[first, metric]) & set(by[second, metric]))
            if len(seeds) < 2:
                continue
            diffs = [by[first, metric][s] - by[second, metric][s] for s in seeds]
            spread = statistics.stdev(by[second, metric][s] for s in seeds)
            lines.append(f"| {label(first)} - {label(second)} | {metric} | {mean_std_cell(diffs, signed=True)} | "
                         f"{spread:.4f} | {within(diffs, spread)} |")
    cpus = "; ".join(sorted({f"{r['cpu']} [{r['host']}]" for r in acc}))
    examples = acc[0]["train_examples"]
    return "\n".join(lines) + (f"\n\nThe demo's SST-2 budget ({examples:,} examples, one epoch, configs/demo.json) "
                               f"and distillation (its distill flags), on {cpus}; full dev set; *training s*: "
                               f"fine-tuning's, or the distillation's for the distill loops. {WITHIN}\n")


# (what, path, variant, metric, at least): issue 33's goals
GOALS = [("fine-tuning, real tokens/s", "finetune", "default", "speedup", 3.0),
         ("distillation: a PKT layer stage, real tokens/s", "pkt_layer", "default", "speedup", 1.5),
         ("distillation: a PD step on a batch PKT kept (the defaults)", "pd", "default", "speedup", 1.5),
         ("distillation: a PD step on a batch no stage kept (fused_adamw: the defaults, nothing kept)", "pd",
          "fused_adamw", "speedup", 1.5),
         ("distillation: the whole PKT plan (mobilekd distill)", "distill_plan", "default", "speedup", 1.5),
         *[(f"{path}: useful FLOP/s of the peak", path, "default", "fraction_of_peak", 0.5)
           for path in ("adapt", "pkt_layer", "pd", "finetune", "finetune_kd", "qat")]]
MET = {"holds": "met", "fails": "missed", "tie": "tie (within noise)"}


def goals_table(rows: list[dict]) -> str:
    """Each goal against its ratio's spread over timing blocks (runs, for the whole plan): met or missed only
    beyond two standard errors (`stats.verdict`)."""
    lines = ["| goal | at least | host, threads | measured (mean ± std over blocks) | verdict |", "|---|---|---|---|---|"]
    for what, path, variant, metric, goal in GOALS:
        for r in rows:
            if (r["path"], r["variant"], r["metric"]) == (path, variant, metric) and r.get("blocks"):
                shown = (lambda x: f"{x:.2f}x") if metric == "speedup" else (lambda x: f"{x:.0%}")
                blocks = r["blocks"]
                spread = f" ± {shown(statistics.stdev(blocks)).rstrip('x')}" if len(blocks) > 1 else ""
                judged = verdict(blocks, goal)
                where = r["host"] + (f", {r['measured']}" if r.get("measured") else "")
                lines.append(f"| {what} | {shown(goal)} | {r['cpu']} [{where}], {r['threads']} | {shown(r['value'])}{spread} "
                             f"[n={len(blocks)}] | {MET.get(judged, judged)} |")
    if len(lines) == 2:
        return ""
    return "\n".join(lines) + ("\n\nThe spread of a speed-up is over blocks of the variants' interleaved steps "
                               "(runs, for the whole plan), of a fraction of peak over the same blocks against the "
                               "run's one peak. " + VERDICTS + "\n")


def tables(rows: list[dict]) -> str:
    return (goals_table(rows) + "\n" + table(rows) + "\n" + plan_table(rows) + "\n" + accuracy_table(rows)).lstrip()


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the loop's on a 2-core host)")
    p.add_argument("--steps", type=int, default=24, help="timed steps per variant (default 24)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (default 2)")
    p.add_argument("--profile-steps", type=int, default=4, help="profiled steps (default 4)")
    p.add_argument("--blocks", type=int, default=4,
                   help="the timed steps' blocks whose spread gives a ratio's noise (default 4)")
    p.add_argument("--examples", type=int, default=4000, help="SST-2 training examples read (default 4000)")
    p.add_argument("--compile-paths", nargs="*", choices=PATHS, default=["finetune"],
                   help="paths that also time torch.compile on the default variant (default: finetune; its "
                        "compilation takes minutes)")
    p.add_argument("--plan", action="store_true", help="time mobilekd distill's whole PKT plan instead (distill_plan)")
    p.add_argument("--plan-steps", type=int, nargs=2, default=[15, 60], metavar=("LAYER", "PD"),
                   help="--plan: steps per layer and of PD (default 15 60: the demo's 3:2 split of 6 x 50 + 200)")
    p.add_argument("--plan-repeats", type=int, default=2, help="--plan: runs of each loop, alternating (default 2)")
    p.add_argument("--accuracy", action="store_true", help="the SST-2 accuracy rows of the fine-tuning loops instead")
    p.add_argument("--student", default="runs/demo/student", help="--accuracy: the distilled student to fine-tune")
    p.add_argument("--scratch", default="runs/demo/scratch_init",
                   help="--accuracy: the randomly initialised student to fine-tune (the demo's)")
    p.add_argument("--distill-accuracy", action="store_true",
                   help="the accuracy rows of the distillation loops instead (distill from --teacher, fine-tune SST-2)")
    p.add_argument("--teacher", default="runs/demo/teacher", help="--distill-accuracy: the adapted teacher")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    table_flags(p, RESULTS)
    args = p.parse_args(argv)
    path = REPO_ROOT / args.results
    if not args.table:
        start = time.time()
        found = (accuracy(args) if args.accuracy else distill_accuracy(args) if args.distill_accuracy else
                 plan_rows(args) if args.plan else measure(args))
        wall = round(time.time() - start)
        # when a run began is part of its rows' key: a later run on the same host stands beside the earlier one
        # (rows from before 2026-12-06 carry no time), never in its place
        began = datetime.datetime.fromtimestamp(start).strftime("%Y-%m-%d %H:%M")
        found = [{**r, "run_seconds": wall, "measured": began} for r in found]
        key = ("path", "variant", "metric", "seed", "cpu", "threads", "measured")
        merge_rows(path, found, key=key, order=_row_order)
        print(f"{len(found)} rows in {path} ({wall} s)")
    return show_table(args, path, tables)


if __name__ == "__main__":
    sys.exit(main())
