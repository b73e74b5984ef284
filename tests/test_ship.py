"""`mobilekd ship`'s budgets from real data, its refusals of bad input, and the custom tasks built from shipped text
(the one command itself runs in test_readme_commands.py, as the README prints it)."""

import csv
from collections import Counter

from conftest import ROOT
from helpers import one_line_error, run_module


def write_csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def sst2_csv(tmp_path, n_train, n_dev=50):
    from mobilekd.data.glue import find_split, read_glue

    data = tmp_path / "data"
    for split, n in (("train", n_train), ("dev", n_dev)):
        examples = read_glue("sst2", find_split(ROOT / "data/glue/SST-2", split))[:n]
        write_csv(data / f"{split}.csv", [(e.text_a, {"0": "negative", "1": "positive"}[e.label]) for e in examples])
    return data


def test_budgets_follow_the_data_size_and_its_lengths(tmp_path):
    from mobilekd.models.pretrained import model_dir
    from mobilekd.recipes.ship import budget, measure

    # SST-2's training phrases under the packaged teacher's tokenizer: short, so 32 or 64 word pieces, not 128
    b = measure(model_dir("all-minilm-l6-v2"), sst2_csv(tmp_path, 3000), regression=False)
    assert b["train_examples"] == 3000 and b["classes"] == 2 and b["dev_examples"] == 50
    assert b["max_len"] in (32, 64) and b["length_p95"] <= b["max_len"]
    assert (b["teacher_epochs"], b["student_epochs"]) == (3, 7)  # 3,000 examples: 7 epochs to see about 20,000
    # the demo's measured settings (configs/demo.json) are the student's
    assert b["layers"] == "spread:2" and b["student_lr"] == 4e-4 and b["teacher_lr"] == 5e-5
    assert budget(10_000, [40] * 10)["student_epochs"] == 2  # the demo's 10,000 SST-2 examples: 2 epochs
    large = budget(67_349, [200] * 10)
    assert (large["teacher_epochs"], large["student_epochs"], large["max_len"]) == (1, 1, 128)


def test_bad_input_is_one_line(tmp_path):
    data = sst2_csv(tmp_path, 20)
    no_teacher = one_line_error(run_module("mobilekd", "ship", "--teacher", tmp_path / "nope", "--data", data,
                                           "--out", tmp_path / "out", check=False))
    assert "nope" in no_teacher and "not a model directory" in no_teacher
    no_data = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data",
                                        tmp_path / "missing", "--out", tmp_path / "out", check=False))
    assert "missing" in no_data
    write_csv(data / "dev.csv", [("a fine film", "positive"), ("a film", "neutral")])  # a label train never has
    unknown = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                        "--out", tmp_path / "out", check=False))
    assert "dev.csv" in unknown and "neutral" in unknown
    assert not (tmp_path / "out").exists()  # refused before any stage ran
    data = sst2_csv(tmp_path / "again", 20)
    layers = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                       "--layers", "0,9", "--out", tmp_path / "out", check=False))
    assert "0-5" in layers and "0,9" in layers and not (tmp_path / "out").exists()  # before the teacher's training
    other = tmp_path / "other"
    other.mkdir()
    (other / "plan.json").write_text('[["finetune", "--task", "custom"]]')  # a run with other settings lives there
    reused = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                       "--out", other, check=False))
    assert "other settings" in reused and not (other / "teacher").exists()


def test_the_plan_asks_for_every_file_checked_on_the_whole_dev_set(tmp_path):
    from mobilekd.recipes.ship import budget, stages

    b = budget(500, [30] * 10) | {"dev_examples": 872}
    plan = {name: (argv, done) for name, argv, done in
            stages(ROOT / "t", ROOT / "d", tmp_path, b, 0, False, ["none", "dynamic-int8"])}
    export, exported = plan["export"]
    assert export[export.index("--parity-examples") + 1] == "872" and export[export.index("--seq-len") + 1] == "32"
    parity = tmp_path / "student" / "tflite" / "parity.json"
    parity.parent.mkdir(parents=True)
    parity.write_text('{"model_none.tflite": {}}')  # interrupted after the first file
    assert not exported()
    parity.write_text('{"model_none.tflite": {}, "model_dynamic_int8.tflite": {}}')
    assert exported()


def test_custom_tasks_from_shipped_text_split_cleanly():
    from benchmarks import custom

    for name, build in custom.TASKS.items():
        splits = build()
        train, dev = ({text for text, _ in splits[s]} for s in ("train", "dev"))
        labels = {s: Counter(label for _, label in splits[s]) for s in splits}
        assert set(labels["dev"]) <= set(labels["train"]), name  # every dev label is learnable
        assert 2 <= len(labels["train"]) <= 10, name
        if name != "brown-genre":  # a sentence may recur in two Brown documents ("No.")
            assert not train & dev, name
    brown = custom.brown_genre()
    assert len(brown["train"]) == custom.TRAIN["brown-genre"] and len(Counter(l for _, l in brown["train"])) == 10
    fulton = {label for text, label in brown["train"] + brown["dev"] if "Fulton County" in text}
    assert fulton == {"press reportage"}  # document ca01, the corpus's first, is press reportage
