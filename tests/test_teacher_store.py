"""The teacher's stored layer features: built once at each example's own length, read back into padded batches
that give the same layer-matching terms as running the teacher, refused in one line over the disk budget."""

import copy

import numpy as np
import pytest
import torch

from helpers import BERT
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.finetune.objective import intermediate_loss
from mobilekd.finetune.example_store import example_keys
from mobilekd.finetune.teacher_features import estimated_bytes, needed, store_key, teacher_store
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.transfer.layer_maps import layer_map
from mobilekd.transfer.objectives import (minilm_matches, mobilebert_matches, projections_for,
                                          tinybert_matches)


@pytest.fixture(scope="module")
def pair(tmp_path_factory, tokenizer):
    """A small teacher saved to disk, a narrower 2-layer student with TinyBERT's projections, and 40 SST-2
    sentences of many lengths."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("teacher")
    teacher = MobileBertForSequenceClassification(BERT.replace(id2label={0: "negative", 1: "positive"})).eval()
    save_pretrained(teacher, folder, tokenizer)
    narrow = BERT.replace(hidden_size=48, embedding_size=48, intra_bottleneck_size=48, num_hidden_layers=2,
                          id2label={0: "negative", 1: "positive"})
    student = MobileBertForSequenceClassification(narrow).eval()  # no dropout: the terms are compared exactly
    task = load_task("sst2", default_data("sst2"))
    split = encode_classification(task, task.train[:40], tokenizer, 48)
    split.arrays["example_index"] = np.arange(len(split))
    return folder, teacher, student, split


@pytest.mark.parametrize("method", ["tinybert", "pkt", "minilm"])
def test_the_stored_teachers_terms_are_the_running_teachers(pair, tmp_path, method):
    folder, teacher, student, split = pair
    mapped = layer_map("uniform", 4, 2)
    matches = {"tinybert": tinybert_matches(mapped, [0, 1]),
               "pkt": mobilebert_matches(mapped, [0, 1], projection=True),
               "minilm": minilm_matches(4, 2)}[method]
    student.add_module("projections", projections_for(matches, teacher.config, student.config))
    store, record = teacher_store(folder, teacher, split, matches, "no", budget_gb=1.0)
    assert record["teacher_store_hit_rate"] == 0 and record["teacher_store_made_seconds"] > 0
    assert record["teacher_store_bytes"] == store.bytes() > 0
    (segment,) = store.segments
    lengths = split.lengths
    assert {tuple(f) for f in segment.manifest["features"]} == set(needed(matches))
    assert segment.manifest["tokens"] == int(lengths.sum()) and segment.lengths.tolist() == lengths.tolist()  # unpadded
    live, stored = intermediate_loss(teacher, matches), intermediate_loss(teacher, matches, store)
    order = np.argsort(lengths)
    for indices in (order[:8], order[-8:], order[::5]):  # short, long, and mixed lengths (much padding)
        batch = split.batch(indices)
        a, b = live(student, batch), stored(student, batch)
        assert set(a) == set(b)
        for k in a:
            assert b[k].item() == pytest.approx(a[k].item(), rel=2e-3, abs=1e-5), k  # float16's rounding
    made = record["teacher_store_made_seconds"]
    again, record = teacher_store(folder, teacher, split, matches, "no", budget_gb=1.0)
    assert (record["teacher_store_hit_rate"], record["teacher_store_made_seconds"]) == (1, made)  # its cost, read
    assert len(again.segments) == 1


def test_padded_positions_count_as_zero_on_both_sides(pair):
    """A batch's padding does not change an example's terms: the matches read padded positions as zero."""
    folder, teacher, student, split = pair
    matches = tinybert_matches(layer_map("uniform", 4, 2), [0, 1])
    student.add_module("projections", projections_for(matches, teacher.config, student.config))
    loss = intermediate_loss(teacher, matches)
    lengths = split.lengths
    short, long = int(np.argmin(lengths)), int(np.argmax(lengths))
    alone = loss(student, split.batch([short]))
    padded = loss(student, split.batch([short, long]))
    width = int(lengths[long])
    # the per-element means: alone over its own length, padded over the longer width, its zeros included
    with_long = loss(student, split.batch([long]))
    n = int(lengths[short])
    expected = (alone["mse_L1"] * n + with_long["mse_L1"] * width) / (2 * width)
    assert padded["mse_L1"].item() == pytest.approx(expected.item(), rel=1e-4)


def test_a_store_over_the_budget_is_refused_in_one_line(pair, capsys):
    folder, teacher, student, split = pair
    matches = tinybert_matches(layer_map("uniform", 4, 2), [0, 1])
    size = estimated_bytes(split.lengths, needed(matches), teacher.config)
    store, record = teacher_store(folder, teacher, split, matches, "bf16", budget_gb=size / 2e9)
    out = capsys.readouterr().out.strip().splitlines()
    assert store is None and len(out) == 1 and "over --teacher-store-gb" in out[0]
    assert record["teacher_store"].startswith("none: ")
    assert not list((folder / "outputs").glob("*-bf16-features/*"))  # nothing half-built left behind
    store, record = teacher_store(folder, teacher, split, matches, "bf16", budget_gb=0)
    assert store is None and record["teacher_store"] == "none: --teacher-store-gb 0"
    patience_like = [m for m in matches] + [type(matches[0])(feature="cls", loss="pkd", teacher_layer=0,
                                                             student_layer=0)]
    assert needed(patience_like) == []  # a feature it does not keep: the teacher runs


def test_another_seeds_carve_reads_what_is_stored_and_adds_only_the_rest(pair, tmp_path, tokenizer):
    """Examples are known by their tokens: a split that shares half its examples with the stored one (another
    seed's carve, another sequence length that truncates none of them) reads those and stores the others."""
    folder, teacher, student, split = pair
    matches = tinybert_matches(layer_map("uniform", 4, 2), [1])
    teacher_store(folder, teacher, split.subset(np.arange(20)), matches, "no", budget_gb=1.0)
    task = load_task("sst2", default_data("sst2"))
    other = encode_classification(task, task.train[10:30], tokenizer, 128)  # 10 stored, 10 new, a longer max-len
    assert len(set(example_keys(other)) & set(example_keys(split))) == 20
    other.arrays["example_index"] = np.arange(len(other))
    store, record = teacher_store(folder, teacher, other, matches, "no", budget_gb=1.0)
    assert record["teacher_store_hit_rate"] == 0.5 and len(store.segments) == 2
    assert sum(len(s.keys) for s in store.segments) == 30 and len(store.missing) == 0
    student.add_module("projections", projections_for(matches, teacher.config, student.config))
    batch = other.batch(np.arange(4, 16))  # across both segments
    live, stored = intermediate_loss(teacher, matches)(student, batch), intermediate_loss(teacher, matches, store)(
        student, batch)
    assert all(stored[k].item() == pytest.approx(live[k].item(), rel=2e-3, abs=1e-5) for k in live)


def test_a_feature_past_float16s_range_keeps_the_teacher_running(tmp_path, pair, tokenizer, capsys):
    """Attention scores a float16 store cannot hold (the query and key weights scaled up) are refused in one line,
    nothing is left in the store, and the run's terms come from the teacher as before; a killed run's half-built
    segment is cleared by the next run that builds one."""
    _, teacher, student, split = pair
    loud = copy.deepcopy(teacher)
    with torch.no_grad():
        for name in ("query", "key"):
            getattr(loud.mobilebert.encoder.layer[1].attention.self, name).weight.mul_(3000.0)
    save_pretrained(loud, tmp_path, tokenizer)
    matches = tinybert_matches(layer_map("uniform", 4, 2), [0, 1])
    half_built = tmp_path / "outputs" / store_key(tmp_path, needed(matches), "no") / ".segment.killed"
    half_built.mkdir(parents=True)
    store, record = teacher_store(tmp_path, loud, split, matches, "no", budget_gb=1.0)
    out = capsys.readouterr().out.strip().splitlines()
    assert store is None and len(out) == 1 and "past float16's range" in out[0], out
    assert record["teacher_store"].startswith("none: ") and not half_built.exists()
    assert not list(half_built.parent.iterdir())
