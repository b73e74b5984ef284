"""`mobilekd ship`'s settings, one dataclass: each field with a help is a flag (`mobilekd.flags.add_flags`), its
default written here and nowhere else; the search's own settings (families, shapes, spaces, trials) are
configs/ship.json's (`--config`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mobilekd.data.glue import TASKS as GLUE_TASKS
from mobilekd.errors import UserError
from mobilekd.export.litert import QUANTIZATIONS
from mobilekd.export.parity import MIN_AGREEMENT
from mobilekd.finetune.teacher_features import BUDGET_GB as STORE_GB
from mobilekd.search.space import CONFIG

STARTS = ".cache/mobilekd/starts"  # relative to the working directory, as the other caches
# the seconds --hours keeps for the stages after the search (the teacher's and the student's dev scorings, the export
# with parity on all of dev: 44-91 s on RTE and STS-B on 2 AVX2 cores, OUT/final_seconds.json, 2026-12-06/07) and
# the summary after them (TF-IDF, the constant answer, the intervals: 25-30 s on STS-B). 120 s left STS-B's
# `ship --hours 1` 5 s inside the hour (3,595 s, 2026-12-07): 180 since, for a margin
FINAL_RESERVE = 180.0


@dataclass
class ShipConfig:
    teacher: str = field(default=None, metadata={
        "required": True,
        "help": "your BERT: a transformers BERT directory, one of ours, or all-minilm-l6-v2 (packaged)"})
    data: str | None = field(default=None, metadata={
        "help": "directory with train and dev files (.csv, .tsv or .jsonl)",
        "default_help": "the shipped copy of a GLUE --task"})
    task: str = field(default="custom", metadata={
        "choices": ["custom", *(t for t in GLUE_TASKS if t != "mnli")],
        "help": "custom (your --data) or a shipped GLUE task read as the toolkit reads it"})
    out: str = field(default=None, metadata={
        "required": True, "help": "output directory (teacher/, trials/, student/, ship.json)"})
    regression: bool = field(default=False, metadata={"help": "numeric labels (scored by Pearson correlation)"})
    latency_ms: float | None = field(default=None, metadata={
        "type": float, "above": 0, "help": "the student's latency budget on --device, ms (estimated)",
        "default_help": "a third of the teacher's own estimate"})
    device: str = field(default="pixel4", metadata={"help": "the phone the budget is for (android_bench/profiles)"})
    families: list[str] | None = field(default=None, metadata={
        "nargs": "+", "help": "the student families to search", "default_help": "all of --config's"})
    trials: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "trials in the search", "default_help": "--config's search.trials"})
    hours: float | None = field(default=None, metadata={
        "type": float, "above": 0,
        "help": "the whole run's wall budget, hours: the search gets what the run before it (the teacher's "
                "fine-tuning the most of it) and an earlier, interrupted search leave of it, less "
                f"{FINAL_RESERVE / 60:g} minutes for the dev scorings, the export and the summary; no trial starts "
                "after that, and a trial under way is cut there once one is complete (--config's "
                "search.at_wall_limit). Past it, trials still run until one is complete, so that there is a student "
                "to choose: the run then takes longer",
        "default_help": "none"})
    search_hours: float | None = field(default=None, metadata={
        "type": float, "above": 0,
        "help": "a wall limit on the search alone, hours, an earlier, interrupted search counted: no trial starts "
                "after it, and a trial under way is cut there once one is complete (with --hours: the smaller)",
        "default_help": "none"})
    workers: int = field(default=1, metadata={
        "min": 1, "help": "processes running trials at once over the study's journal (each trial gets --threads)"})
    threads: int | None = field(default=None, metadata={
        "type": int, "min": 1, "help": "threads per trial; the stages no trial runs beside (the teacher's "
                                       "fine-tuning, the final scoring and export) get --threads x --workers",
        "default_help": "torch's"})
    config: str = field(default=str(CONFIG), metadata={
        "help": "the search's families and spaces", "default_help": "configs/ship.json"})
    starts: str | None = field(default=None, metadata={
        "help": "where the students' starts are made (the teacher's layers, task-agnostic distillation), shared by "
                "every task and seed of one teacher", "default_help": f"{STARTS}/<the teacher's digest>"})
    quantize: list[str] = field(default_factory=lambda: ["none", "dynamic-int8"], metadata={
        "nargs": "+", "choices": list(QUANTIZATIONS), "help": "the .tflite forms to export",
        "default_help": "none dynamic-int8"})
    min_agreement: float = field(default=MIN_AGREEMENT, metadata={
        "min": 0.0, "help": "export's parity bar for the files: a file that answers as the student does on a smaller "
                            "share of dev is removed and ship stops; 0 keeps a lossy quantization (--quantize int8 "
                            "without QAT agrees on 79-85%%)"})
    keep_teacher_features: bool = field(default=False, metadata={
        "help": "keep the teacher's layer-feature stores the trials read (OUT/teacher/outputs/*-features, up to "
                "--teacher-store-gb each; by default removed once the student is exported)"})
    seed: int = field(default=0, metadata={
        "help": "the seed of the teacher, the validation split, the sampler and every trial"})
    teacher_store_gb: float = field(default=STORE_GB, metadata={
        "min": 0, "help": "the disk the fine-tuned teacher's stored layer features may take, read by every layer-"
                          "matching trial (finetune --teacher-store-gb; 0: the teacher runs at every step)"})
    dry_run: bool = field(default=False, metadata={"help": "print the budgets and the candidates, train nothing"})
    make_starts: bool = field(default=False, metadata={
        "help": "make the starts of the candidates that fit (the teacher's layers; task-agnostic distillation, "
                "minutes to an hour each), record them in OUT/starts.json and stop: made once per teacher and "
                "shared by every task and seed, so that a later search's time goes to its trials"})
    join: int = field(default=0, metadata={"hidden": True, "help": "worker N of --workers: trials only"})
    deadline: float | None = field(default=None, metadata={
        "type": float, "hidden": True, "help": "a worker's: when the parent's search ends (seconds since the epoch)"})


def check(c: ShipConfig) -> ShipConfig:
    """Refuse, in one line, settings that do not go together, before any work."""
    if c.dry_run and c.make_starts:
        raise UserError("--dry-run trains nothing and --make-starts trains the starts: choose one")
    return c
