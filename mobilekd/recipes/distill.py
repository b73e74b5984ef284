"""Distill a teacher (an IB-BERT, or a BERT adapted by train_teacher.sh --init-from) into a MobileBERT student:
layer-wise knowledge transfer (feature maps and attention) then pre-training distillation, by the AKT, JKT or PKT
strategy (MobileBERT paper, Section 4). A teacher of another width pairs through learned projections of the
student's feature maps (TinyBERT's W_h; trained here, never saved with the student), one of more attention heads
through grouped heads (`mobilekd.transfer.objectives.group_heads`), one of another depth through --layer-map.

    scripts/pkt_distill.sh --teacher runs/teacher                       # demo: PKT into mobilebert_h384
    scripts/pkt_distill.sh --teacher runs/ib_teacher --student demo_student      # the from-scratch demo pair
    scripts/pkt_distill.sh --teacher T --student mobilebert --layer-steps 24000 --pd-steps 500000 ...
    scripts/pkt_distill.sh --teacher runs/teacher --compare akt,jkt,pkt # the paper's ablation, equal steps
    mobilekd init runs/teacher runs/bert3 --layers spread:3             # DistilBERT: a 3-layer student of the
    scripts/pkt_distill.sh --teacher runs/teacher --student runs/bert3 --strategy distilbert  # teacher's layers
    scripts/pkt_distill.sh --teacher runs/teacher --student tinybert4_h156 --strategy tinybert --layer-map uniform
    scripts/pkt_distill.sh --teacher runs/teacher --student runs/bert3 --strategy minilm  # last layers' relations
    accelerate launch -m mobilekd.recipes.distill --teacher T ...      # GPUs, DDP
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import atomic_path, write_json
from mobilekd.models.heads import MobileBertForPreTraining, pretraining_loss
from mobilekd.models.hf import load_config, load_pretrained, save_pretrained
from mobilekd.models.presets import PRESETS, get_preset
from mobilekd.flags import add_flags, from_flags, take_flags
from mobilekd.train.common import add_training_flags, run_owned, train_config
from mobilekd.transfer.config import DistillConfig
from mobilekd.train.evaluate import evaluate_pretraining
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.transfer.inherit import check_inheritable, inherit
from mobilekd.transfer.layer_maps import parse_layer_map
from mobilekd.transfer.strategies import (STRATEGIES, Distiller, PlanSettings, TransferWeights, check_pair,
                                          copy_shared_weights, plan)


def parse_args(argv=None):
    """The parsed flags: the plan's and the training loop's on the namespace (the plan's as `settings`), the recipe's
    own as one `DistillConfig` in its `recipe`; every setting checked before any work."""
    p = argparse.ArgumentParser(prog="mobilekd distill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, DistillConfig)
    add_flags(p, PlanSettings)
    add_flags(p, TransferWeights)
    add_training_flags(p, out="runs/student", batch_size=32, seq_len=64, optimizer="adamw")
    args = p.parse_args(argv)
    args.recipe = take_flags(DistillConfig, args)
    args.settings = from_flags(PlanSettings, args, weights=from_flags(TransferWeights, args))  # refused here if bad
    for strategy in asked(args):
        if strategy in STRATEGIES:  # a weight a strategy has no use for is refused before any work
            args.settings.weights.for_strategy(strategy)
    train_config(args)  # so are bad training flags
    if args.recipe.inherit:
        check_inherit(args)
    return args


def asked(args) -> list[str]:
    """The strategies a run names: --strategy, then --compare's."""
    return [args.recipe.strategy, *(s.strip() for s in (args.recipe.compare or "").split(",") if s.strip())]


def check_inherit(args) -> None:
    """Refuse, before OUT is made, an --inherit this run could not honour: a student directory (started already),
    a teacher/student pair the start is not defined for, or a strategy with no teacher layer for each student block
    (DistilBERT's and MiniLM's, whose matches read the last layers alone)."""
    c = args.recipe
    if Path(c.student).is_dir():
        raise UserError(f"--inherit starts a preset; --student {c.student} is a directory (start it with `mobilekd "
                        "init PRESET OUT --from-teacher TEACHER`, or give the preset)")
    teacher, student = load_config(c.teacher)[0], get_preset(c.student).config
    check_inheritable(teacher, student)
    mapped = parse_layer_map(c.layer_map, teacher.num_hidden_layers, student.num_hidden_layers)
    for strategy in asked(args):
        if strategy != "scratch" and len(check_pair(teacher, student, mapped, strategy)) != student.num_hidden_layers:
            raise UserError(f"--inherit needs a teacher layer for each student block; --strategy {strategy} maps "
                            "none (its matches read the last layers alone)")


def distill(args, strategy: str, out: Path, accelerator, data, tokenizer, teacher_dir: Path) -> dict:
    """One strategy (or 'scratch') from the teacher directory into a fresh student (or the --student directory's
    model); returns its summary."""
    student = student_model(args.recipe.student, args.recipe.masked_score)
    config = student.config
    n_layers = config.num_hidden_layers
    settings = dataclasses.replace(  # scratch records PD's defaults, as it always has (it reads none of them)
        args.settings, weights=args.settings.weights.for_strategy("pkt" if strategy == "scratch" else strategy))
    w = settings.weights  # as this strategy trains with them, so its summary records what was used
    run = {"student": config.to_dict(), "teacher": str(teacher_dir), "seq_len": args.seq_len, "data": data.path.name,
           "strategy": strategy, "freeze": settings.freeze, "lr": settings.lr, "layer_lr": settings.layer_lr,
           "alpha": w.alpha, "temperature": w.temperature, "layer_map": args.recipe.layer_map,
           "weights": [w.fmt, w.at, w.mean, w.var], "train_word_embeddings": settings.train_word_embeddings,
           # the examples the start was fitted over; None without --inherit, as runs before the flag
           "inherit": args.recipe.inherit_examples if args.recipe.inherit and strategy != "scratch" else None}
    cfg = train_config(args, out_dir=out, run=run)
    distiller, inherited = None, None
    if strategy == "scratch":
        if Path(args.recipe.student).is_dir():  # from random weights, even when --student is a directory
            student = MobileBertForPreTraining(config)
        stages = [Stage(name="scratch", steps=settings.total_steps(n_layers), loss=pretraining_loss, lr=settings.lr,
                        warmup=settings.warmup)]
        copied = []
    else:
        teacher = load_pretrained(teacher_dir, "pretraining", require_head=True).to(accelerator.device)
        layer_map = parse_layer_map(args.recipe.layer_map, teacher.config.num_hidden_layers, n_layers)
        layer_map = check_pair(teacher.config, config, layer_map, strategy)
        copied = copy_shared_weights(teacher, student)
        if args.recipe.inherit:  # every block from the teacher's weights (the embeddings and heads copied again there)
            inherited = inherit(teacher, student, layer_map, data.train.first_batches(args.recipe.inherit_examples))
        distiller = Distiller(teacher, layer_map, settings, config, strategy)
        projections = distiller.projections()
        if len(projections):
            student.add_module("projections", projections)  # trained and checkpointed with the student
        stages = plan(strategy, distiller, n_layers, shared=copied)
    start = time.time()
    summaries = run_plan(stages, student, data.train, cfg, accelerator, resume=args.resume)
    result = {"strategy": strategy, "student": args.recipe.student, "teacher": str(teacher_dir),
              "total_steps": sum(s.steps for s in stages),
              # this process's and (a resumed run) the earlier ones' its checkpoint carried
              "wall_seconds": wall_seconds(start, summaries),
              "copied_from_teacher": len(copied), "stages": summaries,
              **({"inherited": inherited} if inherited else {})}
    if distiller is not None and distiller.inputs is not None:
        result["layer_inputs"] = distiller.inputs.stats()
    if hasattr(student, "projections"):
        del student.projections  # they served the transfer; the student is saved and exported without them
    if accelerator.is_main_process:
        result["heldout"] = evaluate_pretraining(student, data.heldout, data.meta["most_frequent_token"],
                                                 args.recipe.eval_examples)
        save_pretrained(student, out, tokenizer)
        write_json(out / "summary.json", result)
        with atomic_path(out / "summary.md") as tmp:
            tmp.write_text(summary_markdown(result))
    return result


def student_model(name: str, masked_score: float | None) -> MobileBertForPreTraining:
    """A fresh student of a preset, or the model of a directory (e.g. layers taken from the teacher)."""
    if Path(name).is_dir():
        config = load_config(name)[0]
        if masked_score is not None:
            config = config.replace(masked_score=masked_score)
        return load_pretrained(name, "pretraining", config=config)
    if name not in PRESETS:
        raise UserError(f"--student {name}: neither a preset ({', '.join(sorted(PRESETS))}) nor a model directory")
    return MobileBertForPreTraining(get_preset(name).config.replace(masked_score=masked_score))


def summary_markdown(result: dict) -> str:
    lines = [f"# {result['strategy'].upper()} distillation into {result['student']}", "",
             f"Teacher: `{result['teacher']}`; {result['total_steps']} steps in {result['wall_seconds']} s.", "",
             "| stage | steps | seconds | term | start | end |", "|---|---|---|---|---|---|"]
    for s in result["stages"]:
        for i, term in enumerate(sorted(s["end"])):
            head = f"| {s['stage']} | {s['steps']} | {s['seconds']} |" if i == 0 else "| | | |"
            lines.append(f"{head} {term} | {s['start'].get(term, float('nan')):.4f} | {s['end'][term]:.4f} |")
    h = result.get("heldout")
    if h:
        lines += ["", f"Held-out MLM accuracy {h['mlm_accuracy']:.4f} (unigram baseline {h['unigram_accuracy']:.4f}),"
                      f" MLM loss {h['mlm_loss']:.4f}, NSP accuracy {h['nsp_accuracy']:.4f}."]
    return "\n".join(lines) + "\n"


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def run(args, accelerator):
    teacher_dir = Path(args.recipe.teacher)
    if not (teacher_dir / "config.json").is_file():
        raise UserError(f"{teacher_dir}: no teacher here (no config.json); train one with scripts/train_teacher.sh")
    load_config(teacher_dir)  # a teacher of another family is refused in one line before the corpus is read
    tokenizer = load_tokenizer(teacher_dir)
    with accelerator.main_process_first():
        data = load_pretraining_data(args.recipe.corpus, tokenizer, args.seq_len, args.seed, args.cache_dir)
    out = Path(args.out)
    if not args.recipe.compare:
        result = distill(args, args.recipe.strategy, out, accelerator, data, tokenizer, teacher_dir)
        if accelerator.is_main_process:
            h = result["heldout"]
            print(f"{args.recipe.strategy}: held-out MLM accuracy {h['mlm_accuracy']:.4f} (unigram "
                  f"{h['unigram_accuracy']:.4f}), MLM loss {h['mlm_loss']:.4f}; student saved to {out}")
        return
    strategies = [s.strip() for s in args.recipe.compare.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in (*STRATEGIES, "scratch")]
    if unknown:
        raise UserError(f"--compare: unknown strategies {unknown} (choose from {', '.join(STRATEGIES)}, scratch)")
    rows = []
    for strategy in strategies:
        result = distill(args, strategy, out / strategy, accelerator, data, tokenizer, teacher_dir)
        if accelerator.is_main_process:
            h = result["heldout"]
            rows.append({"strategy": strategy, "steps": result["total_steps"], "seconds": result["wall_seconds"],
                         "mlm_accuracy": h["mlm_accuracy"], "mlm_loss": h["mlm_loss"],
                         "nsp_accuracy": h["nsp_accuracy"]})
    if accelerator.is_main_process:
        write_json(out / "compare.json", rows)
        table = ["| strategy | steps | seconds | held-out MLM acc | MLM loss | NSP acc |", "|---|---|---|---|---|---|"]
        table += [f"| {r['strategy']} | {r['steps']} | {r['seconds']} | {r['mlm_accuracy']:.4f} | "
                  f"{r['mlm_loss']:.4f} | {r['nsp_accuracy']:.4f} |" for r in rows]
        with atomic_path(out / "compare.md") as tmp:
            tmp.write_text("\n".join(table) + "\n")
        print("\n".join(table))
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
