"""Fine-tune and evaluate a model directory on GLUE, SQuAD or your own data, optionally with task-specific
distillation from a fine-tuned teacher (Hinton's logit KD; TinyBERT's prediction-layer loss).

    scripts/finetune.sh --model runs/demo/student --task sst2                  # shipped SST-2
    scripts/finetune.sh --model M --task sst2 --teacher runs/sst2-teacher      # + task distillation
    scripts/finetune.sh --model runs/bert3 --task mrpc --teacher T --method pkd-skip   # BERT-PKD
    scripts/finetune.sh --model runs/tiny4 --task rte --teacher T --method tinybert --augment 30 \\
        --augment-model runs/teacher                                           # TinyBERT, augmented data
    scripts/finetune.sh --model M --task squad2 --data my_squad_dir            # train.json + dev.json
    scripts/finetune.sh --model M --task custom --data my_dir                  # train/dev .csv or .jsonl
    scripts/finetune.sh --model M --task cola --eval-only
    accelerate launch -m mobilekd.recipes.finetune --model M --task mnli --data glue/MNLI ...

Defaults per task (mobilekd.data.tasks.DEFAULTS: the paper's for SQuAD, BERT's usual choice for GLUE) are listed
below. The best checkpoint by the task's first metric on a validation split carved from the training data
(mobilekd.finetune.selection: seeded, stratified, its rule in results.json) is kept in OUT, and only then is the
dev set read, once, to score it: the dev score is not a maximum over checkpoints. (--select-on dev picks the step
on dev itself, as runs before the protocol did; that score is optimistic.) results.json has the dev and validation
metrics and, for classification and regression, a TF-IDF bag-of-words baseline trained on the same examples.
"""

from __future__ import annotations

import argparse
import math
import textwrap
import time
from pathlib import Path

import numpy as np
import torch

from mobilekd.data.tasks import (default_lr, defaults_text, encode_classification, encode_qa, load_task, task_data,
                                 training_subset)
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import read_json, timed, write_json
from mobilekd.flags import add_flags, take_flags
from mobilekd.finetune.baseline import bag_of_words_baseline, majority_baseline
from mobilekd.finetune.evaluation import (DevEvaluator, build_model, chosen_by, model_labels, require_labels,
                                         score_once)
from mobilekd.data.augment import augmented
from mobilekd.data.candidate_store import RECORD_KEYS
from mobilekd.finetune.config import FinetuneConfig, check, fill_defaults
from mobilekd.finetune.objective import Distillation, intermediate_loss, task_loss
from mobilekd.finetune.selection import VALIDATION, carve
from mobilekd.finetune.teacher_features import teacher_store
from mobilekd.finetune.teacher_outputs import foreign_outputs, outputs_precision, teacher_outputs
from mobilekd.models.config import ModelConfig
from mobilekd.models.foreign import ForeignEncoder, ForeignTeacher, layer_matching_refusal, load_foreign_teacher, \
    model_type, tokenizer_problem
from mobilekd.models.hf import load_config, load_pretrained
from mobilekd.models.kinds import kind_of
from mobilekd.models.pretrained import model_dir
from mobilekd.rundir import teacher_record
from mobilekd.transfer.layer_maps import layer_map, parse_layer_map
from mobilekd.transfer.objectives import (Match, check_matches, mobilebert_matches, pkd_matches, projections_for,
                                          refuse, tinybert_matches)
from mobilekd.transfer.strategies import layer_index
from mobilekd.train.common import PRECISION_FILE, add_training_flags, run_owned, train_config
from mobilekd.train.loop import Stage, checkpointed_seconds, run_plan, wall_seconds
from mobilekd.train.precision import describe, pass_flag, pass_setting


