"""benchmarks.quality and its plan (configs/benchmarks/quality.toml, made into jobs by benchmarks/quality_plan.py):
the rows it takes from each run, the timings and costs it charges, the students it judges, the runs each plan holds;
on small rows written here, not the committed ones (those are tests/test_results_tables.py's)."""

import pytest

from benchmarks.rows import parameters
from benchmarks.stats import VERDICTS


def test_quality_gives_every_row_of_a_family_timed_again_that_one_timing(tmp_path):
    """Rows of runs gone from OUT keep their scores but take their family's new timing, so a family's rows never mix
    two timing runs; baselines without a file, and rows already so timed, are left alone."""
    from benchmarks import quality
    from mobilekd.fileio import write_json

    old = {"tflite_bytes": 10, "host_ms": 50.6, "pixel4_ms": 33.5}
    names = {**quality.FAMILIES, "model-maker": "average word embedding"}
    rows = [{"task": "sst2", "method": "teacher", "seed": 0, "metric": "accuracy", "value": 0.89, **old,
             "student": names["teacher"]},
            {"task": "mrpc", "method": "pkt-kd", "seed": 0, "metric": "f1", "value": 0.79, **old,
             "student": names["mobilebert"]},
            {"task": "sst2", "method": "tfidf", "seed": 0, "metric": "accuracy", "value": 0.82},
            {"task": "sst2", "method": "model-maker", "seed": 0, "metric": "accuracy", "value": 0.81, **old,
             "student": names["model-maker"]}]
    write_json(tmp_path / "quality.json", rows)
    fresh = {"teacher": {**old, "host_ms": 37.8}, "mobilebert": {**old, "host_ms": 11.3, "pixel4_ms": 9.9},
             "model-maker": old}
    again = quality.restamped(tmp_path / "quality.json", fresh)
    assert [(r["method"], r["host_ms"], r["value"]) for r in again] == [("teacher", 37.8, 0.89), ("pkt-kd", 11.3, 0.79)]
    other = {**rows[1], "student": "mobilebert_h384 (PKT), another width"}  # not the file that was timed
    write_json(tmp_path / "quality.json", [other])
    assert quality.restamped(tmp_path / "quality.json", fresh) == []
    assert again[1]["pixel4_ms"] == 9.9 and quality.family_of(rows[2]) is None


def test_quality_rows_trained_elsewhere_take_each_familys_file_from_the_benchmarks_own_rows(tmp_path, student_dir):
    """Runs collected into a results file of their own (a lent GPU's, their weights left there) carry the GPU's
    name, the parameters their config builds, and their family's size and latency as the benchmark's own rows
    (docs/results/quality.json) recorded them: the file is the architecture's, wherever it trained."""
    import shutil

    from benchmarks import quality
    from mobilekd.fileio import REPO_ROOT, write_json
    from mobilekd.models.hf import load_pretrained

    d = quality.run_dir(tmp_path / "runs", "rte", "teacher", 0)
    d.mkdir(parents=True)
    shutil.copy(student_dir / "config.json", d)
    write_json(d / "results.json", {"complete": True, "metrics": {"dev": {"accuracy": 0.55}}, "best_metric": "accuracy",
                                    "steps": 234, "lr": 5e-5, "wall_seconds": 30.2, "train_examples": 2490,
                                    "teacher_outputs_precision": "bf16",  # as a taught run records them
                                    "training": [{"cpu": "Intel(R) Xeon(R) Processor",
                                                  "gpu": "NVIDIA H100 80GB HBM3", "precision": "bf16"},
                                                 {"precision": "no"}, {"precision": "bf16"}]})
    found, _ = quality.rows(tmp_path / "runs", ["rte"], [0], tmp_path / "quality_gpu.json")
    [teacher] = [r for r in found if r["method"] == "teacher"]
    own = quality.recorded(REPO_ROOT / quality.RESULTS)["teacher"]
    assert {k: teacher[k] for k in quality.LATENCY_FIELDS} == own and own["pixel4_ms"] > 0
    assert teacher["gpu"] == "NVIDIA H100 80GB HBM3" and teacher["value"] == 0.55
    assert teacher["train_precision"] == "bf16+no" and teacher["teacher_outputs_precision"] == "bf16"
    assert "augment_precision" not in teacher  # no augmented set
    assert teacher["params"] == sum(t.numel() for t in load_pretrained(student_dir).state_dict().values())
    assert {r["method"] for r in found} == {"teacher", "tfidf", "majority"}


def test_quality_cost_curves_charge_every_run_of_a_shared_set_what_making_it_cost(tmp_path, student_dir):
    """A run that read its augmented set from the cache, or waited for it, is charged on the cost curves what making
    it cost (`set_made_seconds`), as the run that made it is, so a seed's curve does not depend on which run came
    first (nor on which seeds one invocation collects); the rows keep each run's own seconds."""
    import shutil

    from benchmarks import quality
    from mobilekd.fileio import write_json

    out = tmp_path / "runs"
    stages = quality.stage_dirs(out)
    for name, seconds in (("adapt", 100.0), ("tinybert4", 50.0)):
        stages[name].mkdir(parents=True)
        write_json(stages[name] / "summary.json", {"wall_seconds": seconds})
    for method, seed, wall, got in (("teacher", 0, 200.0, None), ("teacher", 1, 200.0, None),
                                    ("tinybert-td", 0, 1000.0, 300.0), ("tinybert-td", 1, 700.0, 0.5)):
        d = quality.run_dir(out, "rte", method, seed)
        d.mkdir(parents=True)
        shutil.copy(student_dir / "config.json", d)
        write_json(d / "results.json", {"complete": True, "metrics": {"dev": {"accuracy": 0.55}}, "steps": 10,
                                        "best_metric": "accuracy", "lr": 1e-4, "wall_seconds": wall,
                                        **({"shared_set": "augmented/a", "set_seconds": got,
                                            "set_made_seconds": 300.0} if got is not None else {}),
                                        # seed 1 read its teacher's outputs over the set, which took another run 80 s
                                        **({"shared_outputs": "outputs/s1", "outputs_seconds": 0.5,
                                            "outputs_made_seconds": 80.0} if (method, seed) == ("tinybert-td", 1)
                                           else {})})
    found, curves = quality.rows(out, ["rte"], [1], tmp_path / "quality.json")  # seed 1 alone: its maker unseen
    seed1 = 700.0 - 0.5 + 300 + 100 + 50 + 200 + 80 - 0.5
    assert [c["cpu_seconds"] for c in curves if c["method"] == "tinybert-td"] == [seed1]
    found, curves = quality.rows(out, ["rte"], [0, 1], tmp_path / "quality.json")
    charged = {c["seed"]: c["cpu_seconds"] for c in curves if c["method"] == "tinybert-td"}
    assert charged == {0: 1000.0 + 100 + 50 + 200, 1: seed1}
    assert {r["seed"]: (r["train_seconds"], r["set_seconds"]) for r in found if r["method"] == "tinybert-td"} == {
        0: (1000.0, 300.0), 1: (700.0, 0.5)}
    teacher = [c["cpu_seconds"] for c in curves if c["method"] == "teacher"]
    assert teacher == [300.0, 300.0]  # no set: its own seconds and the adaptation's


