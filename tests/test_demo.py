"""The README's main job at micro scale: every stage of scripts/demo.sh connects to the next, the final .tflite
classifies text through MediaPipe, and a re-run skips the finished stages."""

import json
import re
import subprocess
import sys

import numpy as np

from conftest import ROOT
from helpers import env


def run_demo(out, *flags):
    """The demo as the README prints it (not through `bash`: the file's executable bit is part of the command)."""
    proc = subprocess.run(["scripts/demo.sh", "--micro", "--out", str(out), *flags], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_demo_chain_from_text_to_phone_ready_model(tmp_path):
    out = tmp_path / "demo"
    first = run_demo(out)
    report = json.loads((out / "report.json").read_text())
    assert set(report["sst2"]) == {"teacher", "student", "student_task_kd", "subset_task_kd", "scratch"}
    assert all(0 <= r["accuracy"] <= 1 for r in report["sst2"].values())
    assert 0 <= report["sst2_baseline"]["metrics"]["accuracy"] <= 1  # every score beside its bag-of-words baseline
    assert "bag of words (tfidf+logreg" in (out / "report.md").read_text()
    stages = [s["stage"] for s in report["student_transfer"]["stages"]]
    assert stages == [f"pkt_L{l}" for l in range(6)] + ["pd"]  # mobilebert_h384 under the packaged MiniLM teacher
    assert report["teacher_pretraining"]["name"] == "all-minilm-l6-v2 (adapted)"
    fp32 = report["tflite"]["model_none.tflite"]
    assert fp32["max_abs_diff"] <= 1e-5 and fp32["agreement"] == 1.0 and fp32["metadata"]
    assert fp32["model"].endswith("sst2/subset_task_kd")  # configs/demo.json ships the teacher's layers 0 and 5
    subset = json.loads((out / "subset" / "config.json").read_text())
    assert subset["num_hidden_layers"] == 2
    rows = report["latency"]["rows"]
    for name in ("student", "student_int8"):
        assert rows[name]["host"]["1"]["p50_ms"] > 0 and rows[name]["estimate_ms"]["pixel4"] > 0
    assert (out / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Latency" in (out / "report.md").read_text() and "PKT student" in first
    # each SST-2 run's line says which score it prints: dev, read once, of the model kept (no checkpoint chosen on it)
    assert re.search(r"SST-2 subset_task_kd: dev accuracy [01]\.\d{4}, scored once, the model (chosen on validation|of "
                     r"the last step) \(step \d+ of \d+\)", first)

    # the phone-ready file classifies text as is: MediaPipe reads its metadata (vocab, labels) and runs it
    from mediapipe.tasks.python.text import text_classifier
    with text_classifier.TextClassifier.create_from_model_path(str(out / "tflite" / "model_none.tflite")) as c:
        categories = c.classify("a gorgeous, witty, seductive movie.").classifications[0].categories
    assert {cat.category_name for cat in categories} == {"negative", "positive"}
    assert np.isclose(sum(cat.score for cat in categories), 1.0, atol=1e-5)

    # the demo as a measurement: its report as rows, and the demo page's tables printed from them
    results = out / "demo_rows.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.demo", "--from-report", str(out), "--results",
                           str(results)], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(results.read_text())
    assert {r["task"] for r in rows} == {"pretraining", "pkt", "sst2", "tflite", "latency"}  # no wall time: not run
    assert all(r["seed"] == 0 and r["cpu"] and "value" in r for r in rows)
    accuracy = {r["method"]: r["value"] for r in rows if (r["task"], r["metric"]) == ("sst2", "accuracy")}
    assert accuracy["teacher"] == round(report["sst2"]["teacher"]["accuracy"], 4)
    assert f"| teacher | {accuracy['teacher']:.4f} | 100.0% |" in proc.stdout

    again = run_demo(out)  # finished stages are skipped, the report is rebuilt
    assert again.count("done already") >= 4 and "resume: no checkpoint" not in again

    # the report is made from the stages' JSON alone: without any Markdown they wrote, it is the same
    before = (out / "report.md").read_text()
    for md in out.rglob("*.md"):
        md.unlink()
    proc = subprocess.run([sys.executable, "-m", "mobilekd", "report", str(out)], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "report.md").read_text() == before


def test_demo_with_the_from_scratch_ib_bert_teacher(tmp_path):
    """--scratch-teacher keeps the paper's teacher shape: a demo IB-BERT pre-trained here, distilled into
    demo_student (4 layers)."""
    out = tmp_path / "scratch"
    run_demo(out, "--scratch-teacher")
    report = json.loads((out / "report.json").read_text())
    assert report["teacher_pretraining"]["name"] == "demo_teacher (from scratch)"
    assert [s["stage"] for s in report["student_transfer"]["stages"]] == [f"pkt_L{l}" for l in range(4)] + ["pd"]
    assert report["tflite"]["model_none.tflite"]["model"].endswith("sst2/student")  # this mode ships the PKT student
    assert json.loads((out / "student" / "config.json").read_text())["intra_bottleneck_size"] == 32
