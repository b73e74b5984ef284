"""`mobilekd ship`'s budgets from real data, its refusals of bad input, its search and resumes (the one command
itself runs in test_readme_commands.py, as the README prints it; the study built on it, test_ship_benchmark.py)."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from helpers import env, one_line_error, run_module


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
    from mobilekd.search.space import load_space

    teacher = load_space()["teacher"]
    data = sst2_csv(tmp_path, 3000)
    (data / "dev.csv").write_text("not,a,valid\nrow\n")  # the budget is measured without reading dev
    # SST-2's training texts under the packaged teacher's tokenizer: short, so 32 or 64 word pieces, not 128
    b = measure(model_dir("all-minilm-l6-v2"), "custom", data, regression=False, teacher_spec=teacher)
    assert b["train_examples"] == 3000 and b["classes"] == 2
    assert b["max_len"] in (32, 64) and b["length_p95"] <= b["max_len"]
    assert b["teacher_epochs"] == 4 and b["teacher_lrs"] == [5e-5, 2e-4]  # at most; the step chosen on validation
    large = budget(67_349, [200] * 10, teacher)
    assert (large["teacher_epochs"], large["max_len"]) == (1, 128)


def test_the_sequence_length_is_measured_on_whole_texts_not_on_phrases_of_them(tmp_path):
    """SST-2's training examples are the phrases of its sentences: 95% of them fit 32 word pieces, and a quarter of
    the sentences its users send (and its dev set holds) do not. ship measures the whole texts of the training data
    (a phrase found inside a longer training text counted as that one), so SST-2 gets 64; a task of whole texts
    alone (MRPC's pairs) measures every example, a repeated one once."""
    from mobilekd.data.tasks import load_task
    from mobilekd.finetune.selection import whole_texts
    from mobilekd.models.pretrained import model_dir
    from mobilekd.recipes.ship import measure
    from mobilekd.search.space import load_space

    sst2 = load_task("sst2", ROOT / "data/glue/SST-2")
    examples = sst2.train[:20_000]
    whole = whole_texts(examples)
    assert 1_000 < len(whole) < len(examples) / 2  # phrases of one sentence count once
    holder = {e.text_a.lower() for e in whole}
    assert all(any(e.text_a.lower() in h for h in holder) for e in examples[:50])  # each phrase inside a whole one
    data = sst2_csv(tmp_path, 20_000)
    (data / "dev.csv").write_text("not,a,valid\nrow\n")  # dev is not read
    b = measure(model_dir("all-minilm-l6-v2"), "custom", data, regression=False, teacher_spec=load_space()["teacher"])
    assert b["max_len"] == 64 and 32 < b["length_p95"] <= 64 and b["train_examples"] == 20_000
    pairs = load_task("mrpc", ROOT / "data/glue/MRPC").train[:300]
    assert whole_texts(pairs + pairs[:10]) == pairs  # no pair inside another: every pair once, in order


def test_the_search_space_prices_shapes_and_draws_each_familys_own_flags(tmp_path):
    """configs/ship.json as shipped: every family's shapes, a trial's flags drawn from its own family's space (its
    --alpha 0 over an augmented set), and its length in steps capped at ten epochs."""
    import optuna

    from mobilekd.models.hf import load_config
    from mobilekd.models.pretrained import model_dir
    from mobilekd.search.space import (load_space, needs_head, shape_flags, shapes, start_argv, suggest,
                                       training_steps)

    space = load_space()
    teacher = model_dir("all-minilm-l6-v2")
    config, _ = load_config(teacher)
    subset = shapes("subset", space["families"]["subset"], config)
    assert [c.num_hidden_layers for _, c, _ in subset][:3] == [1, 1, 1] and len(subset) == 12
    name, narrow, values = subset[1]
    assert name == "1x384-ffn1280" and narrow.intermediate_size == 1280 and needs_head(space["families"]["subset"],
                                                                                          values)
    argv = start_argv(space["families"]["subset"], teacher, tmp_path / "s", subset[0][2])
    assert argv[:2] == ("init", str(teacher)) and "--intermediate-size" not in argv and "spread:1" in argv
    assert shapes("tinybert", space["families"]["tinybert"], config)[0][1].hidden_size == 156
    mobile = shapes("mobilebert", space["families"]["mobilebert"], config)
    assert [c.num_hidden_layers for _, c, _ in mobile] == [6, 4, 6, 4]  # MobileBERT's and MobileBERT_TINY's blocks
    assert "uniform" in start_argv(space["families"]["mobilebert"], teacher, tmp_path / "m", mobile[1][2])
    assert training_steps(80_000, 500) == 157 and training_steps(20_000, 100_000) == 625
    # a task over scale_above sees the epochs a task of scale_above examples sees (SST-2's 67,349: 1, 2 or 4)
    assert training_steps(20_000, 67_349, 20_000) == 2105 and training_steps(80_000, 67_349, 20_000) == 8419
    assert training_steps(80_000, 20_000, 20_000) == 2500 and training_steps(80_000, 5_000, 20_000) == 1563
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    drawn = []
    for _ in range(12):
        trial = study.ask()
        flags, values = suggest(trial, "subset", space["families"]["subset"], teacher, True, 5000)
        drawn.append(values)
        assert flags[:2] == ["--method", "kd"] and "--max-steps" in flags
        assert not any(k.startswith("tinybert:") for k in trial.params)
        if values["--augment"]:
            assert values["--alpha"] == 0.0 and flags[flags.index("--augment-model") + 1] == str(teacher)
        study.tell(trial, 0.5)
    assert {v["--augment"] for v in drawn} == {0, 4}
    methods = {suggest(study.ask(), "mobilebert", space["families"]["mobilebert"], teacher, True, 5000)[1]["--method"]
               for _ in range(12)}
    assert methods == {"kd", "pkt-td"}  # logit KD, or MobileBERT's transfer over the task's examples first
    headless = suggest(study.ask(), "subset", space["families"]["subset"], teacher, False, 5000)[1]
    assert "--augment" not in headless  # augmentation draws its words from a masked LM the teacher lacks
    # a task over the space's up_to_examples (SST-2's 67,349) trains on its own examples: no augmented set drawn
    for family in ("subset", "tinybert", "bilstm"):
        limit = space["families"][family]["space"]["--augment"]["up_to_examples"]
        large = [suggest(study.ask(), family, space["families"][family], teacher, True, limit + 1) for _ in range(6)]
        assert all("--augment" not in v and "--augment" not in f for f, v in large)
        sst2 = [suggest(study.ask(), family, space["families"][family], teacher, True, 67_349)[0] for _ in range(6)]
        assert {int(f[f.index("--max-steps") + 1]) for f in sst2} <= {2105, 4210, 8419}  # 1, 2 or 4 epochs
        assert {suggest(study.ask(), family, space["families"][family], teacher, True, limit)[1]["--augment"]
                for _ in range(12)} > {0}
    # the BiLSTM: its sizes are its shapes and flags, no start stage, its transfer set needs no masked LM
    lstm = space["families"]["bilstm"]
    found = shapes("bilstm", lstm, config)
    assert [(n, c) for n, c, _ in found][0] == ("h150-e64", None) and start_argv(lstm, teacher, tmp_path, {}) == ()
    assert shape_flags(lstm, found[0][2]) == ["--hidden-size", "150", "--embedding-size", "64"]
    assert shape_flags(space["families"]["subset"], subset[0][2]) == []
    flags = [suggest(study.ask(), "bilstm", lstm, teacher, False, 5000) for _ in range(12)]
    assert {v["--augment"] for _, v in flags} == {0, 4} and all("--augment-model" not in f for f, _ in flags)
    assert {v["--alpha"] for _, v in flags if v["--augment"]} == {0.0, 0.5}  # its new samples carry the teacher's label


def test_a_config_naming_a_base_changes_only_what_it_gives(tmp_path):
    """configs/ship_gpu.json is configs/ship.json but for the MobileBERT-shaped family's shapes and start (3,000
    steps a stage); bases chain, and a base that is not there, or a circle, is refused in one line naming the file."""
    from mobilekd.errors import UserError
    from mobilekd.search.space import CONFIG, load_space

    shipped, gpu = load_space(), load_space(CONFIG.with_name("ship_gpu.json"))
    assert "base" not in gpu and gpu["search"] == shipped["search"] and gpu["teacher"] == shipped["teacher"]
    assert {f: v for f, v in gpu["families"].items() if f != "mobilebert"} == \
        {f: v for f, v in shipped["families"].items() if f != "mobilebert"}
    mine, theirs = gpu["families"]["mobilebert"], shipped["families"]["mobilebert"]
    assert mine["space"] == theirs["space"] and mine["shapes"]["preset"] != theirs["shapes"]["preset"]
    steps = mine["start"][mine["start"].index("--layer-steps") + 1]
    assert steps == "3000" and theirs["start"][theirs["start"].index("--layer-steps") + 1] == "500"
    (tmp_path / "theirs.json").write_text(json.dumps({"base": "mine.json"}))
    for base in ("missing.json", "mine.json", "theirs.json"):  # not there; itself; a circle through another
        (tmp_path / "mine.json").write_text(json.dumps({"base": base, "search": {"trials": 3}}))
        with pytest.raises(UserError, match="json: its base .* is not another configuration file"):
            load_space(tmp_path / "mine.json")
    (tmp_path / "theirs.json").write_text(json.dumps({"base": str(CONFIG), "search": {"rungs": 2}}))
    chained = load_space(tmp_path / "mine.json")  # mine over theirs over the shipped file
    assert chained["search"] == {**shipped["search"], "trials": 3, "rungs": 2}


def test_each_family_gets_an_equal_share_of_draws_and_is_halved_only_against_its_own_trials(tmp_path):
    """Five shapes of one family and one of another are drawn family first (about half each, where a draw over the
    six candidates gives the second one a sixth), and successive halving cuts a trial only by its own family's
    evaluations: a trial behind the other family's first evaluations goes on, one behind its own family's stops."""
    import optuna

    from mobilekd.search.space import Candidate
    from mobilekd.search.study import FamilyHalving, Objective

    found = [Candidate("subset", f"{n}x384", None, (), tmp_path, {}) for n in range(5)]
    found.append(Candidate("tinybert", "tinybert4_h156", None, (), tmp_path, {}))
    objective = Objective(tmp_path, found, {}, tmp_path, tmp_path, [], True, 1000, 4)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [objective.draw(study.ask()).family for _ in range(600)]
    assert 0.42 < drawn.count("tinybert") / len(drawn) < 0.58
    assert {c.shape for c in found[:5]} == {objective.draw(study.ask()).shape for _ in range(200)} - {"tinybert4_h156"}

    def first_evaluation(family: str, value: float) -> bool:
        trial = study.ask()
        trial.set_user_attr("family", family)
        trial.report(value, 1)
        pruned = trial.should_prune()
        study.tell(trial, state=optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE,
                   values=None if pruned else value)
        return pruned

    for pruner, cut in ((optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3), True),
                        (FamilyHalving(reduction_factor=3), False)):
        study = optuna.create_study(direction="maximize", pruner=pruner)
        assert [first_evaluation("tinybert", v) for v in (0.62, 0.59, 0.53)] == [False, True, True]
        assert first_evaluation("subset", 0.41) == cut  # behind every TinyBERT trial, first of its family
    assert not first_evaluation("subset", 0.45)
    assert first_evaluation("subset", 0.30)  # behind the best of its own family's (Optuna's first eta - 1 trials)


