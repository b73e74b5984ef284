"""The selection protocol (`mobilekd.finetune.selection`): choices read a validation split carved from the training
data, and dev is read once, after every choice, to score the model chosen."""

import csv
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from helpers import env
from mobilekd.data.glue import read_glue
from mobilekd.data.tasks import load_task
from mobilekd.errors import UserError
from mobilekd.finetune.selection import carve, validation_size


def _write_task(directory, train=300, dev=120):
    """SST-2 sentences as a user's CSV task with the labels 'bad' and 'good'; returns dev's text."""
    directory.mkdir()
    texts = {}
    for split, n in (("train", train), ("dev", dev)):
        rows = read_glue("sst2", ROOT / "data/glue/SST-2" / f"{split}.tsv.gz")[:n]
        with open(directory / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows([e.text_a, {"0": "bad", "1": "good"}[e.label]] for e in rows)
        texts[split] = (directory / f"{split}.csv").read_text()
    return texts["dev"]


def test_the_validation_split_is_seeded_stratified_disjoint_and_recorded(tmp_path):
    _write_task(tmp_path / "t", train=300)
    task = load_task("custom", tmp_path / "t")
    a, b, c = carve(task, task.train, 0), carve(task, task.train, 0), carve(task, task.train, 1)
    assert [e.text_a for e in a.validation] == [e.text_a for e in b.validation]  # seeded
    assert [e.text_a for e in a.validation] != [e.text_a for e in c.validation]
    assert len(a.validation) == 30 and len(a.train) == 270
    assert {id(e) for e in a.train}.isdisjoint({id(e) for e in a.validation})
    share = Counter(e.label for e in task.train)["good"] / 300
    assert abs(Counter(e.label for e in a.validation)["good"] / 30 - share) <= 1 / 30  # stratified by label
    assert a.record["rule"].startswith("stratified by label") and a.record["size"] == 30
    assert 35 <= len(carve(task, task.train, 0, fraction=0.5, cap=40).validation) <= 40  # capped (by group)
    with pytest.raises(UserError, match="between 0 and 1"):
        carve(task, task.train, 0, fraction=1.0)
    stsb = load_task("stsb", ROOT / "data/glue/STS-B")
    assert "quantile" in carve(stsb, stsb.train[:200], 0).record["rule"]


def test_a_text_that_recurs_in_training_is_never_on_both_sides(tmp_path):
    """STS-B's first sentences recur across its pairs: as a one-sentence task, a random split would score
    validation on sentences training saw."""
    import csv as csv_

    with open(tmp_path / "train.csv", "w", newline="") as f:
        writer = csv_.writer(f)
        writer.writerow(["text", "label"])
        for e in load_task("stsb", ROOT / "data/glue/STS-B").train[:1500]:
            writer.writerow([e.text_a, "high" if e.label >= 2.5 else "low"])
    (tmp_path / "dev.csv").write_text("text,label\na,high\nb,low\n")
    task = load_task("custom", tmp_path)
    assert len({e.text_a for e in task.train}) < len(task.train)  # the texts do recur
    carved = carve(task, task.train, 0)
    assert not {e.text_a for e in carved.validation} & {e.text_a for e in carved.train}
    assert "one side" in carved.record["rule"] and 100 <= carved.record["size"] <= 200


def test_a_phrase_inside_a_longer_training_text_is_held_on_that_texts_side():
    """SST-2's training examples are the phrases of its sentences' parse trees: a split drawn at random scores
    validation on phrases of sentences training saw (88% of them on the whole set). Grouped, a phrase goes where the
    longest text holding it goes; only phrases common to many sentences ("the film") still stand inside training."""
    from sklearn.model_selection import train_test_split

    from mobilekd.finetune.selection import text_groups

    task = load_task("sst2", ROOT / "data/glue/SST-2")
    examples = task.train[:5000]

    def inside_share(train, validation):
        spans = {w[a:b] for w in (tuple(e.text_a.lower().split()) for e in train)
                 for a in range(len(w)) for b in range(a + 1, len(w) + 1)}
        return sum(tuple(e.text_a.lower().split()) in spans for e in validation) / len(validation)

    carved = carve(task, examples, 0)
    assert carved.record["rule"] == "stratified by label, a text and the training texts holding it on one side"
    assert 400 <= carved.record["size"] <= 600
    train, validation = train_test_split(examples, test_size=carved.record["size"], random_state=0)
    assert inside_share(train, validation) > 0.15 and inside_share(carved.train, carved.validation) < 0.05
    longer = [e for e in carved.validation if len(e.text_a.split()) >= 4]  # a phrase of 4 words or more
    assert inside_share(carved.train, longer) < 0.01
    pairs = load_task("mrpc", ROOT / "data/glue/MRPC").train[:300]  # a pair task, its links aside: copies (none)
    groups, rule = text_groups(pairs, linked_pairs=False)
    assert rule == "" and groups.max() + 1 == 300


@pytest.mark.parametrize("name, folder", [("mrpc", "MRPC"), ("rte", "RTE")])
def test_a_pair_task_holds_the_pairs_linked_by_a_shared_sentence_on_one_side(name, folder):
    """MRPC and RTE pair a sentence with several others: split at random, validation reads sentences training saw;
    carved, no validation pair shares a sentence (as an uncased model reads it) with a training pair."""
    from sklearn.model_selection import train_test_split

    task = load_task(name, ROOT / "data/glue" / folder)

    def seen(train, validation):
        read = {" ".join(t.lower().split()) for e in train for t in (e.text_a, e.text_b)}
        return sum(any(" ".join(t.lower().split()) in read for t in (e.text_a, e.text_b)) for e in validation)

    carved = carve(task, task.train, 0)
    assert carved.record["rule"] == "stratified by label, the pairs linked by a shared text on one side"
    train, validation = train_test_split(task.train, test_size=carved.record["size"], random_state=0)
    assert seen(train, validation) > 0.05 * len(validation) and seen(carved.train, carved.validation) == 0


def test_pairs_sharing_a_prompt_are_not_one_group_that_outgrows_the_split():
    """A custom pair task whose second text is one of three prompts would link every pair into three groups, each
    larger than the validation split: the links are let go (copies still kept together), and the split keeps
    its size."""
    from mobilekd.data.examples import TextExample
    from mobilekd.data.tasks import Task

    task = Task("custom", "classification", ["no", "yes"], ("accuracy",), None, None)
    rows = load_task("sst2", ROOT / "data/glue/SST-2").train[:400]
    examples = [TextExample(e.text_a, ("Is it good?", "Is it bad?", "Would you see it?")[i % 3], e.label == "positive"
                            and "yes" or "no") for i, e in enumerate(rows)]
    carved = carve(task, examples, 0)
    assert carved.record["size"] == 40 and "not kept together (one such group would outgrow the split)" in \
        carved.record["rule"]


def test_a_linked_group_too_large_for_a_fair_share_of_validation_trains():
    """STS-B's shared sentences chain 245 video-caption pairs into one group, which held whole was 43% of every
    seed's validation split (the same 245 for each seed). A linked group over MAX_GROUP_SHARE of the split now
    trains: no group fills validation, the seeds draw different splits, no validation pair shares a sentence with
    training, the split keeps its size, and ship's plan records the rule (so a search carved before is not resumed)."""
    from mobilekd.finetune.selection import MAX_GROUP_SHARE, OVERSIZED, PAIR_GROUPING, grouping, text_groups

    task = load_task("stsb", ROOT / "data/glue/STS-B")
    groups, _ = text_groups(task.train)
    held = []
    for seed in (0, 1):
        carved = carve(task, task.train, seed)
        assert 520 <= carved.record["size"] <= 630
        assert "1 linked group(s) of over 28 pairs (245 pairs) kept in training" in carved.record["rule"]
        assert [task.train[i] for i in carved.held] == carved.validation
        in_validation = groups[carved.held]
        assert np.bincount(in_validation).max() <= MAX_GROUP_SHARE * 575
        read = {" ".join(t.lower().split()) for e in carved.train for t in (e.text_a, e.text_b)}
        assert not any(" ".join(t.lower().split()) in read for e in carved.validation for t in (e.text_a, e.text_b))
        held.append(set(carved.held))
    assert len(held[0] & held[1]) < 0.25 * 575  # held whole, the caption group made them share 245 and more
    assert grouping(task.train) == PAIR_GROUPING + OVERSIZED
    before = carve(task, task.train, 0, max_group_share=None)  # the split the runs of 2026-12-06 were scored on
    assert sum(groups[before.held] == np.argmax(np.bincount(groups))) == 245
    assert grouping(load_task("mrpc", ROOT / "data/glue/MRPC").train) == PAIR_GROUPING  # no group over the share


def test_small_pair_data_keeps_its_linked_groups_whole():
    """300 pairs, 50 questions with 6 answers each: the share's floor (one pair of a 30-pair split) would send every
    group to training and leave none to validate with, so the groups stay whole, as before the share: no validation
    question is one training read."""
    from mobilekd.data.examples import TextExample
    from mobilekd.data.tasks import Task

    task = Task("custom", "classification", ["no", "yes"], ("accuracy",), None, None)
    texts = [e.text_a for e in load_task("sst2", ROOT / "data/glue/SST-2").train[:2000]]
    questions, answers = texts[:50], texts[50:350]
    examples = [TextExample(questions[i // 6], answers[i], ("no", "yes")[i % 2]) for i in range(300)]
    carved = carve(task, examples, 0)
    assert carved.record["size"] == 30
    assert carved.record["rule"].endswith(", the pairs linked by a shared text on one side")
    assert not {e.text_a for e in carved.validation} & {e.text_a for e in carved.train}


def test_loading_a_task_reads_its_dev_file_only_when_a_dev_split_is_used(tmp_path):
    _write_task(tmp_path / "t")
    (tmp_path / "t" / "dev.csv").write_text("not,a,valid\ncsv row with no label\n")
    task = load_task("custom", tmp_path / "t")  # a broken dev file is not read yet
    assert list(task.dev) == ["dev"] and len(task.train) == 300
    with pytest.raises(UserError, match="dev.csv"):
        task.dev["dev"]


def _run_with_dev_a_pipe(student_dir, tmp_path, *flags) -> tuple[dict, list, dict, Path]:
    """Fine-tune on a CSV task whose dev.csv is a named pipe: any read blocks until this writes it, which it does
    only once the run opens it. Returns results.json and history.json as they were then, results.json after."""
    data = tmp_path / "t"
    dev_text = _write_task(data)
    (data / "dev.csv").unlink()
    os.mkfifo(data / "dev.csv")
    out = tmp_path / "ft"
    proc = subprocess.Popen([sys.executable, "-m", "mobilekd.recipes.finetune", "--model", str(student_dir),
                             "--task", "custom", "--data", str(data), "--out", str(out), "--batch-size", "16",
                             "--max-len", "32", "--threads", "1", *flags],
                            cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, fd = time.time() + 300, None
        while fd is None:  # the pipe opens for writing only once the run opens it for reading
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the run never read dev"
            try:
                fd = os.open(data / "dev.csv", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.2)
        before = json.loads((out / "results.json").read_text())  # the run waits on dev: every choice is made
        history = json.loads((out / "history.json").read_text())
        assert (out / "model.safetensors").is_file()
        os.set_blocking(fd, True)
        os.write(fd, dev_text.encode())
        os.close(fd)
        assert proc.wait(timeout=300) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    return before, history, json.loads((out / "results.json").read_text()), out


def test_a_run_whose_dev_file_is_unreadable_until_the_end_still_makes_every_choice(student_dir, tmp_path):
    """dev.csv is a named pipe that the test fills only once the run has trained, evaluated every checkpoint on
    validation and kept its best; then the run scores dev once."""
    before, history, after, out = _run_with_dev_a_pipe(student_dir, tmp_path, "--max-steps", "6", "--eval-every", "2")
    assert before["selected_on"] == "validation" and list(before["metrics"]) == ["validation"]
    assert [h["step"] for h in history] == [2, 4, 6] and all(list(h["metrics"]) == ["validation"] for h in history)
    assert after["best_step"] == before["best_step"] and list(after["metrics"]) == ["dev", "validation"]
    assert 0 <= after["metrics"]["dev"]["accuracy"] <= 1 and after["dev_scored"].startswith("once")
    assert (out / "dev_predictions.tsv").read_text().count("\n") == 121  # the model chosen, over all of dev


def test_a_run_that_chooses_nothing_trains_on_every_example_and_reads_dev_once_at_the_end(student_dir, tmp_path):
    """With --eval-every 0 there is no checkpoint to choose: no validation split is carved (auto), the last step's
    model is kept, and dev is still read only after it is."""
    before, history, after, _ = _run_with_dev_a_pipe(student_dir, tmp_path, "--max-steps", "4", "--eval-every", "0")
    assert before["selected_on"] == after["selected_on"] == "none (the last step)" and before["metrics"] == {}
    assert [h["step"] for h in history] == [4] and after["train_examples"] == 300  # none held out
    assert list(after["metrics"]) == ["dev"] and after["best_score"] == after["metrics"]["dev"]["accuracy"]


def test_select_on_none_keeps_the_last_model_however_often_it_evaluates(student_dir, tmp_path):
    _write_task(tmp_path / "t")
    out = tmp_path / "ft"
    subprocess.run([sys.executable, "-m", "mobilekd.recipes.finetune", "--model", str(student_dir), "--task", "custom",
                    "--data", str(tmp_path / "t"), "--out", str(out), "--batch-size", "16", "--max-len", "32",
                    "--threads", "1", "--max-steps", "6", "--eval-every", "2", "--select-on", "none"],
                   cwd=ROOT, env=env(), check=True, capture_output=True)
    result = json.loads((out / "results.json").read_text())
    assert result["best_step"] == 6 and result["selected_on"] == "none (the last step)"
    assert list(result["metrics"]) == ["dev"] and result["train_examples"] == 300


def test_squad_questions_are_held_out_by_paragraph(tmp_path):
    """Validation never reads a context that training saw: a paragraph's questions stay on one side."""
    data = [{"title": f"t{a}", "paragraphs": [{"context": f"Paragraph {a}.{p} says the answer is {a}{p}.", "qas": [
        {"id": f"{a}.{p}.{q}", "question": f"What does paragraph {a}.{p} say, {q}?",
         "answers": [{"text": f"{a}{p}", "answer_start": len(f"Paragraph {a}.{p} says the answer is ")}]}
        for q in range(3)]} for p in range(4)]} for a in range(5)]
    (tmp_path / "squad").mkdir()
    for split in ("train", "dev"):
        (tmp_path / "squad" / f"{split}.json").write_text(json.dumps({"version": "1.1", "data": data}))
    task = load_task("squad1", tmp_path / "squad")
    carved = carve(task, task.train, 0, fraction=0.2)
    held, kept = {e.context for e in carved.validation}, {e.context for e in carved.train}
    assert held and kept and not held & kept and carved.record["rule"] == "random paragraphs"
    assert len(carved.validation) % 3 == 0 and len(carved.validation) + len(carved.train) == 60


def test_mrpc_chooses_on_f1_and_accuracy_so_answering_equivalent_to_every_pair_is_not_chosen():
    """On MRPC's dev labels (68% paraphrases), answering "equivalent" to every pair scores an F1 above that of a model
    right on three pairs in four of each class: F1 alone would pick the constant answer, and early checkpoints that
    answer so were picked (ship's MRPC students sat at the majority class's F1). The score a run chooses on, the mean
    of F1 and accuracy, puts the model first."""
    import numpy as np

    from mobilekd.data.tasks import default_data
    from mobilekd.finetune.metrics import classification_metrics, selection_score

    task = load_task("mrpc", default_data("mrpc"), eval_only=True)
    labels = task.targets(next(iter(task.dev.values())))
    rng = np.random.default_rng(0)
    model = labels.copy()
    for cls in (0, 1):  # a quarter of each class answered wrong
        where = np.flatnonzero(labels == cls)
        model[rng.choice(where, len(where) // 4, replace=False)] = 1 - cls
    scores = {name: classification_metrics(task.metrics, labels, p) for name, p in
              (("model", model), ("constant", np.ones_like(labels)))}
    assert scores["constant"]["f1"] > scores["model"]["f1"]  # what choosing on F1 alone would do
    chosen = {name: selection_score(task.selection_metric, m) for name, m in scores.items()}
    assert chosen["model"] > chosen["constant"]
    assert chosen["constant"] == pytest.approx((scores["constant"]["f1"] + scores["constant"]["accuracy"]) / 2)
    assert task.metrics[0] == "f1" and load_task("sst2", default_data("sst2"), eval_only=True).selection_metric == \
        "accuracy"  # the tables still report MRPC's F1; other tasks choose on their first metric


def test_the_best_constant_answer_is_scored_on_the_split_a_run_carves(tmp_path):
    """What a chosen student's validation score is read against (ship's warning, the frontier's floor): each class
    answered to every example `carve` holds out for that seed, in the score a run chooses on, the best kept. On MRPC
    it is "equivalent", whose F1 on validation is far above its F1-and-accuracy mean, the score that no longer
    rewards it. Where paraphrases are the minority (MRPC's training pairs with two thirds of its paraphrases left
    out) the majority answer scores an F1 of 0 and the best constant is still "equivalent"; regression has none."""
    import gzip

    import numpy as np

    from mobilekd.data.tasks import default_data
    from mobilekd.finetune.baseline import constant_on_validation
    from mobilekd.finetune.metrics import classification_metrics

    task = load_task("mrpc", default_data("mrpc"))
    best = constant_on_validation(task, 0)
    held = carve(task, task.train, 0).validation
    assert best["metric"] == "acc_and_f1" and best["examples"] == len(held)
    assert abs(len(held) - validation_size(len(task.train))) <= 5  # grouped: whole groups of linked pairs
    share = sum(e.label == best["label"] for e in held) / len(held)  # its accuracy: the label's share there
    assert best["label"] == "equivalent" and share > 0.5
    f1 = constant_on_validation(task, 0, metric="f1")["value"]
    assert f1 == pytest.approx(classification_metrics(["f1"], task.targets(held), np.ones(len(held)))["f1"])
    assert best["value"] == pytest.approx((f1 + share) / 2) and f1 - best["value"] > 0.05

    lines = gzip.open(default_data("mrpc") / "train.tsv.gz", "rt", encoding="utf-8").read().splitlines()
    kept = [line for k, line in enumerate(lines[1:]) if not line.startswith("1") or k % 3 == 0]
    (tmp_path / "train.tsv").write_text("\n".join([lines[0], *kept]) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv.gz").write_bytes((default_data("mrpc") / "dev.tsv.gz").read_bytes())
    fewer = load_task("mrpc", tmp_path)
    labels = fewer.targets(carve(fewer, fewer.train, 0).validation)
    assert labels.mean() < 0.5  # the majority is now "not_equivalent", whose F1 is 0
    got = constant_on_validation(fewer, 0)
    scores = [(classification_metrics(["f1"], labels, np.full(len(labels), k))["f1"] + np.mean(labels == k)) / 2
              for k in (0, 1)]
    assert got["label"] == "equivalent" and got["value"] == pytest.approx(max(scores)) and scores[1] > scores[0]
    assert constant_on_validation(load_task("stsb", default_data("stsb")), 0) is None


def test_a_run_records_the_score_it_chose_on_in_each_evaluation(student_dir, tmp_path):
    """A fine-tuning run on MRPC writes, beside each evaluation's metrics, the score it chooses its checkpoint by
    (what `ship`'s pruner reads); its results name that score and keep F1, the task's own metric, as best_metric;
    a run resumed from a results.json written before the score existed does not compare F1 with it."""
    out = tmp_path / "ft"
    subprocess.run([sys.executable, "-m", "mobilekd.recipes.finetune", "--model", str(student_dir), "--task", "mrpc",
                    "--max-train-examples", "200", "--out", str(out), "--batch-size", "16", "--max-len", "48",
                    "--threads", "1", "--max-steps", "4", "--eval-every", "2", "--select-on", "validation",
                    "--skip-dev"], cwd=ROOT, env=env(), check=True, capture_output=True)
    result = json.loads((out / "results.json").read_text())
    history = json.loads((out / "history.json").read_text())
    from mobilekd.data.tasks import default_data
    from mobilekd.finetune.evaluation import chosen_by, kept_score
    from mobilekd.search.study import validation_values

    assert [h["step"] for h in history] == [2, 4] and result["selected_on"] == "validation"
    for h in history:
        v = h["metrics"]["validation"]
        assert list(v) == ["f1", "accuracy"] and h["score"] == pytest.approx((v["f1"] + v["accuracy"]) / 2)
    assert validation_values(out / "history.json") == [h["score"] for h in history]
    best = next(h for h in history if h["step"] == result["best_step"])
    assert chosen_by(result) == ("acc_and_f1", max(h["score"] for h in history)) == ("acc_and_f1", best["score"])
    assert result["best_metric"] == "f1" and result["best_score"] == best["metrics"]["validation"]["f1"]
    task = load_task("mrpc", default_data("mrpc"), eval_only=True)
    older = {k: v for k, v in result.items() if not k.startswith("selection")}
    assert kept_score(result, task) == best["score"] and kept_score(older, task) is None


def test_a_students_teacher_record_holds_that_teachers_dev_scores_on_the_same_task(tmp_path):
    """`teacher_record`: the teacher's weights' digest, and its dev scores only from a finished run on the student's
    task, not its held-out training slice ("selection", first where a run selected on it)."""
    from mobilekd.fileio import write_json
    from mobilekd.rundir import teacher_record
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    write_json(tmp_path / "results.json", {"complete": True, "task": "rte", "metrics": {
        "selection": {"accuracy": 0.9}, "dev": {"accuracy": 0.55}}})
    record = teacher_record(tmp_path, "rte")
    assert record["teacher_dev"] == {"accuracy": 0.55} and len(record["teacher_digest"]) == 16
    assert "teacher_dev" not in teacher_record(tmp_path, "qnli")  # a teacher of another task: no share over it
    write_json(tmp_path / "results.json", {"task": "rte", "metrics": {"dev": {"accuracy": 0.55}}})
    assert "teacher_dev" not in teacher_record(tmp_path, "rte")  # not finished

