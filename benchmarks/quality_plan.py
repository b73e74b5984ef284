"""The plan of `python -m benchmarks.quality` made into jobs. The plan itself is data, configs/benchmarks/quality.toml:
the tasks and their budgets, the task-agnostic stages every task shares, each method (its family, start, flags,
teacher, budget and what it is) and the default plan (one recipe per student family, with the swaps measurement
chose per task); `load(path)` reads it, and the names below are views of it for the benchmark's code. The teacher is
the demo's (all-MiniLM-L6-v2 adapted by `train-teacher --init-from`, configs/demo.json), fine-tuned on each task;
every student learns from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from benchmarks import methods, teacher_value
from benchmarks.runner import RESUMABLE, Job, with_needs
from mobilekd.errors import located
from mobilekd.fileio import REPO_ROOT

PLAN_FILE = REPO_ROOT / "configs" / "benchmarks" / "quality.toml"


REQUIRED = ("results", "eval_points", "plot_tasks", "ablation_tasks", "default", "family", "baselines", "model_maker",
            "bilstm", "task_distillation", "pkt_steps", "tinybert_steps", "distilbert_steps", "narrow_ffn", "tasks",
            "budgets", "epochs", "methods", "plans", "task_recipes", "as_methods", "families")


def load(path=PLAN_FILE) -> dict:
    """The plan file, parsed; unreadable, not TOML, or without a section the plan reads: one line naming it."""
    try:
        plan = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise located(path, f"not a readable plan: {err}") from None
    missing = [key for key in REQUIRED if key not in plan]
    if missing:
        raise located(path, f"lacks {', '.join(missing)}")
    return plan


PLAN = load()
B = PLAN["budgets"]


def _tasks_of(name: str) -> list[str]:
    """The tasks a budgets entry names: a list's items, or a table's keys."""
    return list(B[name])


def _of(flag: str) -> dict:
    """method -> its `flag` in the plan file, for the methods that set it."""
    return {m: spec[flag] for m, spec in PLAN["methods"].items() if flag in spec}


# task -> (--max-len, the teacher's epochs, the students' epochs)
TASKS = {t: (v["max_len"], v["teacher_epochs"], v["student_epochs"]) for t, v in PLAN["tasks"].items()}
AUGMENT = {t: v["augment"] for t, v in PLAN["tasks"].items()}  # new copies per example (TinyBERT)
TRANSFER = {t: v["transfer"] for t, v in PLAN["tasks"].items()}  # BiLSTM transfer-set samples
OWN_SET_EPOCHS = B["own_set_epochs"]
TEACHER_LONG = B["teacher_long"]
INTERMEDIATE_EPOCHS = B["intermediate_epochs"]
LONG_INTERMEDIATE_EPOCHS = B["long_intermediate_epochs"]
ABLATION_TASKS = tuple(PLAN["ablation_tasks"])
PKT_STEPS, TINYBERT_STEPS, DISTILBERT_STEPS = PLAN["pkt_steps"], PLAN["tinybert_steps"], PLAN["distilbert_steps"]
PKT_SHORT_STEPS = teacher_value.TRANSFER[2:]  # the demo's: --layer-steps 50 --pd-steps 200
NARROW_FFN = PLAN["narrow_ffn"]
AUGMENTED_EPOCHS = PLAN["epochs"]["augmented"]
SHORT_INTERMEDIATE_EPOCHS = PLAN["epochs"]["short_intermediate"]
TASK_DISTILLATION = PLAN["task_distillation"]
# method -> (student family, its start (a stage), finetune flags beyond the shared ones, the teacher method whose
# run of the same task and seed teaches it task KD, or None)
METHODS = {m: (spec["family"], spec.get("start"), spec.get("flags", []), spec.get("teacher"))
           for m, spec in PLAN["methods"].items()}
COPIES = {m: B[table] for m, table in _of("copies").items()}  # its new copies by task, where not AUGMENT's
AUGMENTED_ONLY = tuple(_of("augmented_only"))  # over an augmented set alone: only where there is one
AUGMENTED = (*_of("augmented"), *AUGMENTED_ONLY)  # over AUGMENT's set where the task has one
SET_EPOCHS = _of("set_epochs")
STEP_EPOCHS = {m: B[table] for m, table in _of("step_epochs").items()}  # its students' epochs by task
LONG_MATCHING = tuple(_of("long_matching"))
ONLY_ON = {m: [t for t in TASKS if all(t in _tasks_of(n) for n in names)] for m, names in _of("only_on").items()}
ABLATIONS = tuple(_of("ablation"))
BILSTM_EPOCHS = _of("bilstm_epochs")
BILSTM = PLAN["bilstm"]
EVAL_POINTS = PLAN["eval_points"]
PLOT_TASKS = tuple(PLAN["plot_tasks"])
TEACHER_LR, STUDENT_LR = teacher_value.TEACHER_LR, teacher_value.STUDENT_LR
FAMILY_METHODS = tuple(PLAN["plans"]["family_methods"])
FAMILY = PLAN["family"]
AS_METHODS = PLAN["as_methods"]
RECIPES = tuple(PLAN["plans"]["recipes"])
TASK_RECIPES = PLAN["task_recipes"]
DEFAULT = PLAN["default"]
SWAPS = "; ".join(f"{new} for {old} on {task}" for task, swap in TASK_RECIPES.items() for old, new in swap.items())
BASELINES = tuple(PLAN["baselines"])
FAMILIES = {f: v["student"].format(narrow_ffn=NARROW_FFN) for f, v in PLAN["families"].items()}
# family -> the method whose SST-2 model is exported and timed, but for TASK_RECIPES' SST-2 swap where it is
# planned (measurement_jobs)
EXPORTED = {f: v["exported"] for f, v in PLAN["families"].items() if "exported" in v}
ORDER = [*METHODS, *BASELINES]
MODEL_MAKER = PLAN["model_maker"]
TIMED = {**FAMILIES, "model-maker": MODEL_MAKER}  # the `student` of the rows whose file each family's timing is
RESULTS = PLAN["results"]


def stage_dirs(out: Path) -> dict[str, Path]:
    s = out / "students"
    return {"adapt": out / "teacher", "pkt": s / "pkt", "pkt-short": s / "pkt_short", "subset2": s / "subset2",
            "subset2-narrow": s / f"subset2_ffn{NARROW_FFN}", "tinybert4": s / "tinybert4", "bert3": s / "bert3",
            "spread3": s / "spread3", "distilbert": s / "distilbert"}


def run_dir(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "finetune" / task / method / f"seed{seed}"


def recipe(task: str, method: str) -> str:
    """The method that stands for `method` on `task`: TASK_RECIPES' swap where it names one, else `method`."""
    return TASK_RECIPES.get(task, {}).get(method, method)


