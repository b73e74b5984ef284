"""No run can corrupt another, every input gets a clear answer, every score comes with its baseline (issue 15).
Each test here failed on the code before that issue's change."""

import csv
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT
from helpers import env, kill_after_checkpoint, one_line_error, run_module
from mobilekd.data.custom import read_custom
from mobilekd.data.glue import read_glue
from mobilekd.data.pretraining import load_pretraining_data, read_documents
from mobilekd.errors import UserError
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.models.presets import PRESETS

FINETUNE = "mobilekd.recipes.finetune"
QUICK = ["--task", "sst2", "--max-train-examples", 256, "--batch-size", 16, "--max-len", 32, "--threads", 1]


def test_two_runs_cannot_share_an_output_directory(student_dir, tmp_path):
    out = tmp_path / "shared"
    first = subprocess.Popen([sys.executable, "-m", FINETUNE, "--model", str(student_dir), "--out", str(out),
                              *map(str, QUICK), "--max-steps", "60", "--lr", "1e-3"], env=env(), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = out / ".mobilekd.lock"
    deadline = time.time() + 120
    while time.time() < deadline and not (lock.is_file() and lock.read_text()):
        time.sleep(0.05)
    second = run_module(FINETUNE, "--model", student_dir, "--out", out, *QUICK, "--max-steps", 60, "--lr", 2e-3,
                        check=False)
    line = one_line_error(second)
    assert f"{out}: in use by another run (pid {first.pid}" in line and "choose another --out" in line
    assert first.wait(timeout=600) == 0, first.stderr.read()[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] and result["lr"] == 1e-3  # the first run's, untouched by the second


def test_an_output_directory_that_is_a_broken_link_is_refused_in_one_line(student_dir, tmp_path):
    out = tmp_path / "run"
    out.symlink_to(tmp_path / "gone")  # e.g. `cp -r` of a run directory that was a link to a sibling
    line = one_line_error(run_module(FINETUNE, "--model", student_dir, "--out", out, *QUICK, "--max-steps", 2,
                                     check=False))
    assert f"{out}: is a broken link (to {tmp_path / 'gone'})" in line and "choose another --out" in line
    assert not (tmp_path / "gone").exists()


def test_a_killed_runs_lock_is_taken_over_and_its_seconds_counted(student_dir, tmp_path):
    from mobilekd.train.checkpoint import find_checkpoint
    from mobilekd.train.loop import earlier_seconds

    out = tmp_path / "killed"
    args = ["--model", student_dir, "--out", out, *QUICK, "--max-steps", 120, "--save-every", 2]
    kill_after_checkpoint(FINETUNE, args, out, 60)
    assert (out / ".mobilekd.lock").is_file()  # left behind by kill -9, stale: the kernel released the lock
    before = json.loads((find_checkpoint(out) / "trainer.json").read_text())["stage_seconds"]
    run_module(FINETUNE, *args, "--resume")
    result = json.loads((out / "results.json").read_text())
    assert result["complete"]
    # the run's wall time counts the killed process's training (half of it or more: it stopped at step 60 or later of
    # 120), not this process's alone
    (stage,) = result["training"]
    assert stage["seconds_before_resume"] == earlier_seconds(result["training"]) == before > 0
    assert result["wall_seconds"] >= stage["seconds"] > before
    # and so does the history's: its last evaluation, after the resume, is timed on the run's clock (the killed
    # process's training and this process's time), not this process's alone
    history = json.loads((out / "history.json").read_text())
    assert history[-1]["step"] == 120 and result["wall_seconds"] >= history[-1]["wall_seconds"] >= stage["seconds"]


def test_a_corrupt_checkpoint_says_how_to_start_over(student_dir, tmp_path):
    out = tmp_path / "run"
    args = ["--model", student_dir, "--out", out, *QUICK, "--max-steps", 120, "--save-every", 2]
    kill_after_checkpoint(FINETUNE, args, out, 2)
    (out / "checkpoint" / "model.safetensors").write_bytes(b"not weights")
    line = one_line_error(run_module(FINETUNE, *args, "--resume", check=False))
    assert "model.safetensors: not a readable safetensors file" in line
    assert f"to start over, remove {out / 'checkpoint'}" in line


def test_one_line_corpus_is_cut_into_examples_and_held_out_text_never_trains(tmp_path, tokenizer):
    words = [w for doc, _ in zip(read_documents(ROOT / "data/corpus/brown.txt.gz"), range(60)) for line in doc
             for w in line.split()]
    one_line = tmp_path / "one_line.txt"
    one_line.write_text(" ".join(words) + "\n")  # about 100,000 characters on one line
    data = load_pretraining_data([one_line], tokenizer, 32, 0, tmp_path / "cache")
    assert len(data.train) > 500 and len(data.heldout) > 10

    def covered(rows):
        return {t for a0, a1, b0, b1, _ in rows for t in (*range(a0, a1), *range(b0, b1))}

    assert not covered(data.train.rows) & covered(data.heldout.rows)
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("One short sentence.\nAnother one.\n")
    with pytest.raises(UserError, match="too little text to hold any out"):
        load_pretraining_data([tiny], tokenizer, 32, 0, tmp_path / "cache")


def test_values_that_make_no_sense_are_refused(tmp_path):
    for steps in (0, -5):
        line = one_line_error(run_module("mobilekd.recipes.distill", "--teacher", tmp_path / "none", "--out",
                                         tmp_path / "x", "--layer-steps", steps, check=False))
        assert f"--layer-steps must be at least 1, got {steps}" in line
    line = one_line_error(run_module("mobilekd.recipes.distill", "--teacher", tmp_path / "none", "--out",
                                     tmp_path / "x", "--batch-size", 0, check=False))
    assert "--batch-size must be at least 1, got 0" in line
    line = one_line_error(run_module("mobilekd.recipes.train_teacher", "--out", tmp_path / "t", "--steps", 0,
                                     check=False))
    assert "--steps must be at least 1, got 0" in line
    line = one_line_error(run_module(FINETUNE, "--model", tmp_path, "--task", "sst2", "--max-steps", 0, check=False))
    assert "--max-steps must be at least 1, got 0" in line
    # finetune's flags are FinetuneConfig's fields: their bounds, checks and former names hold as declared there
    for flags, problem in ((["--epochs", 0], "--epochs must be greater than 0, got 0.0"),
                           (["--intermediate-epochs", -1], "--intermediate-epochs must be greater than 0, got -1.0"),
                           (["--augment", 4], "--augment needs --augment-model"),
                           (["--selection-fraction", 2], "--validation-fraction must be between 0 and 1, got 2.0")):
        line = one_line_error(run_module(FINETUNE, "--model", tmp_path, "--task", "sst2", *flags, check=False))
        assert problem in line
    help_text = run_module(FINETUNE, "--help").stdout
    assert "--max-len" in help_text and "--seq-len" not in help_text  # one flag for the sequence length


@pytest.fixture(scope="module")
def sst2_classifier(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("classifier")
    config = PRESETS["demo_student"].config.replace(id2label={0: "negative", 1: "positive"})
    save_pretrained(MobileBertForSequenceClassification(config), out, tokenizer)
    return out


def test_export_checks_its_flags_before_converting(sst2_classifier, tmp_path):
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", sst2_classifier, "--max-len", 0,
                                     "--out", tmp_path / "a", check=False))
    assert "--max-len must be at least 1, got 0" in line
    taken = tmp_path / "a_file"
    taken.write_text("mine")
    start = time.time()
    line = one_line_error(run_module("mobilekd.recipes.export", "--model", sst2_classifier, "--out", taken,
                                     check=False))
    assert f"{taken}: exists and is not a directory" in line
    assert time.time() - start < 60 and taken.read_text() == "mine"  # refused before any conversion