def parse_args(argv=None):
    """The parsed flags: the training loop's (`add_training_flags`) on the namespace, the recipe's own as one
    `FinetuneConfig` in its `recipe`, checked and with the task's and the method's defaults filled in."""
    description = __doc__ + "\n" + textwrap.fill(f"Defaults: {defaults_text()}.", 115)
    p = argparse.ArgumentParser(prog="mobilekd finetune", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, FinetuneConfig)
    add_training_flags(p, out="runs/finetune", batch_size=32, optimizer="adamw", with_seq_len=False)
    args = p.parse_args(argv)
    c = take_flags(FinetuneConfig, args)
    # a packaged checkpoint by name (all-minilm-l6-v2), as init, train-teacher and ship take it
    c.model = str(model_dir(c.model))
    c.teacher = c.teacher and str(model_dir(c.teacher))
    train_config(args)  # bad training flags are refused before any work
    args.recipe = fill_defaults(check(c))
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    c = args.recipe  # the recipe's settings (FinetuneConfig); args holds the training loop's
    data = task_data(c.task, c.data)
    task = load_task(c.task, data, c.eval_only, c.regression,
                     model_labels(c.model) if c.eval_only and not c.regression else None)
    tokenizer = load_tokenizer(c.model)
    foreign = foreign_teacher(c, task, tokenizer) if c.teacher and kind_of(c.teacher).name == "foreign" \
        else None
    if c.teacher and task.head != "qa" and foreign is None:  # before any work: an untrained head would be
        require_labels(c.teacher, "teacher")                  # distilled silently
    model = build_model(c.model, task, classifier_dropout=None if c.eval_only else c.classifier_dropout)
    fresh_pooler = not (c.eval_only or c.keep_pooler) and task.head == "classification"
    if fresh_pooler and load_config(c.model)[1] != "classification":  # a pre-trained model, not a classifier yet
        model.mobilebert.pooler.reset()
    if c.dropout is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = c.dropout
    if c.max_len > model.config.max_position_embeddings:
        raise UserError(f"--max-len {c.max_len} exceeds the model's {model.config.max_position_embeddings} "
                        f"positions ({c.model})")
    model.to(accelerator.device)
    out = Path(args.out)
    if c.lr is None and not c.eval_only:
        params = sum(p.numel() for p in model.parameters())
        c.lr = default_lr(c.task, params)
        print(f"--lr not given: {c.lr:g} for a model of {params / 1e6:.1f}M parameters (see --help)")

    def encode(examples):
        if task.head == "qa":
            return encode_qa(examples, tokenizer, c.max_len, c.stride)
        return encode_classification(task, examples, tokenizer, c.max_len), None

    identity = {"model": str(c.model), "task": task.name, "data": str(data), "regression": c.regression}
    start = time.time()
    train_examples, carved = task.train, None
    if not c.eval_only:
        train_examples = training_subset(train_examples, c.max_train_examples,
                                         args.seed if c.subset_seed is None else c.subset_seed)
    if not c.eval_only and c.select_on == "validation":  # it picks the checkpoint and never trains
        carved = carve(task, train_examples, args.seed, c.validation_fraction)
        train_examples = carved.train
        print(f"validation split: {carved.record['size']} of {carved.record['size'] + carved.record['train_size']} "
              f"training examples held out ({carved.record['rule']}); dev is read once, after training, to score "
              f"the model chosen")
    splits = ({VALIDATION: carved.validation} if carved else {} if c.select_on == "none" and not c.eval_only
              else dict(task.dev))  # none: nothing is scored before the last step's model is kept
    augment_pass, shared = None, {}  # shared: the augmented set's and the teacher's outputs' records (`Made.record`)
    if not c.eval_only and c.augment:
        if task.head == "qa":
            raise UserError("--augment (TinyBERT's) works on sentence tasks, not on SQuAD")
        if not (Path(c.augment_model) / "model.safetensors").is_file():
            raise UserError(f"{c.augment_model}: no model here (model.safetensors) for --augment-model")
        n = len(train_examples)
        (train_examples, made, augment_pass), got = timed(lambda: augmented(
            train_examples, Path(c.augment_model), c.augment, c.augment_seed, Path(args.cache_dir),
            load=_mlm_model, flag=pass_flag(args, "augment_precision"),
            precision_cache=Path(args.cache_dir) / PRECISION_FILE))
        stored = {k: augment_pass[k] for k in RECORD_KEYS if k in augment_pass}
        shared = {**made.record(got), **stored}
        print(f"augmented: {n} -> {len(train_examples)} training examples" + (" (cached)" if made.cached else "") +
              f"; the masked-LM pass {describe(augment_pass)}" +
              (f"; word candidates of {stored['candidates_stored_share']:.0%} of its "
               f"{stored['candidate_sentences']} sentences read from the store, "
               f"{stored['candidates_computed']} computed here" if stored else ""))
    dev = {name: (examples, *encode(examples)) for name, examples in splits.items()}
    evaluator = DevEvaluator(task, dev, out, tokenizer, save_model=not c.eval_only)
    if c.eval_only:
        print(f"{task.name}: {evaluator(model, 0, {**identity, 'steps': 0})}")
        return
    train_split, _ = encode(train_examples)
    if task.head == "classification" and "labels" not in train_split.arrays:
        raise UserError(f"{data}: the training split has unlabelled rows")
    steps_per_epoch = math.ceil(len(train_split) / args.batch_size)
    steps = c.max_steps or max(1, round(c.epochs * steps_per_epoch))
    if c.patience_weight and task.head != "classification":
        raise UserError(f"--patience-weight (BERT-PKD) needs a classification or regression task, not {task.name}")
    teacher = None if foreign or not c.teacher else \
        build_model(c.teacher, task, "teacher").to(accelerator.device).eval()
    outputs_pass, foreign_layers = None, None
    if foreign is not None:  # its logits, read through its own tokenizer (its layers: below)
        foreign.model.to(accelerator.device)
        (outputs, made), got = timed(lambda: foreign_outputs(c.teacher, foreign, train_examples, c.max_len))
        shared = {**shared, **made.record(got, "outputs")}
        train_split.arrays.update(outputs)
        print(f"teacher outputs ({foreign.model_type}, through its own tokenizer) over {len(train_split)} training "
              f"examples: " + ("from the cache" if made.cached else "computed and cached"))
        # its layers, for the intermediate step's matches; else its logits are all it gives, and it is let go
        foreign_layers = ForeignEncoder(foreign.model).eval() if c.intermediate else None
        foreign.model = None
    if teacher is not None and task.head != "qa":
        outputs_pass = outputs_precision(teacher, train_split, pass_flag(args, "teacher_outputs_precision"),
                                         Path(args.cache_dir) / PRECISION_FILE)
        (outputs, made), got = timed(lambda: teacher_outputs(c.teacher, teacher, train_split,
                                                             precision=outputs_pass["precision"]))
        shared = {**shared, **made.record(got, "outputs")}
        train_split.arrays.update(outputs)
        print(f"teacher outputs over {len(train_split)} training examples: " +
              ("from the cache" if made.cached else "computed and cached") +
              f"; the teacher's pass {describe(outputs_pass)}")
    kd = Distillation(c.alpha, c.temperature, c.kd_reduction) if foreign else None
    if teacher is not None:
        kd = Distillation(c.alpha, c.temperature, c.kd_reduction,
                          patience_matches(c, teacher.config, model.config) if c.patience_weight else [])
    stages = []
    if c.intermediate:
        stages, stored = intermediate_stages(c, teacher or foreign_layers, model, train_split, steps_per_epoch,
                                             outputs_pass["precision"] if outputs_pass else "no")
        shared = {**shared, **stored}
    stages.append(Stage(name="finetune", steps=steps, loss=task_loss(task, teacher, kd), lr=c.lr,
                        warmup=c.warmup, trainable=lambda name: not name.startswith("projections.")))
    cfg = train_config(args, eval_every=steps_per_epoch if c.eval_every is None else c.eval_every,
                       run={"model": str(c.model), "task": task.name, "teacher": c.teacher, "lr": c.lr,
                            "max_len": c.max_len, "alpha": c.alpha, "temperature": c.temperature,
                            "classifier_dropout": c.classifier_dropout, "keep_pooler": c.keep_pooler,
                            "train_examples": len(train_split), "method": c.method,
                            "kd_reduction": c.kd_reduction, "patience_weight": c.patience_weight,
                            "patience_layers": c.patience_layers, "intermediate": c.intermediate,
                            "intermediate_epochs": c.intermediate_epochs, "augment": c.augment,
                            "augment_model": c.augment_model, "subset_seed": c.subset_seed,
                            "select_on": c.select_on,
                            "validation_fraction": c.validation_fraction if carved else None,
                            "augment_precision": pass_setting(augment_pass),
                            "teacher_outputs_precision": pass_setting(outputs_pass)})
    # the teacher that taught it, restated at the end (a resumed run's best, and so its results, may be older)
    taught = teacher_record(c.teacher, task.name) if c.teacher else {}
    extra = {**identity, "method": c.method, "teacher": c.teacher, "steps": sum(st.steps for st in stages),
             "train_examples": len(train_split),
             "selected_on": VALIDATION if carved else "none (the last step)" if c.select_on == "none" else
             next(iter(task.dev)),
             **({"validation_split": carved.record} if carved else {}), "lr": c.lr,
             **({"teacher_outputs_precision": outputs_pass["precision"]} if outputs_pass else {}),
             **({"augment_precision": augment_pass["precision"]} if augment_pass else {}),
             **taught, **shared}

    warm = sum(st.steps for st in stages[:-1])  # the intermediate steps, which train no classifier
    before = checkpointed_seconds(out) if args.resume else 0.0  # a resumed run's history goes on from its clock

    def on_eval(m, step):
        if step <= warm < steps + warm:  # TinyBERT's step 1 trains no classifier: models are picked in step 2
            return
        evaluator(m, step, {**extra, "wall_seconds": round(time.time() - start + before, 1)})

    summaries = run_plan(stages, model, train_split, cfg, accelerator, resume=args.resume, on_eval=on_eval)
    if accelerator.is_main_process:
        # training and selection, this process's and (a resumed run) the earlier ones' its checkpoint carried; dev's
        # one scoring is not a training cost
        wall = wall_seconds(start, summaries)
        result = read_json(out / "results.json")
        if c.skip_dev:
            result["dev_scored"] = "never (--skip-dev)"
        elif c.select_on != "dev":  # every choice is made: now, and only now, dev is read and scored once
            dev_metrics = score_once(task, out, tokenizer, encode, accelerator.device)
            result["metrics"] = {**dev_metrics, **{k: v for k, v in result["metrics"].items() if k == VALIDATION}}
            result["dev_scored"] = f"once, the model {'chosen on validation' if carved else 'of the last step'}"
            if not carved:  # the score the kept model is known by
                result["best_score"] = next(iter(dev_metrics.values()), {}).get(result["best_metric"])
        dev_examples = [] if c.skip_dev else next(iter(task.dev.values()))
        baseline = majority = None  # what a bag of words and a constant answer score on the same examples
        if dev_examples and task.head == "classification" and all(e.label is not None for e in dev_examples):
            baseline = bag_of_words_baseline(task, train_examples, dev_examples, args.seed)
            majority = majority_baseline(task, train_examples, dev_examples)
        result.update(wall_seconds=wall, complete=True, training=summaries, baseline=baseline, majority=majority,
                      **taught, **shared)
        write_json(out / "results.json", result)
        metric = result["best_metric"]
        dev_score = None if c.skip_dev else result["metrics"].get(next(iter(task.dev)), {}).get(metric)
        chosen_on, best = chosen_by(result)  # MRPC's checkpoint: the best mean of F1 and accuracy
        chosen = (f"the last step's model ({extra['steps']} steps)" if c.select_on == "none" else
                  f"best {chosen_on} {best:.4f} on {result['selected_on']} at step {result['best_step']} "
                  f"of {extra['steps']}")
        print(f"{task.name}: {chosen}; model in {out}" +
              (f"; its dev {metric} {dev_score:.4f}" if c.select_on != "dev" and dev_score is not None else "") +
              (f"; bag-of-words baseline ({baseline['method']}, same training examples) "
               f"{baseline['metrics'][metric]:.4f}" if baseline else "") +
              (f"; the majority class {majority['metrics'][metric]:.4f}" if majority else ""))