@pytest.mark.parametrize("head", ["pretraining", "classification", "cmlm", "qa"])
def test_a_runs_parameters_are_counted_from_its_config_where_its_weights_stayed_elsewhere(tmp_path, head):
    """Every head's count from config.json alone is the weights file's, the extras transformers reads (an untied
    C-MLM decoder's bias) included."""
    from mobilekd.models.heads import HEADS
    from mobilekd.models.hf import save_pretrained
    from mobilekd.models.presets import PRESETS

    save_pretrained(HEADS[head].model_class(PRESETS["demo_student"].config), tmp_path, head=head)
    full = parameters(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    assert parameters(tmp_path) == full > 0


def test_quality_estimates_its_wall_time_from_the_rows_and_names_what_it_leaves_out():
    """Every planned run at its task and method's mean seconds times the issue's 3 seeds, a run's metric rows once,
    every shared stage once (its longest record; a 0-second stage is measured, not missing), over 2 workers; a method
    with no row yet (and its stage) is named, not guessed: "fails" past 6 hours, otherwise not judged until nothing
    is left out; and no wall line at all from the rows of some tasks only."""
    from benchmarks import quality

    rows = [{"task": "sst2", "method": "model-maker", "seed": 0, "metric": "accuracy", "train_seconds": 300.0}]
    for task in quality.TASKS:
        rows.append({"task": task, "method": "tfidf", "seed": 0, "metric": "accuracy", "train_seconds": 2.0})
        for seed, seconds in ((0, 900.0), (1, 1100.0)):
            for metric in ("accuracy", "f1"):  # two rows of one run: counted once
                rows += [{"task": task, "method": "teacher", "seed": seed, "metric": metric, "train_seconds": seconds,
                          "start_seconds": 400.0},
                         {"task": task, "method": "pkt-kd", "seed": seed, "metric": metric,
                          "train_seconds": seconds / 2, "start_seconds": 1900.0 + 100 * seed},
                         {"task": task, "method": "subset2-kd", "seed": seed, "metric": metric,
                          "train_seconds": seconds / 4, "start_seconds": 0.0}]
    cpu = 5 * 3 * (1000 + 500 + 250 + 2) + 3 * 300 + 400 + 2000 + 0
    assert quality.wall_estimate(rows, ("teacher", "pkt-kd", "subset2-kd")) == (pytest.approx(cpu / 2 / 3600), {})
    hours, missing = quality.wall_estimate(rows, ("teacher", "pkt-kd", "subset2-kd", "tinybert-td"))
    assert hours == pytest.approx(cpu / 2 / 3600)
    assert missing == {"tinybert-td": list(quality.TASKS), "stages": ["tinybert4"]}
    lines = quality.wall_goals(rows)
    assert [line.rsplit("|", 2)[-2].strip() for line in lines] == ["not judged (some runs left out)"] * 2
    assert "the default plan" in lines[0] and "every method" in lines[1]
    assert "tinybert-td (mrpc, stsb)" in lines[0] and "tinybert-td-aug (sst2)" in lines[0]
    assert "tinybert-td-wide (cola)" in lines[0] and "tinybert-td-short (rte)" in lines[0]  # TASK_RECIPES' swaps
    assert "pkt (" not in lines[0] and "pkt (sst2, mrpc)" in lines[1]
    slow = [{**r, "train_seconds": r["train_seconds"] * 10} for r in rows]
    assert [line.rsplit("|", 2)[-2].strip() for line in quality.wall_goals(slow)] == ["fails (an estimate)"] * 2
    assert all("summed over the hosts `None`" in line and "never run whole" in line for line in lines)
    # every run of the issue's table measured: judged, and each stage (bilstm has none) counted once
    done = rows + [{"task": task, "method": method, "seed": 0, "metric": "accuracy", "train_seconds": 100.0,
                    **({"start_seconds": 600.0} if method == "tinybert-td" else {})}
                   for task in quality.TASKS for method in ("subset2-narrow-kd", "tinybert-td", "bilstm-kd-aug")]
    for r in done:
        if r["method"] == "subset2-narrow-kd":
            r["start_seconds"] = 85.0
    hours, missing = quality.wall_estimate(done, quality.RECIPES)
    assert missing == {} and hours == pytest.approx(
        (5 * 3 * (1000 + 500 + 3 * 100 + 2) + 3 * 300 + 400 + 2000 + 85 + 600) / 2 / 3600)
    # the default plan runs the subset family's STS-B recipe and TinyBERT's SST-2 one (TASK_RECIPES), which no row of
    # `done` measures yet
    subset_on_stsb = quality.recipe("stsb", "subset2-narrow-kd")
    assert quality.wall_estimate(done, [quality.DEFAULT])[1] == {subset_on_stsb: ["stsb"],
                                                                 "tinybert-td-aug": ["sst2"],
                                                                 "tinybert-td-wide": ["cola"],
                                                                 "tinybert-td-short": ["rte"],
                                                                 "bilstm-kd-aug-short": ["rte"]}
    done += [{"task": "stsb", "method": subset_on_stsb, "seed": 0, "metric": "pearson",
              "train_seconds": 400.0, "start_seconds": 85.0},
             {"task": "sst2", "method": "tinybert-td-aug", "seed": 0, "metric": "accuracy",
              "train_seconds": 250.0, "start_seconds": 600.0},
             {"task": "cola", "method": "tinybert-td-wide", "seed": 0, "metric": "matthews_corr",
              "train_seconds": 150.0, "start_seconds": 600.0},
             {"task": "rte", "method": "tinybert-td-short", "seed": 0, "metric": "accuracy",
              "train_seconds": 40.0, "start_seconds": 600.0},
             {"task": "rte", "method": "bilstm-kd-aug-short", "seed": 0, "metric": "accuracy",
              "train_seconds": 30.0}]
    hours, missing = quality.wall_estimate(done, [quality.DEFAULT])
    assert missing == {} and hours == pytest.approx(
        (5 * 3 * (1000 + 500 + 3 * 100 + 2) + 3 * (400 - 100) + 3 * (250 - 100) + 3 * (150 - 100) + 3 * (40 - 100)
         + 3 * (30 - 100) + 3 * 300 + 400 + 2000 + 85 + 600) / 2 / 3600)
    assert [line.rsplit("|", 2)[-2].strip() for line in quality.wall_goals(done)] == [
        "holds (an estimate)", "not judged (some runs left out)"]  # the default plan; every method (pkt unmeasured)
    # where the hours go: each item by task (the stages under "all"), costliest first, its total, and the estimate
    costs = quality.costs_table(done).splitlines()
    assert costs[0] == "| single-thread hours, 3 seeds | sst2 | mrpc | stsb | cola | rte | all | total |"
    assert [line.split(" | ")[0] for line in costs[2:]] == [
        "| teacher", "| pkt-kd", "| shared stages", "| subset2-narrow-kd", "| bilstm-kd-aug",
        "| subset2-narrow-kd-aug-wide-longer", "| model-maker", "| tinybert-td-aug", "| tinybert-td",
        "| tinybert-td-wide", "| tinybert-td-short", "| bilstm-kd-aug-short", "| tfidf",
        "| all, over 2 workers (the wall estimate)"]  # equal totals (1,200 s) in the plan's order
    assert costs[2] == "| teacher | 0.83 | 0.83 | 0.83 | 0.83 | 0.83 | - | 4.17 |"  # 3 x 1,000 s a task
    assert costs[4] == "| shared stages | - | - | - | - | - | 0.86 | 0.86 |"  # 400 + 2,000 + 85 + 600 s
    assert costs[-1].endswith(f" | {2 * hours:.2f} / 2 = {hours:.2f} |")
    assert quality.costs_table([r for r in done if r["task"] != "rte"]) == ""  # no plan: no table
    partial = quality.costs_table([r for r in done if r["method"] != "tinybert-td-aug"])  # one run unmeasured
    assert partial.endswith("\nLeft out, no row records them yet: tinybert-td-aug (sst2).\n")
    assert quality.wall_goals([r for r in done if r["task"] != "rte"]) == []  # a command run on some tasks
    # a lent GPU's runs are no estimate of 2 cores: its rows are left out, as if not run (here: RTE's)
    on_gpu = [{**r, "gpu": "NVIDIA H100 80GB HBM3"} if r["task"] == "rte" else r for r in done]
    assert quality.wall_goals(on_gpu) == []
    assert quality.wall_goals([{**r, "gpu": "NVIDIA H100 80GB HBM3"} if r["method"] in quality.METHODS else r
                               for r in done]) == []  # the GPU's runs with this host's baselines beside them
    assert quality.wall_goals(done + [{**r, "gpu": "NVIDIA H100 80GB HBM3", "train_seconds": 1.0} for r in done]) == \
        quality.wall_goals(done)


def test_quality_wall_estimate_counts_a_shared_cached_set_once():
    """A cached set the planned runs share counts once, at what making it cost, whichever run (planned or not) made
    it; a run's own seconds leave out those it spent getting the set (making it, or waiting for it); a row that
    does not record the cost counts its seconds as they are, as rows did before runs recorded it."""
    from benchmarks import quality

    def run(method, seed, seconds, got=None, made=None, name="augmented/a"):
        return {"task": "cola", "method": method, "seed": seed, "metric": "matthews_corr", "train_seconds": seconds,
                **({"shared_set": name, "set_seconds": got, "set_made_seconds": made} if got is not None else {})}

    chosen = ("tinybert-td", "bilstm-kd-aug")
    rows = [run("subset2-narrow-kd-aug", 0, 1300.0, 300.0, 300.0),  # not planned: it made the set
            run("tinybert-td", 0, 1250.0, 250.0, 300.0),  # started with it: waited 250 s on its lock
            run("tinybert-td", 1, 1000.0, 1.0, 300.0),  # read it
            run("bilstm-kd-aug", 0, 500.0, 200.0, 200.0, name="transfer_set/b")]
    hours, _ = quality.wall_estimate(rows, chosen)
    assert hours * 2 * 3600 == pytest.approx(3 * (1000 + 999) / 2 + 300 + 3 * 300 + 200)
    unrecorded = [{k: v for k, v in r.items() if k not in ("shared_set", "set_seconds", "set_made_seconds")}
                  for r in rows]
    hours, _ = quality.wall_estimate(unrecorded, chosen)
    assert hours * 2 * 3600 == pytest.approx(3 * (1250 + 1000) / 2 + 3 * 500)
    # the teacher's outputs over a set, a file of each seed's teacher, once a seed: seed 0's TinyBERT run computed
    # its teacher's (40 s) and another planned run of seed 0 read the same file; seed 1's read its teacher's from
    # the cache a run outside the plan filled (60 s there); seed 2, unmeasured, at their mean
    outputs = [{**rows[1], "shared_outputs": "outputs/s0", "outputs_seconds": 40.0, "outputs_made_seconds": 40.0},
               {**rows[2], "shared_outputs": "outputs/s1", "outputs_seconds": 0.5, "outputs_made_seconds": 60.0},
               {**run("pkt-kd", 0, 500.0), "shared_outputs": "outputs/s0", "outputs_seconds": 0.2,
                "outputs_made_seconds": 40.0}]
    hours, _ = quality.wall_estimate([rows[0], *outputs, rows[3]], (*chosen, "pkt-kd"))
    assert hours * 2 * 3600 == pytest.approx(3 * (960 + 998.5) / 2 + 300 + 3 * (500 - 0.2) + 3 * (40 + 60) / 2
                                             + 3 * 300 + 200)
    spent, _ = quality.plan_seconds([rows[0], *outputs, rows[3]], (*chosen, "pkt-kd"))
    assert (spent[quality.SETS], spent[quality.OUTPUTS]) == ({"cola": 300 + 200}, {"cola": 3 * (40 + 60) / 2})


def test_quality_judges_the_student_measured_over_the_most_seeds():
    """The issue's rule picks the best mean among students within a third of the teacher's Pixel 4 estimate; a
    student run once, however high, does not displace one measured over three seeds, nor one over its budget."""
    from benchmarks import quality

    def run(method, values, pixel4):
        return [{"task": "sst2", "method": method, "seed": s, "metric": "accuracy", "value": v, "pixel4_ms": pixel4}
                for s, v in enumerate(values)]

    rows = run("teacher", [0.89, 0.89, 0.89], 30.0) + run("pkt-kd", [0.84, 0.83, 0.84], 9.0) + \
        run("bilstm-kd-aug", [0.87, 0.87, 0.86], 2.7) + run("subset2-kd", [0.88, 0.88, 0.88], 11.0)
    assert quality.best_student(rows, "sst2", "accuracy") == "bilstm-kd-aug"  # subset2-kd: over a third
    assert quality.best_student(rows + run("tinybert-td", [0.875], 1.0), "sst2", "accuracy") == "bilstm-kd-aug"
    three = run("tinybert-td", [0.875, 0.87, 0.87], 1.0)
    assert quality.best_student(rows + three, "sst2", "accuracy") == "tinybert-td"
    # a stronger teacher is a teacher, not a student, and what it adds its student is judged seed by seed
    stronger = run("teacher-long", [0.90, 0.91, 0.90], 1.0) + run("tinybert-td-teacher-long", [0.885, 0.88, 0.88], 1.0)
    assert quality.best_student(rows + three + stronger, "sst2", "accuracy") == "tinybert-td-teacher-long"
    goals = quality.goals(rows + three + stronger)
    assert "| sst2: 3 epochs of the teacher against 1 add (teacher-long - teacher) | +0.0133 ± 0.0058 [n=3] | > 0 | " \
           "holds |" in goals
    assert "| sst2: a teacher of 3 epochs against 1 adds its student (tinybert-td-teacher-long - tinybert-td) | " \
           "+0.0100 ± 0.0000 [n=3] | > 0 | holds |" in goals
    # longer layer matching: judged seed by seed against tinybert-td
    long_matching = run("tinybert-td-long", [0.88, 0.87, 0.875], 1.0)
    longer = quality.goals(rows + three + long_matching)
    assert "| sst2: 3 epochs of TinyBERT's layer matching against 1 add (tinybert-td-long - tinybert-td) | " \
           "+0.0033 ± 0.0029 [n=3] | > 0 | tie |" in longer
    # and the shorter prediction step, against tinybert-td-long
    shorter = quality.goals(rows + three + long_matching + run("tinybert-td-long-pred1", [0.89, 0.88, 0.885], 1.0))
    assert "| sst2: 1 epoch of TinyBERT's prediction step against 2 adds (tinybert-td-long-pred1 - tinybert-td-long) " \
           "| +0.0100 ± 0.0000 [n=3] | > 0 | holds |" in shorter
    # the narrowed subset: TinyBERT's two steps against logit KD, and 3 epochs of its layer matching against 1
    subset = quality.goals(rows + three + run("subset2-narrow-kd", [0.86, 0.87, 0.865], 10.2)
                           + run("subset2-narrow-td", [0.87, 0.88, 0.875], 10.2)
                           + run("subset2-narrow-td-long", [0.875, 0.885, 0.88], 10.2))
    assert "| sst2: TinyBERT's two steps against logit KD add (subset2-narrow-td - subset2-narrow-kd) | " \
           "+0.0100 ± 0.0000 [n=3] | > 0 | holds |" in subset
    assert "| sst2: 3 epochs of TinyBERT's layer matching against 1 add (subset2-narrow-td-long - subset2-narrow-td) " \
           "| +0.0050 ± 0.0000 [n=3] | > 0 | holds |" in subset
    # TinyBERT's augmentation on SST-2: against tinybert-td (the same epochs), tinybert-td-long (near its steps)
    augmented = quality.goals(rows + three + long_matching + run("tinybert-td-aug", [0.885, 0.88, 0.885], 1.0))
    assert "| sst2: TinyBERT's augmented set (2 new copies an example) adds (tinybert-td-aug - tinybert-td) | " \
           "+0.0117 ± 0.0029 [n=3] | > 0 | holds |" in augmented
    assert "| sst2: the augmented set against 3 epochs of layer matching over the task's own examples adds " \
           "(tinybert-td-aug - tinybert-td-long) | +0.0083 ± 0.0029 [n=3] | > 0 | holds |" in augmented
    # TinyBERT's own copies on CoLA, at close to the same steps: judged there against tinybert-td

    def on_cola(rows_):
        return [{**r, "task": "cola", "metric": "matthews_corr"} for r in rows_]
    wide = quality.goals(on_cola(rows + three + run("tinybert-td-wide", [0.865, 0.87, 0.875], 1.0)))
    assert "| cola: TinyBERT's own 30 new copies an example against 4, 1 + 1 epochs against 5 + 5, add " \
           "(tinybert-td-wide - tinybert-td) | -0.0017 ± 0.0076 [n=3] | > 0 | tie |" in wide


def test_quality_ship_table_gives_each_tasks_judged_student_and_names_the_goals_it_misses():
    """The table a user reads first: per task, the student the goals judge, its score, share of the teacher and
    margin over TF-IDF seed by seed, its file and Pixel 4 estimate, and which of its task's goals do not hold."""
    from benchmarks import quality

    def run(task, metric, method, values, **extra):
        return [{"task": task, "method": method, "seed": s, "metric": metric, "value": v, **extra}
                for s, v in enumerate(values)]

    timed = {"pixel4_ms": 5.4, "tflite_bytes": 24_200_000, "student": "tinybert4_h156"}
    rows = (run("sst2", "accuracy", "teacher", [0.90, 0.90, 0.90], pixel4_ms=33.0)
            + run("sst2", "accuracy", "tinybert-td", [0.88, 0.89, 0.885], **timed)
            + run("sst2", "accuracy", "tfidf", [0.82] * 3) + run("sst2", "accuracy", "majority", [0.51] * 3)
            + run("sst2", "accuracy", "model-maker", [0.82] * 3)
            + run("cola", "matthews_corr", "teacher", [0.26, 0.24, 0.28])
            + run("cola", "matthews_corr", "tinybert-td", [0.18, 0.19, 0.19], **timed)
            + run("cola", "matthews_corr", "tfidf", [0.15] * 3))
    lines = quality.ship_table(rows).splitlines()
    assert lines[2] == ("| sst2 (accuracy) | tinybert4_h156 | `tinybert-td` | 0.8850 ± 0.0050 [n=3] | 98.3 ± 0.6% | "
                        "+6.5 ± 0.5 | 24.2 | 5.4 | 4 of 5 hold (model-maker tie) |")
    assert lines[3] == ("| cola (matthews_corr) | tinybert4_h156 | `tinybert-td` | 0.1867 ± 0.0058 [n=3] | "
                        "72.1 ± 6.2% | +3.7 ± 0.6 | 24.2 | 5.4 | 1 of 2 hold (the share of the teacher fails) |")
    # the same goals, judged the same way, stand in the goal table
    goals = quality.goals(rows)
    assert "| sst2: tinybert-td - model-maker | +0.0650 ± 0.0050 [n=3] | > 0.06 | tie |" in goals
    assert "| cola: tinybert-td / teacher | 0.7208 ± 0.0617 [n=3] | >= 0.9 | fails |" in goals


def test_quality_shares_of_the_teacher_are_over_the_teacher_that_taught_each_run():
    """A seed's teacher made again replaces that seed's teacher row; a run records the teacher that taught it
    (`teacher_value`), and its share is over that one; a row from before runs recorded it, over the seed's row."""
    from benchmarks import quality
    rows = [{"task": "mrpc", "method": "teacher", "seed": s, "metric": "f1", "value": 0.8} for s in range(3)]
    rows += [{"task": "mrpc", "method": "pkt-kd", "seed": 0, "metric": "f1", "value": 0.76},  # before the record
             {"task": "mrpc", "method": "pkt-kd", "seed": 1, "metric": "f1", "value": 0.76, "teacher_value": 0.8},
             {"task": "mrpc", "method": "pkt-kd", "seed": 2, "metric": "f1", "value": 0.76, "teacher_value": 0.95}]
    assert quality.teacher_shares(rows, "mrpc", "f1", "pkt-kd") == pytest.approx([0.95, 0.95, 0.8])
    assert quality.teacher_shares(rows[1:], "mrpc", "f1", "pkt-kd") == pytest.approx([0.95, 0.8])  # no seed-0 teacher
    # a row from before of a method another teacher teaches: over that teacher's row
    strong = [{"task": "mrpc", "method": "teacher-long", "seed": 0, "metric": "f1", "value": 0.95},
              {"task": "mrpc", "method": "tinybert-td-teacher-long", "seed": 0, "metric": "f1", "value": 0.76}]
    assert quality.teacher_shares(rows + strong, "mrpc", "f1", "tinybert-td-teacher-long") == pytest.approx([0.8])
    # the results table gives the same shares' mean (90%), not the ratio of the means (0.76 / 0.8: 95%)
    line = next(x for x in quality.table(rows).splitlines() if x.startswith("| pkt-kd "))
    assert "0.7600 ± 0.0000 (90%) [n=3]" in line
    assert "%" not in next(x for x in quality.table(rows).splitlines() if x.startswith("| teacher "))


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


def test_quality_replaces_the_whole_cost_curve_of_a_run_made_again(tmp_path):
    """A run re-made at another budget (MRPC's students went from 5 epochs to 1) leaves none of its old points: the
    plot would otherwise average two budgets' curves; other runs' curves stay."""
    from benchmarks import quality
    from mobilekd.fileio import read_json, write_json

    def point(seed, step):
        return {"task": "mrpc", "method": "pkt-kd", "seed": seed, "metric": "f1", "value": 0.8, "step": step,
                "cpu_seconds": float(step)}

    accuracy = {**point(0, 71), "metric": "accuracy"}  # another metric's curve of the same run: kept
    sst2 = {**point(0, 71), "task": "sst2", "metric": "accuracy"}  # the same method and seed on another task: kept
    write_json(tmp_path / "cost.json", [point(0, 71), point(0, 575), point(1, 71), accuracy, sst2])
    quality.merge_curves(tmp_path / "cost.json", [point(0, 14), point(0, 115)])
    assert sorted((r["task"], r["metric"], r["seed"], r["step"]) for r in read_json(tmp_path / "cost.json")) == [
        ("mrpc", "accuracy", 0, 71), ("mrpc", "f1", 0, 14), ("mrpc", "f1", 0, 115), ("mrpc", "f1", 1, 71),
        ("sst2", "accuracy", 0, 71)]
    # a curve of a method this code does not know (an invocation of a newer version wrote it beside this one) is kept,
    # after the known methods, not a crash at the end of a long run
    newer = {**point(0, 71), "method": "a-newer-method"}
    write_json(tmp_path / "cost.json", [newer, point(0, 71)])
    quality.merge_curves(tmp_path / "cost.json", [point(1, 14)])
    assert [(r["method"], r["seed"]) for r in read_json(tmp_path / "cost.json")] == [
        ("pkt-kd", 0), ("pkt-kd", 1), ("a-newer-method", 0)]




def test_every_quality_plan_holds_every_run_its_runs_need(tmp_path):
    """A method asked for alone plans the stages its start stands on, and the stages those stand on: `--methods pkt`
    has no teacher, yet its PKT stage distils from the adapted teacher (`adapt`), which the plan once left out, so
    that nothing could start and the invocation ended at once with no run and no failure."""
    from benchmarks import quality

    assert [j.name for j in quality.jobs(tmp_path, ["mrpc"], [0], ["pkt"])] == ["adapt", "distill/pkt", "mrpc/pkt/0"]
    for method in [*quality.METHODS, quality.DEFAULT]:
        plan = quality.jobs(tmp_path, list(quality.TASKS), [0], [method])
        names = [j.name for j in plan]
        assert len(names) == len(set(names)), method
        for i, job in enumerate(plan):  # every need is planned, and before the job that needs it
            assert all(n in names[:i] for n in job.needs), (method, job.name, job.needs)


def test_quality_plans_the_issues_table_by_default_and_every_method_on_request(tmp_path):
    """The default plan is the issue's table (RECIPES: one recipe per family), not the ablations and augmented runs,
    which `--methods all` (or by name) adds."""
    from benchmarks import quality, quality_plan

    def planned(chosen):
        return {j.name.split("/")[1] for j in quality.jobs(tmp_path, ["mrpc"], [0], chosen)
                if j.name.startswith("mrpc/")}

    assert planned(quality.RECIPES) == set(quality.RECIPES) == planned([quality.DEFAULT])
    # on STS-B the default plan's subset recipe is its measured best there (TASK_RECIPES), the named list's is not
    stsb = {j.name.split("/")[1] for j in quality.jobs(tmp_path, ["stsb"], [0], [quality.DEFAULT])
            if j.name.startswith("stsb/")}
    assert stsb == set(quality.RECIPES) - {"subset2-narrow-kd"} | {"subset2-narrow-kd-aug-wide-longer"}
    # every swap runs on its task, in place of the family's recipe
    assert all(new in quality.methods_for(task, [quality.DEFAULT]) and old not in quality.methods_for(
        task, [quality.DEFAULT]) for task, swap in quality_plan.TASK_RECIPES.items() for old, new in swap.items())
    # the exports stay SST-2's: the default plan exports and times every family's file
    assert {j.name for j in quality.jobs(tmp_path, ["sst2"], [0], [quality.DEFAULT]) if j.name.startswith("export/")
            } == {f"export/{family}" for family, method in quality.EXPORTED.items() if method in quality.RECIPES}
    # ... each from the family's SST-2 recipe: TinyBERT over the augmented set there, tinybert-td where only it runs
    assert [[j.needs for j in quality.jobs(tmp_path, ["sst2"], [0], chosen) if j.name == "export/tinybert"]
            for chosen in ([quality.DEFAULT], ["tinybert-td"])] == [[["sst2/tinybert-td-aug/0"]],
                                                                    [["sst2/tinybert-td/0"]]]
    assert {"pkt", "pkt-short-kd", "subset2-kd", "subset2-kd-aug", "subset2-narrow-kd-aug",
            "pkt-kd-aug"} <= planned(tuple(quality.METHODS))
    # the narrowed subset over the augmented set: its own start, KD alone, TinyBERT's copies; none on SST-2
    narrow = {j.name: j.argv for j in quality.jobs(tmp_path, ["mrpc", "sst2"], [0], ["subset2-narrow-kd-aug"])}
    argv = narrow["mrpc/subset2-narrow-kd-aug/0"]
    assert argv[argv.index("--model") + 1] == str(quality.stage_dirs(tmp_path)["subset2-narrow"])
    assert argv[argv.index("--alpha") + 1] == "0" and argv[argv.index("--augment") + 1] == quality_plan.AUGMENT["mrpc"]
    assert argv[argv.index("--epochs") + 1] == quality.AUGMENTED_EPOCHS
    assert not any(name.startswith("sst2/subset2-narrow") for name in narrow)
    # its longer run: the same argv but for twice the epochs, evaluated as often over them (EVAL_POINTS)
    long = quality.jobs(tmp_path, ["mrpc"], [0], ["subset2-narrow-kd-aug-long"])[-1].argv
    assert long[long.index("--epochs") + 1] == "6" == str(2 * int(quality.AUGMENTED_EPOCHS))
    assert int(long[long.index("--eval-every") + 1]) == 2 * int(argv[argv.index("--eval-every") + 1])

    def rest(a):  # the argv but for the flags the two runs differ in
        drop = {i for f in ("--epochs", "--eval-every", "--out") for i in (a.index(f), a.index(f) + 1)}
        return [x for i, x in enumerate(a) if i not in drop]
    assert rest(long) == rest(argv)
    # its wider run (STS-B only): -long's argv but for wide_augment's copies over fewer epochs, so that its steps
    # (copies + 1 an example an epoch, up to the pairs' two columns) stay within a tenth of -long's
    wide = {j.name: j.argv for j in quality.jobs(tmp_path, ["stsb", "mrpc"], [0],
                                                  ["subset2-narrow-kd-aug-long", "subset2-narrow-kd-aug-wide"])}
    assert "mrpc/subset2-narrow-kd-aug-wide/0" not in wide
    w, lng = wide["stsb/subset2-narrow-kd-aug-wide/0"], wide["stsb/subset2-narrow-kd-aug-long/0"]
    n_w, n_l = (int(a[a.index("--augment") + 1]) for a in (w, lng))
    e_w, e_l = (int(a[a.index("--epochs") + 1]) for a in (w, lng))
    assert n_w > n_l and abs((1 + 2 * n_w) * e_w / ((1 + 2 * n_l) * e_l) - 1) < 0.1
    def without_copies(a):
        i = a.index("--augment")
        return a[:i] + a[i + 2:]
    assert rest(without_copies(w)) == rest(without_copies(lng))
    # a third epoch over the wider set (STS-B only): -wide's argv but for 3 epochs against 2, evaluated as often
    wider = {j.name: j.argv for j in quality.jobs(tmp_path, ["stsb", "mrpc"], [0], ["subset2-narrow-kd-aug-wide-long"])}
    assert "mrpc/subset2-narrow-kd-aug-wide-long/0" not in wider
    w3 = wider["stsb/subset2-narrow-kd-aug-wide-long/0"]
    assert (w[w.index("--epochs") + 1], w3[w3.index("--epochs") + 1]) == ("2", "3") and rest(w3) == rest(w)
    assert abs(int(w3[w3.index("--eval-every") + 1]) / int(w[w.index("--eval-every") + 1]) - 1.5) < 0.01
    # and a fourth: -wide-long's argv but for 4 epochs against 3
    w4 = {j.name: j.argv for j in quality.jobs(tmp_path, ["stsb"], [0], ["subset2-narrow-kd-aug-wide-longer"])}[
        "stsb/subset2-narrow-kd-aug-wide-longer/0"]
    assert (w4[w4.index("--epochs") + 1], rest(w4)) == ("4", rest(w3))
    # TinyBERT at a smaller budget: tinybert-td's argv but for 2 epochs of layer matching and 3 of prediction; none on
    # SST-2 (no augmented set there)
    tiny = {j.name: j.argv for j in quality.jobs(tmp_path, ["mrpc", "sst2"], [0], ["tinybert-td", "tinybert-td-short"])}
    full, short = tiny["mrpc/tinybert-td/0"], tiny["mrpc/tinybert-td-short/0"]
    assert (full[full.index("--epochs") + 1], short[short.index("--epochs") + 1]) == ("5", "3")
    assert "--intermediate-epochs" not in full and short[short.index("--intermediate-epochs") + 1] == "2"
    i = short.index("--intermediate-epochs")
    assert rest(short[:i] + short[i + 2:]) == rest(full)
    assert "sst2/tinybert-td-short/0" not in tiny and "sst2/tinybert-td/0" in tiny
    # longer layer matching: tinybert-td-long (SST-2 only) is tinybert-td's argv but for 3 epochs of step 1 against 1
    longer = {j.name: j.argv for j in quality.jobs(tmp_path, ["sst2", "mrpc"], [0], ["tinybert-td-long"])}
    assert set(longer) == {"adapt", "distill/tinybert4", "sst2/teacher/0", "sst2/tinybert-td-long/0", "export/teacher",
                           "latency"}  # not TinyBERT's SST-2 recipe (TASK_RECIPES): its file is not exported
    step1 = longer["sst2/tinybert-td-long/0"]
    i = step1.index("--intermediate-epochs")
    one = tiny["sst2/tinybert-td/0"]
    j = one.index("--intermediate-epochs")
    assert (one[j + 1], step1[i + 1]) == ("1", "3") and rest(one[:j] + one[j + 2:]) == rest(step1[:i] + step1[i + 2:])
    assert quality.budget("sst2", "tinybert-td-long")["intermediate_epochs"] == 3.0
    # a shorter prediction step: tinybert-td-long-pred1 (SST-2 only) is tinybert-td-long's argv but for 1 epoch of
    # step 2 against 2, evaluated as often over it (EVAL_POINTS)
    pred1 = {j.name: j.argv for j in quality.jobs(tmp_path, ["sst2", "mrpc"], [0], ["tinybert-td-long-pred1"])}
    assert not any(name.startswith("mrpc/tinybert") for name in pred1)
    step2 = pred1["sst2/tinybert-td-long-pred1/0"]
    assert (step1[step1.index("--epochs") + 1], step2[step2.index("--epochs") + 1]) == ("2", "1")
    assert int(step1[step1.index("--eval-every") + 1]) == 2 * int(step2[step2.index("--eval-every") + 1])
    assert rest(step2) == rest(step1) and step2[step2.index("--intermediate-epochs") + 1] == "3"
    assert {k: quality.budget("sst2", "tinybert-td-long-pred1")[k] for k in ("epochs", "intermediate_epochs")} == {
        "epochs": 1.0, "intermediate_epochs": 3.0}
    # TinyBERT's augmentation on SST-2 (there only): tinybert-td's argv but for the augmented set (2 new copies an
    # example, from the adapted teacher's masked LM), evaluated as often over its 3-fold steps
    aug = {j.name: j.argv for j in quality.jobs(tmp_path, ["sst2", "mrpc"], [0], ["tinybert-td-aug"])}
    assert not any(name.startswith("mrpc/tinybert") for name in aug) and "export/tinybert" in aug  # SST-2's recipe
    a, one = aug["sst2/tinybert-td-aug/0"], tiny["sst2/tinybert-td/0"]
    i = a.index("--augment")
    assert a[i:i + 4] == ["--augment", "2", "--augment-model", str(quality.stage_dirs(tmp_path)["adapt"])]
    assert int(a[a.index("--eval-every") + 1]) == 3 * int(one[one.index("--eval-every") + 1])
    assert rest(a[:i] + a[i + 4:]) == rest(one)
    assert a[a.index("--epochs") + 1] == one[one.index("--epochs") + 1] == "2"  # the prediction step's, over the set
    assert [quality.budget("sst2", m)["augment"] for m in ("tinybert-td-aug", "tinybert-td", "tinybert-td-long")] == [
        2, 0, 0]  # the rows record the copies an example
    # TinyBERT over a wider augmented set (CoLA only): tinybert-td's argv but for TinyBERT's own 30 new copies an
    # example over 1 epoch of each step against 5, its evaluations spaced for 31 times the task's examples an epoch
    wide = {j.name: j.argv for j in quality.jobs(tmp_path, ["cola", "mrpc"], [0], ["tinybert-td", "tinybert-td-wide"])}
    assert "mrpc/tinybert-td-wide/0" not in wide
    w, td5 = wide["cola/tinybert-td-wide/0"], wide["cola/tinybert-td/0"]
    assert [(a[a.index("--augment") + 1], a[a.index("--epochs") + 1]) for a in (w, td5)] == [("30", "1"), ("4", "5")]
    assert "--intermediate-epochs" not in w  # step 1 runs step 2's epochs: 1
    assert abs(int(w[w.index("--eval-every") + 1]) * 5 * 5 / (31 * int(td5[td5.index("--eval-every") + 1])) - 1) < 0.01
    assert rest(without_copies(w)) == rest(without_copies(td5))
    assert {k: quality.budget("cola", "tinybert-td-wide")[k] for k in ("augment", "epochs", "intermediate_epochs")} == {
        "augment": 30, "epochs": 1.0, "intermediate_epochs": 1.0}
    # the narrowed subset by TinyBERT's two steps (SST-2 only): subset2-narrow-kd's argv but for TinyBERT's method and
    # 1 epoch of layer matching (3 in its -long run)
    td = {j.name: j.argv for j in quality.jobs(tmp_path, ["sst2", "mrpc"], [0],
                                               ["subset2-narrow-kd", "subset2-narrow-td", "subset2-narrow-td-long"])}
    assert not any(name.startswith("mrpc/subset2-narrow-td") for name in td)
    kd = td["sst2/subset2-narrow-kd/0"]
    for method, matching in (("subset2-narrow-td", "1"), ("subset2-narrow-td-long", "3")):
        a = td[f"sst2/{method}/0"]
        i = a.index("--intermediate-epochs")
        assert a[i + 1] == matching and a[a.index("--method") + 1] == "tinybert"
        assert a[a.index("--epochs") + 1] == kd[kd.index("--epochs") + 1] == "2"  # the prediction step: KD's epochs
        assert [x if x != "tinybert" else "kd" for x in rest(a[:i] + a[i + 2:])] == rest(kd)
    assert [quality.budget(t, m).get("intermediate_epochs") for t, m in (
        ("mrpc", "tinybert-td-short"), ("mrpc", "tinybert-td"), ("sst2", "tinybert-td"), ("mrpc", "pkt-kd"))] == [
        2.0, 5.0, 1.0, None]  # the rows record step 1's epochs
    # a stronger teacher: teacher-long (SST-2 only) is fine-tuned for 3 epochs against 1, and teaches its student,
    # which is tinybert-td's argv but for its teacher; the 1-epoch teacher is not planned, nor a timing with no file
    strong = {j.name: j for j in quality.jobs(tmp_path, ["sst2", "mrpc"], [0], ["tinybert-td-teacher-long"])}
    assert set(strong) == {"adapt", "distill/tinybert4", "sst2/teacher-long/0", "sst2/tinybert-td-teacher-long/0"}
    teacher, student = strong["sst2/teacher-long/0"].argv, strong["sst2/tinybert-td-teacher-long/0"].argv
    one = tiny["sst2/tinybert-td/0"]
    assert teacher[teacher.index("--epochs") + 1] == "3" and quality.budget("sst2", "teacher-long")["epochs"] == 3.0
    assert student[student.index("--teacher") + 1] == str(quality.run_dir(tmp_path, "sst2", "teacher-long", 0))
    assert strong["sst2/tinybert-td-teacher-long/0"].needs == ["distill/tinybert4", "sst2/teacher-long/0"]
    drop = ("--teacher", "--out")
    assert [x for i, x in enumerate(student) if i - 1 not in {student.index(f) for f in drop}] == [
        x for i, x in enumerate(one) if i - 1 not in {one.index(f) for f in drop}]
    assert quality.parse([]).methods == [quality.DEFAULT]
    assert quality.parse(["--methods", "all"]).methods == list(quality.METHODS)
    assert quality.parse(["--methods", "pkt", "subset2-kd"]).methods == ["pkt", "subset2-kd"]



def test_quality_times_the_fused_bilstm_file_with_every_family_exported_before(tmp_path):
    """The BiLSTM is exported with --fused-lstm and its fused file is the one timed; files an earlier invocation
    exported (here the PKT student's) are timed in the same run, while their export is not planned again."""
    from benchmarks import quality, quality_plan

    earlier = quality.exported(tmp_path, "mobilebert")
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"tflite")
    plan = {j.name: j for j in quality_plan.measurement_jobs(tmp_path, ("teacher", "bilstm-kd-aug"))}
    assert set(plan) == {"export/teacher", "export/bilstm", "latency"}
    assert "--fused-lstm" in plan["export/bilstm"].argv and "--fused-lstm" not in plan["export/teacher"].argv
    timed = plan["latency"].argv[plan["latency"].argv.index("--tflite") + 1:]
    assert timed == [f"teacher={quality.exported(tmp_path, 'teacher')}", f"mobilebert={earlier}",
                     f"bilstm={tmp_path / 'tflite' / 'bilstm-fused' / 'model_none_fused.tflite'}"]
    assert sorted(plan["latency"].needs) == ["export/bilstm", "export/teacher"]
    # in the whole plan the timing waits for every run, the other seeds' and tasks' too: nothing trains beside it
    whole = quality.jobs(tmp_path, ["sst2", "rte"], [0, 1], ("teacher", "bilstm-kd-aug"))
    assert [j.name for j in whole][-1] != "latency" and "rte/bilstm-kd-aug/1" in [j.name for j in whole]
    latency = next(j for j in whole if j.name == "latency")
    assert set(latency.needs) | set(latency.after) == {j.name for j in whole} - {"latency"}
    assert sorted(latency.needs) == ["export/bilstm", "export/teacher"]  # the others order it, a failure skips none


