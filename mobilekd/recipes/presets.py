"""The model presets: print them beside the paper's figures (`mobilekd models`), or write a randomly initialised
model directory of one (`mobilekd init PRESET OUT`: the from-scratch baseline, or a starting point), or one made of
some of a model directory's layers (`mobilekd init MODEL OUT --layers spread:3`), its feed-forward networks
narrowed to their most important neurons (`--intermediate-size`, DynaBERT's rewiring: mobilekd/models/narrow.py),
or a MobileBERT-shaped preset started from a teacher's weights through its bottlenecks (`mobilekd init PRESET OUT
--from-teacher TEACHER`: mobilekd/transfer/inherit.py), for `mobilekd distill --student OUT`."""

from __future__ import annotations

import argparse
import json
import time

from mobilekd.errors import UserError, cli_entry
from mobilekd.flags import add_length_flag, at_least
from mobilekd.fileio import write_json
from mobilekd.rundir import owned


def models_table(seq_len: int = 128) -> list[dict]:
    """Every preset's parameters and FLOPs beside the paper's figures."""
    from mobilekd.models.flops import model_stats
    from mobilekd.models.presets import PRESETS

    rows = []
    for preset in PRESETS.values():
        stats = model_stats(preset.config, seq_len)
        rows.append({
            "name": preset.name,
            "params": stats["params"],
            f"flops_seq{seq_len}": stats[f"flops_seq{seq_len}"],
            "paper_params": preset.paper_params,
            f"paper_flops_seq{seq_len}": preset.paper_flops_seq128 if seq_len == 128 else None,
            "description": preset.description,
        })
    return rows


def _fmt(value, scale, unit):
    return "-" if value is None else f"{value / scale:.1f}{unit}"


def _print_models(args) -> None:
    rows = models_table(args.seq_len)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    key = f"flops_seq{args.seq_len}"
    wide = max(len(r["name"]) for r in rows)
    header = f"{'preset':<{wide}} {'params':>8} {'paper':>8} {'FLOPs':>8} {'paper':>8}  description"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:<{wide}} {_fmt(r['params'], 1e6, 'M'):>8} {_fmt(r['paper_params'], 1e6, 'M'):>8} "
              f"{_fmt(r[key], 1e9, 'G'):>8} {_fmt(r['paper_' + key], 1e9, 'G'):>8}  {r['description']}")
    print(f"params: embeddings + encoder + pooler; FLOPs: 2 x MACs of one forward pass at sequence length "
          f"{args.seq_len}, batch 1; paper: MobileBERT paper, Tables 1 and 4")


