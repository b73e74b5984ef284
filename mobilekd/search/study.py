"""The search of `mobilekd ship`: an Optuna study whose trials are `mobilekd finetune` runs of candidate students,
each scored on the validation split carved from the training data (dev is never read: --skip-dev), cut short by
successive halving.

- Sampler: Optuna's TPE (Bergstra et al. 2011), seeded by --seed. A trial draws its family first, then one of
  that family's shapes, then the family's flags (define-by-run: a family's parameters are drawn only in its trials),
  so each family has the same share of the random start whatever its number of shapes (drawn as one parameter, a
  family of five shapes had five chances in six at each random draw: STS-B's seed 2 never tried TinyBERT's student
  in 13 trials).
- Multi-fidelity: Optuna's `SuccessiveHalvingPruner` (asynchronous successive halving, Li et al. 2020, "A System for
  Massively Parallel Hyperparameter Tuning", Algorithm 2; optuna/pruners/_successive_halving.py), run within each
  family (`FamilyHalving`). A trial evaluates on validation `rungs` times; its i-th evaluation is reported at
  resource i, and a trial not in the top 1/reduction_factor of its family's trials that reached rung i is stopped
  there. The fidelity is the share of a trial's own training done, so the short runs are the first parts of longer
  ones (with their learning rate not yet decayed). Within a family, not across: families learn along curves of
  other shapes (a student started from a task-agnostic distillation is ahead at its first evaluation; the
  teacher's own layers over an augmented set can start behind and pass it: STS-B's seed 2 chose one at 0.408,
  0.685, 0.719, 0.727 on validation, and 0.408 is below the top third of seed 0's first evaluations, where
  TinyBERT's trials stood at 0.43-0.62), which breaks the premise successive halving rests on, that early ranks
  predict late ones. The families meet only in the choice, among complete trials.
- The wall limit (what `--hours` leaves the search, or `--search-hours`: ship's `search_left`): no trial starts after
  it, and where configs/ship.json's `search.at_wall_limit` is "cut", a trial still running at it is stopped there
  (pruned, its `cut` attribute "wall limit") once the study holds a complete trial to choose, so that a search ends
  within about one validation interval of the limit instead of waiting on trials drawn just before it (MRPC's
  TinyBERT trials with 12 augmented copies ran 29 minutes past a 0.75-hour limit, docs/ship_runs.md). Until a trial
  is complete, nothing is cut, and ship's process goes on drawing trials past the limit until one is (`search`'s
  until_complete): a search always has a choice. "finish" lets every trial under way finish (Optuna's `timeout`, as
  before the setting).
- Storage: a journal file (`optuna.storages.JournalStorage` over `JournalFileBackend`), which several processes, on
  this machine or on machines sharing the file system, read and append to at once: the study resumes from it,
  and `--workers N` runs N processes over it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from pathlib import Path

import optuna
from filelock import FileLock

from mobilekd import launch
from mobilekd.errors import UserError
from mobilekd.fileio import read_json
from mobilekd.finetune.evaluation import chosen_by
from mobilekd.host import identity
from mobilekd.search.space import Candidate, shape_flags, suggest, verb

STUDY = "ship"
DRAW = "family, then shape; halving within a family"  # in plan.json: a journal drawn otherwise is not resumed
JOURNAL = "search.journal"  # in OUT
CUT = "wall limit"  # a trial's `cut` attribute where the wall limit stopped it
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
POLL_SECONDS = 1.0


class TrialFailed(Exception):
    """A trial's run exited with an error: the trial is recorded as failed and the search goes on."""


def open_study(out: Path, seed: int, reduction_factor: int, worker: int = 0, startup: int = 4) -> optuna.Study:
    """The study in OUT/search.journal, created or resumed, as worker `worker` sees it. TPE draws its first
    `startup` trials at random, then from its density model of the trials so far. Each worker's sampler has its
    own seed, moved on by the trials the study already holds (the same seed would draw the same trials in every
    worker, and on every resume), and, while other trials run, counts them at their worst value (TPE's constant
    liar, optuna/samplers/_tpe/sampler.py), so that workers do not draw the same region at once."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / JOURNAL)))
    held = _trials_held(storage)
    return optuna.create_study(study_name=STUDY, storage=storage, direction="maximize", load_if_exists=True,
                               sampler=optuna.samplers.TPESampler(seed=seed + 1000 * worker + 100_000 * held,
                                                                  constant_liar=True, n_startup_trials=startup),
                               pruner=FamilyHalving(reduction_factor))


class FamilyHalving(optuna.pruners.BasePruner):
    """Optuna's asynchronous successive halving (min_resource 1) with each trial compared only with the trials of
    its own family (its `family` user attribute): the halving itself is Optuna's, given a view of the study that
    holds that family's trials."""

    def __init__(self, reduction_factor: int):
        self.halving = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=reduction_factor)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.halving.prune(_FamilyView(study, trial.user_attrs.get("family")), trial)


