"""One home per default (issue 32): the demo's steps and learning rates live in configs/demo.json, which
scripts/demo.sh (through `mobilekd run-config`) and benchmarks.teacher_value both read; the KD defaults are
`Distillation`'s fields; fine-tuning's learning rate is data/tasks.py's; models/ imports no training code."""

import ast
import dataclasses
import importlib
import json
import re
import subprocess
from collections import defaultdict

import pytest

from benchmarks import teacher_value as tv
from conftest import ROOT
from helpers import one_line_error, run_module
from mobilekd.data.pairs import MAX_LEN as PAIR_LENGTHS
from mobilekd.data.tasks import DEFAULTS, SMALL_MODEL_LR, default_lr
from mobilekd.errors import UserError
from mobilekd.finetune.methods import DEFAULTS as KD_DEFAULTS
from mobilekd.finetune.objective import Distillation
from mobilekd.models.heads import MobileBertForSequenceClassification
from mobilekd.models.hf import load_pretrained
from mobilekd.models.presets import PRESETS
from mobilekd.models.pretrained import model_dir
from mobilekd.recipes import finetune
from mobilekd.recipes.run_config import main as run_config
from mobilekd.run_config import DEMO, flags, run_settings
from mobilekd.train.loop import Stage
from mobilekd.train.task_training import Schedule

DEMO_SH = ROOT / "scripts" / "demo.sh"


def shell_settings(capsys, *args) -> dict[str, list[str]]:
    """What scripts/demo.sh gets: `mobilekd run-config ARGS` evaluated by bash, each variable as a list."""
    run_config([*map(str, args)])
    printed = capsys.readouterr().out
    names = re.findall(r"^(\w+)=", printed, re.M)
    dump = "".join(f'printf "%s\\0" {n} "${{#{n}[@]}}" "${{{n}[@]}}"; ' for n in names)
    out = subprocess.run(["bash", "-c", f'set -e; eval "$1"; {dump}', "-", printed], capture_output=True,
                         text=True, check=True).stdout.split("\0")[:-1]
    found = {}
    while out:
        name, n = out[0], int(out[1])
        found[name], out = out[2:2 + n], out[2 + n:]
    return found


def test_teacher_value_and_the_demo_take_their_settings_from_configs_demo_json(capsys):
    s = run_settings(DEMO, "packaged-teacher")
    assert tv.ADAPT == flags(s["train-teacher"]) == ["--init-from", tv.TEACHER]
    assert tv.TRANSFER == ["--student", s["student"], *flags(s["distill"])]
    assert tv.TASKS == {task: flags(f) for task, f in s["tasks"].items()}
    assert tv.TEACHER_TASKS == {task: flags(f) for task, f in s["teacher-tasks"].items()} and tv.TEACHER_TASKS["sst2"]
    assert (float(tv.TEACHER_LR), float(tv.STUDENT_LR)) == (s["teacher_lr"], s["student_lr"])
    # the demo's packaged-teacher settings are the benchmark's, as bash sees them
    demo = shell_settings(capsys)
    assert demo["TRAIN_TEACHER"] == tv.ADAPT and ["--student", *demo["STUDENT"], *demo["DISTILL"]] == tv.TRANSFER
    assert demo["TASK_SST2"] == tv.TASKS["sst2"] and demo["FINETUNE"] == ["--eval-every", "0"]
    assert demo["TEACHER_TASK_SST2"] == tv.TEACHER_TASKS["sst2"]
    assert (demo["TEACHER_LR"], demo["STUDENT_LR"]) == ([tv.TEACHER_LR], [tv.STUDENT_LR])
    assert (demo["INIT_SUBSET"], demo["FINETUNE_SUBSET"]) == (tv.INIT_SUBSET, tv.FINETUNE_SUBSET)
    assert demo["SHIP"] == ["subset_task_kd"]  # the run the demo exports, one of teacher_value's methods
    # --methods: the runs asked for, with the stages and the teachers they stand on, nothing else
    from benchmarks.runner import with_needs
    plan = with_needs(tv.jobs(ROOT / "runs/x", ["sst2"], [0, 1]), lambda j: j.name.endswith("/subset_task_kd/1"))
    assert [j.name for j in plan] == ["adapt", "init/subset", "sst2/teacher/1", "sst2/subset_task_kd/1"]
    teacher = plan[2].argv  # the teacher's own flags (teacher-tasks) after the task's, so its epochs win
    assert teacher[-len(tv.TEACHER_TASKS["sst2"]):] == tv.TEACHER_TASKS["sst2"]
    subset = plan[-1].argv  # taught by its seed's teacher; the subset's flags last, so its epochs and rate win
    assert subset[subset.index("--teacher") + 1].endswith("sst2/teacher/seed1") and subset.count("--lr") == 1
    assert subset[-len(tv.FINETUNE_SUBSET):] == tv.FINETUNE_SUBSET
    # demo.sh reads the file and keeps no setting of its own: no flag with a number, no learning rate
    script = DEMO_SH.read_text()
    assert "CONFIG=configs/demo.json" in script and 'run-config "$CONFIG"' in script
    assert (ROOT / "configs" / "demo.json") == DEMO
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert re.findall(r"--[a-z][a-z-]*[ =]+['\"]?[0-9.]", code) == []
    assert re.findall(r"\b[0-9.]+e-[0-9]+\b|\b0\.0[0-9]+\b", code) == []  # no learning rate (1e-4, 0.0001)