def test_bad_input_is_one_line(tmp_path):
    data = sst2_csv(tmp_path, 20)
    no_teacher = one_line_error(run_module("mobilekd", "ship", "--teacher", tmp_path / "nope", "--data", data,
                                           "--out", tmp_path / "out", check=False))
    assert "nope" in no_teacher and "not a model directory" in no_teacher
    no_data = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data",
                                        tmp_path / "missing", "--out", tmp_path / "out", check=False))
    assert "missing" in no_data
    family = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                       "--families", "gpt", "--out", tmp_path / "out", check=False))
    assert "ship.json" in family and "gpt" in family and "subset" in family
    config = tmp_path / "space.json"
    config.write_text('{"search": {"trials": 2, "rungs": 1, "reduction_factor": 2}, "families": {"subset": '
                      '{"shapes": {"layers": [1]}, "start": ["init"]}}}')
    broken = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                       "--config", config, "--out", tmp_path / "out", check=False))
    assert "space.json" in broken and "lacks space" in broken
    shipped = json.loads((ROOT / "configs/ship.json").read_text())
    config.write_text(json.dumps({**shipped, "teacher": {**shipped["teacher"], "lr": []}}))
    no_lr = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                      "--config", config, "--out", tmp_path / "out", check=False))
    assert "space.json" in no_lr and "teacher.lr must be a list of positive learning rates" in no_lr
    tight = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                      "--latency-ms", "0.1", "--families", "subset", "--out", tmp_path / "out",
                                      check=False))
    assert "no student shape fits 0.1 ms" in tight
    both = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                     "--dry-run", "--make-starts", "--out", tmp_path / "out", check=False))
    assert "--dry-run" in both and "--make-starts" in both
    for flag in ("--latency-ms", "--hours", "--search-hours"):  # a budget of nothing is refused, not searched
        zero = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data, flag,
                                         "0", "--out", tmp_path / "out", check=False))
        assert f"{flag} must be greater than 0, got 0.0" in zero
    assert not (tmp_path / "out").exists()  # refused before any stage ran
    other = tmp_path / "other"
    other.mkdir()
    from mobilekd.finetune.selection import GROUPING
    from mobilekd.recipes.ship import LENGTHS_OF
    from mobilekd.search.study import DRAW

    other_settings = {"teacher": {}, "draw": DRAW, "validation": GROUPING, "lengths": LENGTHS_OF}  # other settings
    (other / "plan.json").write_text(json.dumps(other_settings))
    reused = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                       "--families", "subset", "--out", other, check=False))
    assert "other settings" in reused and not (other / "teacher").exists()
    (other / "plan.json").write_text('{"teacher": []}')  # a ship of before the teacher was chosen on validation
    older = one_line_error(run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data,
                                      "--families", "subset", "--out", other, check=False))
    assert "before the teacher was chosen on validation" in older and not (other / "teacher").exists()


