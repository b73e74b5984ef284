"""Training strategies as data (MobileBERT paper, Section 4.3 and Figure 2): each returns a list of `Stage`s
that the one training loop runs.

  AKT  auxiliary knowledge transfer: layer-wise transfer losses beside pre-training distillation, one stage.
  JKT  joint knowledge transfer: all layer-wise losses together, then pre-training distillation.
  PKT  progressive knowledge transfer: stage l trains layer l on its own transfer losses with every layer
       below frozen, then pre-training distillation over the whole student.

The source documents' task-agnostic distillations are one-stage plans on the same machinery, at the same total
steps:

  distilbert  DistilBERT's triple loss (Sanh et al. 2019, Section 3): soft-target KD on the MLM logits, the MLM
              loss and the cosine loss between the last hidden states (`Distiller.distilbert_terms`)
  tinybert    TinyBERT's general distillation (Jiao et al. 2020, Section 3.3): embedding, attention-score and
              hidden-state MSE against the pre-trained teacher, uniform layer map (`objectives.tinybert_matches`)
  minilm      MiniLM's deep self-attention distillation (Wang et al. 2020, Section 3.1): the last layers' attention
              distributions and value relations, no layer map, no projection (`objectives.minilm_matches`)

Each is declared once, as a `Strategy` in `STRATEGIES` (its matches, its stages, the flags it reads); the
distillation recipe, its --help and the pair check look it up there. Adding a method: docs/layout.md.

As in every strategy, a word-embedding table copied from the teacher stays frozen unless
--train-word-embeddings: DistilBERT trains its table, but on a small corpus Adam would move the rows of words it
never sees (issue 14's unseen rows).

In stage l of PKT nothing above layer l runs, in teacher or student: both run `num_layers=l+1`. The teacher
runs in eval mode under no_grad; a frozen student prefix has no parameter that needs a gradient, so autograd
records nothing for it either. With `keep_layer_inputs` (the default) PKT's and JKT's stages reread the same
batches and nothing below is run twice either: each stage starts both models from the hidden states the stage
before left at its blocks' inputs (`mobilekd.transfer.layer_inputs`); the student's frozen prefix then runs
without dropout, as the teacher does, so that what it computes can be kept (the official TF1 code goes further and
builds the student with is_training=False, no dropout anywhere, whenever it has a teacher: run_pretraining.py,
`model_fn_builder`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import psutil
import torch
import torch.nn.functional as F

from mobilekd.errors import UserError
from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import WORD_EMBEDDINGS, mlm_loss
from mobilekd.train.loop import Stage
from mobilekd.transfer.layer_inputs import LayerInputs
from mobilekd.transfer.layer_maps import map_problem
from mobilekd.transfer.losses import logit_distillation
from mobilekd.transfer.objectives import (Features, Match, check_matches, deepest, distilbert_matches, evaluate,
                                          lowest, minilm_matches, mobilebert_matches, projections_for, refuse,
                                          tinybert_matches)

# DistilBERT's loss weights and temperature: the README's training command (examples/research_projects/
# distillation/README.md: --alpha_ce 5.0 --alpha_mlm 2.0 --alpha_cos 1.0; train.py --temperature 2.0)
DISTILBERT = {"ce": 5.0, "mlm": 2.0, "cos": 1.0, "temperature": 2.0}
STRATEGY = "pkt"  # the paper's progressive knowledge transfer: `mobilekd distill`'s default
PD_ALPHA, PD_TEMPERATURE = 0.5, 1.0  # pre-training distillation's defaults (eq. 4 with the hard and soft MLM halved)


@dataclass(kw_only=True)
class TransferWeights:
    """Loss weights of the official MobileBERT config; mean/variance transfer are off by default."""

    fmt: float = field(default=100.0, metadata={"flag": "--fmt-weight", "help": "feature-map transfer weight"})
    at: float = field(default=1.0, metadata={"flag": "--at-weight", "help": "attention transfer weight"})
    mean: float = field(default=0.0, metadata={"flag": "--mean-weight",
                                               "help": "mean transfer weight (official: 5000; 0 = off)"})
    var: float = field(default=0.0, metadata={"flag": "--var-weight",
                                              "help": "variance transfer weight (official: 5; 0 = off)"})
    alpha: float | None = field(default=None, metadata={
        "type": float, "default_help": "0.5", "help": "PD: weight of the hard MLM loss, eq. (4); not under "
                                                       "--strategy distilbert, whose triple loss has its own weights"})
    temperature: float | None = field(default=None, metadata={
        "type": float, "default_help": "1 for PD, 2 under --strategy distilbert (DistilBERT's train.py)",
        "help": "distillation temperature of the MLM head's soft targets"})

    def for_strategy(self, strategy: str) -> "TransferWeights":
        """These weights as `strategy` trains with them (what its run records): its own defaults for alpha and
        temperature (`Strategy.defaults`: PD's 0.5 and 1, eq. 4; DistilBERT's temperature 2.0), and either flag
        refused in one line where the strategy has no use for it, rather than ignored."""
        declared = strategy_named(strategy).defaults
        for name in ("alpha", "temperature"):
            if getattr(self, name) is not None and name not in declared:
                raise UserError(f"--{name} is not used by --strategy {strategy} ({STRATEGIES[strategy].help}): "
                                f"drop --{name}")
        return dataclasses.replace(self, **{k: v if getattr(self, k) is None else getattr(self, k)
                                            for k, v in declared.items()})


@dataclass(kw_only=True)
class PlanSettings:
    layer_steps: int = field(default=60, metadata={
        "min": 1, "help": "steps of each layer-wise stage (PKT), or per layer of JKT's joint stage"})
    pd_steps: int = field(default=500, metadata={"min": 1, "help": "pre-training distillation steps"})
    lr: float = field(default=1e-3, metadata={"min": 0.0, "help": "peak learning rate"})
    layer_lr: float | None = field(default=None, metadata={
        "type": float, "default_help": "--lr", "help": "learning rate of the layer-wise stages"})
    warmup: float = field(default=0.1, metadata={"min": 0.0, "help": "warm-up fraction of each stage"})
    freeze: str = field(default="hard", metadata={
        "choices": ["hard", "soft"],
        "help": "PKT: hard (the paper, Section 4.3) trains only the current layer (and the embeddings in stage 0) "
                "and decays each stage linearly; soft (the official TF1 code) trains the current layer at 3x and "
                "those below at 0.3x, the embeddings and heads not at all, each stage warming up over 10%% and "
                "then staying near its peak (1 -> 0.9)"})
    weights: TransferWeights = field(default_factory=TransferWeights)
    teacher_bf16: bool = field(default=False, metadata={
        "help": "run the teacher under bf16 autocast even where the student trains in fp32 (where the student "
                "trains under bf16, --mixed-precision, the teacher does too)"})
    train_word_embeddings: bool = field(default=False, metadata={
        "help": "train the word-embedding table copied from the teacher; by default it stays the teacher's (the "
                "paper shares it), since on a small corpus Adam moves every row of the tied MLM decoder, seen or "
                "not, the same way each step"})
    keep_layer_inputs: bool = field(default=True, metadata={
        "help": "PKT and JKT: every stage rereads the same batches and starts from the layer inputs the stage before "
                "left (the teacher's, and the student's frozen blocks' in hard PKT), instead of running both models "
                "from their embeddings each time (mobilekd/transfer/layer_inputs.py); --no-keep-layer-inputs: "
                "each stage reads new batches and runs from the embeddings"})
    layer_inputs_gb: float | None = field(default=None, metadata={
        "type": float, "min": 0.0,
        "default_help": "a quarter of the memory available at start (the GPU's, where the teacher runs on one)",
        "help": "memory for kept layer inputs, in GiB; batches past it run from the embeddings"})

    def total_steps(self, n_layers: int) -> int:
        """Steps of every strategy's plan (equal by construction, so strategies compare at equal cost in steps)."""
        return n_layers * self.layer_steps + self.pd_steps


