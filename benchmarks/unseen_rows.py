"""Words the corpus never shows (issue 14): the demo IB-BERT teacher pre-trained from scratch on the shipped
corpora twice, the word-embedding rows of tokens absent from the corpus given no gradient (`frozen`, the default
since issue 14) or updated like every other row (`updated`, `--update-unseen-rows`, the behaviour before), each
fine-tuned on SST-2 over seeds. Rows to docs/results/unseen_rows.json: SST-2 dev accuracy per fine-tuning run,
and per teacher (task "embedding", seed 0) the unseen rows' mean pairwise cosine and mean norm beside the seen
rows', and the share of SST-2 dev tokens whose rows the corpus never showed.

    python -m benchmarks.unseen_rows             # resumable; about 30 minutes on 2 cores
    python -m benchmarks.unseen_rows --table
    python -m benchmarks.unseen_rows --table --write  # and put it between its markers in its page

Settings are the scratch demo's (`scripts/demo.sh --scratch-teacher`: preset demo_teacher with its recipe
defaults, teacher fine-tuning rate 5e-4) on the 10,000 SST-2 examples the other benchmarks use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from benchmarks.command import comparison, comparison_flags
from benchmarks.rows import finetune_rows
from benchmarks.runner import RESUMABLE, Job
from benchmarks.stats import VERDICTS, judged_cell, mean_std_cell, paired_differences, values
from mobilekd.data.glue import find_split, read_glue
from mobilekd.data.pretraining import DEFAULT_CACHE, load_pretraining_data
from mobilekd.data.tasks import default_data
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.fileio import REPO_ROOT
from mobilekd.models.heads import WORD_EMBEDDINGS
from mobilekd.train.common import SHIPPED_CORPORA
from mobilekd.train.vocab import seen_tokens
from teacher_ib_bert import pretraining_defaults

PRESET = "demo_teacher"
ARMS = {"frozen": [], "updated": ["--update-unseen-rows"]}
SST2 = ["--task", "sst2", "--max-train-examples", "10000", "--epochs", "1", "--max-len", "64", "--lr", "5e-4"]
STATISTICS = ("unseen_row_cosine", "unseen_row_norm", "seen_row_norm")  # per teacher
SHARE = "sst2_dev_unseen_token_share"  # the corpus's, the same for both teachers


def teacher_dir(out: Path, arm: str) -> Path:
    return out / "teachers" / arm


def finetune_dir(out: Path, arm: str, seed: int) -> Path:
    return out / "finetune" / "sst2" / arm / f"seed{seed}"


def jobs(out: Path, seeds: list[int]) -> list[Job]:
    plan = [Job(f"pretrain/{arm}", ["train-teacher", "--preset", PRESET, *flags, "--out", str(teacher_dir(out, arm)),
                                    *RESUMABLE], teacher_dir(out, arm)) for arm, flags in ARMS.items()]
    for seed in seeds:
        plan += [Job(f"sst2/{arm}/{seed}", ["finetune", *SST2, "--model", str(teacher_dir(out, arm)), "--seed",
                                            str(seed), "--eval-every", "0", "--out", str(finetune_dir(out, arm, seed)),
                                            *RESUMABLE], finetune_dir(out, arm, seed), [f"pretrain/{arm}"])
                 for arm in ARMS]
    return plan


def corpus_vocabulary(tokenizer) -> tuple[np.ndarray, float]:
    """Which token ids the pre-training corpus shows (a mask over the vocabulary), and the share of SST-2's dev
    tokens it never shows: the corpus's, the same for both teachers."""
    data = load_pretraining_data([REPO_ROOT / c for c in SHIPPED_CORPORA], tokenizer,
                                 pretraining_defaults(PRESET)["seq_len"], cache_dir=REPO_ROOT / DEFAULT_CACHE)
    seen = np.zeros(len(tokenizer), dtype=bool)
    seen[seen_tokens(data.train)] = True
    dev = read_glue("sst2", find_split(default_data("sst2"), "dev"))
    ids = np.concatenate([tokenizer(e.text_a, add_special_tokens=False)["input_ids"] for e in dev])
    return seen, float((~seen[ids]).mean())


def row_statistics(teacher: Path, seen: np.ndarray) -> dict[str, float]:
    """The trained table's rows of tokens the pre-training corpus never shows against those it shows."""
    with safe_open(str(teacher / "model.safetensors"), "pt") as f:
        table = f.get_tensor(next(k for k in (WORD_EMBEDDINGS, "bert." + WORD_EMBEDDINGS.removeprefix("mobilebert."))
                                  if k in f.keys()))  # a BERT-layout teacher is saved under transformers' names
    unseen = table[torch.from_numpy(~seen)]
    unit = torch.nn.functional.normalize(unseen, dim=1)
    n = len(unit)
    cosine = ((unit.sum(0) @ unit.sum(0)) - n) / (n * (n - 1))  # the mean over pairs of distinct rows
    return {"unseen_row_cosine": float(cosine), "unseen_row_norm": float(unseen.norm(dim=1).mean()),
            "seen_row_norm": float(table[torch.from_numpy(seen)].norm(dim=1).mean())}


def rows(out: Path, seeds: list[int]) -> list[dict]:
    pretrained = [arm for arm in ARMS if (teacher_dir(out, arm) / "summary.json").is_file()]
    if pretrained:
        seen, share = corpus_vocabulary(load_tokenizer(teacher_dir(out, pretrained[0])))
    found = []
    for arm in ARMS:
        if arm in pretrained:
            found += [{"task": "embedding", "method": arm, "seed": 0, "metric": name, "value": round(value, 4)}
                      for name, value in {**row_statistics(teacher_dir(out, arm), seen), SHARE: share}.items()]
        found += [row for seed in seeds for row in finetune_rows(finetune_dir(out, arm, seed), task="sst2",
                                                                 method=arm, seed=seed, student=PRESET)]
    return found


def table(results: list[dict]) -> str:
    """Per arm: SST-2 dev accuracy (mean +- std over seeds) and the table's row statistics; then the difference
    between the arms seed by seed, with its verdict (`stats.verdict`)."""
    lines = ["| unseen rows | sst2 (accuracy) | " + " | ".join(s.replace("_", " ") for s in STATISTICS) + " |",
             "|---|---|" + "---|" * len(STATISTICS)]
    for arm in ARMS:
        accuracy = values(results, "sst2", "accuracy", arm)
        stats = [values(results, "embedding", s, arm) for s in STATISTICS]
        lines.append(f"| {arm} | {mean_std_cell(accuracy) if accuracy else '-'} | "
                     + " | ".join(f"{s[0]:.4f}" if s else "-" for s in stats) + " |")
    share = next((r["value"] for r in results if r["metric"] == SHARE), None)
    if share is not None:
        lines.append(f"\nSST-2 dev tokens whose rows the corpus never shows: {share:.1%}")
    paired = paired_differences(results, "sst2", "accuracy", *ARMS)
    if paired:
        lines.append(f"\nfrozen - updated, SST-2 dev accuracy, seed by seed: {judged_cell(paired)}\n\n{VERDICTS}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.unseen_rows", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    comparison_flags(p, "runs/unseen_rows", "docs/results/unseen_rows.json")
    args = p.parse_args(argv)
    out = (REPO_ROOT / args.out).resolve()
    return comparison(args, lambda: jobs(out, args.seeds), lambda: rows(out, args.seeds),
                      lambda r: (r["task"], list(ARMS).index(r["method"]), r["seed"], r["metric"]), table)


if __name__ == "__main__":
    sys.exit(main())
