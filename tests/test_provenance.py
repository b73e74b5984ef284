"""Every figure names its machine: the host identity (`mobilekd.host`), the results writer's hosts file, rows of
two hosts kept side by side, and the committed rows themselves (`benchmarks.provenance`)."""

import json

import pytest

from benchmarks.provenance import table, timed, unhosted
from benchmarks.rows import HOSTS, merge_rows
from benchmarks.stats import by_seed, values
from mobilekd.host import KERNEL_FLAGS, UNKNOWN, cpu_flags, describe, identity, make_id


def test_the_host_id_tells_apart_cpus_one_model_name_covers():
    here = identity()
    assert here == identity() and here["id"] == make_id({k: v for k, v in here.items() if k != "id"})
    assert set(here["cpu_flags"]) <= set(KERNEL_FLAGS) and here["cpu_flags"] == cpu_flags()
    with open("/proc/cpuinfo") as f:
        listed = set(f.read().split("\n\n")[0].split())
    assert [f for f in KERNEL_FLAGS if f in listed] == here["cpu_flags"]
    # the AVX2-only EPYC and the one with avx512_bf16 share the name "AMD EPYC"; their ids differ, and say which
    avx2 = {"cpu": "AMD EPYC", "cpu_flags": ["avx2"], "cpu_count": 2, "torch": "2.13.0", "litert": None}
    bf16 = {**avx2, "cpu_flags": ["avx512_bf16", "avx512_vnni", "avx512f", "avx2"]}
    assert make_id(avx2).startswith("epyc-avx2-2c-") and make_id(bf16).startswith("epyc-avx512bf16-2c-")
    assert make_id({**avx2, "torch": "2.14.1"}) != make_id(avx2)
    assert "avx512_bf16" in describe({"id": make_id(bf16), **bf16}) and describe({"id": UNKNOWN}) != ""


def test_a_run_on_another_host_stays_beside_the_first(tmp_path):
    path = tmp_path / "rows.json"
    other = {"cpu": "AMD EPYC", "cpu_flags": ["avx2"], "cpu_count": 2, "torch": "2.13.0", "litert": None}
    other_id = make_id(other)
    first = [{"task": "sst2", "method": "kd", "seed": s, "metric": "accuracy", "value": 0.80 + s / 100,
              "train_seconds": 10.0, "host": other_id, "host_fields": {"id": other_id, **other}} for s in (0, 1)]
    merge_rows(path, first, order=lambda r: r["seed"])
    here = identity()["id"]
    second = [{"task": "sst2", "method": "kd", "seed": 0, "metric": "accuracy", "value": 0.84, "train_seconds": 7.0,
               "host": here}]
    rows = merge_rows(path, second, order=lambda r: r["seed"])
    assert len(rows) == 3 and all("host_fields" not in r for r in json.loads(path.read_text()))
    assert set(json.loads((tmp_path / HOSTS).read_text())) == {other_id, here}
    assert by_seed(rows, "sst2", "accuracy", "kd") == {0: pytest.approx(0.82), 1: 0.81}  # runs pooled, not replaced
    assert values(rows, "sst2", "accuracy", "kd") == [pytest.approx(0.82), 0.81]  # one value a seed
    # the same run collected again replaces its own rows only
    rows = merge_rows(path, [{**second[0], "value": 0.85}], order=lambda r: r["seed"])
    assert len(rows) == 3 and sorted(r["value"] for r in rows) == [0.80, 0.81, 0.85]
    # a run from before hosts were recorded, collected again, names none: it replaces its back-filled rows
    hosts = json.loads((tmp_path / HOSTS).read_text())
    (tmp_path / HOSTS).write_text(json.dumps({**hosts, "old-backfilled": {"cpu": "AMD EPYC", "cpu_flags": None,
                                                                          "evidence": "back-filled"}}))
    merge_rows(path, [{**first[1], "host": "old-backfilled", "host_fields": None}], order=lambda r: r["seed"])
    rows = merge_rows(path, [{**first[1], "host": "unknown", "host_fields": None, "value": 0.79}],
                      order=lambda r: r["seed"])
    assert sorted((r["seed"], r["host"], r["value"]) for r in rows if r["seed"] == 1) == [
        (1, other_id, 0.81), (1, "unknown", 0.79)]
    shown = table(json.loads((tmp_path / HOSTS).read_text()), tmp_path)
    assert unhosted(tmp_path) == [] and other_id in shown and "avx2" in shown
    # a timed row with no host, or a host nobody registered, is named
    path.write_text(json.dumps([*rows, {"task": "sst2", "method": "x", "seed": 0, "metric": "host_ms", "value": 1},
                                {"task": "sst2", "method": "y", "seed": 0, "metric": "accuracy", "value": 0.5,
                                 "train_seconds": 3, "host": "nowhere-1"}]))
    assert unhosted(tmp_path) == ["rows: row 4 (host_ms)", "rows: row 5 (accuracy)"]


def test_every_committed_timing_row_names_a_known_host():
    assert timed({"metric": "speedup"}) and timed({"metric": "accuracy", "train_precision": "bf16"})
    assert not timed({"metric": "accuracy", "train_seconds": None})
    assert unhosted() == []