def check_pair(teacher: ModelConfig, student: ModelConfig, layer_map: list[int] | None,
               strategy: str = STRATEGY) -> list[int]:
    """Refuse a teacher/student that cannot be paired for the strategy's matches (every problem in one line);
    return the teacher layer for each student layer."""
    # widths and head counts, by the matches' own check (layer 0 of each will do for that)
    n, declared = student.num_hidden_layers, strategy_named(strategy)
    problems = check_matches(declared.matches([0], [0], teacher, student, TransferWeights()), teacher, student)
    if teacher.vocab_size != student.vocab_size:
        problems.append(f"vocabularies differ (teacher {teacher.vocab_size}, student {student.vocab_size})")
    if declared.no_layer_map:  # only the last layers meet
        if layer_map:
            problems.append(f"--layer-map does not apply to {strategy} ({declared.no_layer_map})")
        refuse(problems)
        return layer_map or []
    if layer_map is None:
        if teacher.num_hidden_layers != n:
            problems.append(f"depths differ (teacher {teacher.num_hidden_layers}, student {n}) and no --layer-map "
                            f"was given")
        layer_map = list(range(n))
    elif problem := map_problem(layer_map, teacher.num_hidden_layers, n):
        problems.append(problem)
    refuse(problems)
    return layer_map


