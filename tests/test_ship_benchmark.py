"""`python -m benchmarks.ship`, the study that runs `mobilekd ship` on the GLUE tasks and on custom tasks built from
shipped text: the tasks it builds, the dev predictions it keeps, its search spaces kept apart, its families' table
and its comparison with Model Maker (the command itself: test_ship.py)."""

import json
import shutil
from collections import Counter

import pytest

from conftest import ROOT


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


def test_the_benchmark_keeps_each_seeds_dev_predictions_so_a_later_invocation_pools_them(tmp_path):
    """benchmarks.ship: a seed's predictions, kept beside the results, still count once its run folder is gone."""
    from benchmarks.ship import keep_predictions, paired_intervals, predictions, run_dir

    def finished(seed, ship, tfidf):
        run = run_dir(tmp_path / "runs", "rte", seed)
        (run / "student" / "dev").mkdir(parents=True)
        (run / "student" / "dev" / "dev_predictions.tsv").write_text(
            "label\tprediction\n" + "".join(f"{y}\t{p}\n" for y, p in zip("aab", ship)))
        (run / "baseline_dev_predictions.tsv").write_text("prediction\n" + "".join(f"{p}\n" for p in tfidf))

    kept = tmp_path / "ship_predictions.json"
    finished(0, "aaa", "bbb")
    honest, family = ("validation", None, None), ("validation", "family", None)
    first = keep_predictions(tmp_path / "runs", "rte", {0: honest}, kept)
    assert first == {honest: {0: {"labels": ["a", "a", "b"], "ship": ["a", "a", "a"], "tfidf": ["b", "b", "b"]}}}
    shutil.rmtree(tmp_path / "runs")  # the next session's checkout: seed 0's folder is gone
    finished(1, "aab", "abb")
    both = keep_predictions(tmp_path / "runs", "rte", {1: honest}, kept)[honest]
    assert sorted(both) == [0, 1] and both[0] == first[honest][0]
    versions = keep_predictions(tmp_path / "runs", "rte", {1: family}, kept)  # another version apart
    assert versions[family].keys() == {1} and versions[honest].keys() == {0, 1}
    assert keep_predictions(tmp_path / "runs", "mrpc", {}, kept) == {}
    pooled = predictions(both)
    assert pooled["ship"].shape == (2, 3) and pooled["labels"].tolist() == ["a", "a", "b"]
    # a run that names its majority label and keeps its teacher's predictions: both kept, for their intervals
    finished(2, "abb", "aaa")
    (run_dir(tmp_path / "runs", "rte", 2) / "ship.json").write_text(json.dumps({"majority": {"label": "a"}}))
    (run_dir(tmp_path / "runs", "rte", 2) / "teacher" / "dev").mkdir(parents=True)
    (run_dir(tmp_path / "runs", "rte", 2) / "teacher" / "dev" / "dev_predictions.tsv").write_text(
        "label\tprediction\na\ta\na\ta\nb\tb\n")
    third = keep_predictions(tmp_path / "runs", "rte", {2: honest}, kept)[honest]
    assert third[2]["majority"] == ["a", "a", "a"] and third[2]["teacher"] == ["a", "a", "b"]
    assert not {"majority", "teacher"} & (set(third[0]) | set(third[1]))  # seed 1's folder kept neither
    found = {r["method"]: r for r in paired_intervals("rte", "accuracy", {honest: third})}
    assert {m: r["seeds"] for m, r in found.items()} == {"ship-tfidf-interval": [0, 1, 2],
                                                        "ship-majority-interval": [2], "ship-teacher-interval": [2]}
    # seed 2: ship "abb" against labels "aab" scores 2/3, the majority's "aaa" 2/3, the teacher's "aab" 3/3
    assert found["ship-majority-interval"]["interval"]["mean"] == 0
    assert round(found["ship-teacher-interval"]["interval"]["mean"], 4) == round(-1 / 3, 4)


