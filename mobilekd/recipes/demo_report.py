"""The end-to-end report of a demo run: pre-training, knowledge transfer, SST-2, export, latency.

    mobilekd report runs/demo        # after scripts/demo.sh has run its stages

Reads the JSON each stage wrote under RUN (teacher/summary.json, student/summary.json, sst2/*/results.json,
tflite/parity.json, latency/report.json), nothing else, and writes RUN/report.md, RUN/report.json and RUN/report.png (per-layer feature-map
transfer loss through PKT; SST-2 dev accuracy of every model; latency of the exported student against its
accuracy, measured on this host and estimated for a Pixel 4).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from android_bench.report import markdown as latency_markdown
from mobilekd.errors import cli_entry
from mobilekd.fileio import atomic_path, read_json, save_png, write_json

SST2_RUNS = ("teacher", "student", "student_task_kd", "subset_task_kd", "scratch")


def gather(run: Path) -> dict:
    teacher, student = read_json(run / "teacher" / "summary.json"), read_json(run / "student" / "summary.json")
    sst2 = {name: read_json(run / "sst2" / name / "results.json") for name in SST2_RUNS}
    name = f"{teacher['init_from']} (adapted)" if teacher.get("init_from") else f"{teacher['preset']} (from scratch)"
    return {"teacher_pretraining": teacher["heldout"] | {"wall_seconds": teacher["wall_seconds"], "name": name},
            "student_transfer": student["heldout"] | {"wall_seconds": student["wall_seconds"],
                                                      "stages": student["stages"]},
            "sst2": {n: r["metrics"]["dev"] | {"wall_seconds": r["wall_seconds"]} for n, r in sst2.items()},
            "sst2_baseline": sst2["scratch"]["baseline"],  # every SST-2 run trains on the same examples
            "tflite": read_json(run / "tflite" / "parity.json"),
            "latency": read_json(run / "latency" / "report.json")}


def feature_map_terms(stages: list[dict]):
    """(stage, term name) for every stage that trains one layer's feature-map transfer (its matches say so)."""
    for stage in stages:
        fmt = [m["name"] for m in stage.get("matches", []) if m["loss"] == "fmt"]
        if len(fmt) == 1:
            yield stage, fmt[0]


def markdown(report: dict, run: Path) -> str:
    t, s = report["teacher_pretraining"], report["student_transfer"]
    lines = [f"# mobilekd demo: {run}", "", "## Pre-training and progressive knowledge transfer (held-out)", "",
             "| model | MLM accuracy | unigram baseline | NSP accuracy | NSP majority | wall time |",
             "|---|---|---|---|---|---|"]
    for name, r in ((f"teacher: {t['name']}", t), ("PKT student", s)):
        lines.append(f"| {name} | {r['mlm_accuracy']:.3f} | {r['unigram_accuracy']:.3f} | {r['nsp_accuracy']:.3f} | "
                     f"{r['nsp_majority_accuracy']:.3f} | {r['wall_seconds']:.0f} s |")
    lines += ["", "| PKT stage | feature-map transfer loss, start -> end |", "|---|---|"]
    for stage, fmt in feature_map_terms(s["stages"]):
        lines.append(f"| {stage['stage']} | {stage['start'][fmt]:.3f} -> {stage['end'][fmt]:.3f} |")
    teacher_acc = report["sst2"]["teacher"]["accuracy"]
    lines += ["", "## SST-2 dev (872 sentences)", "", "| model | accuracy | share of teacher | fine-tuning time |",
              "|---|---|---|---|"]
    for name, r in report["sst2"].items():
        lines.append(f"| {name} | {r['accuracy']:.4f} | {100 * r['accuracy'] / teacher_acc:.1f}% | "
                     f"{r['wall_seconds']:.0f} s |")
    base = report["sst2_baseline"]
    lines.append(f"| bag of words ({base['method']}, the same {base['train_examples']} examples) | "
                 f"{base['metrics']['accuracy']:.4f} | {100 * base['metrics']['accuracy'] / teacher_acc:.1f}% | "
                 f"{base['seconds']:.0f} s |")
    shipped = Path(next(iter(report["tflite"].values()))["model"]).name
    lines += ["", f"## .tflite of the shipped SST-2 run, {shipped} (parity on all dev sentences)", "",
              "| file | size | max abs diff | agreement | dev accuracy (PyTorch) |", "|---|---|---|---|---|"]
    for name, r in report["tflite"].items():
        lines.append(f"| {name} | {r['size_bytes'] / 1e6:.1f} MB | {r['max_abs_diff']:.2e} | {r['agreement']:.4f} | "
                     f"{r['accuracy_exported']:.4f} ({r['accuracy_torch']:.4f}) |")
    lines += ["", "## Latency (host measured; Pixel columns are estimates)", latency_markdown(report["latency"],
                                                                                          title=False)]
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (transfer, sst2, latency) = plt.subplots(1, 3, figsize=(15, 4.2))
    for stage, fmt in feature_map_terms(report["student_transfer"]["stages"]):
        layer = next(m["student_layer"] for m in stage["matches"] if m["name"] == fmt)
        transfer.plot([0, 1], [stage["start"][fmt], stage["end"][fmt]], marker="o", label=f"L{layer}")
    transfer.set_xticks([0, 1], ["stage start", "stage end"])
    transfer.set_ylabel("feature-map transfer loss")
    transfer.set_title("PKT: each layer's stage")
    transfer.legend()
    names = list(report["sst2"])
    sst2.bar(names, [report["sst2"][n]["accuracy"] for n in names])
    sst2.axhline(report["sst2_baseline"]["metrics"]["accuracy"], color="grey", linestyle="--",
                 label="bag of words (TF-IDF + logistic regression)")
    sst2.legend(fontsize=7, loc="upper left")
    sst2.set_ylim(0.4, 1.0)
    sst2.set_ylabel("SST-2 dev accuracy")
    sst2.set_title("fine-tuned models")
    sst2.tick_params(axis="x", labelrotation=20)
    rows = {k: r for k, r in report["latency"]["rows"].items() if r["accuracy"] is not None}
    thread = str(report["latency"]["host"]["threads"][0])
    for (label, r), color in zip(rows.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        latency.scatter(r["host"][thread]["p50_ms"], r["accuracy"], marker="o", color=color,
                        label=f"{label}, host {thread} thread (measured)")
        if "pixel4" in r["estimate_ms"]:
            latency.scatter(r["estimate_ms"]["pixel4"], r["accuracy"], marker="^", color=color,
                            label=f"{label}, Pixel 4 (estimate)")
    latency.legend(fontsize=7)
    latency.set_xlabel("latency (ms)")
    latency.set_ylabel("SST-2 dev accuracy")
    latency.set_title("exported student")
    save_png(fig, path, dpi=110)


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser(prog="mobilekd report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="the demo's output directory (runs/demo)")
    run = Path(p.parse_args(argv).run)
    report = gather(run)
    write_json(run / "report.json", report)
    with atomic_path(run / "report.md") as tmp:
        tmp.write_text(markdown(report, run))
    plot(report, run / "report.png")
    print((run / "report.md").read_text())
    print(f"report: {run}/report.md, {run}/report.json, {run}/report.png")


if __name__ == "__main__":
    main()
