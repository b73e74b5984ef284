"""Every command the README and the docs pages print runs as typed on a fresh clone: each script they name is
executable in git's index (a clone keeps only that bit), and each `python -m mobilekd VERB` and
`python -m benchmarks.NAME` they name exists and answers `--help` with exit 0; every link between them reaches a
file, and a heading where it names one."""

import json
import re
import subprocess
import sys

from huggingface_hub import ModelCard

from conftest import ROOT
from helpers import env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)  # a fenced block: its language, its text
SCRIPT = re.compile(r"(?:^|[\s;&|(])((?:scripts|\.ci)/[\w./-]+)")
MODULE = re.compile(r"python -m (mobilekd(?: [a-z][\w-]*)?|benchmarks\.\w+)")


def shell_lines(block: str) -> list[str]:
    """A shell block's command lines: comments dropped, a line ending in a backslash joined to the next."""
    lines = [line.split("#", 1)[0].rstrip() for line in block.splitlines()]
    return [line.strip() for line in re.sub(r"\\\n\s*", " ", "\n".join(lines)).splitlines() if line.strip()]


def commands() -> list[tuple[str, str]]:
    """(page, command line) for every line of every shell block in the pages."""
    return [(page.name, line) for page in PAGES
            for language, block in BLOCK.findall(page.read_text(encoding="utf-8"))
            if language in ("bash", "sh", "")  # not text, kotlin, ...
            for line in shell_lines(block)]


def test_the_pages_print_the_two_commands_and_more():
    lines = [line for _, line in commands()]
    assert "scripts/demo.sh" in lines and "scripts/test.sh" in lines  # the README's two commands
    assert any(MODULE.search(line) for line in lines)


LINK = re.compile(r"\]\(([^)\s]+)\)")  # a markdown link's target


