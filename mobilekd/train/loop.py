"""The one training loop: runs a plan (a list of stages) on Hugging Face Accelerate.

Teacher pre-training and fine-tuning are one-stage plans; AKT, JKT and PKT (paper, Section 4.3) are plans of
several stages. A stage names what trains (a predicate over parameter names; everything else is frozen: no
gradient, no optimizer state), its loss (a function of the model and a batch returning named terms, `loss`
being the one to minimise), its steps, learning rate, warm-up and per-parameter learning-rate multipliers.

The same code runs on one CPU, one GPU, or `accelerate launch` / `torchrun` across processes and machines with
DDP (tests/test_teacher.py: two CPU processes under torchrun give the weights of one). Each process takes its
slice of every global batch, and batches are a pure function of (seed, step), so a resumed run and an N-process
run see exactly the data of an uninterrupted one-process run.

Where the host's time goes (issue 33; `python -m benchmarks.throughput` measures each change, docs/throughput.md):
- batches are grouped by length (`--batch-order length-grouped`, the default): a batch is cut to its widest
  example, and a random batch of short sentences is mostly padding (SST-2's, about two thirds);
- AdamW is torch's fused kernel (`--fused-optimizer`); a classifier's word-embedding table, most of a small
  student, can be updated lazily, only on the batch's rows (`--embedding-updates lazy`, `mobilekd.train.lazy_adamw`:
  opt-in, as it is not AdamW's rule and a table learnt from scratch suffers);
- `--mixed-precision auto` (the default) trains under bf16 autocast only where this host runs it faster
  (`mobilekd.train.precision`: a matrix product in each precision, then where bf16's is faster three of the
  first stage's next 24 batches, at the sixths of their sizes, timed in both), recorded in the summary and kept
  for the next run on this host;
- stages that reread (`Stage.rereads`) see the batches of the stage before, so distillation can start each stage
  where the last one stopped (`mobilekd.transfer.layer_inputs`).

Set-ups that shard the model or optimizer state (FSDP, DeepSpeed, Megatron-LM) are refused (`refuse_sharded`,
called where the recipes make their Accelerator).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm
from transformers import (get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
                          get_polynomial_decay_schedule_with_warmup)

from mobilekd.errors import UserError
from mobilekd.train.checkpoint import find_checkpoint, load_checkpoint, read_trainer_state, save_checkpoint
from mobilekd.train.lamb import Lamb
from mobilekd.train.lazy_adamw import LazyAdamW, clip_grad_norm
from mobilekd.host import cpu_model, identity
from mobilekd.train.precision import PROBE_WINDOW, decide_precision, describe, probe_sample


def _everything(name: str) -> bool:
    return True


def _one(name: str) -> float:
    return 1.0


@dataclass(kw_only=True)
class Stage:
    """One stage of a plan. Its peak learning rate `lr` has no default here: each kind of training keeps its
    default in one place, which its recipe reads. Teacher pre-training: teacher_ib_bert/configs/<preset>.json, and
    teacher_ib_bert/adaptation.json for --init-from; distillation: `PlanSettings.lr` (transfer/strategies.py);
    fine-tuning: `DEFAULTS` and `default_lr` (data/tasks.py); FastBERT, the BiLSTM and QAT: their recipe's
    `add_task_flags(lr=...)`; multi-task: its recipe's --lr; the demo's runs (scripts/demo.sh and
    benchmarks.teacher_value): configs/demo.json."""

    name: str
    steps: int
    loss: Callable[[torch.nn.Module, dict], dict[str, torch.Tensor]]
    trainable: Callable[[str], bool] = _everything
    lr: float
    lr_scale: Callable[[str], float] = _one
    warmup: float = 0.1  # fraction of the stage's steps
    # after the warm-up the rate decays to decay_to x its peak, polynomially with decay_power (1: linearly)
    decay_to: float = 0.0
    decay_power: float = 1.0
    weight_decay: float = 0.01
    # step s of a stage that rereads takes the run's batch s, not the batch of the run's global step: stages that
    # reread see the same examples, so one can reuse what an earlier one computed for them (PKT's layer inputs)
    rereads: bool = False
    info: dict = field(default_factory=dict)  # data copied into the stage's summary (e.g. its matches)


@dataclass(kw_only=True)
class TrainConfig:
    """How the loop trains, whatever the recipe; `add_training_flags` makes these fields command-line flags."""

    out_dir: Path = field(metadata={"flag": "--out", "help": "output directory"})
    global_batch_size: int = field(default=32, metadata={
        "flag": "--batch-size", "min": 1, "help": "global batch size, over all processes and accumulation steps"})
    grad_accum: int = field(default=1, metadata={"min": 1, "help": "gradient accumulation steps"})
    optimizer: str = field(default="adamw", metadata={"choices": ["adamw", "lamb"], "help": "optimizer"})
    max_grad_norm: float = 1.0
    save_every: int = field(default=100, metadata={"min": 1, "help": "checkpoint every N steps"})
    log_every: int = 10
    eval_every: int = 0  # call `on_eval` every N steps (0: only at the end of the plan)
    seed: int = field(default=0, metadata={"help": "random seed"})
    batch_order: str = field(default="length-grouped", metadata={
        "choices": ["length-grouped", "random"],
        "help": "length-grouped: each epoch's shuffled examples sorted by length within pools of 64 batches, the "
                "batches then shuffled (less padding; still a pure function of seed and step); random: plain "
                "shuffled batches"})
    mixed_precision: str = field(default="auto", metadata={
        "choices": ["auto", "no", "bf16", "fp16"],
        "help": "autocast precision; auto: bf16 where this host runs it faster (a matrix product in each precision, "
                "then three of the next batches' forward and backward in each), else fp32"})
    embedding_updates: str = field(default="dense", metadata={
        "choices": ["dense", "lazy"],
        "help": "dense: every row of the word-embedding table every step, as plain AdamW; lazy: a classifier's table "
                "gets a sparse gradient and AdamW updates only the rows in the batch (TensorFlow's LazyAdam rule, "
                "mobilekd/train/lazy_adamw.py; one process only): faster, but a row's momentum stops when it leaves "
                "the batch, and a table trained from random initialisation then barely learns (docs/throughput.md)"})
    fused_optimizer: bool = field(default=True, metadata={
        "help": "AdamW as torch's fused kernel; --no-fused-optimizer: its per-tensor loop (the same update, slower)"})
    kept_table_gradient: bool = field(default=True, metadata={
        "help": "with --embedding-updates dense, a classifier's word table's gradient as the batch's rows, added into "
                "a dense buffer kept across steps (AdamW on one process of a CPU, not fp16); "
                "--no-kept-table-gradient: the fresh dense gradient autograd allocates each step (the same update; a "
                "table over 32 MB pays new pages each step: mobilekd/train/lazy_adamw.py)"})
    precision_cache: Path | None = None  # where --mixed-precision auto keeps its choices (None: probe every run)
    run: dict = field(default_factory=dict)  # settings a checkpoint must agree with to be resumed


POOL_BATCHES = 64  # length grouping sorts within pools of this many global batches


def length_grouped(order: np.ndarray, lengths: np.ndarray, first: int, batch: int, rng) -> np.ndarray:
    """`order` (an epoch's shuffled example indices) regrouped so that each global batch holds examples of similar
    length: cut at the global batches' boundaries (the first after `first` positions, an epoch need not start at
    one), sorted by length within pools of POOL_BATCHES batches, re-cut, and the whole batches shuffled (the two
    partial ones at the epoch's ends stay in place). The idea of Hugging Face's `group_by_length`
    (transformers trainer_pt_utils.py, `get_length_grouped_indices`), whose megabatches are 50 batches and are not
    shuffled within."""
    n = len(order)
    cuts = list(range(first, n, batch)) if first else list(range(0, n, batch))
    cuts = [c for c in cuts if 0 < c < n]
    bounds = [0, *cuts, n]
    out = order.copy()
    for i in range(0, len(bounds) - 1, POOL_BATCHES):
        lo, hi = bounds[i], bounds[min(i + POOL_BATCHES, len(bounds) - 1)]
        out[lo:hi] = out[lo:hi][np.argsort(lengths[out[lo:hi]], kind="stable")]
    pieces = [out[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    whole = [i for i, p in enumerate(pieces) if len(p) == batch]
    shuffled = list(pieces)
    for i, j in zip(whole, rng.permutation(whole)):
        shuffled[i] = pieces[j]
    return np.concatenate(shuffled)


class Batches:
    """Global batch `step` of a split, this process's slice of it: a pure function of (seed, step). With
    `order="length-grouped"` and a split that knows its examples' `lengths`, each epoch's order is regrouped by
    `length_grouped`."""

    def __init__(self, split, global_batch: int, accelerator: Accelerator, grad_accum: int, seed: int,
                 order: str = "random"):
        self.split, self.global_batch, self.seed = split, global_batch, seed
        self.lengths = getattr(split, "lengths", None) if order == "length-grouped" else None
        self.world, self.rank, self.accum = accelerator.num_processes, accelerator.process_index, grad_accum
        if global_batch % (self.world * grad_accum):
            raise UserError(f"--batch-size {global_batch} is not divisible by processes ({self.world}) x "
                            f"gradient accumulation ({grad_accum})")
        self.micro = global_batch // (self.world * grad_accum)
        self._perms = {}

    def _index(self, position: int) -> tuple[int, int]:
        epoch, offset = divmod(position, len(self.split))
        if epoch not in self._perms:
            rng = np.random.default_rng((self.seed, epoch))
            order = rng.permutation(len(self.split))
            if self.lengths is not None:
                first = (-epoch * len(self.split)) % self.global_batch  # positions before this epoch's first batch
                order = length_grouped(order, self.lengths, first, self.global_batch, rng)
            self._perms = {epoch: order}
        return epoch, int(self._perms[epoch][offset])

    def micro_batches(self, step: int):
        """This process's micro-batches of global batch `step`; each names its examples in `example`, (B, 2)
        rows of (index, epoch), so that what is computed for an example can be kept for the same example later."""
        for m in range(self.accum):
            start = step * self.global_batch + (m * self.world + self.rank) * self.micro
            epochs, indices = zip(*(self._index(p) for p in range(start, start + self.micro)))
            batch = self.split.batch(indices, epochs)
            batch["example"] = torch.tensor([indices, epochs]).T
            yield batch


def _param_groups(model, stage: Stage):
    """AdamW/LAMB groups by (learning-rate multiplier, decay); no decay for biases and normalizations."""
    groups = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = 0.0 if (p.ndim == 1 or "LayerNorm" in name) else stage.weight_decay
        key = (stage.lr_scale(name), decay)
        groups.setdefault(key, {"params": [], "lr": stage.lr * key[0], "weight_decay": decay})["params"].append(p)
    return list(groups.values())


def make_schedule(optimizer, stage: Stage):
    """Linear warm-up, then linear decay to 0, or polynomial decay to `decay_to` x the peak (1: a constant rate)."""
    warmup = int(stage.warmup * stage.steps)
    if stage.decay_to == 1.0:
        return get_constant_schedule_with_warmup(optimizer, warmup)
    if stage.decay_to == 0.0 and stage.decay_power == 1.0:
        return get_linear_schedule_with_warmup(optimizer, warmup, stage.steps)
    return get_polynomial_decay_schedule_with_warmup(optimizer, warmup, stage.steps, lr_end=stage.lr * stage.decay_to,
                                                     power=stage.decay_power)


def make_optimizer(model, stage: Stage, cfg: TrainConfig) -> torch.optim.Optimizer:
    """LAMB, or AdamW: torch's fused kernel unless `cfg.fused_optimizer` is off (same update, one pass over
    memory instead of a dozen per-tensor kernels)."""
    if cfg.optimizer == "lamb":
        return Lamb(_param_groups(model, stage), lr=stage.lr)
    return LazyAdamW(_param_groups(model, stage), lr=stage.lr, fused=cfg.fused_optimizer or None,
                     lazy_rows=cfg.embedding_updates == "lazy")


def sparse_embeddings(model, cfg: TrainConfig, processes: int, device: str = "cpu") -> int:
    """Give the trainable tables the model lists in `sparse_embeddings()` a sparse gradient when the optimizer is
    AdamW and `cfg.embedding_updates` is lazy (LazyAdamW updates their batch's rows), or dense with
    `cfg.kept_table_gradient` and no fp16 loss scaling, on a CPU (LazyAdamW adds the rows into a kept dense buffer:
    AdamW's update; what it saves is a CPU allocation, and a GPU's index_add_ is not deterministic); on one process
    only (DDP's all-reduce is not set up here for sparse gradients). Returns how many."""
    if cfg.embedding_updates == "lazy" and cfg.mixed_precision == "fp16":
        raise UserError("--embedding-updates lazy does not combine with --mixed-precision fp16 (the lazy rows are "
                        "clipped before the loss scale is undone): use bf16 or no")
    kept = (cfg.embedding_updates == "dense" and cfg.kept_table_gradient and cfg.mixed_precision != "fp16"
            and device == "cpu")
    sparse = (cfg.embedding_updates == "lazy" or kept) and cfg.optimizer == "adamw" and processes == 1
    tables = getattr(model, "sparse_embeddings", lambda: [])()
    for table in tables:
        table.sparse = sparse and table.weight.requires_grad
    return sum(t.sparse for t in tables)


def autocast(accelerator: Accelerator, precision: str):
    """The step's autocast: Accelerate's for a precision it was made with, else bf16 when the probe chose it."""
    if accelerator.mixed_precision != "no":
        return accelerator.autocast()
    return torch.autocast(accelerator.device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def freeze_for_stage(model, stage: Stage) -> int:
    """Set requires_grad by the stage's predicate; return the number of trainable parameters."""
    n = 0
    for name, p in model.named_parameters():
        p.requires_grad_(stage.trainable(name))
        n += p.numel() if p.requires_grad else 0
    if n == 0:
        raise UserError(f"stage {stage.name!r} trains no parameter")
    return n


SHARDED = (DistributedType.FSDP, DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM)


def refuse_sharded(distributed_type: DistributedType) -> None:
    """One line instead of a wrong checkpoint. The loop saves the main process's unwrapped model (`_save`): the
    whole model only where every process holds all of it (one process, DDP); under FSDP, DeepSpeed (ZeRO) or
    Megatron-LM a process holds a shard, and gathering the whole is a collective every process must join. The loop
    also prepares the model and a new optimizer again for every stage (`run_plan`), untried with those wrappers."""
    if distributed_type in SHARDED:
        raise UserError(f"Accelerate is set up for {distributed_type.value}; mobilekd trains on one process or with "
                        f"DDP only (its checkpoints are the main process's whole model, which {distributed_type.value} "
                        f"shards): launch without that config")


def run_plan(stages: list[Stage], model: torch.nn.Module, split, cfg: TrainConfig, accelerator: Accelerator,
             resume: bool = False, on_eval: Callable[[torch.nn.Module, int], None] | None = None) -> list[dict]:
    """Run every stage in order; return one summary dict per stage. Checkpoints go to cfg.out_dir/checkpoint.

    `on_eval(model, global_step)` runs on the main process every `cfg.eval_every` steps and after the last
    step (fine-tuning keeps its best checkpoint by dev metric this way)."""
    out_dir = Path(cfg.out_dir)
    run = {**cfg.run, "stages": [[s.name, s.steps, *(["rereads"] if s.rereads else [])] for s in stages],
           "global_batch_size": cfg.global_batch_size,
           "seed": cfg.seed, "optimizer": cfg.optimizer, "grad_accum": cfg.grad_accum,
           # None for random order: a checkpoint from before length grouping resumes with --batch-order random
           "batch_order": None if cfg.batch_order == "random" else cfg.batch_order}
    trainer = {"run": run, "stage": 0, "step": 0, "global_step": 0, "summaries": []}
    ckpt = find_checkpoint(out_dir) if resume else None
    if resume and ckpt is None and accelerator.is_main_process:
        print(f"resume: no checkpoint in {out_dir}, starting from scratch")
    if ckpt is not None:
        trainer = read_trainer_state(ckpt, run)
        for summary in trainer["summaries"]:  # stages an earlier process finished: their seconds are not this one's
            summary["earlier_attempt"] = True
        if trainer["stage"] >= len(stages):  # finished: its weights, e.g. for a run killed while saving its outputs
            load_checkpoint(ckpt, model)
    elif not resume and find_checkpoint(out_dir) is not None:
        raise UserError(f"{out_dir}: holds a checkpoint of an earlier run; pass --resume to continue it, "
                        f"or choose another --out")
    torch.manual_seed(cfg.seed)
    batches = Batches(split, cfg.global_batch_size, accelerator, cfg.grad_accum, cfg.seed, cfg.batch_order)
    unwrapped = model.to(accelerator.device)  # on the GPU before `prepare`: the precision probe runs the model first
    writer = SummaryWriter(out_dir / "tensorboard") if accelerator.is_main_process else None
    try:
        for index, stage in enumerate(stages):
            if index < trainer["stage"]:
                continue
            n_trainable = freeze_for_stage(unwrapped, stage)
            sparse_tables = sparse_embeddings(unwrapped, cfg, accelerator.num_processes, accelerator.device.type)
            optimizer = make_optimizer(unwrapped, stage, cfg)
            scheduler = make_schedule(optimizer, stage)
            if ckpt is not None and index == trainer["stage"]:
                # Mid-stage: weights, optimizer, schedule and RNG. At a stage boundary the new optimizer starts fresh.
                mid_stage = trainer["step"] > 0
                load_checkpoint(ckpt, unwrapped, optimizer if mid_stage else None, scheduler if mid_stage else None)
            # The schedule is ours, one step per global batch: a prepared scheduler would step once per process.
            if "precision" not in trainer:  # decided once per run (a resumed run keeps its choice)
                trainer["precision"] = _precision(stage, unwrapped, batches, _batch_step(stage, trainer),
                                                  accelerator, cfg)
            wrapped, optimizer = accelerator.prepare(unwrapped, optimizer)
            summary = _run_stage(stage, index, wrapped, unwrapped, optimizer, scheduler, batches, accelerator, cfg,
                                 trainer, writer, n_trainable, on_eval)
            summary["sparse_gradient_tables"] = sparse_tables  # lazy rows, or a kept table gradient (sparse_embeddings)
            trainer["summaries"].append(summary)
            trainer.update(stage=index + 1, step=0, stage_start=None, stage_seconds=0.0)
            if on_eval is not None and index == len(stages) - 1 and not (cfg.eval_every and
                                                                         trainer["global_step"] % cfg.eval_every == 0):
                _evaluate(accelerator, on_eval, unwrapped, trainer["global_step"])
            _save(accelerator, cfg, unwrapped, None, None, trainer)  # a stage boundary: no optimizer state to keep
            accelerator.free_memory()
    finally:  # also when a stage raises (a bad batch, an on_eval error, Ctrl-C): the writer closed, the tables dense
        if writer is not None:
            writer.close()
        for table in getattr(unwrapped, "sparse_embeddings", lambda: [])():
            table.sparse = False  # the model left as it came (an exported graph has no use for sparse gradients)
    return trainer["summaries"]


def earlier_seconds(summaries: list[dict]) -> float:
    """The training seconds that earlier processes of a resumed run spent, as its checkpoint carried them: the
    stages they finished and the part of the stage they left (what a run's wall time adds to its own process's)."""
    return sum(s["seconds"] if s.get("earlier_attempt") else s.get("seconds_before_resume", 0.0) for s in summaries)


def checkpointed_seconds(out_dir) -> float:
    """The training seconds the checkpoint in `out_dir` carries from the processes before: the stages they finished
    and the part of the stage they left (what `earlier_seconds` finds in the summaries once run_plan has resumed), for
    a figure taken before run_plan returns (a per-evaluation wall time); 0 without a checkpoint, or for one
    run_plan will refuse in its own words."""
    ckpt = find_checkpoint(out_dir)
    try:
        trainer = json.loads((ckpt / "trainer.json").read_text()) if ckpt else {}
        return float(sum(s["seconds"] for s in trainer.get("summaries", [])) + trainer.get("stage_seconds", 0.0))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return 0.0


def wall_seconds(start: float, summaries: list[dict]) -> float:
    """A run's wall time in seconds: this process's since `start` (its `time.time()`), and where the run resumed,
    the training its earlier processes checkpointed (`earlier_seconds`), so a killed and resumed run reports all
    the time it took, not its last process's."""
    return round(time.time() - start + earlier_seconds(summaries), 1)


def _batch_step(stage: Stage, trainer: dict) -> int:
    """The global batch the stage's next step reads (`Stage.rereads`)."""
    return trainer["step"] if stage.rereads else trainer["global_step"]


def probe_window(batches: Batches, step: int) -> list[dict]:
    """The probe's batches (`probe_sample`) among the first micro-batches of global batches `step` to `step` +
    PROBE_WINDOW: what the loop times before its stage and benchmarks.throughput before its path."""
    return probe_sample([next(batches.micro_batches(s)) for s in range(step, step + PROBE_WINDOW)])


def _precision(stage, model, batches, step, accelerator, cfg) -> dict:
    """The run's precision: the flag's, or with `auto` the probe's choice on batches sampled from the stage's next
    ones (`probe_sample`; kept per host, stage and model in `cfg.precision_cache`, so a repeated run trains in the
    same precision)."""
    if cfg.mixed_precision != "auto":
        return {"precision": cfg.mixed_precision}
    found = decide_precision(stage.name, stage.loss, model, probe_window(batches, step), accelerator,
                             cfg.precision_cache)
    if accelerator.is_main_process:
        print(describe(found))
    return found


def _evaluate(accelerator, on_eval, model, step):
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        on_eval(model, step)
        model.train()
    accelerator.wait_for_everyone()


def _save(accelerator, cfg, model, optimizer, scheduler, trainer):
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        save_checkpoint(cfg.out_dir, model, optimizer, scheduler, trainer)
    accelerator.wait_for_everyone()


def train_step(stage: Stage, wrapped, optimizer, scheduler, micro_batches, accelerator: Accelerator,
               cfg: TrainConfig, precision: str, where: str = "") -> tuple[dict, int, int]:
    """One optimizer step over a global batch's micro-batches: the step's mean terms (its `loss` reduced over
    processes), and the real and padded tokens it computed, over all processes."""
    terms_sum = defaultdict(float)
    tokens = padded = 0
    for batch in micro_batches:
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        if "masked_labels" in batch:  # normalise masked-LM by this micro-batch's masked tokens over all processes
            count = (batch["masked_labels"] >= 0).sum().float()
            batch["mlm_denominator"] = accelerator.reduce(count, "sum") / accelerator.num_processes
        with autocast(accelerator, precision):
            terms = stage.loss(wrapped, batch)
        accelerator.backward(terms["loss"] / cfg.grad_accum)
        for k, v in terms.items():
            terms_sum[k] += float(v.detach()) / cfg.grad_accum
        tokens += int(batch["attention_mask"].sum()) * accelerator.num_processes
        padded += batch["attention_mask"].numel() * accelerator.num_processes
    loss = accelerator.reduce(torch.tensor(terms_sum["loss"], device=accelerator.device), "mean").item()
    if not math.isfinite(loss):
        raise UserError(f"{cfg.out_dir}: loss became {loss} at {where}; stopped, the last good checkpoint is kept "
                        f"(lower the learning rate or use fp32)")
    terms_sum["loss"] = loss
    if cfg.max_grad_norm:
        params = list(wrapped.parameters())
        if any(p.grad is not None and p.grad.is_sparse for p in params):
            clip_grad_norm(params, cfg.max_grad_norm)  # one process (sparse_embeddings): nothing to unscale
        else:
            accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return dict(terms_sum), tokens, padded


def _accelerator_info(device: torch.device) -> dict:
    """The GPU a stage ran on and the most memory it held (none on CPU)."""
    if device.type != "cuda":
        return {}
    return {"gpu": torch.cuda.get_device_name(device),
            "peak_gpu_gib": round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)}


def _run_stage(stage, index, wrapped, unwrapped, optimizer, scheduler, batches, accelerator, cfg, trainer,
               writer, n_trainable, on_eval) -> dict:
    main = accelerator.is_main_process
    wrapped.train()
    first = trainer["step"]
    totals, last_terms = defaultdict(float), {}
    tokens = padded = 0
    if accelerator.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(accelerator.device)  # so peak_gpu_gib is this stage's
    start = time.time()
    # the stage's seconds before a resume, carried in the checkpoint: `seconds` is the whole stage's time
    earlier = trainer.get("stage_seconds", 0.0) if first else 0.0
    precision = trainer["precision"]["precision"]
    bar = tqdm(range(first, stage.steps), desc=f"[{index + 1}] {stage.name}", disable=not main,
               initial=first, total=stage.steps, dynamic_ncols=True)
    for step in bar:
        terms_sum, real, width = train_step(stage, wrapped, optimizer, scheduler,
                                            batches.micro_batches(_batch_step(stage, trainer)), accelerator, cfg,
                                            precision, f"stage {stage.name!r} step {step + 1}")
        tokens, padded = tokens + real, padded + width
        if step == first:  # its first step pays for allocation, kernel choice and warm-up: steady = the others
            first_seconds = time.time() - start
        loss = terms_sum["loss"]
        trainer["global_step"] += 1
        trainer["step"] = step + 1
        if not trainer.get("stage_start"):
            trainer["stage_start"] = dict(terms_sum)
        last_terms = dict(terms_sum)
        for k, v in terms_sum.items():
            totals[k] += v
        elapsed = time.time() - start
        if main:
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}",
                            tok_s=f"{tokens / max(elapsed, 1e-9):.0f}")
            if writer is not None and (step + 1) % cfg.log_every == 0:
                for k, v in terms_sum.items():
                    writer.add_scalar(f"{stage.name}/{k}", v, trainer["global_step"])
                writer.add_scalar(f"{stage.name}/lr", scheduler.get_last_lr()[0], trainer["global_step"])
        if on_eval is not None and cfg.eval_every and trainer["global_step"] % cfg.eval_every == 0:
            _evaluate(accelerator, on_eval, unwrapped, trainer["global_step"])
        if (step + 1) % cfg.save_every == 0 and step + 1 < stage.steps:
            trainer["stage_seconds"] = round(earlier + time.time() - start, 1)
            _save(accelerator, cfg, unwrapped, optimizer, scheduler, trainer)
    bar.close()
    elapsed = time.time() - start
    steps_run = stage.steps - first
    accelerated = _accelerator_info(accelerator.device)
    return {"stage": stage.name, "steps": stage.steps, "trainable_params": n_trainable, **stage.info,
            "seconds": round(earlier + elapsed, 1),
            **({"resumed_at_step": first, "seconds_before_resume": round(earlier, 1)} if first else {}),
            **({"first_step_seconds": round(first_seconds, 3)} if steps_run else {}),
            "tokens_per_second": round(tokens / max(elapsed, 1e-9), 1),
            "padding_share": round(1 - tokens / padded, 4) if padded else None, "batch_order": cfg.batch_order,
            "precision": precision, **({} if index else {"precision_probe": trainer["precision"]}),
            "cpu": cpu_model(), "host": identity(accelerated.get("gpu")),  # where the seconds were measured
            "threads": torch.get_num_threads(), **accelerated,
            "start": trainer.get("stage_start") or {}, "end": last_terms,
            "mean": {k: v / max(steps_run, 1) for k, v in totals.items()}}