def test_latency_names_the_bad_tflite_file(sst2_classifier, tmp_path):
    from mobilekd.export.litert import convert
    from mobilekd.models.hf import load_pretrained

    good = convert(load_pretrained(sst2_classifier), "classification", 16, tmp_path / "good.tflite")
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    text = tmp_path / "notes.tflite"
    text.write_text("these are my notes, not a model\n")
    for bad, problem in ((text, "not a .tflite model"), (truncated, "not a whole .tflite model")):
        proc = run_module("mobilekd.recipes.latency", "--models", "--tflite", f"good={good}", f"bad={bad}",
                          "--threads", 1, "--runs", 1, "--out", tmp_path / "lat", check=False)
        assert f"{bad}: {problem}" in one_line_error(proc)


def test_csv_with_a_quoted_newline_is_read(tmp_path):
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["text", "label"], ["first line\nsecond line, same field", "a"], ["plain", "b"]])
    examples = read_custom(path)
    assert [(e.text_a, e.label) for e in examples] == [("first line\nsecond line, same field", "a"), ("plain", "b")]
    assert examples[1].source.endswith("mine.csv:4")  # the line the record starts on


def test_artifacts_respect_the_umask(tmp_path, tokenizer):
    old = os.umask(0o022)
    try:
        out = save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), tmp_path / "m", tokenizer)
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name