def test_the_micro_overlay_and_the_scratch_teacher_mode(capsys):
    micro = shell_settings(capsys, "--mode", "scratch-teacher", "--overlay", "micro")
    assert micro["DISTILL"] == ["--pd-steps", "4", "--layer-steps", "2", "--batch-size", "8", "--max-len", "32",
                                "--eval-examples", "32", "--save-every", "3"]
    assert micro["TASK_SST2"] + micro["FINETUNE"] == ["--max-train-examples", "64", "--epochs", "1", "--max-len",
                                                      "32", "--batch-size", "16"]  # null: --eval-every left out
    assert micro["LATENCY"] == ["--threads", "1", "--runs", "3"] and micro["STUDENT"] == ["demo_student"]
    assert shell_settings(capsys)["LATENCY"] == ["--threads", "1", "2", "--runs", "20"]


def test_a_copied_and_edited_run_configuration_changes_what_the_demo_runs(tmp_path, capsys):
    config = json.loads(DEMO.read_text())
    config["modes"]["packaged-teacher"]["student_lr"] = 1e-4
    config["modes"]["packaged-teacher"]["distill"]["--teacher-bf16"] = True
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(config))
    edited = shell_settings(capsys, mine)
    assert edited["STUDENT_LR"] == ["1e-4"] and edited["DISTILL"][-1] == "--teacher-bf16"


@pytest.mark.parametrize("edit, problem", [
    (lambda c: c.pop("modes"), '"modes"'),
    (lambda c: c["modes"]["packaged-teacher"]["distill"].update({"--pd-steps": {"x": 1}}), "--pd-steps"),
    (lambda c: c["modes"]["packaged-teacher"]["distill"].update({"pd-steps": 1}), "not a flag"),
    (lambda c: c["modes"].update({"packaged-teacher": "oops"}), "mode 'packaged-teacher': expected a JSON object"),
    (lambda c: c["modes"]["packaged-teacher"].update({"tasks": 3}), "tasks: expected"),
    (lambda c: c["modes"]["packaged-teacher"].update({"teacher-tasks": [3]}), "teacher-tasks: expected"),
    (lambda c: c["overlays"].update({"micro": 3}), "overlay 'micro': expected a JSON object"),
    (lambda c: c["modes"]["packaged-teacher"].update({"out": "elsewhere"}), "settings not read here"),
    (lambda c: c["modes"]["packaged-teacher"].update({"distill": None}), "settings missing in its first mode: distill"),
])
def test_a_bad_run_configuration_is_one_line(tmp_path, edit, problem):
    """What the demo would evaluate is checked first: no setting may name a variable the demo does not read (a key
    "out" would overwrite its OUT), and every one it reads is there."""
    config = json.loads(DEMO.read_text())
    edit(config)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(config))
    keys = ["student", "teacher_lr", "student_lr", "train-teacher", "distill", "finetune", "tasks", "teacher-tasks",
            "init-subset", "finetune-subset", "ship", "export", "latency"]  # what scripts/demo.sh reads
    overlay = ["--overlay", "micro"] if "overlay" in problem else []
    proc = run_module("mobilekd", "run-config", bad, *overlay, "--keys", *keys, check=False)
    assert problem in one_line_error(proc)
    with pytest.raises(UserError, match="no mode 'other'"):
        run_settings(DEMO, "other")