def test_quality_takes_a_familys_timing_only_from_the_file_it_ships(tmp_path):
    """A BiLSTM export cut short before its fused file (parity.json without it), or a latency run that timed the
    unfused file, gives the family no size and latency (its rows fall back to recorded ones), not a KeyError or the
    wrong file's figures."""
    from benchmarks import quality
    from mobilekd.fileio import write_json

    def report(files):
        (tmp_path / "latency" / "+".join(files)).mkdir(parents=True, exist_ok=True)
        write_json(tmp_path / "latency" / "+".join(files) / "report.json", {"rows": {
            k: {"file": str(f), "host": {"1": {"p50_ms": 4.7}}, "estimate_ms": {"pixel4": 2.7}}
            for k, f in files.items()}})

    teacher, fused = quality.exported(tmp_path, "teacher"), quality.exported(tmp_path, "bilstm")
    for f in (teacher, fused):
        f.parent.mkdir(parents=True)
    write_json(teacher.parent / "parity.json", {"model_none.tflite": {"size_bytes": 90}})
    write_json(fused.parent / "parity.json", {"model_none.tflite": {"size_bytes": 10}})  # cut short
    report({"teacher": teacher, "bilstm": fused})
    assert set(quality.measured(tmp_path)) == {"teacher"}
    write_json(fused.parent / "parity.json", {"model_none.tflite": {"size_bytes": 10},
                                              "model_none_fused.tflite": {"size_bytes": 9}})
    assert quality.measured(tmp_path)["bilstm"] == {"tflite_bytes": 9, "host_ms": 4.7, "pixel4_ms": 2.7}
    report({"teacher": teacher, "bilstm": fused.parent / "model_none.tflite", "x": teacher})  # the unfused file
    assert set(quality.measured(tmp_path)) == {"teacher"}