def copy_shared_weights(teacher: torch.nn.Module, student: torch.nn.Module) -> list[str]:
    """Start the student's embeddings and pre-training heads from the teacher's (the paper shares them), as the
    official TF1 code does: by name, where shapes match (run_pretraining.py restores the teacher checkpoint's
    variables by name; TF2's distillation.py copies the embedding layer only).

    By name means a normalization is copied only into one of its kind: TF1 names NoNorm's variables
    differently from LayerNorm's, so a NoNorm student keeps NoNorm's initial values, as here. One departure: the
    NSP classifier is copied only between models whose pooled vectors are alike (both through the tanh pooler or
    both the raw [CLS]); TF1 would copy a classifier fitted to the teacher's tanh pooler onto a pooler-less
    student's [CLS]. And one addition: a student whose embedding has MobileBERT's dense lift where the teacher
    (BERT) has none, at equal widths and without the trigram, starts that lift at the identity, so its embedding
    computes what the teacher's does up to the normalization."""
    t_state, copied = teacher.state_dict(), []
    t_cfg, s_cfg = teacher.config, student.config
    same_norm = t_cfg.normalization_type == s_cfg.normalization_type
    same_pooler = t_cfg.classifier_activation == s_cfg.classifier_activation
    with torch.no_grad():
        for name, p in student.state_dict().items():
            if not name.startswith(("mobilebert.embeddings.", "cls.")):
                continue
            if name.startswith("mobilebert.embeddings.LayerNorm.") and not same_norm:
                continue
            if name.startswith("cls.seq_relationship.") and not same_pooler:
                continue
            if name in t_state and t_state[name].shape == p.shape:
                p.copy_(t_state[name])
                copied.append(name)
        lift = getattr(student.mobilebert.embeddings, "embedding_transformation", None)
        if (lift is not None and teacher.mobilebert.embeddings.embedding_transformation is None
                and not s_cfg.trigram_input and lift.in_features == lift.out_features
                and "mobilebert.embeddings.word_embeddings.weight" in copied):
            lift.weight.copy_(torch.eye(lift.out_features))
            lift.bias.zero_()
            copied += ["mobilebert.embeddings.embedding_transformation.weight (identity)"]
    return copied


def layer_index(name: str) -> int | None:
    """The block a parameter belongs to (a projection: its student layer); -1 for embeddings (and a projection
    of them), None for heads and pooler."""
    if name.startswith("mobilebert.embeddings.") or name.startswith("projections.embeddings."):
        return -1
    if name.startswith("mobilebert.encoder.layer."):
        return int(name.split(".")[3])
    if name.startswith("projections.L"):
        return int(name.split(".")[1][1:])
    return None