def _custom_task(directory):
    """A small task of the user's own, as CSV: SST-2 sentences with the labels 'bad' and 'good'."""
    directory.mkdir()
    for split, n in (("train", 300), ("dev", 120)):
        rows = read_glue("sst2", ROOT / "data/glue/SST-2" / f"{split}.tsv.gz")[:n]
        with open(directory / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows([e.text_a, {"0": "bad", "1": "good"}[e.label]] for e in rows)
    return directory


def test_own_task_gets_a_sized_lr_a_baseline_held_out_selection_and_its_own_parity_data(student_dir, tmp_path):
    data = _custom_task(tmp_path / "mine")
    out = tmp_path / "ft"
    proc = run_module(FINETUNE, "--model", student_dir, "--task", "custom", "--data", data, "--out", out,
                      "--max-steps", 6, "--batch-size", 16, "--max-len", 32, "--eval-every", 3, "--threads", 1)
    result = json.loads((out / "results.json").read_text())
    assert result["lr"] == 5e-4 and "--lr not given: 0.0005 for a model of 2.3M parameters" in proc.stdout
    baseline = result["baseline"]
    assert baseline["method"] == "tfidf+logreg" and baseline["train_examples"] == result["train_examples"] == 270
    assert baseline["dev_examples"] == 120 and 0.4 < baseline["metrics"]["accuracy"] <= 1.0
    # and the constant answer: the training split's most frequent label on every dev sentence
    from mobilekd.data.tasks import load_task
    labels = [e.label for e in load_task("custom", data).dev["dev"]]
    majority = result["majority"]
    # "good" is the training split's most frequent label: 172 of the 300 rows, so at least 142 of the 270 kept
    trained = [e.label for e in load_task("custom", data).train]
    assert trained.count("good") - trained.count("bad") > 30 and majority["train_examples"] == 270
    assert majority["label"] == "good"
    assert majority["metrics"]["accuracy"] == labels.count(majority["label"]) / len(labels)
    assert "the majority class" in proc.stdout
    from benchmarks.rows import baseline_rows  # a comparison's rows of both, from the run alone
    assert [(r["method"], r["value"]) for r in baseline_rows(out, "custom", 0, "accuracy")] == [
        ("tfidf", round(baseline["metrics"]["accuracy"], 4)), ("majority", round(majority["metrics"]["accuracy"], 4))]
    # chosen on a validation split of the training data (the default), dev scored once after
    assert result["selected_on"] == "validation" and list(result["metrics"]) == ["dev", "validation"]
    assert result["best_score"] == result["metrics"]["validation"]["accuracy"]
    # SST-2's first 300 rows are phrases of a few sentences: a phrase goes where the sentence holding it goes
    assert result["validation_split"] == {"rule": "stratified by label, a text and the training texts holding it "
                                          "on one side", "fraction": 0.1, "cap": 2000, "seed": 0,
                                          "size": 30, "train_size": 270}
    assert result["dev_scored"].startswith("once")
    assert "bag-of-words baseline" in proc.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "bad", "1": "good"}  # the user's names, in sorted order

    run_module("mobilekd.recipes.export", "--model", out, "--max-len", 32, "--parity-examples", 40,
               "--no-metadata", "--out", tmp_path / "tflite")
    parity = json.loads((tmp_path / "tflite" / "parity.json").read_text())["model_none.tflite"]
    assert parity["examples"] == 40 and "accuracy_torch" in parity  # scored on the model's own dev labels


