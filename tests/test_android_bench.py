"""android_bench: the benchmark_model parser on real output, `mobilekd adb` end to end against a stand-in phone
(tests/standin_adb.py) and its refusals, the host benchmark, and the cost model's account of LayerNorm + GELU
against NoNorm + ReLU on real exported graphs."""

import json
import os
from pathlib import Path

import pytest

from android_bench.adb import REMOTE_DIR, parse_benchmark_output
from android_bench.estimate import calibrate, estimate, load_profile, op_costs
from android_bench.host import measure_in_child, peak_memory
from android_bench.kernels import OTHER, family, parse_report
from android_bench.models import preset_classifier
from helpers import one_line_error, run_module
from mobilekd.export.graph import read_graph
from mobilekd.export.litert import convert
from mobilekd.models.flops import model_stats
from mobilekd.models.presets import get_preset
from standin_adb import PIXEL_4, calls, install

FIXTURES = Path(__file__).parent / "data" / "benchmark_model"
PERF = Path(__file__).parent / "data" / "perf"  # `perf report -F sample,sym` of full-size MobileBERT's files
SEQ = 64


def test_parser_reads_current_benchmark_model_output():
    result = parse_benchmark_output((FIXTURES / "ti_am62x_cpu.txt").read_text())
    assert result["count"] == 50  # the timed run, not the warm-up line before it
    assert result["avg_ms"] == pytest.approx(1240.27) and result["std_ms"] == pytest.approx(2.565)
    assert result["p50_ms"] == pytest.approx(1239.807) and result["min_ms"] == pytest.approx(1238.588)
    assert result["init_ms"] == pytest.approx(5.579) and result["first_ms"] == pytest.approx(1357.602)
    assert result["memory_mb"] == {"init": 6.36328, "overall": 109.832}


def test_parser_reads_op_profile_of_older_release():
    result = parse_benchmark_output((FIXTURES / "tf_readme_op_profile.txt").read_text())
    assert result["count"] == 50 and result["avg_ms"] == pytest.approx(79.732) and result["p50_ms"] is None
    assert result["init_ms"] == pytest.approx(38.467)
    assert list(result["by_node_type"]) == ["CONV_2D", "DEPTHWISE_CONV_2D", "SOFTMAX", "RESHAPE", "AVERAGE_POOL_2D"]
    assert result["by_node_type"]["CONV_2D"] == {"count": 15, "avg_ms": 1.406, "percent": 89.27}


def test_perf_reports_are_read_whole_and_their_kernels_land_in_their_families():
    """Two real reports (this host, full-size MobileBERT at 1 thread, python loading included): every sample is
    read (perf record said 6489 and 3444), and every XNNPACK or TFLite function has a family of its own."""
    qat = parse_report((PERF / "mobilebert_qat_int8.txt").read_text())
    dynamic = parse_report((PERF / "mobilebert_dynamic_int8.txt").read_text())
    assert sum(qat.values()) == 6489 and sum(dynamic.values()) == 3444
    assert qat["tflite::reference_ops::BatchMatMul<signed char, int, signed char, signed char>"] == 1862
    assert [s for s in {**qat, **dynamic} if family(s) == OTHER and ("xnn" in s or "tflite" in s)] == []
    expected = {"tflite::reference_ops::BatchMatMul<signed char, int, signed char, signed char>":
                "TFLite builtin BATCH_MATMUL",
                "tflite::MultiplyByQuantizedMultiplier": "TFLite integer requantization",
                "tflite::optimized_ops::Softmax<signed char, signed char>": "TFLite builtin SOFTMAX",
                "xnn_qs8_qc8w_gemm_minmax_fp32_ukernel_7x16c8__avx512vnni_prfm": "XNNPACK int8 GEMM",
                "xnn_qs8_to_qu8_packw_gemm_goi_ukernel_x16c8__avx256vnni": "XNNPACK weight packing",
                "xnn_qd8_f32_qc8w_gemm_minmax_ukernel_5x64c4__asm_amd64_avx512vnni":
                "XNNPACK dynamic-range int8 GEMM (qd8)",
                "xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast": "XNNPACK float GEMM",
                "(anonymous namespace)::xnn_pack_lh_f32_qduint8": "XNNPACK conversions (quantize, dequantize, ranges)",
                "xnn_qs8_vadd_minmax_ukernel__avx512skx_mul32_ld128_u16": "XNNPACK int8 elementwise",
                "_PyEval_EvalFrameDefault": OTHER}
    assert {s: family(s) for s in expected} == expected
    assert all(s in qat or s in dynamic for s in expected)  # names as this runtime has them