def available_memory(device: torch.device) -> int:
    """Bytes free where tensors computed on `device` are kept: the GPU's memory on a GPU, the host's otherwise."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


class Distiller:
    """The loss functions of every stage kind, over one teacher/student pair."""

    def __init__(self, teacher, layer_map: list[int], settings: PlanSettings, student_config: ModelConfig,
                 strategy: str = STRATEGY):
        settings = dataclasses.replace(settings, weights=settings.weights.for_strategy(strategy))
        self.teacher, self.layer_map, self.s, self.strategy = teacher.eval(), layer_map, settings, strategy
        # teachers of another width pair through learned projections of the student's feature maps
        self.projected = teacher.config.hidden_size != student_config.hidden_size
        self.student_config = student_config
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.inputs = None
        if settings.keep_layer_inputs and strategy_named(strategy).rereads:
            gb = settings.layer_inputs_gb
            self.inputs = LayerInputs(int(gb * 2 ** 30) if gb is not None else available_memory(
                next(teacher.parameters()).device) // 4)

    def projections(self) -> torch.nn.ModuleDict:
        """The projections the plan's matches need (none for equal widths), to train as the student's
        `projections` submodule: checkpointed and resumed with it, removed before it is saved."""
        every = self.layer_matches(list(range(self.student_config.num_hidden_layers)))
        return projections_for(every, self.teacher.config, self.student_config)

    def _teacher(self, batch, **kw):
        forced = torch.autocast(batch["input_ids"].device.type, dtype=torch.bfloat16) if self.s.teacher_bf16 else \
            contextlib.nullcontext()  # else the step's own autocast, if any
        with torch.no_grad(), forced:
            return self.teacher(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **kw)

    def _start(self, side: str, batch, first: int) -> dict:
        """Where `side` may start for a pass whose first needed block is `first`: the batch's kept input of a block
        at or below it (as `hidden`, `start_layer`), or from the embeddings ({})."""
        kept = self.inputs.get(side, batch, first) if self.inputs is not None else None
        return {} if kept is None else {"hidden": kept.hidden, "start_layer": kept.layer}

    def _keep(self, side: str, batch, layer: int, hidden: torch.Tensor) -> None:
        if self.inputs is not None:
            self.inputs.put(side, batch, layer, hidden)

    def layer_matches(self, layers: list[int]) -> list[Match]:
        """The strategy's layer-wise matches for these student layers (`Strategy.matches`), with this plan's
        weights."""
        return strategy_named(self.strategy).matches(self.layer_map, layers, self.teacher.config, self.student_config,
                                                 self.s.weights)

    def layer_terms(self, student, batch, matches: list[Match], depth: int | None = None,
                    frozen_below: int = 0) -> dict[str, torch.Tensor]:
        """The matches' terms, each logged on its own (`objectives.evaluate`).

        Both models run just deep enough for these matches, unless `depth` asks for more (the benchmark's
        naive baseline runs them at full depth), and without their heads: at full depth (PKT's last stage, JKT,
        TinyBERT) the MLM head would compute logits over the whole vocabulary at every position, for nothing. With kept layer inputs each starts at the kept input of the lowest
        block the matches read. `frozen_below` > 0 says the student's embeddings and blocks below it stay frozen
        for the rest of the run (hard PKT): with kept inputs they run as `_frozen_prefix`."""
        t_depth = max(self.layer_map[:depth]) + 1 if depth else deepest(matches, "teacher")
        s_depth = depth or deepest(matches, "student")
        t_out = self._teacher(batch, num_layers=t_depth, output_feature_maps=True, output_attentions=True,
                              heads=False, **self._start("teacher", batch, lowest(matches, "teacher"))).encoder
        self._keep("teacher", batch, t_depth, t_out.last_hidden_state)
        start = {}
        if frozen_below and self.inputs is not None:
            start = {"hidden": self._frozen_prefix(student, batch, frozen_below), "start_layer": frozen_below}
        s_out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], num_layers=s_depth,
                        output_feature_maps=True, output_attentions=True, heads=False, **start).encoder
        mask = batch["attention_mask"]
        return evaluate(matches, Features(t_out, attention_mask=mask), Features(s_out, attention_mask=mask),
                        getattr(_unwrap(student), "projections", None))

    def _frozen_prefix(self, student, batch, depth: int) -> torch.Tensor:
        """The input of student block `depth` through the student's frozen embeddings and blocks below it: without
        autograd and without dropout (a frozen block is a fixed function, so what it computes for an example can
        be kept), from the batch's kept input where there is one; kept for the next stage."""
        encoder = _unwrap(student).mobilebert
        training = encoder.training
        encoder.eval()
        try:
            with torch.no_grad():
                hidden = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], num_layers=depth,
                                 **self._start("student", batch, depth)).last_hidden_state
        finally:
            encoder.train(training)
        self._keep("student", batch, depth, hidden)
        return hidden

    def distilbert_terms(self, student, batch) -> dict[str, torch.Tensor]:
        """DistilBERT's triple loss (distiller.py, `Distiller.step`: `alpha_ce * loss_ce + alpha_mlm * loss_mlm +
        alpha_cos * loss_cos`), weights `DISTILBERT`, temperature the run's (DistilBERT's 2.0 unless --temperature
        says otherwise: `TransferWeights.for_strategy`), NSP dropped as DistilBERT drops it.

        Two departures: the soft-target KL covers the masked positions only (the official `--restrict_ce_to_mask`),
        not every non-padding token (its default), since our MLM head computes logits at masked positions only;
        and the masked positions are our pre-training data's (BERT's 15%, 80/10/10), not DistilBERT's sampling
        smoothed by token frequency (`prepare_batch_mlm`, `mlm_smoothing` 0.7)."""
        t = self._teacher(batch, masked_positions=batch["masked_positions"], output_feature_maps=True)
        out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"],
                      output_feature_maps=True)
        d, mask = DISTILBERT, batch["attention_mask"]
        cos = evaluate(self.layer_matches([]), Features(t.encoder, attention_mask=mask),
                       Features(out.encoder, attention_mask=mask))
        ce = logit_distillation(t.mlm_logits, out.mlm_logits, self.s.weights.temperature)
        mlm = mlm_loss(out.mlm_logits, batch)
        return {"loss": d["ce"] * ce + d["mlm"] * mlm + d["cos"] * cos["loss"], "kd_ce": ce.detach(),
                "mlm": mlm.detach(), "cos": cos["loss"].detach()}

    def pd_terms(self, student, batch) -> dict[str, torch.Tensor]:
        """Pre-training distillation, eq. (4): alpha * MLM + (1 - alpha) * KD on the MLM head, plus NSP."""
        depth = self.teacher.config.num_hidden_layers
        t_logits = self._teacher(batch, masked_positions=batch["masked_positions"],
                                 **self._start("teacher", batch, depth)).mlm_logits
        out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
        return self._pd(t_logits, out, batch)

    def _pd(self, t_logits, out, batch) -> dict[str, torch.Tensor]:
        mlm = mlm_loss(out.mlm_logits, batch)
        kd = logit_distillation(t_logits, out.mlm_logits, self.s.weights.temperature)
        nsp = F.cross_entropy(out.nsp_logits.float(), batch["nsp_labels"])
        alpha = self.s.weights.alpha
        return {"loss": alpha * mlm + (1 - alpha) * kd + nsp, "mlm": mlm.detach(), "mlm_kd": kd.detach(),
                "nsp": nsp.detach()}

    def akt_terms(self, student, batch, matches: list[Match]) -> dict[str, torch.Tensor]:
        """Layer-wise terms beside pre-training distillation, from one forward pass of each model (the layer-wise
        features and the MLM/NSP logits of the same pass)."""
        t = self._teacher(batch, masked_positions=batch["masked_positions"], output_feature_maps=True,
                          output_attentions=True)
        out = student(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"],
                      output_feature_maps=True, output_attentions=True)
        mask = batch["attention_mask"]
        layer = evaluate(matches, Features(t.encoder, attention_mask=mask), Features(out.encoder, attention_mask=mask),
                         getattr(_unwrap(student), "projections", None))
        pd = self._pd(t.mlm_logits, out, batch)
        return {**layer, **pd, "loss": layer["loss"] + pd["loss"], "transfer": layer["loss"].detach()}