def test_kd_and_fine_tuning_learning_rate_defaults_have_one_home(capsys):
    kd = {f.name: f.default for f in dataclasses.fields(Distillation)}
    assert (KD_DEFAULTS["alpha"], KD_DEFAULTS["temperature"], KD_DEFAULTS["kd_reduction"]) == \
        (kd["alpha"], kd["temperature"], kd["reduction"])
    with pytest.raises(SystemExit):
        finetune.parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"(the rest goes to distillation) (default {kd['alpha']:g}, or the method's)" in shown
    assert f"KD temperature (default {kd['temperature']:g}, or the method's)" in shown
    assert "models under 20M parameters (distilled students): lr 5e-4" in shown and SMALL_MODEL_LR == 5e-4
    assert default_lr("sst2", 10**6) == SMALL_MODEL_LR and default_lr("squad1", 10**8) == DEFAULTS["squad1"]["lr"]
    # a MobileBERT-shaped student (the README path's mobilebert_h384) is fine-tuned as a student; the packaged
    # teacher (all-MiniLM-L6-v2) is not
    student = sum(p.numel() for p in
                  MobileBertForSequenceClassification(PRESETS["mobilebert_h384"].config).parameters())
    teacher = sum(p.numel() for p in load_pretrained(model_dir("all-minilm-l6-v2"), "classification").parameters())
    assert default_lr("custom", student) == SMALL_MODEL_LR and default_lr("custom", teacher) == DEFAULTS["custom"]["lr"]
    assert "lr" not in {f.name for f in dataclasses.fields(Stage) if f.default is not dataclasses.MISSING}


def test_models_import_no_training_code():
    above = ("mobilekd.transfer", "mobilekd.finetune", "mobilekd.train", "mobilekd.export")
    bad = [f"{path.name} imports {node.module}" for path in sorted((ROOT / "mobilekd" / "models").glob("*.py"))
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(above)]
    assert bad == []


def test_the_sequence_length_has_one_name_in_every_verb_and_the_old_one_says_so():
    """--max-len in every verb that takes a length; --seq-len, its former name in some, still works and says it is
    deprecated."""
    for verb in ("models", "train-teacher", "distill", "finetune", "export", "latency", "seq2seq"):
        shown = run_module("mobilekd", verb, "--help").stdout
        assert "--max-len N" in shown and "--seq-len" not in shown, verb
    new, old = (run_module("mobilekd", "models", flag, "64") for flag in ("--max-len", "--seq-len"))
    assert new.stdout == old.stdout and "at sequence length 64" in new.stdout
    assert "--seq-len is deprecated, use --max-len" in old.stderr and "deprecated" not in new.stderr


# (verb, its required flags, the task's default sequence length) of every verb that trains on a task's training set
TASK_TRAINED = [("fastbert", ["--model", "m", "--task", "mrpc"], DEFAULTS["mrpc"]["max_len"]),
                ("qat", ["--model", "m", "--task", "stsb"], DEFAULTS["stsb"]["max_len"]),
                ("bilstm", ["--teacher", "t", "--task", "sst2"], DEFAULTS["sst2"]["max_len"]),
                ("cmlm", ["--teacher", "t", "--task", "correction"], PAIR_LENGTHS["correction"]),
                ("seq2seq", ["--method", "ce", "--task", "entailment"], PAIR_LENGTHS["entailment"]),
                ("multitask", ["--model", "m", "--tasks", "sst2", "rte"], 128)]


@pytest.mark.parametrize("verb, given, length", TASK_TRAINED, ids=[v[0] for v in TASK_TRAINED])
def test_a_task_trained_verb_reads_its_schedule_from_one_config(verb, given, length):
    """fastbert, qat, bilstm, cmlm, seq2seq and multitask take their task and schedule as one `Schedule` (the
    verb's `add_task_flags` call holds its epochs and learning rate): an unset --max-len is the task's, the flags
    are read from the config alone (taken off the namespace), and a bad value is refused in one line."""
    parse = importlib.import_module(f"mobilekd.recipes.{verb}").parse_args
    args = parse([*given, "--lr", "3e-4"])
    c = args.recipe
    t = c.schedule if verb == "multitask" else c.training
    assert isinstance(t, Schedule) and (t.max_len, t.lr) == (length, 3e-4)
    assert t.epochs > 0 and t.steps(100, 32) == round(t.epochs * 4)
    assert not any(hasattr(args, name) for name in ("epochs", "lr", "max_len", "task", "data", "model", "teacher"))
    assert parse([*given, "--max-len", "48", "--max-steps", "7"]).recipe.__dict__[
        "schedule" if verb == "multitask" else "training"].steps(10**6, 1) == 7
    for bad, said in ((["--epochs", "0"], "--epochs must be greater than 0"), (["--max-len", "0"], "--max-len must"),
                      (["--lr", "-1"], "--lr must be greater than 0")):
        with pytest.raises(UserError, match=said):
            parse([*given, *bad])


