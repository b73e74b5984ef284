"""Readers and the pre-training cache, on real (small) data and on fixtures written here."""

import gzip
import json

import numpy as np
import pytest

from mobilekd.data.custom import read_custom
from mobilekd.data.glue import TASKS, find_split, read_glue
from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.data.squad import read_squad, squad_features
from mobilekd.data.tasks import load_task
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.errors import UserError

from conftest import ROOT


def test_tokenizer_is_real_wordpiece(tokenizer):
    assert tokenizer.tokenize("MobileBERT runs on phones") == ["mobile", "##bert", "runs", "on", "phones"]
    assert tokenizer.mask_token_id == 103 and len(tokenizer) == 30522


def test_tokenizer_refuses_a_vocab_without_special_tokens(tmp_path):
    (tmp_path / "vocab.txt").write_text("the\nquick\n")
    with pytest.raises(UserError, match="vocab.txt: vocabulary lacks the special tokens"):
        load_tokenizer(tmp_path / "vocab.txt")


def test_pretraining_cache_builds_once_and_masks_like_bert(small_corpus, tokenizer, tmp_path):
    data = load_pretraining_data([small_corpus], tokenizer, seq_len=64, seed=3, cache_dir=tmp_path / "c")
    again = load_pretraining_data([small_corpus], tokenizer, seq_len=64, seed=3, cache_dir=tmp_path / "c")
    assert data.path == again.path and len(list((tmp_path / "c").iterdir())) == 1
    assert len(data.train) > 100 and len(data.heldout) > 0
    nsp = data.train.rows[:, 4]
    assert 0.4 < nsp.mean() < 0.6  # half the B segments come from another document

    batch = data.train.batch(range(200), epoch=0)
    ids, pos, labels = batch["input_ids"].numpy(), batch["masked_positions"].numpy(), batch["masked_labels"].numpy()
    assert (ids[:, 0] == tokenizer.cls_token_id).all()
    real = batch["attention_mask"].numpy().sum()
    chosen = (pos >= 0).sum()
    assert 0.12 < chosen / real < 0.17  # 15% of tokens (special tokens excluded)
    replaced = np.concatenate([ids[i, pos[i][pos[i] >= 0]] for i in range(len(ids))])
    kept_labels = labels[labels >= 0]
    frac_mask = (replaced == tokenizer.mask_token_id).mean()
    frac_same = (replaced == kept_labels).mean()
    assert 0.75 < frac_mask < 0.85 and 0.06 < frac_same < 0.14  # 80% [MASK], 10% unchanged (+ random hits)
    # Deterministic per (seed, epoch, index); new masks each epoch.
    assert np.array_equal(data.train.batch([5], 0)["input_ids"], data.train.batch([5], 0)["input_ids"])
    assert not np.array_equal(data.train.batch(range(8), 0)["input_ids"], data.train.batch(range(8), 1)["input_ids"])


def test_pretraining_refuses_empty_or_missing_corpus(tmp_path, tokenizer):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(UserError, match="empty.txt: the corpus is empty"):
        load_pretraining_data([empty], tokenizer, cache_dir=tmp_path / "c")
    assert not any((tmp_path / "c").iterdir())  # nothing partial left behind
    with pytest.raises(UserError, match="nope.txt: no such corpus file"):
        load_pretraining_data([tmp_path / "nope.txt"], tokenizer, cache_dir=tmp_path / "c")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(UserError, match="latin1.txt:1: not UTF-8"):
        load_pretraining_data([bad], tokenizer, cache_dir=tmp_path / "c")


@pytest.mark.parametrize("name", ["cola", "sst2", "mrpc", "stsb", "rte"])
def test_shipped_glue_tasks_read(name):
    task = TASKS[name]
    train = read_glue(task, find_split(ROOT / "data/glue" / task.directory, "train"))
    dev = read_glue(task, find_split(ROOT / "data/glue" / task.directory, "dev"))
    expected = {"cola": 1043, "sst2": 872, "mrpc": 408, "stsb": 1500, "rte": 277}[name]
    assert len(dev) == expected and len(train) > len(dev)
    if task.is_regression:
        assert all(0.0 <= e.label <= 5.0 for e in dev)
    else:
        assert {e.label for e in dev} == set(task.labels)
    assert (dev[0].text_b is None) == (task.text_b is None)


