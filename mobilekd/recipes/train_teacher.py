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
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError, cli_entry
from mobilekd.fileio import write_json
from mobilekd.flags import add_flags, at_least, take_flags
from mobilekd.models.heads import WORD_EMBEDDINGS, MobileBertForPreTraining, pretraining_loss
from mobilekd.models.hf import load_config, load_pretrained, save_pretrained
from mobilekd.models.presets import get_preset
from mobilekd.models.pretrained import model_dir
from mobilekd.train.common import add_training_flags, run_owned, train_config
from mobilekd.train.evaluate import evaluate_pretraining
from mobilekd.train.loop import Stage, run_plan, wall_seconds
from mobilekd.train.vocab import freeze_unseen_rows, seen_tokens
from teacher_ib_bert.settings import TeacherConfig, check, fill_defaults


def parse_args(argv=None):
    """The parsed flags: the training loop's (`add_training_flags`) on the namespace, the recipe's own as one
    `TeacherConfig` in its `recipe`, checked and with the preset's (or adaptation's) defaults filled in."""
    p = argparse.ArgumentParser(prog="mobilekd train-teacher", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p, TeacherConfig)
    add_training_flags(p, out="runs/teacher", seq_len=None)
    args = p.parse_args(argv)
    args.recipe = fill_defaults(check(take_flags(TeacherConfig, args)), args)
    at_least("--max-len", args.seq_len, 1)
    train_config(args)  # so are bad training flags
    return args


@cli_entry
def main(argv=None):
    run_owned(parse_args(argv), run, argv)


def _is_head(name: str) -> bool:
    return not name.startswith("mobilebert.")


def _adapted(c):
    """What adaptation trains: the heads, the encoder unless --freeze-encoder, the word table if asked."""
    def trainable(name):
        if name == WORD_EMBEDDINGS:
            return c.train_word_embeddings and not c.freeze_encoder
        return _is_head(name) or not c.freeze_encoder
    return trainable


def run(args, accelerator):
    c = args.recipe  # the recipe's settings (TeacherConfig); args holds the training loop's
    source = model_dir(c.init_from) if c.init_from else None
    config = load_config(source)[0] if source else get_preset(c.preset).config
    if c.dropout is not None:
        config = config.replace(hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.dropout)
    if args.seq_len > config.max_position_embeddings:
        raise UserError(f"--max-len {args.seq_len} exceeds the model's {config.max_position_embeddings} positions")
    vocab = source if source else c.vocab
    tokenizer = load_tokenizer(vocab)
    if len(tokenizer) != config.vocab_size:
        raise UserError(f"{vocab}: {len(tokenizer)} tokens, the model expects {config.vocab_size}")
    with accelerator.main_process_first():
        data = load_pretraining_data(c.corpus, tokenizer, args.seq_len, args.seed, args.cache_dir)
    model = load_pretrained(source, "pretraining", config) if source else MobileBertForPreTraining(config)
    if not source and not c.update_unseen_rows:
        freeze_unseen_rows(model, seen_tokens(data.train))
    name = c.init_from or c.preset
    out = Path(args.out)
    stage = Stage(name="adapt" if source else "pretrain", steps=c.steps, loss=pretraining_loss, lr=c.lr,
                  warmup=c.warmup, weight_decay=c.weight_decay,
                  **({"trainable": _adapted(c)} if source else {}),
                  **({"lr_scale": lambda name: c.head_lr_scale if _is_head(name) else 1.0} if source else {}))
    cfg = train_config(args, run={"model": config.to_dict(), "seq_len": args.seq_len, "lr": c.lr,
                                  "data": data.path.name, "mixed_precision": args.mixed_precision,
                                  "init_from": str(source) if source else None, "freeze_encoder": c.freeze_encoder,
                                  "train_word_embeddings": c.train_word_embeddings,
                                  "update_unseen_rows": c.update_unseen_rows,
                                  "head_lr_scale": c.head_lr_scale})
    start = time.time()
    if accelerator.is_main_process:
        print(f"teacher {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
              f"{len(data.train)} training examples of {args.seq_len} tokens ({data.meta['build_seconds']}s to "
              f"build, cached in {data.path})")
    [summary] = run_plan([stage], model, data.train, cfg, accelerator, resume=args.resume)
    if accelerator.is_main_process:
        metrics = evaluate_pretraining(model, data.heldout, data.meta["most_frequent_token"], c.eval_examples)
        save_pretrained(model, out, tokenizer)
        result = {"preset": None if source else c.preset, "init_from": c.init_from,
                  "freeze_encoder": c.freeze_encoder, "steps": c.steps,
                  "wall_seconds": wall_seconds(start, [summary]),  # a resume's too
                  "tokens_per_second": summary["tokens_per_second"], "train": summary, "heldout": metrics}
        write_json(out / "summary.json", result)
        print(f"held-out MLM accuracy {metrics['mlm_accuracy']:.3f} (unigram baseline "
              f"{metrics['unigram_accuracy']:.3f}), MLM loss {metrics['mlm_loss']:.3f}, NSP accuracy "
              f"{metrics['nsp_accuracy']:.3f} (majority class {metrics['nsp_majority_accuracy']:.3f}); "
              f"teacher saved to {out}")
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}))


if __name__ == "__main__":
    main()