def _init(args) -> None:
    """A randomly initialised model directory of a preset (the from-scratch baseline, or a starting point), or a
    model made of some of a model directory's layers (DistilBERT's and BERT-PKD's students), with narrower FFNs."""
    from dataclasses import replace
    from pathlib import Path

    import torch

    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.heads import MobileBertForPreTraining
    from mobilekd.models.hf import load_pretrained, save_pretrained
    from mobilekd.models.presets import PRESETS, get_preset
    from mobilekd.models.pretrained import model_dir
    from mobilekd.models.subset import take_layers

    torch.manual_seed(args.seed)
    if args.preset not in PRESETS:  # a packaged checkpoint's name (all-minilm-l6-v2) is its directory
        args.preset = str(model_dir(args.preset))
    if Path(args.preset).is_dir():
        narrowed = args.intermediate_size is not None  # its importance needs the model's trained masked-LM head
        source = load_pretrained(args.preset, "pretraining", require_head=narrowed)
        depth = source.config.num_hidden_layers
        layers = parse_layers(args.layers, depth) if args.layers else list(range(depth))
        tokenizer = load_tokenizer(args.preset)
        if narrowed:  # before the importance pass, not after it
            from mobilekd.models.narrow import check_size

            check_size(source.config, args.intermediate_size)
        start = time.perf_counter()
        importance = neuron_scores(source, tokenizer, args) if narrowed else None
        model = take_layers(source, layers)
        if narrowed:
            from mobilekd.models.narrow import narrow_ffns

            model = narrow_ffns(model, args.intermediate_size, [importance[l] for l in layers])
            # what the importance pass cost (a stage's CPU-seconds, as distill's summary.json has them); written
            # before the weights, which mark the directory finished
            write_json(Path(args.out) / "summary.json", {
                "layers": layers, "intermediate_size": args.intermediate_size,
                "importance_examples": args.importance_examples, "wall_seconds": round(time.perf_counter() - start, 1)})
        save_pretrained(model, args.out, tokenizer)
        width = f", FFNs narrowed to {args.intermediate_size} neurons" if narrowed else ""
        print(f"{args.preset}: layers {layers} of {depth}{width} written to {args.out}")
        return
    config = get_preset(args.preset).config
    if args.from_teacher:
        _inherit(MobileBertForPreTraining(config), args)
        return
    tokenizer = load_tokenizer(args.vocab) if args.vocab else load_tokenizer()
    if args.vocab:  # the preset's shape over this vocabulary (a foreign teacher's, for layer matching)
        if tokenizer.pad_token_id is None:
            raise UserError(f"{args.vocab}: its tokenizer has no padding token")
        config = replace(config, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    save_pretrained(MobileBertForPreTraining(config), args.out, tokenizer)
    print(f"{args.preset}: randomly initialised model written to {args.out}" +
          (f" (vocabulary of {len(tokenizer)} from {args.vocab})" if args.vocab else ""))


def _inherit(student, args) -> None:
    """The preset's student started from --from-teacher's weights (mobilekd/transfer/inherit.py); summary.json
    records each block's fit and the time it took, written before the weights that mark OUT finished."""
    from pathlib import Path

    from mobilekd.data.tokenizer import load_tokenizer
    from mobilekd.models.hf import load_pretrained, save_pretrained
    from mobilekd.models.pretrained import model_dir
    from mobilekd.transfer.inherit import inherit

    teacher_dir = model_dir(args.from_teacher)
    teacher = load_pretrained(teacher_dir, "pretraining")
    mapping = args.mapping
    tokenizer = load_tokenizer(teacher_dir)
    start = time.perf_counter()
    batches = _pretraining_split(tokenizer, args).first_batches(args.importance_examples)
    n_examples = sum(len(b["input_ids"]) for b in batches)
    summary = {"from_teacher": str(teacher_dir), "examples": n_examples,
               **inherit(teacher, student, mapping, batches)}
    summary["wall_seconds"] = round(time.perf_counter() - start, 1)
    write_json(Path(args.out) / "summary.json", summary)
    save_pretrained(student, args.out, tokenizer)
    print(f"{args.preset}: started from {teacher_dir}'s layers {mapping} over {n_examples} examples (relative "
          f"error of each block's output on them: {', '.join(map(str, summary['relative_error']))}), written to "
          f"{args.out}")


def inherit_map(text: str | None, depth: int, n: int) -> list[int]:
    """--layer-map for --from-teacher: the teacher layer each of the student's `n` blocks starts from (default:
    layer by layer at equal depth, else TinyBERT's uniform rule); a map that does not fit is refused in one line."""
    from mobilekd.transfer.layer_maps import layer_map, map_problem, parse_layer_map

    mapping = parse_layer_map(text, depth, n) or (list(range(n)) if n == depth else layer_map("uniform", depth, n))
    if problem := map_problem(mapping, depth, n):
        raise UserError(problem)
    return mapping


def _pretraining_split(tokenizer, args):
    """--corpus's masked-LM training examples at length 128 (the shipped corpora by default), cached."""
    from mobilekd.data.pretraining import DEFAULT_CACHE, load_pretraining_data
    from mobilekd.train.common import SHIPPED_CORPORA

    return load_pretraining_data(args.corpus or SHIPPED_CORPORA, tokenizer, 128, args.seed,
                                 args.cache_dir or DEFAULT_CACHE).train


def neuron_scores(model, tokenizer, args) -> list:
    """DynaBERT's FFN neuron importance in `model` (every layer in place) over the first --importance-examples
    masked-LM examples of --corpus (mobilekd/models/narrow.py)."""
    from mobilekd.models.narrow import importance_over

    return importance_over(model, _pretraining_split(tokenizer, args), args.importance_examples)


def parse_layers(text: str, depth: int) -> list[int]:
    """--layers: comma-separated layers, or RULE:K for K layers by a rule of mobilekd.transfer.layer_maps
    (spread: DistilBERT's, first: BERT-PKD's)."""
    from mobilekd.transfer.layer_maps import layer_map

    rule, _, count = text.partition(":")
    try:
        return layer_map(rule, depth, int(count)) if count else [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--layers must be comma-separated layers or RULE:K (e.g. spread:3), got {text!r}") from None


@cli_entry
def models(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd models", description="print the model presets with parameters and "
                                                                    "FLOPs beside the paper's")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    add_length_flag(p, dest="seq_len", default=128, help="sequence length for the FLOP count (default 128)")
    _print_models(p.parse_args(argv))


@cli_entry
def init(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd init", description="write a randomly initialised model directory "
                                                                  "of a preset, one made of some of a model "
                                                                  "directory's layers (its FFNs optionally narrowed), "
                                                                  "or a MobileBERT-shaped preset started from a "
                                                                  "teacher's weights (--from-teacher)")
    p.add_argument("preset", help="a preset name (see `mobilekd models`), or a model directory to take layers of")
    p.add_argument("out", help="output directory")
    p.add_argument("--layers", help="with a model directory: its layers to keep (0-based), comma-separated, or "
                                    "RULE:K, e.g. spread:3 (DistilBERT's initialisation: 0,2,4,7,9,11 of 12 for "
                                    "6) or first:3 (BERT-PKD's); default all")
    p.add_argument("--intermediate-size", type=int, metavar="N",
                   help="with a model directory: keep this many of each FFN's neurons, the most important by "
                        "DynaBERT's first-order estimate of the masked-LM loss without them (default: all)")
    p.add_argument("--from-teacher", metavar="TEACHER",
                   help="with a MobileBERT-shaped preset: start it from this BERT-layout teacher's weights through "
                        "its bottlenecks (principal components of each layer's features, the most important heads "
                        "and FFN neurons, normalizations fitted; mobilekd/transfer/inherit.py), for `mobilekd distill "
                        "--student OUT`")
    p.add_argument("--layer-map", help="with --from-teacher: the teacher layer each student block starts from, "
                                       "comma-separated, or a rule (default: layer by layer at equal depth, else "
                                       "uniform, as ship's MobileBERT family distils)")
    p.add_argument("--importance-examples", type=int, metavar="N",
                   help="masked-LM examples the neuron importance (default 512) or, with --from-teacher, the "
                        "start's fit (default 128: mobilekd/transfer/inherit.py) is computed over")
    p.add_argument("--corpus", nargs="+", help="their text (default: the shipped corpora)")
    p.add_argument("--cache-dir", help="where their tokenized examples are cached (default "
                                       ".cache/mobilekd/pretraining)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", help="with a preset: vocab.txt, or a model directory whose tokenizer the student "
                                   "reads (a transformers teacher of another architecture, so that TinyBERT's and "
                                   "MobileBERT's layer matching can pair them); default: the shipped "
                                   "bert-base-uncased vocab")
    args = p.parse_args(argv)
    from mobilekd.models.presets import PRESETS, get_preset
    from mobilekd.models.pretrained import model_dir

    if not (args.preset not in PRESETS and model_dir(args.preset).is_dir()):  # a preset: refused before OUT is made
        if args.layers or args.intermediate_size is not None:
            raise UserError(f"{args.preset}: no such model directory (--layers and --intermediate-size take a model "
                            "directory, not a preset)")
        get_preset(args.preset)  # neither a preset nor a directory: one line
    elif args.from_teacher:
        raise UserError(f"--from-teacher takes a preset to start, not a model directory ({args.preset})")
    if args.layer_map and not args.from_teacher:
        raise UserError("--layer-map is read with --from-teacher only")
    if args.from_teacher:
        teacher = model_dir(args.from_teacher)
        if not teacher.is_dir():
            raise UserError(f"--from-teacher {args.from_teacher}: no such model directory")
        from mobilekd.models.hf import load_config
        from mobilekd.transfer.inherit import check_inheritable

        teacher_config, student_config = load_config(teacher)[0], get_preset(args.preset).config
        check_inheritable(teacher_config, student_config)  # the pair and its layer map, before OUT is made
        args.mapping = inherit_map(args.layer_map, teacher_config.num_hidden_layers,
                                   student_config.num_hidden_layers)
    if args.importance_examples is None:
        from mobilekd.transfer.inherit import INHERIT_EXAMPLES

        args.importance_examples = INHERIT_EXAMPLES if args.from_teacher else 512
    at_least("--importance-examples", args.importance_examples, 1)
    with owned(args.out, argv=argv):  # this run's OUT, marked complete when written
        _init(args)