def _unwrap(model):
    """The model inside a distributed wrapper (its submodules, e.g. the projections, are reached there)."""
    return getattr(model, "module", model)


def _encoder_only(name: str) -> bool:
    return layer_index(name) is not None


def _stage_info(matches: list[Match]) -> dict:
    """What a stage summary records of its objective: every match as data, under its term name."""
    return {"matches": [{"name": m.name, "site": m.site, **dataclasses.asdict(m)} for m in matches]}


def plan(strategy: str, distiller: Distiller, n_layers: int, shared: list[str] = ()) -> list[Stage]:
    """The strategy's stages; `shared` (the names `copy_shared_weights` copied) keeps the copied word-embedding
    table frozen in every stage unless the settings train it."""
    frozen = {WORD_EMBEDDINGS} if WORD_EMBEDDINGS in shared and not distiller.s.train_word_embeddings else set()
    return [_only_used_projections(st, frozen) for st in _plan(strategy, distiller, n_layers)]


def _only_used_projections(stage: Stage, frozen: set[str]) -> Stage:
    """A stage trains a projection only if its matches read through it (a parameter left without a gradient
    would stop a multi-process run: DDP expects every trained parameter to get one), and nothing in `frozen`."""
    sites = {f"projections.{m['site']}." for m in stage.info.get("matches", []) if m["projection"]}

    def trainable(name, base=stage.trainable):
        if name in frozen:
            return False
        if name.startswith("projections."):
            return base(name) and any(name.startswith(s) for s in sites)
        return base(name)

    return dataclasses.replace(stage, trainable=trainable)


