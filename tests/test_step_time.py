"""The latency report's goals judged against the timing noise, and the rows behind the step-time figures:
benchmarks.transfer_step and benchmarks.teacher_step write their rows, a re-run of one configuration replacing its
own."""

import json

from helpers import run_module

PEAKS = {"fp32": {"1": 300.0, "2": 390.0, "4": 380.0}, "int8": {"1": 800.0, "2": 1500.0, "4": 1450.0}}
# model -> (p50 ms at 1 thread, GFLOPs): BERT_BASE/MobileBERT 5.5x (the paper's 5.52x: reproduced), w/o OPT 1.1x
# (not), MobileBERT/TINY 1.55x (reproduced)
MODELS = {"bert_base": (110.0, 22.3), "mobilebert_no_opt": (22.0, 5.38), "mobilebert": (20.0, 5.38),
          "mobilebert_tiny": (20.0 / 1.55, 3.07), "transformers_mobilebert": (20.1, 5.39)}


def fake_report(tmp_path) -> dict:
    rows = {}
    for model, (ms, gflops) in MODELS.items():
        for quantize, speed in (("none", 1.0), ("dynamic-int8", 2.5)):
            if model == "transformers_mobilebert" and quantize != "none":
                continue
            label = model.replace("transformers_", "transformers ") + ("" if quantize == "none" else f" {quantize}")
            peak = PEAKS["fp32" if quantize == "none" else "int8"]
            host = {t: {"p50_ms": ms / speed / int(t) ** 0.9, "p90_ms": 1.1 * ms, "std_ms": 0.1}
                    for t in ("1", "2", "4")}
            for t, h in host.items():
                h["achieved_gflops"] = gflops / (h["p50_ms"] / 1000)
                h["fraction_of_peak"] = round(h["achieved_gflops"] / peak[t], 3)
            rows[label] = {"model": model, "quantize": quantize, "file": str(tmp_path / "missing.tflite"),
                           "params_m": 24.4, "gflops": gflops, "size_mb": 98.7 / speed, "memory_mb": 100.0,
                           "host": host, "estimate_ms": {"pixel4": 3 * ms, "pixel6": 2 * ms, "pixel8": 2.5 * ms},
                           "ops": 1098, "elementwise_ops": 500, "elementwise_mb": 10.0}
    return {"host": {"cpu": "Test CPU", "cpu_count": 2, "threads": [1, 2, 4], "runs": 20, "interleaved": True,
                     "omp_wait_policy": "PASSIVE", "peak_gflops": PEAKS},
            "seq_len": 128, "estimate": {"threads": 4, "efficiency": 0.6, "calibrated_on": "the paper's 62 ms"},
            "rows": rows}


def test_latency_goals_judge_against_the_timing_noise(tmp_path):
    """A goal is met or missed only beyond two standard errors of the files' spread over the timed runs."""
    from android_bench.report import goals

    rows = fake_report(tmp_path)["rows"]
    ours = "our MobileBERT / transformers' MobileBERT latency (1 thr)"
    quiet = {g["goal"]: g for g in goals(rows, [1], runs=20)}
    assert quiet[ours]["value"] == 0.995 and quiet[ours]["verdict"] == "met"  # 20.0 against 20.1 ms, std 0.1 ms
    for name in ("mobilebert", "transformers mobilebert"):
        rows[name]["host"]["1"]["std_ms"] = 1.0  # the same medians, ten times the spread: 0.5% is within it
    noisy = {g["goal"]: g for g in goals(rows, [1], runs=20)}
    assert noisy[ours]["value"] == 0.995 and noisy[ours]["verdict"] == "tie"
    rows["mobilebert"]["host"]["1"]["p50_ms"] = 22.0  # 9% slower than transformers': beyond the noise
    assert {g["goal"]: g for g in goals(rows, [1], runs=20)}[ours]["verdict"] == "missed"


def test_step_rows_merge_by_configuration(tmp_path):
    results = tmp_path / "step_time.json"
    small = ["--presets", "demo_teacher", "--batch", "2", "--steps", "1", "--threads", "1", "2", "--only-fp32-masked",
             "--results", results]
    run_module("benchmarks.teacher_step", *small, "--seq-len", "8")
    first = json.loads(results.read_text())
    ratio = [r for r in first if r["metric"] == "ratio"]
    assert len(ratio) == 1 and ratio[0]["threads"] == 2 and ratio[0]["cpu"]
    assert abs(ratio[0]["value"] - ratio[0]["numerator_s"] / ratio[0]["denominator_s"]) < 0.01
    run_module("benchmarks.teacher_step", *small, "--seq-len", "8")  # the same configuration: replaced
    assert len(json.loads(results.read_text())) == len(first)
    run_module("benchmarks.teacher_step", *small, "--seq-len", "12")  # another: kept beside
    assert len(json.loads(results.read_text())) == 2 * len(first)
    run_module("benchmarks.transfer_step", "--teacher", "demo_teacher", "--student", "demo_student", "--batch", "2",
               "--seq-len", "8", "--every", "3", "--threads", "1", "--results", results)
    rows = json.loads(results.read_text())
    assert {r["benchmark"] for r in rows} == {"transfer_step", "teacher_step"}
    table = run_module("benchmarks.teacher_step", "--table", "--results", results).stdout
    assert table.count("| teacher_step |") == 2 and "| transfer_step |" not in table and "2 threads" in table
    table = run_module("benchmarks.transfer_step", "--table", "--results", results).stdout
    assert table.count("| transfer_step |") == 4 and "a PD step costs" in table  # stages 0 and 3, their sum; PD


def test_matching_step_times_tinyberts_layer_matching_with_and_without_the_teacher(tmp_path):
    """benchmarks.matching_step: the whole step, the step with the teacher's outputs given (its loss checked equal
    before timing) and the teacher's forward, with their two ratios; a run in the other precision is kept beside."""
    results = tmp_path / "step_time.json"
    small = ["--batch", "2", "--seq-len", "8", "--rounds", "1", "--threads", "1", "--results", results]
    out = run_module("benchmarks.matching_step", *small).stdout
    assert "both losses" in out
    rows = json.loads(results.read_text())
    times = {r["variant"]: r["value"] for r in rows if r["metric"] == "seconds_per_step"}
    assert set(times) == {"whole step", "step, teacher's outputs given", "teacher's forward"}
    assert all(t > 0 for t in times.values())
    ratios = {r["variant"]: r for r in rows if r["metric"] == "ratio"}
    share = ratios["teacher's forward / whole step"]
    assert abs(share["value"] - share["numerator_s"] / share["denominator_s"]) < 0.01 and share["precision"] == "bf16"
    run_module("benchmarks.matching_step", *small, "--precision", "no")
    both = json.loads(results.read_text())
    assert len(both) == 2 * len(rows) and {r["precision"] for r in both} == {"bf16", "fp32"}
    table = run_module("benchmarks.matching_step", "--table", "--results", results).stdout
    assert table.count("| matching_step |") == 4 and "TinyBERT layer matching (fp32)" in table
