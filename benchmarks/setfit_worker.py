"""One SetFit run (Tunstall et al. 2022), executed by the SetFit venv's interpreter (benchmarks/setfit.py makes it):
reads a task's train.csv and dev.csv (text,label), fine-tunes the sentence-transformers body contrastively and fits
the logistic-regression head (setfit.Trainer, its defaults but `max_steps`), predicts dev once, and writes
OUT/predictions.tsv (dev label, prediction) and OUT/result.json (accuracy, the seconds training took, threads).
Nothing here chooses anything: no dev score is read before the final prediction.

    .cache/setfit/venv/bin/python -P benchmarks/setfit_worker.py --body DIR --data TASK_DIR --out OUT --seed 0

(-P: the script's folder is not put on sys.path, where benchmarks/setfit.py would shadow the setfit package.)
"""

import argparse
import csv
import json
import time
from pathlib import Path


def read(path: Path) -> tuple[list[str], list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--body", required=True, help="a sentence-transformers model directory")
    p.add_argument("--data", required=True, help="a folder with train.csv and dev.csv (text,label)")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=500)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    import torch
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    torch.set_num_threads(args.threads)
    data, out = Path(args.data), Path(args.out)
    texts, labels = read(data / "train.csv")
    names = sorted(set(labels))
    ids = {name: i for i, name in enumerate(names)}
    model = SetFitModel.from_pretrained(args.body)
    trainer = Trainer(model=model, train_dataset=Dataset.from_dict({"text": texts, "label": [ids[x] for x in labels]}),
                      args=TrainingArguments(max_steps=args.max_steps, seed=args.seed, report_to="none",
                                             output_dir=str(out / "checkpoints")))
    start = time.time()
    trainer.train()
    seconds = time.time() - start
    dev_texts, dev_labels = read(data / "dev.csv")
    predicted = [names[int(i)] for i in model.predict(dev_texts, batch_size=64, as_numpy=True)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "predictions.tsv", "w", encoding="utf-8") as f:
        f.write("label\tprediction\n" + "".join(f"{y}\t{x}\n" for y, x in zip(dev_labels, predicted)))
    accuracy = sum(y == x for y, x in zip(dev_labels, predicted)) / len(dev_labels)
    (out / "result.json").write_text(json.dumps({"accuracy": accuracy, "train_seconds": round(seconds, 1),
                                                 "train_examples": len(texts), "dev_examples": len(dev_labels),
                                                 "max_steps": args.max_steps, "seed": args.seed,
                                                 "threads": args.threads}, indent=2))


if __name__ == "__main__":
    main()