def test_the_benchmark_tells_search_spaces_apart_and_refuses_one_it_does_not_name(tmp_path):
    """benchmarks.ship: configs/ship_gpu.json (the MobileBERT-shaped family's longer starts) is the last space SPACES
    names, today's configs/ship.json searched with that family too the one before it, and without it the one before
    that (edit a searched family's space and this fails until the new space is named there); a run in an unnamed
    space is refused in one line, and a named one's predictions are kept apart from the first space's."""
    import copy

    from benchmarks.ship import (FAMILIES, SPACES, earlier_space, jobs, keep_predictions, run_dir, run_space,
                                 space_digest)
    from mobilekd.errors import UserError
    from mobilekd.fileio import read_json
    from mobilekd.finetune.selection import GROUPING, OVERSIZED, PAIR_GROUPING
    from mobilekd.recipes.ship import LENGTHS_OF
    from mobilekd.search.space import CONFIG, load_space

    plan = {"candidates": [f"{f}/x" for f in FAMILIES], "config": read_json(CONFIG), "validation": GROUPING,
            "lengths": LENGTHS_OF}
    names = [name for name, _ in SPACES.values()]
    linked = names[-6:-3]  # a two-text task's runs since its linked pairs were held together: spaces of their own
    capped = names[-3:]  # and since a linked group over MAX_GROUP_SHARE of the split trains (where one does)
    pairs = {**plan, "validation": PAIR_GROUPING}
    gpu = {"candidates": [*plan["candidates"], "mobilebert/mobilebert_tiny_h384_l4"],
           "config": load_space(CONFIG.with_name("ship_gpu.json"))}
    assert run_space(tmp_path, pairs) == linked[0] and earlier_space(linked[0]) == names[-7]
    assert run_space(tmp_path, {**pairs, **gpu}) == linked[2]
    assert run_space(tmp_path, {**pairs, "validation": PAIR_GROUPING + OVERSIZED}) == capped[0]
    assert earlier_space(capped[0], ran={linked[0]}) == linked[0]  # STS-B's capped seeds beside its linked ones
    assert run_space(tmp_path, {**pairs, **gpu, "validation": PAIR_GROUPING + OVERSIZED}) == capped[2]
    assert run_space(tmp_path, {**pairs, "candidates": gpu["candidates"],
                                "validation": PAIR_GROUPING + OVERSIZED}) == capped[1]
    names = names[:-6]
    hours = {j.name: j.argv[j.argv.index("--search-hours") + 1] for j in jobs(tmp_path, ["sst2", "rte"], [0])
             if "--search-hours" in j.argv}  # SST-2's search the longer: its trials scale with its size (3-hour goal)
    assert hours == {"sst2/ship/0": "2", "rte/ship/0": "0.75"}
    from mobilekd.rundir import owned

    rte = next(j for j in jobs(tmp_path, ["rte"], [0]) if j.name == "rte/ship/0")
    with owned(rte.out, argv=[("--hours" if a == "--search-hours" else a) for a in rte.argv[1:]]):
        assert not rte.done()  # under way
    assert rte.done()  # finished when ship named the search's limit --hours: not run again
    with owned(rte.out, argv=[*rte.argv[1:], "--trials", "20"]):
        pass
    assert not rte.done()  # finished under other flags: runs
    unscaled = copy.deepcopy(plan)  # before examples_seen's scale_above
    for family in unscaled["config"]["families"].values():
        family["space"]["examples_seen"].pop("scale_above")
    assert run_space(tmp_path, unscaled) == names[-6]
    assert run_space(tmp_path, {**unscaled, "lengths": None}) == names[-9]  # before ship measured whole texts
    before = copy.deepcopy({**unscaled, "lengths": None})  # before --augment's up_to_examples
    for family in before["config"]["families"].values():
        family["space"]["--augment"].pop("up_to_examples")
    assert run_space(tmp_path, before) == names[-12]
    assert run_space(tmp_path, {**before, "validation": None}) == names[-15]  # before ship recorded its grouping
    with_mobilebert = {**plan, "candidates": [*plan["candidates"], "mobilebert/mobilebert_tiny_h384_l4"]}
    assert run_space(tmp_path, with_mobilebert) == names[-2] and run_space(tmp_path, plan) == names[-3]
    gpu = {**with_mobilebert, "config": load_space(CONFIG.with_name("ship_gpu.json"))}  # its starts 3,000 steps
    assert run_space(tmp_path, gpu) == names[-1] and earlier_space(names[-1]) == names[-2]
    assert earlier_space(names[-2]) == names[-3] and earlier_space(names[-3]) == names[-4]
    assert names[0] is None and earlier_space(names[1]) is None
    assert earlier_space(names[-1], {None, names[-1]}) is None  # a task that ran the first space alone before it
    with pytest.raises(ValueError):
        earlier_space(names[0])
    reworded = copy.deepcopy(plan)
    reworded["config"]["families"]["tinybert"]["description"] = "reworded"
    reworded["config"]["families"]["bilstm"]["space"]["--lr"]["high"] = 0.01  # a family the benchmark leaves out
    assert space_digest(reworded) == space_digest(plan)
    wider = copy.deepcopy(plan)
    wider["config"]["families"]["tinybert"]["space"]["--lr"]["high"] = 1e-2
    with pytest.raises(UserError, match=f"plan.json: its search space \\(digest {space_digest(wider)}\\) is not one "
                                        "benchmarks.ship names"):
        run_space(tmp_path, wider)
    run = run_dir(tmp_path / "runs", "rte", 0)
    (run / "student" / "dev").mkdir(parents=True)
    (run / "student" / "dev" / "dev_predictions.tsv").write_text("label\tprediction\na\ta\n")
    (run / "baseline_dev_predictions.tsv").write_text("prediction\nb\n")
    kept = tmp_path / "kept.json"
    first, named = ("validation", "family", None), ("validation", "family", "wide-lr")
    keep_predictions(tmp_path / "runs", "rte", {0: first}, kept)
    both = keep_predictions(tmp_path / "runs", "rte", {0: named}, kept)
    assert both.keys() == {first, named} and "rte/validation/family/space:wide-lr/seed0" in read_json(kept)