def _plan(strategy: str, distiller: Distiller, n_layers: int) -> list[Stage]:
    stages = _stages(strategy, distiller, n_layers)
    # stages that keep layer inputs for the next read the same batches (`Stage.rereads`)
    return [dataclasses.replace(st, rereads=True) for st in stages] if distiller.inputs is not None else stages


def _stages(strategy: str, distiller: Distiller, n_layers: int) -> list[Stage]:
    return strategy_named(strategy).stages(distiller, n_layers, distiller.layer_matches(list(range(n_layers))))


def _pd_stage(d: Distiller) -> Stage:
    return Stage(name="pd", steps=d.s.pd_steps, loss=d.pd_terms, lr=d.s.lr, warmup=d.s.warmup)


def _akt(d: Distiller, n_layers: int, every: list[Match]) -> list[Stage]:
    return [Stage(name="akt", steps=d.s.total_steps(n_layers), loss=lambda m, b: d.akt_terms(m, b, every),
                  lr=d.s.lr, warmup=d.s.warmup, info=_stage_info(every))]


def _jkt(d: Distiller, n_layers: int, every: list[Match]) -> list[Stage]:
    joint = Stage(name="jkt", steps=n_layers * d.s.layer_steps, loss=lambda m, b: d.layer_terms(m, b, every),
                  trainable=_encoder_only, lr=d.s.layer_lr or d.s.lr, warmup=d.s.warmup, info=_stage_info(every))
    return [joint, _pd_stage(d)]


def _pkt(d: Distiller, n_layers: int, every: list[Match]) -> list[Stage]:
    return [_pkt_stage(d, l, d.s, d.s.layer_lr or d.s.lr) for l in range(n_layers)] + [_pd_stage(d)]


def _distilbert(d: Distiller, n_layers: int, every: list[Match]) -> list[Stage]:
    # what the loss reaches: embeddings, encoder and MLM head (no NSP, hence no pooler)
    return [Stage(name="distilbert", steps=d.s.total_steps(n_layers), loss=d.distilbert_terms, lr=d.s.lr,
                  warmup=d.s.warmup, info=_stage_info(every),
                  trainable=lambda name: _encoder_only(name) or name.startswith("cls.predictions."))]


def _layer_matching(name: str, trainable=None):
    """One stage of layer-wise matches alone at the plan's total steps, no pre-training loss, so no head trains
    (TinyBERT's general_distill.py; MiniLM, Section 3.1)."""
    def stages(d: Distiller, n_layers: int, every: list[Match]) -> list[Stage]:
        return [Stage(name=name, steps=d.s.total_steps(n_layers), lr=d.s.lr, warmup=d.s.warmup,
                      loss=lambda m, b: d.layer_terms(m, b, every), info=_stage_info(every),
                      trainable=trainable(d.student_config) if trainable else _encoder_only)]
    return stages


def _up_to_last_attention(config: ModelConfig):
    """What MiniLM's loss reaches: the embeddings, every block below the last, and in the last block what feeds
    its attention's queries, keys and values: the attention's own projections and, in a MobileBERT block, the
    bottleneck they read (`blocks.Bottleneck`: Q and K from the shared one, or Q, K and V all from the input
    bottleneck in MobileBERT_TINY's block). The rest of the last block gets no gradient, so it does not train (nor
    would DDP let it)."""
    last = config.num_hidden_layers - 1
    feeds = [".attention.self."]
    if config.use_bottleneck and config.use_bottleneck_attention:
        feeds.append(".bottleneck.input.")
    elif config.use_bottleneck and config.key_query_shared_bottleneck:
        feeds.append(".bottleneck.attention.")

    def trainable(name: str) -> bool:
        idx = layer_index(name)
        if idx is None or name.startswith("projections."):
            return False
        return idx < last or any(f in name for f in feeds)
    return trainable