def standin_phone(tmp_path, monkeypatch, **changes) -> Path:
    """The stand-in adb answering as PIXEL_4 with `changes`, first on PATH; returns the folder of its state."""
    directory = tmp_path / "phone"
    monkeypatch.setenv("PATH", f"{install(directory, {**PIXEL_4, **changes})}{os.pathsep}{os.environ['PATH']}")
    return directory


def test_adb_end_to_end_on_a_phone_with_an_offline_core(opt_and_no_opt, tmp_path, monkeypatch):
    """`mobilekd adb` as a user runs it, adb answering as an 8-core Pixel 4 whose cpu5 is offline: the run is pinned
    to the fastest online cores by CPU number (7 at 2.84 GHz; 4 and 6 at 2.42; then 0, the lowest-numbered of the
    1.79 GHz cores), the model and binary pushed are the user's, and the JSON holds the phone and the timings."""
    phone = standin_phone(tmp_path, monkeypatch)
    model, binary = opt_and_no_opt["opt"], tmp_path / "benchmark_model"
    binary.write_bytes(b"\x7fELF benchmark_model stand-in")
    out = tmp_path / "phone.json"
    printed = run_module("mobilekd", "adb", "--model", model, "--benchmark-binary", binary, "--out", out).stdout
    result = json.loads(out.read_text())
    assert json.loads(printed) == result
    assert result["device"] == {"model": "Pixel 4", "soc": "SM8150", "manufacturer": "QTI", "abi": "arm64-v8a",
                                "android": "13"}
    assert result["affinity_mask"] == "d1" and result["threads"] == 4  # 0b11010001: cpus 7, 6, 4, 0
    assert result["count"] == 50 and result["avg_ms"] == pytest.approx(1240.27)
    assert result["p50_ms"] == pytest.approx(1239.807) and result["std_ms"] == pytest.approx(2.565)
    remote_model, remote_binary = f"{REMOTE_DIR}/model.tflite", f"{REMOTE_DIR}/benchmark_model"
    sent = calls(phone)
    assert ["push", str(model), remote_model] in sent and ["push", str(binary), remote_binary] in sent
    assert (phone / "device" / remote_model.lstrip("/")).read_bytes() == model.read_bytes()
    assert not any("cpu5/" in arg for call in sent for arg in call)  # the offline core is not asked about
    assert sent[-1][:1] == ["shell"] and "getprop" in sent[-1]  # the run happened before the phone's details
    [run] = [call for call in sent if call[1:2] == ["taskset"]]
    assert run == ["shell", "taskset", "d1", remote_binary, f"--graph={remote_model}", "--num_threads=4",
                   "--use_xnnpack=true", "--num_runs=50", "--warmup_runs=5", "--enable_op_profiling=true"]

    (phone / "calls.jsonl").unlink()
    run_module("mobilekd", "adb", "--model", model, "--benchmark-binary", binary, "--serial", PIXEL_4["serial"],
               "--threads", 2, "--runs", 7)
    sent = calls(phone)
    assert all(call[:2] == ["-s", PIXEL_4["serial"]] for call in sent)
    [run] = [call[2:] for call in sent if call[3:4] == ["taskset"]]
    assert run[2] == "90" and "--num_threads=2" in run and "--num_runs=7" in run  # cpus 7 and 4