def test_a_dev_set_that_cannot_score_the_chosen_student_is_refused_in_one_line(tmp_path):
    """Found when dev is first read, after every choice (`finish`): no labels at all, or a row without one, or a
    label training never had; each one line naming the file (and the row), so the search can be resumed."""
    from mobilekd.errors import UserError
    from mobilekd.recipes.ship import require_labelled_dev

    data = sst2_csv(tmp_path, 20)
    dev = (data / "dev.csv").read_text()
    require_labelled_dev("custom", data, False)
    (data / "dev.csv").write_text("text,label\n" + "".join(f"{line.rsplit(',', 1)[0]},\n"
                                                           for line in dev.splitlines()[1:]))
    with pytest.raises(UserError, match=r"dev.csv: no labels: ship scores the student it chose on dev, once"):
        require_labelled_dev("custom", data, False)
    (data / "dev.csv").write_text(dev + "a fine film,\n")
    with pytest.raises(UserError, match=r"dev.csv:52: no label on this row, while line 2 has one"):
        require_labelled_dev("custom", data, False)


def test_the_starts_are_made_ahead_of_a_search_once_per_teacher(tmp_path):
    """--make-starts makes the start of every candidate that fits (here the teacher's own layers), each whole in
    its place and no `.partial` left, trains no teacher and records them in OUT/starts.json; made again, each is
    found made."""
    data = sst2_csv(tmp_path, 40)
    config = tmp_path / "space.json"
    config.write_text(json.dumps({"search": {"trials": 2, "rungs": 1, "reduction_factor": 2}, "families": {
        "subset": {"shapes": {"layers": [1, 2]}, "start": ["init", "{teacher}", "{start}", "--layers",
                                                             "spread:{layers}"],
                   "space": {"--lr": {"low": 2e-4, "high": 8e-4, "log": True}}}}}))
    starts, out = tmp_path / "starts", tmp_path / "out"
    argv = ["mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data, "--config", config, "--starts",
            starts, "--latency-ms", 100, "--out", out, "--make-starts"]
    dry = [line.split("its start: mobilekd ")[1].split() for line in run_module(*argv[:-1], "--dry-run").stdout
           .splitlines() if "its start: " in line]  # each command, to run here or where a GPU is
    first = run_module(*argv)
    made = sorted(p.name for p in starts.iterdir() if p.is_dir())
    assert [m.split("-")[:2] for m in made] == [["subset", "1x384"], ["subset", "2x384"]], made
    assert sorted(Path(x[2]).name for x in dry) == made and all(x[0] == "init" for x in dry)
    assert all((starts / m / "model.safetensors").is_file() for m in made) and not (out / "teacher").exists()
    record = json.loads((out / "starts.json").read_text())["starts"]
    assert [r["made"] for r in record] == [True, True] and all(r["seconds"] > 0 for r in record)
    assert first.stdout.count(": made, ") == 2
    from benchmarks.ship import start_rows  # the benchmark's rows of them: each made here, its seconds and host

    (tmp_path / "runs" / "starts").mkdir(parents=True)
    shutil.copytree(out, tmp_path / "runs" / "starts" / "sst2")
    found = start_rows(tmp_path / "runs", "sst2")
    assert sorted(r["start"] for r in found) == made and all(r["made_by_the_job"] and r["value"] > 0 for r in found)
    again = run_module(*argv)
    assert again.stdout.count("already made") == 2
    assert "its start: " not in run_module(*argv[:-1], "--dry-run").stdout  # made: nothing left to make
    assert [r["made"] for r in json.loads((out / "starts.json").read_text())["starts"]] == [False, False]