FIXTURES = {
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
            "1\t1\t2\tHow do I learn Python?\tWhat is the best way to learn Python?\t1\n"),
    "mnli": ("index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label\n"
             "0\t1\t1a\tfiction\t(x)\t(y)\t(X)\t(Y)\tThe cat sat.\tA cat is sitting.\tentailment\tentailment\n"),
    "qnli": "index\tquestion\tsentence\tlabel\n0\tWho wrote it?\tShe wrote it in 1811.\tentailment\n",
    "wnli": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n",
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_unshipped_glue_layouts(name, tmp_path):
    path = tmp_path / ("dev_matched.tsv" if name == "mnli" else "dev.tsv")
    path.write_text(FIXTURES[name])
    [example] = read_glue(name, path)
    assert example.text_a and example.text_b and example.label in TASKS[name].labels
    test = tmp_path / "test.tsv"  # GLUE test files have no label column
    header, row = FIXTURES[name].splitlines()
    cols = header.split("\t")
    keep = [i for i, c in enumerate(cols) if c != TASKS[name].label]
    test.write_text("\n".join("\t".join(line.split("\t")[i] for i in keep) for line in (header, row)) + "\n")
    assert read_glue(name, test)[0].label is None


@pytest.mark.parametrize("content, problem", [
    ("sentence\tlabel\ngood film\t1\textra\n", r"dev.tsv:2: row has 3 columns, expected 2"),
    ("sentence\tlabel\ngood film\t7\n", r"dev.tsv:2: unknown label '7'"),
    ("sentence\tlabel\n \t1\n", r"dev.tsv:2: empty text"),
    ("text\tlabel\ngood\t1\n", r"dev.tsv:1: not a sst2 file: header lacks the columns \['sentence'\]"),
    ("sentence\tlabel\n", r"dev.tsv: no examples"),
])
def test_glue_bad_input_names_file_and_line(tmp_path, content, problem):
    path = tmp_path / "dev.tsv"
    path.write_text(content)
    with pytest.raises(UserError, match=problem):
        read_glue("sst2", path)


def test_glue_reads_gzip_and_refuses_non_utf8(tmp_path):
    path = tmp_path / "dev.tsv.gz"
    with gzip.open(path, "wt") as f:
        f.write("sentence\tlabel\nfine\t1\n")
    assert read_glue("sst2", path)[0].label == "1"
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"sentence\tlabel\nna\xefve\t1\n")
    with pytest.raises(UserError, match=r"bad.tsv:2: not UTF-8"):
        read_glue("sst2", bad)


def test_custom_csv_and_jsonl(tmp_path):
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text('text,text_pair,label\n"Hello, world",Hi,greeting\nBye,Ciao,farewell\n')
    examples = read_custom(csv_path)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("Hello, world", "Hi", "greeting"),
                                                                  ("Bye", "Ciao", "farewell")]
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text(json.dumps({"text": "great", "label": 4.5}) + "\n" + json.dumps({"text": "meh", "label": 2}))
    assert [e.label for e in read_custom(jsonl, regression=True)] == [4.5, 2.0]
    jsonl.write_text(json.dumps({"text": "great"}) + "\n" + json.dumps({"text": "meh"}) + "\n")  # to predict
    assert [e.label for e in read_custom(jsonl)] == [None, None]
    with pytest.raises(UserError, match=r"mine.csv:2: unknown label 'greeting'"):
        read_custom(csv_path, labels=["farewell"])
    # a row without the second text or the label that the others have: refused at it, not dropped or crashed on
    csv_path.write_text('text,text_pair,label\n"Hello, world",Hi,greeting\nBye,,farewell\n')
    with pytest.raises(UserError, match=r"mine.csv:3: no text_pair on this row, while line 2 has one"):
        read_custom(csv_path)
    csv_path.write_text('text,text_pair,label\nBye,,farewell\n"Hello, world",Hi,greeting\n')  # the first blank
    with pytest.raises(UserError, match=r"mine.csv:2: no text_pair on this row, while line 3 has one"):
        read_custom(csv_path)
    csv_path.write_text("text,label\nHello,greeting\nBye,\n")
    with pytest.raises(UserError, match=r"mine.csv:3: no label on this row, while line 2 has one"):
        read_custom(csv_path)
    jsonl.write_text('{"text": "ok", "label": "a"}\n{"label": "b"}\n')
    with pytest.raises(UserError, match=r"mine.jsonl:2: record has no 'text' field"):
        read_custom(jsonl)