def headings(page) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    text = BLOCK.sub("", page.read_text(encoding="utf-8"))  # a "# comment" in a shell block is no heading
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def test_every_link_between_the_pages_reaches_its_file_and_heading():
    broken, seen = [], 0
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, heading = target.partition("#")
            dest, seen = (page.parent / path if path else page), seen + 1
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif heading and dest.suffix == ".md" and heading not in headings(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert seen > 100 and not broken, broken

def test_every_script_a_page_names_is_executable_in_git():
    named = sorted({m for _, line in commands() for m in SCRIPT.findall(line)})
    assert "scripts/demo.sh" in named
    index = subprocess.run(["git", "ls-files", "-s", "--", *named], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    modes = {row.split()[3]: row.split()[0] for row in index}
    assert set(modes) == set(named), f"named but not in git: {set(named) - set(modes)}"
    assert all(mode == "100755" for mode in modes.values()), {p: m for p, m in modes.items() if m != "100755"}
    tests_calls = (ROOT / ".ci/run").read_text()
    assert "scripts/test.sh" in tests_calls and "bash scripts/test.sh" not in tests_calls  # CI runs it as printed


def test_help_read_by_a_closed_pipe_ends_without_a_traceback():
    """`mobilekd --help | head -1`: the reader gone before the listing is written (its pipe's read end closed
    first, so the write always fails) ends in exit 1 and nothing on stderr, as a Unix tool does."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "mobilekd", "--help"], stdout=write, stderr=subprocess.PIPE,
                              cwd=ROOT, env=env(), text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr


def test_the_demo_prints_its_whole_help_before_any_set_up(tmp_path):
    """`scripts/demo.sh --help` prints its comment block to the last line and sets nothing up: run from a copy of
    the script beside no `.venv` and no setup.sh, it still answers."""
    import shutil

    (tmp_path / "scripts").mkdir()
    demo = shutil.copy2(ROOT / "scripts/demo.sh", tmp_path / "scripts/demo.sh")
    proc = subprocess.run([demo, "--help"], capture_output=True, text=True, timeout=60, env=env())
    assert proc.returncode == 0, proc.stderr
    header = [line for line in (ROOT / "scripts/demo.sh").read_text().splitlines()[1:40] if line.startswith("#")]
    assert proc.stdout.splitlines()[-1] == header[-1].removeprefix("# ")  # the block's last line, not cut short
    assert "scripts/demo.sh [--force]" in proc.stdout and not (tmp_path / ".venv").exists()


def test_every_module_a_page_names_answers_help():
    """One interpreter runs every `--help` (each as `python -m` would: run as __main__, its argv set)."""
    named = sorted({m for _, line in commands() for m in MODULE.findall(line)})
    assert any(m.startswith("benchmarks.") for m in named) and any(m.startswith("mobilekd ") for m in named)
    probe = """
import runpy, sys, io, contextlib
failed = []
for name in sys.argv[1:]:
    module, *verb = name.split(" ")
    sys.argv = [module, *verb, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    except Exception as e:
        code = repr(e)
    if code != 0 or "usage" not in out.getvalue():
        failed.append(f"{name}: exit {code}")
print("\\n".join(failed))
"""
    proc = subprocess.run([sys.executable, "-c", probe, *named], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", proc.stdout


# what each script of the README's own-data block gets appended, so the chain runs in seconds
MICRO = {
    "scripts/train_teacher.sh": "--steps 4 --batch-size 8 --max-len 32 --eval-examples 16 --threads 1",
    "scripts/pkt_distill.sh": "--layer-steps 1 --pd-steps 2 --batch-size 8 --max-len 32 --eval-examples 16 --threads 1",
    "scripts/finetune.sh": "--epochs 1 --max-len 32 --batch-size 16 --threads 1",
    "scripts/export_tflite.sh": "--max-len 32 --parity-examples 16",
}


def own_data_blocks() -> list[list[str]]:
    """The README's "your own data" shell blocks, as command lines: the one command, then the five steps."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Your own data"):]
    return [shell_lines(text) for language, text in BLOCK.findall(section) if language == "bash"][:2]


def your_bert_and_csv(tmp_path, tokenizer):
    """The placeholders' stand-ins: a small transformers BERT (12 layers as bert-base has, 64 wide) and a CSV of 64
    real SST-2 reviews (32 for dev) whose labels are words."""
    import csv

    import torch
    import transformers

    from mobilekd.data.glue import find_split, read_glue
    from mobilekd.data.tokenizer import save_tokenizer

    torch.manual_seed(0)
    bert = tmp_path / "your-bert"
    transformers.BertModel(transformers.BertConfig(hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
                                                   intermediate_size=128)).save_pretrained(bert)
    save_tokenizer(tokenizer, bert)
    data = tmp_path / "my_data"
    data.mkdir()
    for split, n in (("train", 64), ("dev", 32)):
        examples = read_glue("sst2", find_split(ROOT / "data/glue/SST-2", split))[:n]
        with open(data / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows([e.text_a, {"0": "bad", "1": "good"}[e.label]] for e in examples)
    return bert, data


def typed(line, tmp_path, bert, data):
    return (line.replace("path/to/your-bert", str(bert)).replace("runs/my", f"{tmp_path}/runs/my")
            .replace("--data my_data", f"--data {data}"))


def test_the_one_own_data_command_runs_as_printed(tmp_path, tokenizer):
    """The README's one command, as printed, on the stand-ins: no budget appended (it picks its own from the data:
    64 examples train in seconds); a .tflite with the user's label names, and the summary beside TF-IDF."""
    (line,) = own_data_blocks()[0]
    assert line.split()[0] == "scripts/ship.sh"
    bert, data = your_bert_and_csv(tmp_path, tokenizer)
    proc = subprocess.run(typed(line, tmp_path, bert, data), shell=True, cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "runs/my_ship"
    summary = json.loads((out / "ship.json").read_text())
    assert summary["budget"]["train_examples"] == 64 and summary["budget"]["classes"] == 2
    max_len = summary["budget"]["max_len"]
    assert max_len <= 64 and summary["baseline"]["method"].startswith("tfidf") and summary["metric"] == "accuracy"
    chosen = summary["chosen"]
    assert chosen["family"] == "subset" and chosen["pixel4_ms_est"] <= summary["budget"]["latency_ms"]
    assert len(summary["trials"]) >= 12  # configs/ship.json's search, as shipped
    layers = json.loads((out / "student/config.json").read_text())["num_hidden_layers"]
    assert layers == int(chosen["shape"].split("x")[0]) < 12  # a subset of the stand-in's 12 layers
    assert json.loads((out / "student/config.json").read_text())["id2label"] == {"0": "bad", "1": "good"}
    parity = json.loads((out / "student/tflite/parity.json").read_text())
    assert parity["model_none.tflite"]["agreement"] == 1.0 and parity["model_none.tflite"]["seq_len"] == max_len
    assert "bag of words" in proc.stdout and (out / "frontier.png").is_file()
    card = ModelCard.load(out / "student/tflite/README.md")  # export's card reads ship's one dev scoring
    assert card.data.eval_results[0].metric_value == round(summary["student"]["dev"]["accuracy"], 4)

    again = subprocess.run(typed(line, tmp_path, bert, data), shell=True, cwd=ROOT, env=env(), capture_output=True,
                           text=True, timeout=300)  # a finished run is not redone
    assert again.returncode == 0 and "== " not in again.stdout


def test_the_own_data_steps_run_as_printed(tmp_path, small_corpus, tokenizer):
    """The README's five steps (the MobileBERT path), line by line as printed (run by the shell, so each script's
    executable bit counts), with its placeholders pointed at the stand-ins (the 12-layer, 64-wide BERT is paired
    with the 6-layer, 384-wide student through the layer map and projections), and the micro budgets above
    appended."""
    lines = own_data_blocks()[1]
    assert [line.split()[0] for line in lines] == ["scripts/train_teacher.sh", "scripts/pkt_distill.sh",
                                                   "scripts/finetune.sh", "scripts/finetune.sh",
                                                   "scripts/export_tflite.sh"]  # the five steps, in order
    bert, data = your_bert_and_csv(tmp_path, tokenizer)
    for line in lines:
        typed_line = typed(line, tmp_path, bert, data)
        reads_corpus = line.split()[0] in ("scripts/train_teacher.sh", "scripts/pkt_distill.sh")
        corpus = f" --corpus {small_corpus}" if reads_corpus else ""
        typed_line += f" {MICRO[line.split()[0]]}{corpus}"
        proc = subprocess.run(typed_line, shell=True, cwd=ROOT, env=env(), capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, (typed_line, proc.stderr[-3000:])

    parity = json.loads((tmp_path / "runs/my/student_task/tflite/parity.json").read_text())
    assert set(parity) >= {"model_none.tflite", "model_dynamic_int8.tflite"}
    config = json.loads((tmp_path / "runs/my/student_task/config.json").read_text())
    assert config["id2label"] == {"0": "bad", "1": "good"}  # the user's label names, in sorted order
    card = ModelCard.load(tmp_path / "runs/my/student_task/tflite/README.md")
    dev = json.loads((tmp_path / "runs/my/student_task/results.json").read_text())["metrics"]["dev"]["accuracy"]
    (result,) = card.data.eval_results
    assert result.metric_value == round(dev, 4) and "chosen on a validation split" in result.metric_name
    assert card.data.base_model is None and f"Taught by `{tmp_path}/runs/my/teacher_task`" in card.text  # a path,
    # not a Hub id: named in the text