@dataclass(frozen=True)
class Strategy:
    """A task-agnostic distillation method, declared in one place.

    `matches(layer_map, layers, teacher, student, weights)`: its layer-wise `Match`es for these student layers
    (what `check_pair` checks a pair against, what `projections_for` sizes); `stages(distiller, n_layers,
    every)`: its plan, given the matches of every layer; `defaults`: its alpha and temperature (a flag it has no
    entry for is refused); `rereads`: its stages reread one batch sequence, so layer inputs can be kept;
    `no_layer_map`: why --layer-map does not apply, where only the last layers meet."""

    name: str
    help: str
    matches: Callable[[list[int], list[int], ModelConfig, ModelConfig, TransferWeights], list[Match]]
    stages: Callable[[Distiller, int, list[Match]], list[Stage]]
    defaults: dict = field(default_factory=dict)
    rereads: bool = False
    no_layer_map: str | None = None


def _mobilebert(layer_map, layers, teacher, student, w):
    return mobilebert_matches(layer_map, layers, fmt=w.fmt, at=w.at, mean=w.mean, var=w.var,
                              projection=teacher.hidden_size != student.hidden_size)


PD_DEFAULTS = {"alpha": PD_ALPHA, "temperature": PD_TEMPERATURE}
# TinyBERT's plan has no PD stage; it keeps PD's defaults (and accepts the flags) as it did before the registry, so
# that its runs record what they always have and resume
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("akt", "MobileBERT's auxiliary knowledge transfer", _mobilebert, _akt, PD_DEFAULTS),
    Strategy("jkt", "MobileBERT's joint knowledge transfer", _mobilebert, _jkt, PD_DEFAULTS, rereads=True),
    Strategy("pkt", "MobileBERT's progressive knowledge transfer", _mobilebert, _pkt, PD_DEFAULTS, rereads=True),
    Strategy("distilbert", f"DistilBERT's triple loss, fixed weights: ce {DISTILBERT['ce']:g}, mlm "
                           f"{DISTILBERT['mlm']:g}, cos {DISTILBERT['cos']:g}",
             lambda lm, ls, t, s, w: distilbert_matches(t.num_hidden_layers, s.num_hidden_layers), _distilbert,
             {"temperature": DISTILBERT["temperature"]},
             no_layer_map="its one match pairs the last layers; the student's layers come from `mobilekd init "
                          "TEACHER OUT --layers spread:K`"),
    Strategy("tinybert", "TinyBERT's general distillation", lambda lm, ls, t, s, w: tinybert_matches(lm, ls),
             _layer_matching("tinybert"), PD_DEFAULTS),
    Strategy("minilm", "MiniLM's deep self-attention distillation",
             lambda lm, ls, t, s, w: minilm_matches(t.num_hidden_layers, s.num_hidden_layers),
             _layer_matching("minilm", _up_to_last_attention),
             no_layer_map="its matches pair the last layers alone, at any depth"),
)}


def _pkt_stage(distiller: Distiller, l: int, s: PlanSettings, lr: float) -> Stage:
    matches = distiller.layer_matches([l])
    common = dict(name=f"pkt_L{l}", steps=s.layer_steps, lr=lr, info=_stage_info(matches))
    if s.freeze == "hard":
        # The paper's PKT: the layers below are frozen. Layer 0's stage also trains the embeddings.
        def current(name):
            return layer_index(name) == l or (l == 0 and layer_index(name) == -1)

        return Stage(trainable=current, warmup=s.warmup,
                     loss=lambda m, b: distiller.layer_terms(m, b, matches, frozen_below=l), **common)
    common["loss"] = lambda m, b: distiller.layer_terms(m, b, matches)

    # The official TF1 code (mobilebert/distill_util.py, `layer_wise_learning_rate`): layer l at 3x the
    # background rate, the layers below at 0.3x, those above, the embeddings and the heads at 0 (not trained);
    # the background rate of each phase (`get_background_lr`) is min(linear warm-up over the first 10%,
    # polynomial decay 1 -> 0.9 with power 0.5). Here the decay starts after the warm-up (transformers'
    # polynomial schedule), not at step 0: at 10% of a phase TF1's factor is 0.995, ours 1.
    def trainable(name):
        idx = layer_index(name)
        return idx is not None and 0 <= idx <= l

    def scale(name):
        return 3.0 if layer_index(name) == l else 0.3

    return Stage(trainable=trainable, lr_scale=scale, warmup=0.1, decay_to=0.9, decay_power=0.5, **common)


def strategy_named(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}: choose from {', '.join(STRATEGIES)}")
    return STRATEGIES[name]
