"""MediaPipe Model Maker's average-word-embedding text classifier on the shipped SST-2, run as a user would run it,
beside benchmarks.quality (issue 34): `mediapipe-model-maker` 0.2.1.4 pins tensorflow < 2.16, so it lives in a
virtual environment of its own (OUT/venv, made once with PINS), never in ours. For each seed it trains on all of
SST-2's training sentences with the tutorial's settings (AverageWordEmbeddingHParams: 10 epochs of batch 32; the
model options' defaults: sequence 256, vocabulary 10,000, 16-wide embedding), scores the full dev set and exports
its .tflite: OUT/sst2_seed<N>/results.json (accuracy, train_seconds, train_examples, epochs) and model.tflite.

    python -m benchmarks.model_maker --out runs/quality/model_maker --seeds 0 1 2

This file runs twice: in our environment (`run`: the venv, the data files, one subprocess a seed) and in the
venv's interpreter (`train`: Model Maker itself; it imports nothing of ours).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PINS = ["tensorflow==2.15.1", "mediapipe-model-maker==0.2.1.4", "mediapipe==0.10.14", "numpy<2", "ml-dtypes~=0.3.1",
        "jax==0.4.30", "jaxlib==0.4.30"]  # the only set found to install on Python 3.11 (issue 34)
EPOCHS, BATCH = 10, 32


def venv(out: Path) -> Path:
    """OUT/venv's interpreter, made (Python 3.11, or $MODEL_MAKER_PYTHON, with PINS) when missing."""
    from mobilekd.sidevenv import side_venv
    return side_venv(out, PINS, "Model Maker", "MODEL_MAKER_PYTHON")


def data_files(out: Path) -> tuple[Path, Path]:
    """SST-2's shipped train and dev sets as the CSV files Model Maker reads (sentence, label name)."""
    from mobilekd.data.tasks import load_task, task_data
    task = load_task("sst2", task_data("sst2", None))
    paths = []
    for name, examples in (("train", task.train), ("dev", next(iter(task.dev.values())))):
        path = out / f"sst2_{name}.csv"
        if not path.is_file():
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(["sentence", "label"])
                w.writerows((e.text_a, e.label) for e in examples)
            tmp.replace(path)
        paths.append(path)
    return paths[0], paths[1]


def run(out: Path, seeds: list[int]) -> list[int]:
    """Train every seed that has no results yet (one thread, as our runs); return the seeds that failed. A seed's
    results.json is written last, once its model.tflite is in place: a run without it is unfinished. One invocation
    at a time (a lock in OUT): another on the same OUT waits for it, then finds its seeds done."""
    if all((out / f"sst2_seed{s}" / "results.json").is_file() for s in seeds):
        return []
    from filelock import FileLock  # here: this file also runs in Model Maker's venv, which need not have it

    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / ".lock")):
        return _run(out, [s for s in seeds if not (out / f"sst2_seed{s}" / "results.json").is_file()])


def _run(out: Path, todo: list[int]) -> list[int]:
    if not todo:
        return []
    python, (train_csv, dev_csv) = venv(out), data_files(out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    failed = []
    for seed in todo:
        d = out / f"sst2_seed{seed}"
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "log.txt", "w") as log:
            rc = subprocess.run([str(python), __file__, "--train", str(train_csv), "--dev", str(dev_csv), "--seed",
                                 str(seed), "--run", str(d)], stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        ok = rc == 0 and (d / "results.json").is_file()
        if ok:  # the machine its seconds were measured on (its venv has no mobilekd to ask)
            from mobilekd.host import identity
            result = json.loads((d / "results.json").read_text())
            (d / "results.json").write_text(json.dumps({**result, "host": identity()}, indent=2) + "\n")
        print(f"model-maker seed {seed}: " + ("done" if ok else f"FAILED; log: {d / 'log.txt'}"))
        failed += [] if ok else [seed]
    return failed


def train(train_csv: str, dev_csv: str, seed: int, run_dir: Path) -> None:
    """Model Maker's own code, in its venv: the tutorial's average-word-embedding classifier."""
    import tensorflow as tf
    from mediapipe_model_maker import text_classifier

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(seed)
    params = text_classifier.CSVParams(text_column="sentence", label_column="label", delimiter=",")
    train_data = text_classifier.Dataset.from_csv(filename=train_csv, csv_params=params)
    dev_data = text_classifier.Dataset.from_csv(filename=dev_csv, csv_params=params)
    options = text_classifier.TextClassifierOptions(
        supported_model=text_classifier.SupportedModels.AVERAGE_WORD_EMBEDDING_CLASSIFIER,
        hparams=text_classifier.AverageWordEmbeddingHParams(epochs=EPOCHS, batch_size=BATCH, learning_rate=0,
                                                             export_dir=str(run_dir / "export")))
    start = time.time()
    model = text_classifier.TextClassifier.create(train_data, dev_data, options)
    seconds = time.time() - start
    _, accuracy = model.evaluate(dev_data)[:2]
    model.export_model()
    (run_dir / "export" / "model.tflite").replace(run_dir / "model.tflite")
    (run_dir / "results.json").write_text(json.dumps({
        "accuracy": float(accuracy), "train_seconds": round(seconds, 1), "train_examples": train_data.size,
        "epochs": EPOCHS, "batch_size": BATCH, "seed": seed, "tensorflow": tf.__version__}, indent=2) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.model_maker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/quality/model_maker")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--train", help=argparse.SUPPRESS)  # the venv's side: train one seed
    p.add_argument("--dev", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.train:
        train(args.train, args.dev, args.seed, Path(args.run))
        return 0
    from mobilekd.errors import UserError  # our side only: the venv's interpreter has no mobilekd
    try:
        return 1 if run(Path(args.out).resolve(), args.seeds) else 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