# Defaults of one flag that are equal in several verbs by coincidence, not one default copied: each is its
# method's own (credited in its recipe's --help)
COINCIDENT = {("--lr", 0.001): "seq2seq's (OpenNMT-style Adam) and the BiLSTM's (Tang et al.'s Adadelta replaced)",
              ("--epochs", 10): "cmlm's, bilstm's and fastbert's own budgets"}


def test_each_default_is_written_once():
    """Walk every recipe's flags in the source (`add_argument` defaults, and the keyword defaults the recipes give
    the shared flag helpers): a flag's number default written as a literal in two places is one default with two
    homes, unless it is a listed coincidence; shared defaults live in named constants (train/common.py's WARMUP,
    CLASSIFIER_DROPOUT, EVAL_EXAMPLES; data/tasks.py's BERT_LR). Zero (off, the first seed) is not a tuned value and
    is not counted."""

    helpers = {"add_task_flags": {"epochs": "--epochs", "lr": "--lr", "warmup": "--warmup", "max_len": "--max-len"}}
    found = defaultdict(list)
    for path in sorted((ROOT / "mobilekd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            pairs = []
            if name == "add_argument" and node.args and isinstance(node.args[0], ast.Constant):
                pairs = [(node.args[0].value, k.value) for k in node.keywords if k.arg == "default"]
            elif name in helpers:
                pairs = [(helpers[name][k.arg], k.value) for k in node.keywords if k.arg in helpers[name]]
            for flag, value in pairs:
                if isinstance(value, ast.Constant) and type(value.value) in (int, float) and value.value != 0:
                    found[(flag, value.value)].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    twice = {k: v for k, v in found.items() if len(v) > 1 and k not in COINCIDENT}
    assert twice == {}
    assert all(len(found[k]) > 1 for k in COINCIDENT)  # a listed coincidence that is gone is taken off the list


def _library_defaults() -> dict[tuple[str, object], list[str]]:
    """(name, default) -> where, for every literal default in mobilekd's source of a dataclass field (a plain one
    or `field(default=...)`) or of a function's parameter."""
    found = defaultdict(list)

    def keep(name, value, path, node):
        if isinstance(value, ast.Constant) and value.value not in (None, True, False, 0, ""):
            found[(name, value.value)].append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")

    for path in sorted((ROOT / "mobilekd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value:
                        value = item.value
                        if isinstance(value, ast.Call) and ast.unparse(value.func) == "field":
                            value = next((k.value for k in value.keywords if k.arg == "default"), None)
                        keep(item.target.id, value, path, node)
            elif isinstance(node, ast.FunctionDef):
                a = node.args
                positional = a.posonlyargs + a.args
                for arg, value in [*zip(positional[len(positional) - len(a.defaults):], a.defaults),
                                   *zip(a.kwonlyargs, a.kw_defaults)]:
                    keep(arg.arg, value, path, node)
    return found


def test_no_flag_repeats_a_library_default():
    """A flag whose default is written as a literal equal to the literal default of a config field or a function
    parameter of its own name in the library is one default with two homes: the flag is the field's
    (`add_flags`), or both read one named constant. The BiLSTM's sizes, FastBERT's branch width and heads, SQuAD's
    stride and distill's strategy each once had two or three."""
    fields = _library_defaults()
    assert fields[("hidden_size", 150)] and fields[("weight_decay", 0.01)] and fields[("max_query_len", 64)]
    twice = []
    for path in sorted((ROOT / "mobilekd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                continue
            dest = node.args[0].value.lstrip("-").replace("-", "_")
            for k in node.keywords:
                if k.arg == "default" and isinstance(k.value, ast.Constant) and (dest, k.value.value) in fields:
                    twice.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.args[0].value}",
                                  fields[(dest, k.value.value)]))
    assert twice == []