def _writer(fifo):
    """The pipe's write end once a reader has opened it (None before: then wait a little)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        time.sleep(0.2)
        return None


def test_a_search_on_two_workers_chooses_without_reading_dev(tmp_path):
    """ship's whole path on SST-2 sentences as a CSV, with two processes running trials over one study, and a dev
    file that is a named pipe the test fills only when the run first opens it: by then the teacher is trained, every
    trial has run and the student is chosen. Then dev is scored once, and the files and rows are all there."""
    data = sst2_csv(tmp_path, 240, n_dev=60)
    dev_text = (data / "dev.csv").read_text()
    (data / "dev.csv").unlink()
    os.mkfifo(data / "dev.csv")
    config = tmp_path / "space.json"
    config.write_text(json.dumps({"search": {"trials": 4, "rungs": 2, "reduction_factor": 2}, "teacher": {
        "lr": [5e-5, 2e-4], "epochs": {"small": 2, "large": 1}, "small_task": 20000, "evaluations_per_epoch": 2},
        "families": {
        "subset": {"shapes": {"layers": [1, 2]}, "start": ["init", "{teacher}", "{start}", "--layers",
                                                             "spread:{layers}"],
                   "finetune": {"--method": "kd"},
                   "space": {"--lr": {"low": 2e-4, "high": 8e-4, "log": True}, "--alpha": {"choices": [0.0, 0.5]},
                             "examples_seen": {"choices": [160, 320]}}}}}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data",
                             str(data), "--config", str(config), "--workers", "2", "--threads", "1", "--out",
                             str(out)], cwd=ROOT, env=env(), stdout=open(tmp_path / "ship.log", "w"),
                            stderr=subprocess.STDOUT)
    try:
        deadline, fd = time.time() + 900, None
        while fd is None:  # the pipe opens for writing only once the run opens it for reading
            assert proc.poll() is None, (tmp_path / "ship.log").read_text()[-3000:]
            assert time.time() < deadline, "the run never read dev"
            fd = _writer(data / "dev.csv")
        import optuna

        from mobilekd.search.study import FINISHED, open_study

        trials = open_study(out, 0, 2).get_trials(states=FINISHED)
        assert len(trials) >= 4 and (out / "student" / "model.safetensors").is_file()  # every choice is made
        assert not (out / "student" / "dev").exists()
        (data / "dev.csv").unlink()  # every later reader (the scorings, the parity, the baseline) finds a file
        (data / "dev.csv").write_text(dev_text)
        os.set_blocking(fd, True)
        os.write(fd, dev_text.encode())  # and the first reader gets dev through the pipe it opened
        os.close(fd)
        proc.wait(timeout=600)
        assert proc.returncode == 0, (tmp_path / "ship.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    s = json.loads((out / "ship.json").read_text())
    rows = s["trials"]
    assert len({t.user_attrs["worker"] for t in trials}) == 2  # both processes ran trials, each its own draws
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials)
    complete = [r for r in rows if r["state"] == "complete"]
    chosen = [r for r in rows if r["chosen"]]
    assert len(chosen) == 1 and chosen[0]["val_value"] == max(r["val_value"] for r in complete)
    assert all(r["pixel4_ms_est"] <= s["budget"]["latency_ms"] and r["host"] for r in rows)
    assert s["budget"]["latency_ms"] == round(s["budget"]["teacher_pixel4_ms_est"] / 3, 2)
    assert 0 <= s["student"]["dev"]["accuracy"] <= 1 and s["student"]["dev_examples"] == 60
    picked = s["teacher"]["chosen"]  # the teacher: the learning rate and step best on validation, dev unread
    assert [r["lr"] for r in picked["runs"]] == [5e-5, 2e-4] and all(r["steps"] > r["best_step"] or
                                                                      r["steps"] == r["best_step"] for r in
                                                                      picked["runs"])
    best = max(picked["runs"], key=lambda r: r["val_value"])
    assert picked["chosen"] == best["run"] and (out / "teacher" / "model.safetensors").is_file()
    teacher_run = json.loads((out / "teachers" / best["run"] / "results.json").read_text())
    assert list(teacher_run["metrics"]) == ["validation"] and teacher_run["selected_on"] == "validation"
    results = json.loads((out / "trials" / f"{chosen[0]['trial']:04d}" / "results.json").read_text())
    assert results["dev_scored"].startswith("never") and list(results["metrics"]) == ["validation"]
    # the best constant answer, scored on the very examples the chosen trial validated on (its predictions' labels)
    with open(out / "trials" / f"{chosen[0]['trial']:04d}" / "validation_predictions.tsv", encoding="utf-8") as f:
        held = [row["label"] for row in csv.DictReader(f, delimiter="\t")]
    constant = s["constant"]
    shares = {label: held.count(label) / len(held) for label in set(held)}
    assert constant["examples"] == len(held) and constant["value"] == pytest.approx(max(shares.values()))
    assert shares[constant["label"]] == max(shares.values()) and constant["metric"] == "accuracy"
    above = s["chosen"]["above_constant"]
    assert above == (chosen[0]["val_value"] > constant["value"])
    warned = ("is not above always answering" in (tmp_path / "ship.log").read_text(),
              "WARNING" in (out / "student" / "README.md").read_text())
    assert warned == (not above, not above)
    parity = json.loads((out / "student/tflite/parity.json").read_text())
    assert parity["model_none.tflite"]["agreement"] == 1.0
    stages = json.loads((out / "final_seconds.json").read_text())  # the last stages' seconds, each as it ran
    assert sorted(stages) == ["export", "student on dev, once", "teacher on dev, once"]
    assert s["wall_seconds"]["final"] == round(sum(stages.values()), 1) and min(stages.values()) > 0
    assert (out / "frontier.png").stat().st_size > 10_000 and "validation" in (out / "student/README.md").read_text()
    assert optuna.trial.TrialState.PRUNED in {t.state for t in trials} or len(complete) == len(rows)
    store = out / "teacher" / "outputs" / "0123-features"  # as layer matching leaves one (this search has none)
    (store / "segment-0").mkdir(parents=True)
    (store / "segment-0" / "hidden_1.npy").write_bytes(b"\0" * 1000)
    logits = sorted((out / "teacher" / "outputs").glob("*-outputs"))
    again = subprocess.run([sys.executable, "-m", "mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data",
                            str(data), "--config", str(config), "--workers", "2", "--threads", "1", "--out",
                            str(out)], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]  # resumed: the same search, nothing trained again
    assert json.loads((out / "ship.json").read_text())["trials"] == rows and "== the" not in again.stdout
    assert not store.exists() and sorted((out / "teacher" / "outputs").glob("*-outputs")) == logits and logits


def test_a_trial_under_way_at_the_wall_limit_is_cut_once_a_trial_is_complete(student_dir, tmp_path):
    """--hours with search.at_wall_limit "cut": past the limit, a trial runs to its end while the study holds no
    complete trial (a search always has one to choose), and once it does, the next trial's run is stopped at the
    limit, pruned with its `cut` attribute, its process gone and no results written."""
    import optuna

    from mobilekd.search.study import CUT, run_trial, trial_rows

    data = sst2_csv(tmp_path, 120, n_dev=20)
    flags = ["finetune", "--model", str(student_dir), "--task", "custom", "--data", str(data), "--batch-size", "16",
             "--max-len", "32", "--threads", "1", "--eval-every", "2", "--select-on", "validation", "--skip-dev"]
    study = optuna.create_study(direction="maximize")
    past = time.time() - 1  # the limit has passed before either trial starts
    first = study.ask()
    value = run_trial(first, [*flags, "--max-steps", "4", "--out", str(tmp_path / "a")], tmp_path / "a", 2, past)
    study.tell(first, value)  # nothing was complete: it ran to its end
    assert (tmp_path / "a" / "results.json").is_file() and "cut" not in first.user_attrs
    second, begun = study.ask(), time.time()
    with pytest.raises(optuna.TrialPruned):
        run_trial(second, [*flags, "--max-steps", "5000", "--out", str(tmp_path / "b")], tmp_path / "b", 2, past)
    study.tell(second, state=optuna.trial.TrialState.PRUNED)
    assert time.time() - begun < 60 and not (tmp_path / "b" / "results.json").exists()  # 5,000 steps not waited on
    rows = trial_rows(study, first.number)
    assert [r.get("cut") for r in rows] == [None, CUT] and [r["state"] for r in rows] == ["complete", "pruned"]
    limitless = study.ask()  # no limit: the same run is not cut
    assert run_trial(limitless, [*flags, "--max-steps", "4", "--out", str(tmp_path / "c")], tmp_path / "c", 2) >= 0


def test_a_search_of_the_bilstm_family_ships_its_fused_file(tmp_path):
    """ship with Tang et al.'s BiLSTM as its family: each trial a `mobilekd bilstm` run from the fine-tuned teacher
    on a validation split (dev never read), priced and exported as the fused-LSTM file an app ships, the chosen
    student scored on dev once. Under an --hours the teacher's fine-tuning spends before the search, the search still
    runs trials until one is complete, and no more of its --trials."""
    data = sst2_csv(tmp_path, 240, n_dev=60)
    config = tmp_path / "space.json"
    config.write_text(json.dumps({"search": {"trials": 2, "rungs": 2, "reduction_factor": 2}, "teacher": {
        "lr": [2e-4], "epochs": {"small": 1, "large": 1}, "small_task": 20000, "evaluations_per_epoch": 2},
        "families": {"bilstm": {"verb": "bilstm", "shapes": {"bilstm": [{"hidden_size": 16, "embedding_size": 16}]},
                                "space": {"--lr": {"low": 1e-3, "high": 3e-3, "log": True},
                                          "--augment": {"choices": [0, 1]}, "examples_seen": {"choices": [320]}}}}}))
    out = tmp_path / "out"
    begun = time.time()
    proc = run_module("mobilekd", "ship", "--teacher", "all-minilm-l6-v2", "--data", data, "--config", config,
                      "--workers", "1", "--threads", "1", "--hours", "0.0003", "--out", out, timeout=900)
    took = time.time() - begun
    s = json.loads((out / "ship.json").read_text())
    chosen = s["chosen"]
    limit = s["wall_limit"]  # 1.08 s in all, spent by the teacher
    assert limit["hours"] == 0.0003 and limit["search_hours"] is None and limit["search_limit_seconds"] == 0.0
    assert limit["left_seconds"] < 0 and len(s["trials"]) == 1 and s["trials"][0]["state"] == "complete"
    # start-up and measurement counted too, the teacher's fine-tuning once: within the command's own time
    assert s["wall_seconds"]["teacher"] < limit["before_search_seconds"] < took - s["wall_seconds"]["search"]
    # ship.json's parts add up to its total, the command's own time but for the interpreter's start and exit
    wall = s["wall_seconds"]
    assert wall["start"] == round(limit["before_search_seconds"] - wall["teacher"], 1) and wall["summary"] > 0
    assert wall["total"] == round(sum(v for k, v in wall.items() if k != "total"), 1) <= took
    assert f"{wall['total'] / 60:.1f} min of --hours 0.0003\n" in proc.stdout
    assert "the budget is spent before the search (--hours 0.0003 less " in proc.stdout
    assert "min before the search (the teacher's fine-tuning " in proc.stdout
    assert "trials run until one is complete, so that there is a student to choose" in proc.stdout
    # the student against the teacher and TF-IDF on dev: each difference the scores' own, with a paired interval
    # over the 60 dev examples that holds it, printed and in the model card
    base = {"teacher": s["teacher"]["dev"]["accuracy"], "baseline": s["baseline"]["metrics"]["accuracy"],
            "majority": s["majority"]["metrics"]["accuracy"]}
    assert s["majority"]["label"] in ("negative", "positive") and 0 < base["majority"] < 1
    for name, score in base.items():
        i = s["intervals"][f"student-{name}"]
        assert i["mean"] == pytest.approx(s["student"]["dev"]["accuracy"] - score, abs=1e-4)
        assert i["low"] <= i["mean"] <= i["high"] and i["examples"] == 60
    assert proc.stdout.count("95% paired bootstrap over the 60 dev examples") == 3
    assert "student - the teacher:" in (out / "student" / "README.md").read_text()
    assert chosen["family"] == "bilstm" and chosen["verb"] == "bilstm" and chosen["shape"] == "h16-e16"
    assert chosen["pixel4_ms_est"] <= s["budget"]["latency_ms"] and (out / "student" / "bilstm.json").is_file()
    trial = json.loads((out / "trials" / f"{chosen['trial']:04d}" / "results.json").read_text())
    assert trial["dev_scored"].startswith("never") and list(trial["metrics"]) == ["validation"]
    assert trial["validation_split"]["size"] == 24  # finetune's carve: a tenth of the 240 training examples
    assert s["constant"]["examples"] == 24 and "above_constant" in chosen  # the split it is read against
    assert 0 <= s["student"]["dev"]["accuracy"] <= 1 and s["student"]["dev_examples"] == 60
    parity = json.loads((out / "student/tflite/parity.json").read_text())
    assert parity["model_none_fused.tflite"]["agreement"] == 1.0  # the app's file, and no unrolled one beside it
    assert sorted(parity) == ["model_dynamic_int8_fused.tflite", "model_none_fused.tflite"]
    assert "mobilekd bilstm" in (out / "student/README.md").read_text()


def test_the_paired_bootstrap_counts_the_dev_sets_noise_and_the_seeds():
    from mobilekd.finetune.intervals import cell, paired_bootstrap

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    better = np.where(rng.random((3, 400)) < 0.9, labels, 1 - labels)  # 3 seeds at about 90%
    worse = np.tile(np.where(rng.random(400) < 0.8, labels, 1 - labels), (3, 1))  # one run at 80%, every seed
    gap = paired_bootstrap(labels, better, worse, replicates=500)
    assert 0.05 < gap["mean"] < 0.15 and 0 < gap["low"] < gap["mean"] < gap["high"] and gap["seeds"] == 3
    assert cell(gap).endswith("above [n=3]")
    same = paired_bootstrap(labels, better, better, replicates=200)
    assert same["mean"] == same["low"] == same["high"] == 0 and cell(same).endswith("tie [n=3]")
    small = paired_bootstrap(labels[:40], better[:, :40], worse[:, :40], replicates=500)
    assert small["high"] - small["low"] > gap["high"] - gap["low"]  # fewer dev examples, a wider interval


def test_each_task_is_bootstrapped_in_its_own_metric():
    """The interval's metric over label names as the prediction files hold them: MRPC's F1 on "equivalent", CoLA's
    Matthews correlation, STS-B's correlations over scores written as text; an unknown metric is refused."""
    from mobilekd.finetune.intervals import metric_function

    labels = np.array(["equivalent", "not_equivalent", "equivalent", "equivalent"])
    guess = np.array(["equivalent", "equivalent", "not_equivalent", "equivalent"])
    assert metric_function("mrpc", "f1")(labels, guess) == pytest.approx(2 / 3)
    assert metric_function("cola", "matthews_corr")(labels, labels) == 1.0
    scores = np.array(["0.5", "1.5", "3.0", "4.25"])
    assert metric_function("stsb", "pearson")(scores, scores) == pytest.approx(1.0)
    assert metric_function("stsb", "spearman")(scores, scores[::-1].copy()) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="no bootstrap metric"):
        metric_function("squad1", "exact_match")