def test_quality_runs_the_family_at_its_budgets_and_judges_the_source_documents_orderings_there(tmp_path):
    """`--methods family` plans BERT-PKD's and DistilBERT's students over the full sets (their stages first, the
    seed's teacher before its KD runs); the orderings of benchmarks.methods are judged over those runs seed by seed,
    TinyBERT without augmentation only where tinybert-td has no augmented set, and a task with no pair is left out."""
    from benchmarks import methods, quality

    args = quality.parse(["--methods", "family", "pkt"])
    assert args.methods == [*quality.FAMILY_METHODS, "pkt"]
    plan = {j.name: j for j in quality.jobs(tmp_path, ["mrpc"], [0], args.methods)}
    assert plan["distill/distilbert"].needs == ["adapt", "init/spread3"]
    assert plan["mrpc/distilbert-ft/0"].needs == ["distill/distilbert"]
    assert plan["mrpc/bert3-pkd-skip/0"].needs == ["init/bert3", "mrpc/teacher/0"]
    argv = plan["mrpc/bert3-pkd-skip/0"].argv
    assert argv[argv.index("--method") + 1] == "pkd-skip" and "--teacher" in argv and "--augment" not in argv
    assert "--teacher" not in plan["mrpc/bert3-ft/0"].argv
    assert quality.budget("mrpc", "distilbert-ft")["agnostic_steps"] == "300 a layer + 200 PD"

    def run(task, method, values):
        metric = {"mrpc": "f1", "sst2": "accuracy", "rte": "accuracy"}[task]
        return [{"task": task, "method": method, "seed": s, "metric": metric, "value": v} for s, v in enumerate(values)]

    rows = (run("mrpc", "bert3-ft", [0.80, 0.81, 0.82]) + run("mrpc", "bert3-kd", [0.83, 0.83, 0.84])
            + run("mrpc", "tinybert-td", [0.82, 0.83, 0.83]) + run("sst2", "tinybert-td", [0.85, 0.86, 0.86])
            + run("sst2", "tinybert-td-aug", [0.87, 0.87, 0.88]) + run("rte", "teacher", [0.55, 0.56, 0.57]))
    assert quality.family_method("mrpc", "tinybert") is None  # MRPC's tinybert-td is augmented
    assert [quality.family_method(t, "tinybert-aug") for t in ("sst2", "mrpc", "cola")] == [
        "tinybert-td-aug", "tinybert-td", "tinybert-td-wide"]
    lines = quality.family_orderings(rows).splitlines()
    assert lines[0] == "| ordering (full training sets) | mrpc | sst2 |"  # RTE: no pair
    assert "| KD >= FT | +0.0233 ± 0.0058 [n=3] holds | - |" in lines
    assert "| TinyBERT aug >= no aug | - | +0.0167 ± 0.0058 [n=3] holds |" in lines
    assert len(lines) == 2 + len(methods.ORDERINGS) and VERDICTS not in quality.family_orderings(rows)
    assert quality.family_orderings(run("rte", "teacher", [0.55])) == ""
    assert quality.report(rows).count(VERDICTS) == 1


def test_the_plan_file_declares_every_method_the_plans_name_and_a_bad_one_is_one_line(tmp_path):
    """configs/benchmarks/quality.toml is the plan: every method a plan, a swap or an export names is declared there
    with a family the rows know, and a plan file that is not TOML is refused naming the file."""
    from benchmarks import quality_plan as qp
    from mobilekd.errors import UserError

    named = {*qp.RECIPES, *qp.FAMILY_METHODS, *qp.AS_METHODS.values(), *qp.EXPORTED.values(),
             *(m for swap in qp.TASK_RECIPES.values() for pair in swap.items() for m in pair)}
    assert named <= set(qp.METHODS) and {f for f, *_ in qp.METHODS.values()} <= set(qp.FAMILIES)
    assert all(spec["about"] for spec in qp.PLAN["methods"].values())
    bad = tmp_path / "plan.toml"
    bad.write_text("[methods\n")
    with pytest.raises(UserError, match=f"{bad}: not a readable plan"):
        qp.load(bad)
    bad.write_text("results = 'x.json'\n")
    with pytest.raises(UserError, match=f"{bad}: lacks eval_points, "):
        qp.load(bad)