class _FamilyView:
    """What SuccessiveHalvingPruner.prune reads of a study (its trials, direction and storage), with the trials
    narrowed to one family."""

    def __init__(self, study: optuna.Study, family: str | None):
        self.study, self.family = study, family
        self.direction, self._storage = study.direction, study._storage  # the pruner writes each rung's value there

    def get_trials(self, deepcopy: bool = True, states=None) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=deepcopy, states=states)
                if t.user_attrs.get("family") == self.family]


def _trials_held(storage) -> int:
    """How many trials the study in `storage` holds (0 before it exists)."""
    try:
        return len(storage.get_all_trials(storage.get_study_id_from_name(STUDY), deepcopy=False))
    except KeyError:
        return 0


INTERRUPTED = "interrupted"  # a user attribute: the trial was stopped by its search's interruption, not by its run


def fail_stale(study: optuna.Study) -> int:
    """Mark the trials an interrupted search left running as failed, and as INTERRUPTED (call only while no worker
    runs)."""
    stale = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    for t in stale:
        study._storage.set_trial_user_attr(t._trial_id, INTERRUPTED, True)
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return len(stale)


def counted(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The finished trials that count toward --trials: complete, pruned, cut, or failed by their own run; not the
    ones an interruption of the search stopped (Ctrl-C, a stopped worker), which `--trials 12` would otherwise
    lose one by one, and which trained nothing a search may choose."""
    return [t for t in study.get_trials(deepcopy=False, states=FINISHED) if not t.user_attrs.get(INTERRUPTED)]


def finished(study: optuna.Study) -> int:
    return len(counted(study))


class Objective:
    """One trial: draw a family, one of its shapes and its flags, make the candidate's start once (shared, under a
    lock), run its family's verb (`mobilekd finetune` on the start; `mobilekd bilstm` from the fine-tuned teacher)
    and report each validation evaluation to the pruner. `verb_flags`: flags one verb takes beyond the task's.
    `cut_at`: the wall limit (seconds since the epoch) past which a trial under way is cut (`run_trial`), or None."""

    def __init__(self, out: Path, candidates: list[Candidate], families: dict, teacher: Path, fine_tuned: Path,
                 task_flags: list[str], has_head: bool, train_examples: int, rungs: int,
                 verb_flags: dict[str, list[str]] | None = None, cut_at: float | None = None):
        self.out, self.candidates, self.families = out, {c.name: c for c in candidates}, families
        self.shapes = {}  # family -> its candidates' shapes, in the budget
        for c in candidates:
            self.shapes.setdefault(c.family, []).append(c.shape)
        self.teacher, self.fine_tuned, self.task_flags = teacher, fine_tuned, task_flags
        self.has_head, self.train_examples, self.rungs = has_head, train_examples, rungs
        self.verb_flags = verb_flags or {}
        self.cut_at = cut_at

    def draw(self, trial: optuna.Trial) -> Candidate:
        """The trial's candidate: its family, then one of that family's shapes."""
        family = trial.suggest_categorical("family", list(self.shapes))
        return self.candidates[f"{family}/{trial.suggest_categorical(f'{family}:shape', self.shapes[family])}"]

    def __call__(self, trial: optuna.Trial) -> float:
        try:
            return self.run(trial)
        except KeyboardInterrupt:  # Optuna marks it failed: it does not count toward --trials (`counted`)
            trial.set_user_attr(INTERRUPTED, True)
            raise

    def run(self, trial: optuna.Trial) -> float:
        candidate = self.draw(trial)
        spec = self.families[candidate.family]
        flags, _ = suggest(trial, candidate.family, spec, self.teacher, self.has_head, self.train_examples)
        flags = [*shape_flags(spec, candidate.values), *flags]  # the BiLSTM's sizes: its recipe names its shape
        steps = int(flags[flags.index("--max-steps") + 1])
        run_dir = self.out / "trials" / f"{trial.number:04d}"
        trial.set_user_attr("family", candidate.family)
        trial.set_user_attr("verb", verb(spec))
        trial.set_user_attr("shape", candidate.shape)
        trial.set_user_attr("pixel_ms_est", candidate.estimate["ms"])
        trial.set_user_attr("params_m", candidate.estimate["params_m"])
        trial.set_user_attr("flags", flags)
        trial.set_user_attr("dir", str(run_dir))
        trial.set_user_attr("host", identity()["id"])
        trial.set_user_attr("worker", os.getpid())
        start = time.time()
        if verb(spec) == "bilstm":  # made from the fine-tuned teacher itself: no start stage
            trial.set_user_attr("start", str(self.fine_tuned))
            head = ["bilstm", *self.task_flags, *self.verb_flags.get("bilstm", []), "--teacher", str(self.fine_tuned)]
        else:
            try:
                start_dir = make_start(candidate)
            except TrialFailed as err:
                trial.set_user_attr("error", str(err)[:300])
                trial.set_user_attr("wall_seconds", round(time.time() - start, 1))
                raise
            trial.set_user_attr("start", str(start_dir))
            head = ["finetune", *self.task_flags, *self.verb_flags.get("finetune", []), "--model", str(start_dir),
                    "--teacher", str(self.fine_tuned)]
        argv = [*head, *flags, "--eval-every", str(max(1, -(-steps // self.rungs))), "--select-on", "validation",
                "--skip-dev", "--out", str(run_dir)]
        try:
            return run_trial(trial, argv, run_dir, self.rungs, self.cut_at)
        finally:
            trial.set_user_attr("wall_seconds", round(time.time() - start, 1))


def make_start(candidate: Candidate) -> Path:
    """The candidate's start directory, made by its stage once (other workers wait on the lock): the stage writes
    into START.partial (`Candidate.start` names it), renamed to START when it succeeds, so an interrupted stage
    leaves no directory that looks finished."""
    start = candidate.start_dir
    partial = start.with_name(start.name + ".partial")
    start.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(start) + ".lock"):
        if not start.is_dir():
            shutil.rmtree(partial, ignore_errors=True)  # an interrupted stage's: begun again
            log = start.with_name(start.name + ".log")  # its progress, to follow a task-agnostic stage's minutes
            code = launch.run(candidate.start, log)
            if code != 0 or not (partial / "model.safetensors").is_file():
                tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
                raise TrialFailed(f"the start of {candidate.name} failed ({log}): {tail[0][:300]}")
            os.replace(partial, start)
    return start


def run_trial(trial: optuna.Trial, argv: list[str], run_dir: Path, rungs: int, cut_at: float | None = None) -> float:
    """Run one trial's `mobilekd` run (finetune or bilstm), reporting its validation evaluations; returns the best
    (the checkpoint it keeps), or stops it when the pruner says so (never at its last evaluation: the run is then
    trained), or when the clock passes `cut_at` while the study holds a complete trial (the wall limit)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    proc = launch.Run(argv, run_dir / "trial.log")
    reported = 0
    try:
        while True:
            done = proc.poll() is not None
            for value in validation_values(run_dir / "history.json")[reported:]:
                reported += 1
                trial.report(value, reported)
                if not done and reported < rungs and trial.should_prune():
                    proc.terminate()
                    proc.wait()
                    raise optuna.TrialPruned(f"pruned at evaluation {reported}")
            if done:
                break
            if (cut_at is not None and time.time() > cut_at and reported < rungs and proc.poll() is None
                    and has_complete(trial.study)):  # as the pruner: never after its last evaluation
                proc.terminate()
                proc.wait()
                trial.set_user_attr("cut", CUT)
                raise optuna.TrialPruned(f"cut at the search's wall limit after {reported} evaluation(s)")
            time.sleep(POLL_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        tail = (run_dir / "trial.log").read_text().strip().splitlines()[-1:] or ["no output"]
        trial.set_user_attr("error", tail[0][:300])
        raise TrialFailed(tail[0])
    result = read_json(run_dir / "results.json")
    metric, score = chosen_by(result)  # MRPC's: the mean of F1 and accuracy, as its run chose its checkpoint
    trial.set_user_attr("metric", metric)
    trial.set_user_attr("best_step", result["best_step"])
    return float(score)


def has_complete(study: optuna.Study) -> bool:
    """Whether any worker has completed a trial: one the search can choose."""
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def validation_values(history: Path) -> list[float]:
    """The validation scores of a run's evaluations so far (the score it chooses its checkpoint by: `score`, or its
    task's first metric in a history written before that field), in order."""
    try:
        entries = json.loads(history.read_text()) if history.is_file() else []
    except json.JSONDecodeError:  # written atomically, but read between replace and rename on some filesystems
        return []
    values = []
    for e in entries:
        metrics = e.get("metrics", {}).get("validation")
        if metrics:
            values.append(float(e["score"] if "score" in e else next(iter(metrics.values()))))
    return values


def search(study: optuna.Study, objective: Objective, trials: int, timeout: float | None, progress=None,
           until_complete: bool = False) -> None:
    """Run trials in this process until `trials` have finished in the study (any worker's count) or `timeout`
    seconds have passed (no trial starts after it; one under way finishes unless the objective's `cut_at` cuts it).
    `until_complete` (one process of a search: ship's parent): where the time is up and no trial is complete (each
    failed, or was pruned), go on drawing, one at a time, until one is or `trials` have finished, so that the search
    has a student to choose."""
    def stop(s, _):  # optuna's MaxTrialsCallback, counting as `counted` does
        if finished(s) >= trials or (late and has_complete(s)):
            s.stop()

    late = False
    callbacks = [stop] + ([lambda s, t: progress(finished(s))] if progress else [])
    if finished(study) >= trials:
        return
    study.optimize(objective, timeout=timeout, callbacks=callbacks, catch=(TrialFailed,))
    if until_complete and not has_complete(study) and finished(study) < trials:
        late = True
        study.optimize(objective, callbacks=callbacks, catch=(TrialFailed,))


def wall_seconds(study: optuna.Study) -> float:
    """The search's wall time: the time at least one trial was running, every worker's and every resume's (the union
    of the finished trials' start-to-end spans), so that the idle time between an interrupted search and its resume
    is not counted."""
    spans = sorted(filter(None, map(_span, study.get_trials(deepcopy=False, states=FINISHED))))
    total, end = 0.0, None
    for start, stop in spans:
        if end is None or start > end:  # a gap: no trial ran
            total, end = total + (stop - start).total_seconds(), stop
        elif stop > end:  # overlapping the one before (another worker's)
            total, end = total + (stop - end).total_seconds(), stop
    return total


def _span(trial: optuna.trial.FrozenTrial):
    """When a finished trial ran: its start to its end; for one an interruption stopped (`fail_stale` ends it when
    the search resumes, hours later perhaps), to the last change in its run folder, or None where it has none."""
    if not trial.user_attrs.get(INTERRUPTED):
        return trial.datetime_start, trial.datetime_complete
    folder = Path(trial.user_attrs.get("dir", ""))
    try:
        changed = [p.stat().st_mtime for p in folder.rglob("*")] if trial.user_attrs.get("dir") else []
    except OSError:  # a file gone while read: its folder's own time
        changed = [folder.stat().st_mtime] if folder.is_dir() else []
    if not changed:
        return None
    last = datetime.datetime.fromtimestamp(max(changed), tz=trial.datetime_start.tzinfo)
    return trial.datetime_start, max(trial.datetime_start, last)


def ended(study: optuna.Study) -> float:
    """When the search's last trial ended (seconds since the epoch; an interrupted one, `_span`)."""
    return max(span[1] for span in map(_span, study.get_trials(deepcopy=False, states=FINISHED)) if span).timestamp()


def chosen_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """The complete trial with the best validation score."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise UserError("the search finished no trial (every one failed or was cut: see OUT/trials/*/trial.log)")
    return max(complete, key=lambda t: t.value)


def trial_rows(study: optuna.Study, chosen: int | None) -> list[dict]:
    """One row per finished trial: its candidate, flags, validation score, state, Pixel estimate, seconds, host."""
    rows = []
    for t in counted(study):
        a = t.user_attrs
        values = list(t.intermediate_values.values())
        rows.append({"trial": t.number, "family": a.get("family"), "shape": a.get("shape"),
                     "recipe": " ".join(a.get("flags", [])), "state": t.state.name.lower(),
                     "val_value": t.value if t.value is not None else (values[-1] if values else None),
                     "evaluations": len(values), "pixel4_ms_est": a.get("pixel_ms_est"),
                     "params_m": a.get("params_m"), "wall_seconds": a.get("wall_seconds"), "host": a.get("host"),
                     "chosen": t.number == chosen, **({"error": a["error"]} if "error" in a else {}),
                     **({"cut": a["cut"]} if "cut" in a else {})})
    return rows