def test_adb_refusals_are_one_line(tmp_path, monkeypatch):
    model = tmp_path / "m.tflite"
    model.write_bytes(b"not used")
    line = one_line_error(run_module("mobilekd", "adb", "--model", model, "--benchmark-binary", model,
                                     "--adb", "no-such-adb", check=False))
    assert "no-such-adb: not found" in line
    line = one_line_error(run_module("mobilekd", "adb", "--model", tmp_path / "missing.tflite",
                                     "--benchmark-binary", model, check=False))
    assert "missing.tflite: no such file" in line
    with pytest.raises(Exception, match="timing line"):
        parse_benchmark_output("INFO: STARTING!\nERROR: could not load model\n")

    def adb(*args) -> str:
        return one_line_error(run_module("mobilekd", "adb", "--model", model, "--benchmark-binary", model, *args,
                                         check=False))

    monkeypatch.setenv("PATH", str(tmp_path))  # no adb on PATH
    assert "adb: not found (install Android platform-tools" in adb()
    monkeypatch.undo()
    standin_phone(tmp_path / "unauthorized", monkeypatch, state="unauthorized")
    assert "no Android device attached" in adb()
    standin_phone(tmp_path / "dropped", monkeypatch, benchmark_error="error: device offline")
    assert adb().endswith("adb shell taskset failed: error: device offline")
    assert "--threads must be at least 1, got 0" in adb("--threads", 0)


@pytest.fixture(scope="module")
def opt_and_no_opt(tmp_path_factory):
    """The demo student exported twice: NoNorm + ReLU (the paper's OPT) and LayerNorm + GELU (w/o OPT)."""
    out = tmp_path_factory.mktemp("graphs")
    paths = {}
    for name, changes in (("opt", {}), ("no_opt", {"normalization_type": "layer_norm", "hidden_act": "gelu"})):
        paths[name] = convert(preset_classifier("demo_student", **changes), "classification", SEQ,
                              out / f"{name}.tflite")
    return paths


def test_cost_model_counts_the_elementwise_passes(opt_and_no_opt):
    opt, no_opt = (op_costs(read_graph(opt_and_no_opt[name])) for name in ("opt", "no_opt"))

    def gemm(costs):
        return sum(c["flops"] for c in costs)

    def passes(costs):
        return sum(c["kind"] == "elementwise" for c in costs)

    assert gemm(opt) == gemm(no_opt)  # same matrix products ...
    config = get_preset("demo_student").config
    encoder_flops = model_stats(config, SEQ)[f"flops_seq{SEQ}"]
    assert gemm(opt) == pytest.approx(encoder_flops, rel=0.01)  # ... and the graph agrees with torch's counter
    # per layer at least: the input and attention bottlenecks, the attention output, each FFN's output, and the
    # block output are normalised; each LayerNorm is several passes (mean, variance, rsqrt, scale, shift), a NoNorm
    # at most two (scale and shift, where no matrix product absorbs them)
    layer_norms = config.num_hidden_layers * (3 + config.num_feedforward_networks + 1)
    assert passes(no_opt) - passes(opt) >= 5 * layer_norms
    profile = load_profile("pixel4")
    fast, slow = estimate(opt, profile), estimate(no_opt, profile)
    assert slow["by_kind_ms"]["gemm"] == pytest.approx(fast["by_kind_ms"]["gemm"])
    assert slow["ms"] > fast["ms"]
    extra = slow["ms"] - fast["ms"]
    assert extra == pytest.approx(slow["by_kind_ms"]["elementwise"] + slow["by_kind_ms"]["dispatch"]
                                  - fast["by_kind_ms"]["elementwise"] - fast["by_kind_ms"]["dispatch"])
    assert slow["by_op_ms"].get("GELU", 0) > 0 and "GELU" not in fast["by_op_ms"]


def test_calibration_reproduces_its_own_figure(opt_and_no_opt):
    costs = op_costs(read_graph(opt_and_no_opt["opt"]))
    efficiency = calibrate(costs)  # pretend this graph were the paper's MobileBERT
    assert estimate(costs, load_profile("pixel4"), 4, efficiency)["ms"] == pytest.approx(62.0, rel=1e-3)
    with pytest.raises(Exception, match="no device profile"):
        load_profile("pixel99")


def test_host_benchmark_times_models_interleaved(opt_and_no_opt):
    paths = [opt_and_no_opt["opt"], opt_and_no_opt["no_opt"]]
    result = measure_in_child(paths, [1, 2], runs=5, warmup=1)
    assert list(result["models"]) == [str(p) for p in paths] and result["cpu_count"] >= 1
    for model in result["models"].values():
        assert [r["threads"] for r in model["by_threads"]] == [1, 2]
        for r in model["by_threads"]:
            assert r["runs"] == 5 and 0 < r["min_ms"] <= r["p50_ms"] <= r["p90_ms"]
    assert peak_memory(paths[0]) > 0