def test_a_run_marks_its_own_output_complete_for_the_flags_it_ran_with(tmp_path):
    """A recipe writes OUT/complete.json with its flags when it starts (under way) and when it returns (finished;
    `mobilekd.rundir.owned`); the benchmarks' runner asks only that (`Job.done`): the same run is done, the same OUT
    under other flags is not, a run refused before it starts leaves OUT as it was, and one that fails in OUT leaves
    it marked unfinished; a run refused inside OUT before it wrote there (a resume under other flags) puts the earlier
    run's mark back; the same run made from another checkout (its paths inside that checkout) is done. A run made
    before the mark counts by what its recipe wrote last then."""
    from benchmarks.runner import Job
    from mobilekd.errors import UserError
    from mobilekd.rundir import COMPLETE, completed, owned

    out = tmp_path / "student"
    job = Job("init", ["init", "demo_student", str(out), "--seed", "0"], out)
    assert not job.done()
    run_module("mobilekd", *job.argv)
    assert job.done() and (out / "model.safetensors").is_file()
    assert not Job("init", ["init", "demo_student", str(out), "--seed", "1"], out).done()
    refused = run_module("mobilekd", "init", "demo_student", out, "--layers", "0", check=False)
    assert "no such model directory" in one_line_error(refused) and job.done()
    with pytest.raises(UserError), owned(out, argv=["--other"]):  # refused inside OUT before writing anything
        raise UserError("a checkpoint made with other settings")
    assert job.done()  # the finished run's mark is back
    with pytest.raises(UserError), owned(out, argv=["--other"]):
        (out / "partial.txt").write_text("written")
        raise UserError("refused after writing")
    assert not job.done()  # OUT changed under the refused run: no longer whole for the finished run's flags
    run_module("mobilekd", *job.argv)
    assert job.done()
    mark = json.loads((out / COMPLETE).read_text())
    assert mark["root"] == str(ROOT)  # the checkout that ran it
    # a run made from another checkout of the repository (a worktree sharing runs/): paths inside it read relative
    (out / COMPLETE).write_text(json.dumps({**mark, "argv": ["--out", "/elsewhere/checkout/runs/x"],
                                            "root": "/elsewhere/checkout"}))
    assert completed(out, ["--out", ROOT / "runs" / "x"]) and not completed(out, ["--out", "/elsewhere/runs/x"])
    assert not completed(out, ["--out", ROOT / "runs" / "y"])
    # ... or its runs/ a link to this one's, so that a resolved path points into this checkout
    moved = ["--out", f"{ROOT}/runs/x", "--teacher", "/elsewhere/checkout/runs/t"]
    (out / COMPLETE).write_text(json.dumps({**mark, "argv": moved, "root": "/elsewhere/checkout"}))
    assert completed(out, ["--out", "runs/x", "--teacher", ROOT / "runs" / "t"])
    (out / COMPLETE).write_text(json.dumps({k: v for k, v in mark.items() if k != "root"}))  # a mark from before roots
    assert job.done()
    (out / COMPLETE).write_text(json.dumps(mark))
    with pytest.raises(RuntimeError), owned(out, argv=job.argv[1:]):
        assert not job.done()  # under way
        raise RuntimeError("killed midway")
    assert not job.done()
    (out / COMPLETE).unlink()  # a run from before the mark: its summary.json beside the weights
    assert not completed(out, job.argv[1:])
    (out / "summary.json").write_text("{}")
    assert completed(out, job.argv[1:])


def test_a_benchmark_job_that_needs_a_run_its_plan_lacks_is_reported_not_waited_on(tmp_path, capsys):
    """A job whose need no job of the plan makes can never start: the invocation says so and counts it (and what
    needs it) as failed, instead of ending with nothing run and nothing failed."""
    from benchmarks.runner import Job, run_all

    orphan = Job("orphan", ["init", "demo_student", str(tmp_path / "orphan")], tmp_path / "orphan", needs=["adapt"])
    after = Job("after", ["init", "demo_student", str(tmp_path / "after")], tmp_path / "after", needs=["orphan"])
    assert sorted(run_all([orphan, after], 2, tmp_path / "logs", poll=0.2)) == ["after", "orphan"]
    log = capsys.readouterr().out
    assert "skipped orphan: it needs adapt, which this plan does not run" in log and "skipped after" in log
    assert not orphan.out.exists() and not after.out.exists()