def test_the_benchmark_pairs_a_later_search_space_with_the_one_before_on_the_seeds_both_ran():
    """benchmarks.ship's table: a task run in a later space of SPACES and in the one before it (CoLA's committed
    rows: the first) gets a line pairing them, each mean over its own space's ship rows of those seeds, and no other
    space's."""
    from benchmarks.ship import FAMILY_DRAW, SPACE_LINES, searched_space, spaces
    from benchmarks.stats import mean_std_cell
    from mobilekd.fileio import read_json

    rows = read_json(ROOT / "docs" / "results" / "ship.json")
    found = [r for r in rows if r["method"] == "ship-space-interval"]
    assert found and all(searched_space(r["space"])[0] in SPACE_LINES for r in found)
    text = spaces(rows)
    for r in found:
        ship = [x for x in rows if x["task"] == r["task"] and x["method"] == "ship" and x["seed"] in r["seeds"]
                and x.get("draw") == FAMILY_DRAW and x.get("teacher_choice") == r["teacher_choice"]]
        earlier = [x["value"] for x in ship if x.get("space") == r.get("against")]
        this = [x["value"] for x in ship if x.get("space") == r["space"]]
        before, later = mean_std_cell(earlier), mean_std_cell(this)
        assert earlier and this and f"| {r.get('against') or 'the first'} | {before} | {later} |" in text
        # another search differs; the same search under ship's --hours (STS-B seed 0) chose the same student
        assert before != later or searched_space(r["space"])[1] is not None