def _mlm_model(model_dir):
    """The augmentation's candidate model: a pre-trained model with its MLM head, and its tokenizer."""
    return load_pretrained(model_dir, "pretraining", require_head=True), load_tokenizer(model_dir)


def foreign_teacher(c: FinetuneConfig, task, tokenizer) -> ForeignTeacher:
    """A transformers classifier of another architecture as `--teacher` (`mobilekd.models.foreign`), refused
    before any work where the task or the method needs more than it gives (logits, hidden states, attentions), or
    where a method matching layers has a student that does not read the teacher's tokenizer (the student's is
    `tokenizer`)."""
    if task.head == "qa":
        raise UserError(f"{c.teacher}: a transformers {model_type(c.teacher)} teacher is read as a sequence "
                        f"classifier; SQuAD needs a BERT-family teacher")
    if c.patience_weight:
        raise UserError(layer_matching_refusal(c.teacher, "BERT-PKD's patience loss"))
    foreign = load_foreign_teacher(c.teacher, task, c.max_len, layers=bool(c.intermediate))
    if c.intermediate:  # matched token by token: the student must read the teacher's tokens
        problem = tokenizer_problem(c.model, tokenizer, c.teacher, foreign.tokenizer)
        if problem:
            raise UserError(problem)
    return foreign


