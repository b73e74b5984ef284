import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# every program a test runs sees these (helpers.env), and so does this process, before torch is imported: the server
# our programs fork from (mobilekd/launch.py) imports torch with this environment, as a fresh process would
os.environ.update({"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1",
                   "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"})
if os.environ.get("PYTEST_XDIST_WORKER"):  # one of scripts/test.sh's processes, one per core: one thread each
    import torch

    torch.set_num_threads(1)
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tokenizer():
    from mobilekd.data.tokenizer import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A real (if small) corpus: the first 40 Brown documents, as the shipped file has them."""
    from mobilekd.data.pretraining import read_documents

    docs = []
    for doc in read_documents(ROOT / "data/corpus/brown.txt.gz"):
        docs.append(doc)
        if len(docs) == 40:
            break
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def student_dir(tmp_path_factory, tokenizer):
    """A randomly initialised demo student (pre-training head), as `mobilekd init` writes one."""
    import torch

    from mobilekd.models.heads import MobileBertForPreTraining
    from mobilekd.models.hf import save_pretrained
    from mobilekd.models.presets import PRESETS

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("student")
    save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), out, tokenizer)
    return out


@pytest.fixture(scope="session")
def demo_teacher_dir(small_corpus, tmp_path_factory):
    """A demo-preset teacher pre-trained for 200 steps on the small corpus: real, if small (about a minute). Under
    scripts/test.sh's workers it is trained once, by the first worker to ask, in the session's directory they share
    (each worker's own lies below it), the others waiting on its lock."""
    from filelock import FileLock
    from helpers import run_module

    base = tmp_path_factory.getbasetemp()
    out = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "demo_teacher"
    with FileLock(f"{out}.lock"):
        if not (out / "model.safetensors").is_file():
            run_module("mobilekd.recipes.train_teacher", "--corpus", small_corpus, "--out", out, "--cache-dir",
                       out / "cache", "--steps", 200, "--max-len", 48, "--batch-size", 16, "--eval-examples", 16,
                       "--threads", 1)
    return out