def test_the_family_table_judges_the_frontier_on_each_familys_best_complete_trial():
    """A family stands on a seed's frontier by its best complete trial: a pruned trial is not compared, a weak trial
    of a faster shape does not put its family there, and a slower trial scoring only as well is dominated (issue 78's
    goal is judged from these, in the newest space that searched the family)."""
    from benchmarks.ship import FAMILY_DRAW, family_table, on_frontier

    def trial(seed, family, ms, val, state="complete", chosen=False):
        return {"method": "ship-trial", "task": "cola", "seed": seed, "teacher_choice": "validation",
                "metric": "matthews_corr",
                "draw": FAMILY_DRAW, "family": family, "shape": f"{family}-{ms}", "pixel4_ms_est": ms,
                "val_value": val, "state": state, "chosen": chosen}

    rows = [trial(0, "tinybert", 1.5, 0.22, chosen=True), trial(0, "mobilebert", 1.2, 0.11),
            trial(0, "mobilebert", 1.2, 0.30, state="pruned"), trial(0, "subset", 2.6, 0.17),
            trial(0, "subset", 1.1, 0.05),
            trial(1, "tinybert", 1.5, 0.20, chosen=True), trial(1, "mobilebert", 1.9, 0.20),
            trial(1, "subset", 2.6, 0.15)]
    assert on_frontier([r for r in rows if r["seed"] == 0 and r["state"] == "complete"]) == [rows[0], rows[1], rows[4]]
    text = family_table(rows)
    constant = "0.0000 ± 0.0000 [n=2]"  # a constant answer on each seed's validation split of CoLA: an MCC of 0
    assert f"| cola | the first | subset | 3 (3) | 0.1600 ± 0.0141 [n=2] | subset-2.6 2.6 ms | {constant} | 0 of 2 | " \
           "0 of 2 |" in text
    assert "| cola | the first | mobilebert | 3 (2) | 0.1550 ± 0.0636 [n=2] | mobilebert-1.2 1.2, mobilebert-1.9 1.9 " \
           f"ms | {constant} | 0 of 2 | 1 of 2 |" in text
    assert f"tinybert | 2 (2) | 0.2100 ± 0.0141 [n=2] | tinybert-1.5 1.5 ms | {constant} | 2 of 2 | 2 of 2 |" in text
    assert "0 of the 1 searched with it so far (cola: not, 1 of 2 seeds: mobilebert-1.2 1.2 ms at 0.1100, where " \
           "that seed's best student is tinybert-1.5 1.5 ms at 0.2200); **not met**" in text
    # a constant answer costs nothing on a phone: a family's best at or below the best constant's validation score
    # (its row's, as ship.json records it) is dominated, however fast
    floors = [{"method": "constant", "task": "cola", "seed": seed, "teacher_choice": "validation", "draw": FAMILY_DRAW,
               "metric": "matthews_corr", "value": None, "val_value": 0.11} for seed in (0, 1)]
    assert "mobilebert | 3 (2) | 0.1550 ± 0.0636 [n=2] | mobilebert-1.2 1.2, mobilebert-1.9 1.9 ms | 0.1100 ± 0.0000 " \
           "[n=2] | 0 of 2 | 0 of 2 |" in family_table(rows + floors)
    assert family_table([r for r in rows if r["family"] == "tinybert"]) == ""  # one family: nothing to compare
    later = [{**r, "space": "mobilebert", "val_value": r["val_value"] + (0.2 if r["family"] == "mobilebert" else 0)}
             for r in rows]  # a newer space where the family leads on both seeds decides, in either order
    for both in (rows + later, later + rows):
        assert "1 of the 1 searched with it so far (cola: on it, 2 of 2 seeds" in family_table(both)


def test_sst2s_ship_is_set_against_model_makers_model_from_their_rows():
    """Issue 74: on SST-2, ship at least 6 points above Model Maker's average-word-embedding model. The note reads
    today's ship rows and the Model Maker rows kept in docs/results/quality.json (5 seeds, about 0.808)."""
    from benchmarks.ship import model_maker

    def ship(seed, value):
        return {"method": "ship", "task": "sst2", "seed": seed, "teacher_choice": "validation", "draw": "family",
                "metric": "accuracy", "value": value}

    assert model_maker([{**ship(0, 0.9), "task": "cola"}]) == ""  # no SST-2 run: nothing said
    met = model_maker([ship(0, 0.87), ship(1, 0.88)])
    assert "ship 0.8750 ± 0.0071 [n=2]" in met and "[n=5]" in met and "+6.7 points" in met and "met on" in met
    assert "missed on the means" in model_maker([ship(0, 0.85)])