def patience_matches(c: FinetuneConfig, teacher: ModelConfig, student: ModelConfig) -> list[Match]:
    """BERT-PKD's patience matches for this pair (--patience-layers: a rule or the teacher layers)."""
    n, m = teacher.num_hidden_layers, student.num_hidden_layers
    if m < 2:
        raise UserError("--patience-weight: a 1-layer student has no layer below its last to learn patiently")
    layers = parse_layer_map(c.patience_layers, n, m)
    if len(layers) != m - 1:
        raise UserError(f"--patience-layers needs {m - 1} teacher layers (one per student layer but the last), "
                        f"got {layers}")
    matches = pkd_matches(layers, c.patience_weight)
    refuse(check_matches(matches, teacher, student))
    return matches


def intermediate_stages(c: FinetuneConfig, teacher, model, train_split, steps_per_epoch: int, precision: str) -> \
        tuple[list[Stage], dict]:
    """The intermediate step of `c.intermediate`, for --intermediate-epochs (default --epochs) in all, through
    projections trained here and never saved, at a constant learning rate without warm-up (TinyBERT's official
    schedule 'none'); the classifier does not train.

    tinybert: TinyBERT's step 1 (task_distill.py without --pred_distill), one stage of embedding, attention-score
    and hidden-state matches against the fine-tuned teacher, uniform layer map.
    pkt: MobileBERT's progressive knowledge transfer (paper, Section 4.3, eq. 2-3: `mobilebert_matches`) against the
    fine-tuned teacher over the task's examples, one stage per student layer l trained alone (and the embeddings
    in stage 0), the layers below it frozen, as the paper's task-agnostic PKT does over its corpus; the epochs
    split evenly over the stages, the uniform layer map where depths differ.

    The teacher's features come from its store over `train_split` (`teacher_features.teacher_store`, built in
    `precision` at the first run and read by the next), or from running it where the store is refused; the
    record (second value) says which."""
    n, m = teacher.config.num_hidden_layers, model.config.num_hidden_layers
    mapped = layer_map("uniform", n, m)
    if c.intermediate == "pkt":
        matches = mobilebert_matches(mapped, list(range(m)),
                                     projection=teacher.config.hidden_size != model.config.hidden_size)
    else:  # a transformers encoder of another architecture gives attention probabilities, not scores
        matches = tinybert_matches(mapped, list(range(m)), scores=not isinstance(teacher, ForeignEncoder))
    refuse(check_matches(matches, teacher.config, model.config))
    device = next(model.parameters()).device
    model.add_module("projections", projections_for(matches, teacher.config, model.config).to(device))
    steps = max(1, round((c.epochs if c.intermediate_epochs is None else c.intermediate_epochs)
                         * steps_per_epoch))
    common = dict(lr=c.lr, warmup=0.0, decay_to=1.0)
    (store, record), got = timed(lambda: teacher_store(c.teacher, teacher, train_split, matches, precision,
                                                       c.teacher_store_gb))
    record["teacher_store_seconds"] = got
    if store is not None:
        train_split.arrays["example_index"] = np.arange(len(train_split))
        print(f"teacher store {store.folder} ({record['teacher_store_bytes'] / 1e9:.2f} GB, {precision}): "
              f"{record['teacher_store_hit_rate']:.0%} of the training examples were stored" +
              (f", the others added in {got:.0f} s" if record["teacher_store_hit_rate"] < 1 else ""))
    if c.intermediate != "pkt":
        return [Stage(name="intermediate", steps=steps, loss=intermediate_loss(teacher, matches, store), **common,
                      trainable=lambda name: name.startswith(("mobilebert.embeddings.", "mobilebert.encoder.",
                                                              "projections.")),
                      info={"matches": [x.name for x in matches]})], record

    def stage(l: int) -> Stage:
        mine = [x for x in matches if x.student_layer == l]

        def trainable(name, l=l):
            return layer_index(name) == l or (l == 0 and layer_index(name) == -1)  # projections.L{l}: layer l

        return Stage(name=f"intermediate_L{l}", steps=max(1, round(steps / m)),
                     loss=intermediate_loss(teacher, mine, store), trainable=trainable, **common,
                     info={"matches": [x.name for x in mine]})

    return [stage(l) for l in range(m)], record


if __name__ == "__main__":
    main()