def test_a_benchmark_job_after_a_failed_one_still_runs_and_a_job_that_needs_it_does_not(tmp_path, capsys):
    """`Job.after` orders (the quality benchmark's timing waits for every run to end), `Job.needs` depends: a run
    that failed skips the jobs that need it, not those that only come after it, which start once it has ended."""
    from benchmarks.runner import INVOCATIONS, Job, run_all, whole_plan_wall
    from mobilekd.fileio import read_json

    broken = Job("broken", ["finetune", "--task", "sst2", "--model", str(tmp_path / "missing"), "--out",
                            str(tmp_path / "broken")], tmp_path / "broken")
    later = Job("later", ["init", "demo_student", str(tmp_path / "later")], tmp_path / "later", after=["broken"])
    needing = Job("needing", ["init", "demo_student", str(tmp_path / "needing")], tmp_path / "needing",
                  needs=["broken"])
    failed = run_all([broken, later, needing], 2, tmp_path / "logs")
    assert sorted(failed) == ["broken", "needing"] and later.done() and not needing.done()
    log = capsys.readouterr().out
    assert log.index("FAILED broken") < log.index("start later") and "skipped needing" in log
    # each invocation is recorded with what it ran and its wall time; only one that ran a whole plan from nothing,
    # none failing, measures that plan
    again = Job("again", ["init", "demo_student", str(tmp_path / "again")], tmp_path / "again")
    assert run_all([later, again], 2, tmp_path / "logs") == []
    first, second = read_json(tmp_path / "logs" / INVOCATIONS)
    assert sorted(first["ran"]) == ["broken", "later"] and sorted(first["failed"]) == ["broken", "needing"]
    assert first["existed"] == second["existed"] == []  # no output folder was there to resume
    assert second["ran"] == ["again"] and second["done_before"] == ["later"] and second["workers"] == 2
    assert 0 < second["seconds"] < 300 and second["cpu"] and second["cores"] >= 1
    assert whole_plan_wall(tmp_path / "logs", [broken, later]) is None  # ran, but failed
    assert whole_plan_wall(tmp_path / "logs", [later, again]) is None  # later was done before
    assert whole_plan_wall(tmp_path / "logs", [again]) == second
    remade = next(f for f in again.out.iterdir() if f.is_file())
    os.utime(remade, (time.time() + 3600,) * 2)  # written after the invocation: it no longer measures what is there
    assert whole_plan_wall(tmp_path / "logs", [again]) is None


def test_a_command_whose_plan_grows_as_its_runs_finish_is_timed_from_its_first_run_to_its_last(tmp_path):
    """A comparison whose plan grows (a choice made names the runs that follow it) calls `run_all` once per stage:
    consecutive entries, each finding done what the ones before ran and starting as the one before ended, are one
    command, its wall time their span; a rerun that runs nothing leaves it, a later command or a stage run again
    later is not part of it."""
    import shutil

    from benchmarks.runner import INVOCATIONS, Job, run_all, whole_plan_wall
    from mobilekd.fileio import read_json, write_json

    logs = tmp_path / "logs"
    first = Job("first", ["init", "demo_student", str(tmp_path / "first")], tmp_path / "first")
    grown = Job("grown", ["init", "demo_student", str(tmp_path / "grown")], tmp_path / "grown", needs=["first"])
    assert run_all([first], 1, logs) == [] and run_all([first, grown], 1, logs) == []
    one, two = read_json(logs / INVOCATIONS)
    wall = whole_plan_wall(logs, [first, grown])
    assert wall["ran"] == ["first", "grown"] and wall["invocations"] == 2 and wall["started"] == one["started"]
    assert one["seconds"] + two["seconds"] - 2 <= wall["seconds"] <= one["seconds"] + two["seconds"] + 60
    assert whole_plan_wall(logs, [first]) == one  # the first stage alone, a plan of its own
    assert run_all([first, grown], 1, logs) == []  # the same command again: it finds all done and runs nothing
    assert whole_plan_wall(logs, [first, grown]) == wall
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.mktime(time.strptime(
        one["started"], "%Y-%m-%dT%H:%M:%S")) + one["seconds"] + 120))  # a second command, two minutes after
    write_json(logs / INVOCATIONS, [one, {**two, "started": later}])
    assert whole_plan_wall(logs, [first, grown]) is None
    write_json(logs / INVOCATIONS, [one, two])
    shutil.rmtree(grown.out)
    assert run_all([first, grown], 1, logs) == []  # `grown` again: found `first` done, not run by this command
    assert whole_plan_wall(logs, [first, grown]) is None