def test_a_trial_an_interruption_stopped_does_not_count_toward_trials(tmp_path):
    """A search stopped while trials ran (Ctrl-C, a killed worker) leaves them running; on resume they are marked
    failed and interrupted, and `--trials N` still trains N: they are neither counted nor listed among the trials.
    A trial whose own run failed counts (and is listed, with its error)."""
    import optuna

    from mobilekd.search import study as search

    study = search.open_study(tmp_path, seed=0, reduction_factor=3)
    study.ask()  # left running by an interrupted search
    failed = study.ask()
    failed.set_user_attr("error", "the run failed")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert search.fail_stale(study) == 1 and search.finished(study) == 1
    search.search(study, lambda trial: 0.5 + trial.number / 10, trials=3, timeout=None)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 2 and search.finished(study) == 3
    rows = search.trial_rows(study, None)
    assert [r["trial"] for r in rows] == [1, 2, 3] and rows[0]["state"] == "fail"


def test_the_search_wall_time_counts_the_time_a_trial_ran_not_the_idle_time_before_a_resume(tmp_path):
    """Two workers' overlapping trials count once, and the hours between an interrupted search and its resume not
    at all: the union of the finished trials' spans."""
    import datetime

    import optuna

    from mobilekd.search import study as search

    study, t0 = search.open_study(tmp_path, seed=0, reduction_factor=3), datetime.datetime(2026, 12, 6, 10)
    for start, end, state in ((0, 100, "COMPLETE"), (50, 150, "PRUNED"), (60, 90, "FAIL"), (7200, 7300, "COMPLETE")):
        study.add_trial(optuna.trial.FrozenTrial(
            number=0, trial_id=0, state=optuna.trial.TrialState[state], value=0.5 if state == "COMPLETE" else None,
            datetime_start=t0 + datetime.timedelta(seconds=start),
            datetime_complete=t0 + datetime.timedelta(seconds=end), params={}, distributions={}, user_attrs={},
            system_attrs={}, intermediate_values={}))
    assert search.wall_seconds(study) == 150 + 100
    assert search.ended(study) == (t0 + datetime.timedelta(seconds=7300)).timestamp()
    # a trial an interruption stopped, marked failed (`fail_stale`) when the search resumed a day later: it ran until
    # the last change in its run folder
    folder = tmp_path / "trials" / "0004"
    folder.mkdir(parents=True)
    (folder / "trial.log").write_text("killed")
    os.utime(folder / "trial.log", ((t0 + datetime.timedelta(seconds=7400)).timestamp(),) * 2)
    study.add_trial(optuna.trial.FrozenTrial(
        number=0, trial_id=0, state=optuna.trial.TrialState.FAIL, value=None,
        datetime_start=t0 + datetime.timedelta(seconds=7350), datetime_complete=t0 + datetime.timedelta(days=1),
        params={}, distributions={}, user_attrs={search.INTERRUPTED: True, "dir": str(folder)}, system_attrs={},
        intermediate_values={}))
    assert search.wall_seconds(study) == 150 + 100 + 50
    assert search.ended(study) == (t0 + datetime.timedelta(seconds=7400)).timestamp()
    # what a resumed search may still take: --hours less the teacher, the 300 s searched and the last stages' reserve;
    # --search-hours less the 300 s; the smaller; a budget spent, below zero
    from mobilekd.recipes.ship import FINAL_RESERVE, before_search, search_left

    assert before_search(20, 1500, 0) == 1520  # the teacher fine-tuned by an earlier process, 20 s of start-up here
    assert before_search(1530, 1500, 1510) == 1530  # fine-tuned here: inside this process's 1530 s
    searched = search.wall_seconds(study)
    assert search_left(1, None, 1500, searched) == 3600 - 1500 - 300 - FINAL_RESERVE
    assert search_left(None, 0.5, 1500, searched) == 1800 - 300
    assert search_left(1, 0.5, 1500, searched) == 1500 and search_left(None, None, 1500, 300) is None
    assert search_left(1, None, 3500, searched) == 3600 - 3500 - 300 - FINAL_RESERVE  # spent: below zero