def test_runs_under_ships_whole_run_budget_are_a_space_of_their_own_beside_the_space_they_searched(tmp_path):
    """benchmarks.ship --hours: the runs get ship's --hours (not --search-hours) in folders of their own; their rows
    carry the space they searched under that wall rule, paired with that space, sorted just after it, and never a
    task's current rows."""
    from benchmarks.ship import (SPACES, _sortable, current, earlier_space, jobs, run_dir, run_space, space_line,
                                 wall_space)
    from mobilekd.fileio import read_json
    from mobilekd.finetune.selection import OVERSIZED, PAIR_GROUPING
    from mobilekd.recipes.ship import LENGTHS_OF
    from mobilekd.search.space import CONFIG

    plan = {"candidates": ["subset/x", "tinybert/x"], "config": read_json(CONFIG),
            "validation": PAIR_GROUPING + OVERSIZED, "lengths": LENGTHS_OF}
    capped = run_space(tmp_path, plan)
    assert run_space(tmp_path, plan, {"wall_limit": {"hours": None, "search_hours": 0.75}}) == capped
    hour = run_space(tmp_path, plan, {"wall_limit": {"hours": 1.0, "search_hours": None}})
    assert hour == wall_space(capped, 1) == f"{capped}-hours1" and earlier_space(hour, ran=set()) == capped
    assert "--hours 1, the whole run's wall budget" in space_line(hour) and space_line(capped) in space_line(hour)
    names = [n for n, _ in SPACES.values()]
    later = names[names.index(capped) + 1]
    assert _sortable(("validation", "family", capped)) < _sortable(("validation", "family", hour)) < \
        _sortable(("validation", "family", later))
    rows = [{"task": "stsb", "method": "ship", "teacher_choice": "validation", "draw": "family", "space": space,
             "seed": 0} for space in (capped, hour)]
    assert current(rows) == rows[:1]  # beside its space: the task's rows stay the space's own
    run = next(j for j in jobs(tmp_path, ["stsb"], [0], hours=1) if j.name.startswith("stsb/ship"))
    assert run.name == "stsb/ship-hours1/0" and run.out == run_dir(tmp_path, "stsb", 0, 1) == \
        tmp_path / "hours1" / "stsb" / "seed0"
    assert run.argv[run.argv.index("--hours") + 1] == "1" and "--search-hours" not in run.argv
    assert not run.renamed_from and run.argv[run.argv.index("--out") + 1] == str(run.out)
    # a finished run there: its rows and kept predictions are gathered from OUT/hours1, in the space under --hours
    from benchmarks.ship import keep_predictions, rows as gathered
    from mobilekd.fileio import write_json

    (run.out / "student" / "dev").mkdir(parents=True)
    (run.out / "student" / "dev" / "dev_predictions.tsv").write_text("label\tprediction\n1.0\t0.5\n2.0\t2.5\n")
    (run.out / "baseline_dev_predictions.tsv").write_text("prediction\n1.5\n1.5\n")
    write_json(run.out / "plan.json", {**plan, "draw": "family"})
    chosen = {"family": "tinybert", "shape": "tinybert4_h156", "recipe": "--lr 1e-4", "val_value": 0.7,
              "pixel4_ms_est": 1.0, "params_m": 4.0}
    wall = {"teacher": 1000.0, "search": 2400.0, "final": 60.0, "start": 12.0, "summary": 28.0, "total": 3500.0}
    write_json(run.out / "ship.json", {
        "budget": {"classes": None, "train_examples": 5749, "max_len": 64, "latency_ms": 3.0,
                   "teacher_pixel4_ms_est": 9.0}, "metric": "pearson", "chosen": chosen, "trials": [],
        "student": {"dev_examples": 2, "dev": {"pearson": 0.7}}, "wall_seconds": wall,
        "teacher": {"dev": {"pearson": 0.85}, "train_seconds": 1000.0, "host": None},
        "majority": {"metrics": {"pearson": 0.0}}, "data": "unused",
        "wall_limit": {"hours": 1.0, "search_hours": None}})
    got = gathered(tmp_path, ["stsb"], [0], hours=1)
    assert {r["space"] for r in got if r["task"] == "stsb"} == {hour} and any(r["method"] == "ship" for r in got)
    assert gathered(tmp_path, ["stsb"], [0]) == [r for r in got if r["method"] == "ship-start"]  # not OUT/stsb
    # its wall time as every row holds it, the recorded stages; the start-up and summary (ship since 44be5c9) kept
    timed = next(r for r in got if r["method"] == "ship-wall")
    assert timed["value"] == 3460.0 and timed["parts"] == wall
    version = ("validation", "family", hour)
    kept = keep_predictions(tmp_path, "stsb", {0: version}, tmp_path / "kept.json", hours=1)
    assert kept[version][0]["ship"] == ["0.5", "2.5"] and kept[version][0]["tfidf"] == ["1.5", "1.5"]