def recipes(task: str) -> list[str]:
    """The default plan's methods on `task`: RECIPES, a family's replaced where TASK_RECIPES names another."""
    return [recipe(task, m) for m in RECIPES]


def methods_for(task: str, chosen=tuple(METHODS)) -> list[str]:
    """The methods run on `task` (the ablations on ABLATION_TASKS only, AUGMENTED_ONLY where AUGMENT has a set,
    ONLY_ON's methods on their tasks), of those `chosen` (DEFAULT among them: the task's `recipes`), and the
    teachers they learn from."""
    if DEFAULT in chosen:
        chosen = [*chosen, *recipes(task)]

    def runs_on(m):
        return ((m not in ABLATIONS or task in ABLATION_TASKS) and (m not in AUGMENTED_ONLY or AUGMENT[task] != "0")
                and task in ONLY_ON.get(m, TASKS))

    wanted = {m for m in chosen if m in METHODS and runs_on(m)}
    wanted |= {METHODS[m][3] for m in wanted if METHODS[m][3]}
    return [m for m in METHODS if m in wanted]


def steps_per_epoch(task: str) -> int:
    from mobilekd.data.tasks import load_task, task_data
    return -(-len(load_task(task, task_data(task, None)).train) // 32)


def copies(task: str, method: str) -> str:
    """The new copies an example of the augmented set `method` trains over on `task` (TinyBERT's augmentation: COPIES'
    where it names the method, else AUGMENT for the methods over it); "0": the task's own examples."""
    if method in COPIES:
        return COPIES[method].get(task, "0")
    return AUGMENT[task] if method in AUGMENTED else "0"


def augmented_epochs(method: str) -> str:
    return SET_EPOCHS.get(method, AUGMENTED_EPOCHS)


def student_epochs(task: str, method: str) -> str:
    """The epochs of `method`'s student training on `task` (TinyBERT's: its prediction step): STEP_EPOCHS' where it
    names them, else SET_EPOCHS' or AUGMENTED_EPOCHS over an augmented set alone, else the task's."""
    if task in STEP_EPOCHS.get(method, {}):
        return STEP_EPOCHS[method][task]
    if method in AUGMENTED_ONLY:
        return augmented_epochs(method)
    if copies(task, method) != "0":  # tinybert-td over its augmented set: the task's epochs
        return TASKS[task][2]
    return OWN_SET_EPOCHS.get(task, TASKS[task][2])


def teacher_epochs(task: str, method: str) -> str:
    """A teacher method's fine-tuning epochs on `task`."""
    return TEACHER_LONG.get(task, TASKS[task][1]) if method == "teacher-long" else TASKS[task][1]


def two_steps(task: str, method: str) -> str:
    """A run of TinyBERT's task distillation's epochs, "step 1 + step 2"."""
    return f"{intermediate_epochs(task, method)} + {student_epochs(task, method)}"


def epochs_against(n: str, what: str, m: str) -> str:
    """A goal line's "N epochs of WHAT against M add", in the singular where N is 1."""
    one = n == "1"
    return f"{n} epoch{'' if one else 's'} of {what} against {m} add{'s' if one else ''}"


def intermediate_epochs(task: str, method: str) -> str | None:
    """The epochs of TinyBERT's step 1 (layer-by-layer matching) in a run of TinyBERT's task distillation; None for
    the others."""
    if METHODS[method][2] != TASK_DISTILLATION:
        return None
    if method == "tinybert-td-short":
        return SHORT_INTERMEDIATE_EPOCHS
    if method in LONG_MATCHING and task in LONG_INTERMEDIATE_EPOCHS:
        return LONG_INTERMEDIATE_EPOCHS[task]
    return INTERMEDIATE_EPOCHS.get(task, student_epochs(task, method))


def stage_jobs(out: Path) -> list[Job]:
    d = stage_dirs(out)
    teacher = d["adapt"]
    distill = ["distill", "--teacher", str(teacher), "--strategy"]
    return [Job("adapt", ["train-teacher", *teacher_value.ADAPT, "--out", str(teacher), *RESUMABLE], teacher),
            Job("distill/pkt", [*distill, "pkt", "--student", teacher_value.STUDENT, *PKT_STEPS, "--out",
                                str(d["pkt"]), *RESUMABLE], d["pkt"], ["adapt"]),
            Job("distill/pkt-short", [*distill, "pkt", "--student", teacher_value.STUDENT, *PKT_SHORT_STEPS,
                                      "--out", str(d["pkt-short"]), *RESUMABLE], d["pkt-short"], ["adapt"]),
            Job("init/subset2", ["init", str(teacher), str(d["subset2"]), "--layers", "spread:2"], d["subset2"],
                ["adapt"]),
            Job("init/subset2-narrow", ["init", str(teacher), str(d["subset2-narrow"]), "--layers", "spread:2",
                                        "--intermediate-size", NARROW_FFN], d["subset2-narrow"], ["adapt"]),
            Job("distill/tinybert4", [*distill, "tinybert", "--student", "tinybert4_h156", "--layer-map", "uniform",
                                      *TINYBERT_STEPS, "--out", str(d["tinybert4"]), *RESUMABLE], d["tinybert4"],
                ["adapt"]),
            *methods.family_stages(teacher, d["bert3"], d["spread3"], d["distilbert"], DISTILBERT_STEPS)]


def stage_of(name: str) -> str:
    return {"adapt": "adapt", "subset2": "init/subset2", "subset2-narrow": "init/subset2-narrow", "bert3": "init/bert3",
            "spread3": "init/spread3"}.get(
        name, f"distill/{name}")


def task_jobs(out: Path, task: str, seed: int, chosen=tuple(METHODS)) -> list[Job]:
    max_len, _, epochs = TASKS[task]
    d = stage_dirs(out)
    per_epoch = steps_per_epoch(task)

    def every(n_epochs: str) -> int:  # EVAL_POINTS evaluations over n_epochs of the task's own examples
        return max(1, int(n_epochs) * per_epoch // EVAL_POINTS)

    plan = []
    for method in methods_for(task, chosen):
        family, start, flags, taught = METHODS[method]
        r = run_dir(out, task, method, seed)
        teacher = run_dir(out, task, taught, seed) if taught else None
        if family == "teacher":
            plan.append(Job(f"{task}/{method}/{seed}", [
                "finetune", "--task", task, "--model", str(d["adapt"]), "--epochs", teacher_epochs(task, method),
                "--max-len", max_len, "--lr", TEACHER_LR, "--seed", str(seed), "--eval-every", "0", "--out", str(r),
                *RESUMABLE], r, ["adapt"]))
        elif family == "bilstm":
            plan.append(Job(f"{task}/{method}/{seed}", [
                "bilstm", "--teacher", str(teacher), "--task", task, "--epochs", BILSTM_EPOCHS[method], *BILSTM,
                "--augment", TRANSFER[task], "--max-len", max_len, "--seed", str(seed), "--out", str(r), *RESUMABLE], r,
                [f"{task}/{taught}/{seed}"]))
        else:
            augmented = copies(task, method) != "0"
            if augmented:
                flags = [*flags, "--augment", copies(task, method), "--augment-model", str(d["adapt"])]
            step1 = intermediate_epochs(task, method)
            if step1 is not None and step1 != student_epochs(task, method):  # finetune's default: --epochs
                flags = [*flags, "--intermediate-epochs", step1]
            plan.append(Job(f"{task}/{method}/{seed}", [
                "finetune", "--task", task, "--model", str(d[start]), "--epochs", student_epochs(task, method),
                "--max-len", max_len, "--lr", STUDENT_LR, "--seed", str(seed), "--eval-every",
                str(every(epochs) * (1 + int(copies(task, method))) * int(student_epochs(task, method))
                    // int(AUGMENTED_EPOCHS if method in AUGMENTED_ONLY else epochs)
                    if augmented else  # augmented: more steps, over its own epochs
                    every(student_epochs(task, method))), *flags,
                *(["--teacher", str(teacher)] if taught else []), "--out", str(r), *RESUMABLE],
                r, [stage_of(start)] + ([f"{task}/{taught}/{seed}"] if taught else [])))
    return plan


def measurement_jobs(out: Path, chosen=tuple(METHODS), seed: int = 0) -> list[Job]:
    """Each family's SST-2 model of `seed` exported, then all timed with Model Maker's file in one run (a file's size
    and speed are its architecture's: any seed's model stands for its family, so a file an earlier invocation exported
    from another method of the family, e.g. `tinybert-td` before TASK_RECIPES swapped in `tinybert-td-long`, is kept:
    its parity is that model's)."""
    plan, tflite, exports, planned = [], {}, [], methods_for("sst2", chosen)
    for family, method in EXPORTED.items():
        # the family's SST-2 recipe where measurement chose another (TASK_RECIPES) and it is planned, else EXPORTED's
        method = next((m for m in (recipe("sst2", method), method) if m in planned), None)
        if method is None:
            if exported(out, family).is_file():  # an earlier invocation's file: timed with the others
                tflite[family] = exported(out, family)
            continue
        tflite[family] = exported(out, family)
        exports.append(f"export/{family}")
        plan.append(Job(exports[-1], [
            "export", "--model", str(run_dir(out, "sst2", method, seed)), "--max-len", "128", "--quantize", "none",
            *(["--fused-lstm"] if family in FUSED else []), "--parity-examples", "872", "--out",
            str(tflite[family].parent)], tflite[family].parent, [f"sst2/{method}/{seed}"]))
    files = [f"{k}={v}" for k, v in tflite.items()]
    if (mm := model_maker_file(out)) is not None:
        files.append(f"model-maker={mm}")
    if not files:  # nothing exported here, now or before
        return plan
    timed = out / "latency" / "+".join(f.split("=")[0] for f in files)  # a run per set of files timed together
    plan.append(Job("latency", ["latency", "--models", "--quantize", "none", "--threads", "1", "--devices", "pixel4",
                                "--max-len", "128", "--out", str(timed), "--tflite", *files],
                    timed, exports))
    return plan


FUSED = ("bilstm",)  # families whose file is TFLite's fused LSTM kernel: the file an app ships (38 ops, not 6,272)


def exported(out: Path, family: str) -> Path:
    """A family's timed SST-2 file (fp32): the fused-LSTM file for a BiLSTM."""
    if family in FUSED:
        return out / "tflite" / f"{family}-fused" / "model_none_fused.tflite"
    return out / "tflite" / family / "model_none.tflite"


def model_maker_dir(out: Path, seed: int) -> Path:
    return out / "model_maker" / f"sst2_seed{seed}"


def model_maker_file(out: Path) -> Path | None:
    """The .tflite of Model Maker's lowest finished seed (its results.json is written last), the one timed."""
    done = sorted((int(d.name.removeprefix("sst2_seed")), d) for d in (out / "model_maker").glob("sst2_seed*")
                  if d.name.removeprefix("sst2_seed").isdigit() and (d / "results.json").is_file())
    return done[0][1] / "model.tflite" if done else None


def jobs(out: Path, tasks: list[str], seeds: list[int], chosen=tuple(METHODS)) -> list[Job]:
    """The shared stages the `chosen` methods stand on, then seed by seed and task by task (partial results are
    whole seeds), the exports once SST-2's runs of the first seed exist, and the timing after every other run has
    ended (done or failed): a latency run beside training reads host milliseconds up to ten times too slow."""
    plan = []
    for seed in seeds:
        for task in tasks:
            plan += task_jobs(out, task, seed, chosen)
            if seed == seeds[0] and task == "sst2":
                plan += measurement_jobs(out, chosen, seed)
    stages = stage_jobs(out)
    names = {j.name for j in stages}
    # the stages the runs stand on, and those the stages stand on: `distill/pkt` needs `adapt`, which no run needs
    # itself when the plan has no teacher (--methods pkt)
    plan = with_needs(stages + plan, lambda j: j.name not in names)
    for job in plan:
        if job.name == "latency":
            job.after = [j.name for j in plan if j.name != "latency" and j.name not in job.needs]
    return plan