def test_past_its_wall_limit_a_search_with_no_complete_trial_draws_until_one_is(tmp_path):
    """A search whose time is up before a trial is complete (here: none, the budget spent before it) starts none
    in a worker's process, and in ship's own (until_complete) draws trials one at a time, a failed one and all,
    until one is complete, and stops there rather than running its --trials."""
    from mobilekd.search import study as search

    outcomes = iter([search.TrialFailed("the first run failed"), 0.5, 0.7])

    def run(trial):  # what each trial's run ends with, in order
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    study = search.open_study(tmp_path, seed=0, reduction_factor=3)
    search.search(study, run, trials=6, timeout=0.0)  # a worker's: no trial starts past the deadline
    assert search.finished(study) == 0
    search.search(study, run, trials=6, timeout=0.0, until_complete=True)
    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    assert states == ["FAIL", "COMPLETE"] and search.has_complete(study)
    search.search(study, run, trials=6, timeout=0.0, until_complete=True)  # resumed: one is complete, none starts
    assert len(study.get_trials(deepcopy=False)) == 2


def test_a_search_resumes_across_edited_descriptions_and_added_families_but_not_an_edited_space():
    import copy

    from mobilekd.recipes.ship import settings

    plan = {"candidates": ["subset/1x384", "subset/2x384"], "seed": 0,
            "config": {"description": "what ship searches", "search": {"trials": 12},
                       "families": {"subset": {"description": "layers", "space": {"--lr": {"low": 1e-4}}},
                                    "tinybert": {"description": "never tried", "space": {}}}}}
    edited = copy.deepcopy(plan)
    edited["config"]["description"] = "reworded"
    edited["config"]["families"]["subset"]["description"] = "the teacher's own layers, reworded"
    edited["config"]["families"]["bilstm"] = {"space": {"--lr": {"low": 3e-4}}}
    assert settings(edited) == settings(plan)
    assert settings({**plan, "trials": 20}) == settings({**plan, "trials": 12})  # a search extended by --trials
    edited["config"]["families"]["subset"]["space"]["--lr"]["low"] = 2e-4
    assert settings(edited) != settings(plan)


