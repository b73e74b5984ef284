"""Pre-train the IB-BERT teacher with masked LM + next-sentence prediction (MobileBERT paper, Section 4 and
Appendix A: LAMB, lr 1.5e-3 at batch 4096, weight decay 0.01, clipping 1.0, warm-up then linear decay), or adapt
a pre-trained BERT checkpoint into a teacher (--init-from): the same objective, continued from its weights, fits
the MLM and NSP heads a transformers `BertModel` lacks (pre-training distillation needs the teacher's MLM logits).

    scripts/train_teacher.sh --init-from all-minilm-l6-v2        # the demo's teacher: a packaged BERT, adapted
    scripts/train_teacher.sh --init-from path/to/bert-large-uncased --corpus my_corpus.txt   # your BERT
    scripts/train_teacher.sh --preset demo_teacher               # a demo IB-BERT from scratch (minutes)
    scripts/train_teacher.sh --preset ib_bert_large --corpus my_corpus.txt --batch-size 4096 ...
    accelerate launch -m mobilekd.recipes.train_teacher --preset ib_bert_large ...   # GPUs, DDP
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.data.tokenizer import DEFAULT_VOCAB, load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import write_json
from mobilekd.flags import at_least, fill_unset
from mobilekd.models.heads import WORD_EMBEDDINGS, MobileBertForPreTraining, pretraining_loss
from mobilekd.models.hf import load_config, load_pretrained, save_pretrained
from mobilekd.models.presets import get_preset
from mobilekd.models.pretrained import PACKAGED, model_dir
from mobilekd.train.common import EVAL_EXAMPLES, SHIPPED_CORPORA, WARMUP, add_training_flags, run_owned, train_config
from mobilekd.train.evaluate import evaluate_pretraining
from mobilekd.train.loop import Stage, run_plan
from mobilekd.train.vocab import freeze_unseen_rows, seen_tokens
from teacher_ib_bert import TEACHER_PRESETS, adaptation_defaults, pretraining_defaults


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd train-teacher", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=TEACHER_PRESETS, default="demo_teacher",
                   help="teacher model preset; its recipe defaults are teacher_ib_bert/configs/PRESET.json "
                        "(default demo_teacher; ignored with --init-from)")
    p.add_argument("--init-from", help="adapt this pre-trained checkpoint instead of training a preset from scratch: "
                                       "a model directory (ours, or a transformers BERT/MobileBERT one, with or "
                                       f"without the bert. prefix) or a packaged name ({', '.join(PACKAGED)}); "
                                       "defaults from teacher_ib_bert/adaptation.json; its own tokenizer is used")
    p.add_argument("--freeze-encoder", action="store_true",
                   help="with --init-from: train only the pre-training heads, keeping the encoder as it is")
    p.add_argument("--train-word-embeddings", action="store_true",
                   help="with --init-from: train the word-embedding table too; by default it stays as pre-trained, "
                        "since on a small corpus Adam moves every row of the tied MLM decoder (words the corpus never "
                        "shows included) the same way each step")
    p.add_argument("--update-unseen-rows", action="store_true",
                   help="from scratch: also update the word-embedding rows of tokens the corpus never shows (by "
                        "default they get no gradient: with the decoder tied to them, Adam would move them all the "
                        "same way; mobilekd/train/vocab.py)")
    p.add_argument("--head-lr-scale", type=float,
                   help="with --init-from: the heads' learning rate as a multiple of --lr (default from "
                        "adaptation.json: the new heads start from scratch, the encoder is already trained)")
    p.add_argument("--corpus", nargs="+", default=SHIPPED_CORPORA,
                   help="text files: one sentence or paragraph a line, blank lines between documents "
                        "(default: the shipped Brown and Austen corpora)")
    p.add_argument("--vocab", default=str(DEFAULT_VOCAB),
                   help="WordPiece vocab.txt (default: bert-base-uncased; with --init-from, the checkpoint's)")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the preset's config)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the preset's config)")
    p.add_argument("--warmup", type=float, default=WARMUP, help=f"warm-up fraction of the steps (default {WARMUP:g})")
    p.add_argument("--weight-decay", type=float, default=Stage.weight_decay,
                   help=f"AdamW/LAMB weight decay, not on biases and LayerNorms (default {Stage.weight_decay:g})")
    p.add_argument("--dropout", type=float, help="override the preset's hidden and attention dropout")
    p.add_argument("--eval-examples", type=int, default=EVAL_EXAMPLES,
                   help=f"held-out examples to evaluate (default {EVAL_EXAMPLES})")
    add_training_flags(p, out="runs/teacher", seq_len=None)
    args = p.parse_args(argv)
    if args.update_unseen_rows and args.init_from:
        raise UserError("--update-unseen-rows is for a teacher trained from scratch (with --init-from the word table "
                        "stays as pre-trained unless --train-word-embeddings)")
    if (args.freeze_encoder or args.train_word_embeddings or args.head_lr_scale is not None) and not args.init_from:
        raise UserError("--freeze-encoder, --train-word-embeddings and --head-lr-scale need --init-from (they adapt "
                        "a trained encoder)")
    fill_unset(args, adaptation_defaults() if args.init_from else pretraining_defaults(args.preset))
    at_least("--steps", args.steps, 1)
    at_least("--max-len", args.seq_len, 1)
    train_config(args)  # so are bad training flags
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def _is_head(name: str) -> bool:
    return not name.startswith("mobilebert.")


def _adapted(args):
    """What adaptation trains: the heads, the encoder unless --freeze-encoder, the word table if asked."""
    def trainable(name):
        if name == WORD_EMBEDDINGS:
            return args.train_word_embeddings and not args.freeze_encoder
        return _is_head(name) or not args.freeze_encoder
    return trainable


def run(args, accelerator):
    source = model_dir(args.init_from) if args.init_from else None
    config = load_config(source)[0] if source else get_preset(args.preset).config
    if args.dropout is not None:
        config = config.replace(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    if args.seq_len > config.max_position_embeddings:
        raise UserError(f"--max-len {args.seq_len} exceeds the model's {config.max_position_embeddings} positions")
    vocab = source if source else args.vocab
    tokenizer = load_tokenizer(vocab)
    if len(tokenizer) != config.vocab_size:
        raise UserError(f"{vocab}: {len(tokenizer)} tokens, the model expects {config.vocab_size}")
    with accelerator.main_process_first():
        data = load_pretraining_data(args.corpus, tokenizer, args.seq_len, args.seed, args.cache_dir)
    model = load_pretrained(source, "pretraining", config) if source else MobileBertForPreTraining(config)
    if not source and not args.update_unseen_rows:
        freeze_unseen_rows(model, seen_tokens(data.train))
    name = args.init_from or args.preset
    out = Path(args.out)
    stage = Stage(name="adapt" if source else "pretrain", steps=args.steps, loss=pretraining_loss, lr=args.lr,
                  warmup=args.warmup, weight_decay=args.weight_decay,
                  **({"trainable": _adapted(args)} if source else {}),
                  **({"lr_scale": lambda name: args.head_lr_scale if _is_head(name) else 1.0} if source else {}))
    cfg = train_config(args, run={"model": config.to_dict(), "seq_len": args.seq_len, "lr": args.lr,
                                  "data": data.path.name, "mixed_precision": args.mixed_precision,
                                  "init_from": str(source) if source else None, "freeze_encoder": args.freeze_encoder,
                                  "train_word_embeddings": args.train_word_embeddings,
                                  "update_unseen_rows": args.update_unseen_rows,
                                  "head_lr_scale": args.head_lr_scale})
    start = time.time()
    if accelerator.is_main_process:
        print(f"teacher {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
              f"{len(data.train)} training examples of {args.seq_len} tokens ({data.meta['build_seconds']}s to "
              f"build, cached in {data.path})")
    [summary] = run_plan([stage], model, data.train, cfg, accelerator, resume=args.resume)
    if accelerator.is_main_process:
        metrics = evaluate_pretraining(model, data.heldout, data.meta["most_frequent_token"], args.eval_examples)
        save_pretrained(model, out, tokenizer)
        result = {"preset": None if source else args.preset, "init_from": args.init_from,
                  "freeze_encoder": args.freeze_encoder, "steps": args.steps,
                  "wall_seconds": round(time.time() - start, 1),
                  "tokens_per_second": summary["tokens_per_second"], "train": summary, "heldout": metrics}
        write_json(out / "summary.json", result)
        print(f"held-out MLM accuracy {metrics['mlm_accuracy']:.3f} (unigram baseline "
              f"{metrics['unigram_accuracy']:.3f}), MLM loss {metrics['mlm_loss']:.3f}, NSP accuracy "
              f"{metrics['nsp_accuracy']:.3f} (majority class {metrics['nsp_majority_accuracy']:.3f}); "
              f"teacher saved to {out}")
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))


if __name__ == "__main__":
    main()