def _squad(v2: bool):
    context = ("MobileBERT is a thin version of BERT_LARGE. " * 30) + "It was released by Google in 2020."
    qas = [{"id": "q1", "question": "Who released MobileBERT?",
            "answers": [{"text": "Google", "answer_start": context.index("Google")}]}]
    if v2:
        qas[0]["is_impossible"] = False
        qas.append({"id": "q2", "question": "Who ate the cake?", "answers": [], "is_impossible": True})
    return {"version": "v2.0" if v2 else "1.1", "data": [{"title": "t", "paragraphs": [{"context": context,
                                                                                         "qas": qas}]}]}


@pytest.mark.parametrize("v2", [False, True])
def test_squad_reader_and_document_stride(tmp_path, tokenizer, v2):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(_squad(v2)))
    examples, version = read_squad(path)
    assert version == ("2.0" if v2 else "1.1") and len(examples) == (2 if v2 else 1)
    feats = squad_features(examples, tokenizer, max_len=128, stride=32)
    first = feats["example_index"] == 0
    assert first.sum() >= 3  # the ~330-token context is cut into overlapping windows
    hits = np.flatnonzero(first & (feats["start_positions"] > 0))
    assert len(hits) >= 1  # the answer lies in (at least) the last window...
    for i in hits:
        span = feats["input_ids"][i, feats["start_positions"][i]:feats["end_positions"][i] + 1]
        assert tokenizer.decode(span) == "google"
    if v2:
        assert (feats["start_positions"][feats["example_index"] == 1] == 0).all()  # unanswerable -> [CLS]


def test_squad_bad_answer_offset(tmp_path):
    data = _squad(False)
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"squad.json: data\[0\].paragraphs\[0\].qas\[0\]: answer 'Google' is not at"):
        read_squad(path)


def test_read_only_passes_batch_by_length_and_return_outputs_in_order(tokenizer):
    """`EncodedSplit.by_length`: every example once, batches shortest first (so a teacher's outputs over SST-2 read
    little padding), and `back` puts outputs made in that order back in the split's order."""
    from mobilekd.data.tasks import encode_classification, load_task, task_data
    task = load_task("sst2", task_data("sst2", None))
    split = encode_classification(task, task.train[:300], tokenizer, 64)
    batches, back = split.by_length(32)
    order = np.concatenate(batches)
    assert sorted(order.tolist()) == list(range(300)) and len(batches) == 10
    widths = [int(split.lengths[b].max()) for b in batches]
    assert widths == sorted(widths) and widths[0] < widths[-1]
    padded = sum(len(b) * int(split.lengths[b].max()) for b in batches)
    in_order = sum(32 * int(split.lengths[i:i + 32].max()) for i in range(0, 300, 32))
    assert padded < in_order  # fewer padded positions than the split's own order
    assert np.array_equal(split.arrays["input_ids"][order][back], split.arrays["input_ids"])


def test_a_custom_training_set_of_one_class_is_refused_before_any_training(tmp_path):
    """Found when the task is loaded, not when dev is scored at the end of a whole run (or search), where the one
    class the model learnt cannot hold dev's others; dev is not read to find it."""
    (tmp_path / "train.csv").write_text("text,label\na film,captions\nanother,captions\n")
    (tmp_path / "dev.csv").write_text("text,label\nnews item,news\n")
    with pytest.raises(UserError, match=r"train.csv: every example has the label 'captions': a classifier needs two"):
        load_task("custom", tmp_path)
    (tmp_path / "train.csv").write_text("text,label\na film,captions\nnews,news\n")
    assert load_task("custom", tmp_path).labels == ["captions", "news"]
    (tmp_path / "train.csv").write_text("text,label\na film,1.5\nanother,1.5\n")
    assert load_task("custom", tmp_path, regression=True).is_regression


def test_a_dev_set_lacking_a_class_is_read_against_the_models_labels(tmp_path):
    """Scoring a fine-tuned model (eval-only) reads dev against the model's labels, in its order: a dev set without
    one of them still fits the model, and a label the model never learned is refused at its line."""
    (tmp_path / "dev.csv").write_text("text,label\nnews item,news\nmore news,news\n")
    assert load_task("custom", tmp_path, eval_only=True).labels == ["news"]  # no model: dev's own, as before
    task = load_task("custom", tmp_path, eval_only=True, labels=["news", "captions", "ads"])
    assert task.labels == ["news", "captions", "ads"] and len(task.dev["dev"]) == 2
    (tmp_path / "dev.csv").write_text("text,label\nnews item,news\nsports,sports\n")
    with pytest.raises(UserError, match=r"dev.csv:3: unknown label 'sports'"):
        load_task("custom", tmp_path, eval_only=True, labels=["news", "captions"]).dev["dev"]