def test_a_search_drawn_another_way_is_not_resumed(tmp_path):
    """A run folder whose search drew its trials before families were drawn first is refused in one line, naming
    both draws, and its plan is left as it was."""
    from mobilekd.errors import UserError
    from mobilekd.fileio import read_json, write_json
    from mobilekd.finetune.selection import GROUPING, OVERSIZED, PAIR_GROUPING
    from mobilekd.recipes.ship import LENGTHS_OF, keep_plan
    from mobilekd.search.study import DRAW

    plan = {"candidates": ["subset/1x384"], "seed": 0, "config": {"search": {"trials": 12}}, "teacher": {}}
    write_json(tmp_path / "plan.json", plan)
    with pytest.raises(UserError, match="holds a search drawn another way .*halved across families; this mobilekd: "
                                        "family, then shape"):
        keep_plan(tmp_path, {**plan, "draw": DRAW})
    assert read_json(tmp_path / "plan.json") == plan
    (tmp_path / "new").mkdir()
    for _ in range(2):  # begun, then resumed under the same draw
        keep_plan(tmp_path / "new", {**plan, "draw": DRAW})
    assert read_json(tmp_path / "new" / "plan.json")["draw"] == DRAW
    with pytest.raises(UserError, match="holds a search whose validation split was grouped otherwise \\(a text's "
                                        "copies; this mobilekd: a text's copies, and in a one-text task"):
        keep_plan(tmp_path / "new", {**plan, "draw": DRAW, "validation": GROUPING})
    assert "validation" not in read_json(tmp_path / "new" / "plan.json")
    keep_plan(tmp_path / "grouped", {**plan, "draw": DRAW, "validation": GROUPING})
    with pytest.raises(UserError, match="holds a search whose --max-len was measured otherwise \\(every training "
                                        "example; this mobilekd: whole texts"):
        keep_plan(tmp_path / "grouped", {**plan, "draw": DRAW, "validation": GROUPING, "lengths": LENGTHS_OF})
    # a pair task's search of before its linked pairs were held together is not resumed; a one-text task's is
    keep_plan(tmp_path / "pairs", {**plan, "draw": DRAW, "validation": GROUPING, "lengths": LENGTHS_OF})
    with pytest.raises(UserError, match="grouped otherwise .*this mobilekd: a text's copies, and in a two-text task "
                                        "the pairs linked by a shared text"):
        keep_plan(tmp_path / "pairs", {**plan, "draw": DRAW, "validation": PAIR_GROUPING, "lengths": LENGTHS_OF})
    keep_plan(tmp_path / "pairs", {**plan, "draw": DRAW, "validation": GROUPING, "lengths": LENGTHS_OF})
    # nor one whose linked groups all stayed whole where one now trains (STS-B's 245 caption pairs)
    keep_plan(tmp_path / "linked", {**plan, "draw": DRAW, "validation": PAIR_GROUPING, "lengths": LENGTHS_OF})
    with pytest.raises(UserError, match="grouped otherwise .*of over 5% of the validation split kept in training"):
        keep_plan(tmp_path / "linked", {**plan, "draw": DRAW, "validation": PAIR_GROUPING + OVERSIZED,
                                        "lengths": LENGTHS_OF})
    # the training file or the teacher edited between two invocations: named, not resumed; a plan of before the
    # digests were recorded is resumed and gains them
    now = {**plan, "draw": DRAW, "validation": GROUPING, "lengths": LENGTHS_OF}
    keep_plan(tmp_path / "pairs", {**now, "inputs": {"training": "aa", "teacher": "bb"}})
    assert read_json(tmp_path / "pairs" / "plan.json")["inputs"] == {"training": "aa", "teacher": "bb"}
    keep_plan(tmp_path / "pairs", {**now, "inputs": {"training": "aa", "teacher": "bb"}, "trials": 30})  # extended
    with pytest.raises(UserError, match="holds a search begun on another training file .*use another --out"):
        keep_plan(tmp_path / "pairs", {**now, "inputs": {"training": "cc", "teacher": "bb"}})
    with pytest.raises(UserError, match="begun on another training and teacher file"):
        keep_plan(tmp_path / "pairs", {**now, "inputs": {"training": "cc", "teacher": "dd"}})