def test_runs_a_plan_names_as_its_runs_end_join_the_same_invocation(tmp_path, capsys):
    """`run_all(grow=...)`: a choice made names the runs that follow it while others still run; they join this
    invocation (one entry in the invocations file, whose wall time is the whole plan's) instead of waiting for every
    run of the stage to end; one named with a need no plan makes is skipped and counted as failed."""
    from benchmarks.runner import INVOCATIONS, Job, run_all, whole_plan_wall
    from mobilekd.fileio import read_json

    def job(name, needs=()):
        return Job(name, ["init", "demo_student", str(tmp_path / name)], tmp_path / name, needs=list(needs))

    first, other, grown = job("first"), job("other"), job("grown", ["first"])
    plan = [first, other]
    assert run_all(plan, 2, tmp_path / "logs", grow=lambda: [first, other] + ([grown] if first.done() else [])) == []
    assert grown.done() and [j.name for j in plan] == ["first", "other", "grown"]
    (entry,) = read_json(tmp_path / "logs" / INVOCATIONS)
    assert sorted(entry["ran"]) == ["first", "grown", "other"] and entry["done_before"] == entry["failed"] == []
    assert whole_plan_wall(tmp_path / "logs", [first, other, grown]) == entry
    assert "named 1 more: grown" in capsys.readouterr().out
    orphan, last = job("orphan", ["nowhere"]), job("last")
    failed = run_all([last], 1, tmp_path / "logs2", grow=lambda: [last, orphan])
    assert failed == ["orphan"] and last.done() and not orphan.out.exists()
    assert "skipped orphan: it needs nowhere, which this plan does not run" in capsys.readouterr().out

    def unreadable():  # a plan that cannot be named again once a run has ended: the invocation ends, recorded
        if (tmp_path / "alone").exists():
            raise ValueError("results.json: not JSON")
        return [alone]

    alone = job("alone")
    assert run_all([alone], 1, tmp_path / "logs3", grow=unreadable) == [] and alone.done()
    assert "the plan could not be named again (ValueError: results.json: not JSON)" in capsys.readouterr().out
    assert [e["ran"] for e in read_json(tmp_path / "logs3" / INVOCATIONS)] == [["alone"]]


def test_a_run_another_invocation_is_running_is_waited_for_not_started_twice(tmp_path, capsys):
    """Two invocations on one --out share their stages: a job the other has claimed is waited for; done there, it
    is done here and what needs it starts; ended there unfinished, it runs here."""
    import threading

    from benchmarks.runner import Job, claim, run_all
    from mobilekd.fileio import read_json

    logs = tmp_path / "logs"
    logs.mkdir()

    def job(name, **kw):
        return Job(name, ["init", "demo_student", str(tmp_path / name)], tmp_path / name, **kw)

    shared, needing = job("shared"), job("needing", needs=["shared"])
    other = claim(shared)  # the other invocation holds it (another benchmark's, say: it is keyed by OUT)
    assert other is not None and claim(shared) is None
    result, printed = [], []
    here = threading.Thread(target=lambda: result.append(run_all([shared, needing], 2, logs, poll=0.2)))
    here.start()
    deadline = time.time() + 60
    while "waiting for shared" not in "".join(printed) and time.time() < deadline:
        time.sleep(0.2)
        printed.append(capsys.readouterr().out)
    assert "waiting for shared: another invocation is running it" in "".join(printed)
    assert not (tmp_path / "needing").exists()  # what needs it waits too
    run_module("mobilekd", "init", "demo_student", tmp_path / "shared")  # the other invocation finishes it
    os.close(other)
    here.join(120)
    printed.append(capsys.readouterr().out)
    log = "".join(printed)
    assert result == [[]] and needing.done() and "done shared (by another invocation)" in log
    assert "start shared" not in log and read_json(logs / "invocations.json")[-1]["ran"] == ["needing"]

    # held, then let go unfinished (the other invocation was stopped): this one runs it
    again = job("again")
    other = claim(again)
    here = threading.Thread(target=lambda: result.append(run_all([again], 1, logs, poll=0.2)))
    here.start()
    time.sleep(1.0)
    assert not again.out.exists()
    os.close(other)
    here.join(120)
    assert result[-1] == [] and again.done() and read_json(logs / "invocations.json")[-1]["ran"] == ["again"]
