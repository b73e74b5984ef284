"""What `mobilekd ship` searches, read from a configuration file (configs/ship.json): the student families, the
shapes each may take, the stage that makes a shape's start, and each family's search space as the flags of the
verb that trains a trial (`finetune` by default; `bilstm` for Tang et al.'s BiLSTM, made from the fine-tuned
teacher with no start stage).

A *candidate* is one shape of one family, priced by its Pixel estimate before any training (the caller's
`estimate`); only candidates within the latency budget enter the search. A *trial* draws a candidate and its
family's flags through Optuna's define-by-run API, so a flag of one family is never drawn for another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from mobilekd.errors import located
from mobilekd.fileio import REPO_ROOT, read_json
from mobilekd.models.config import ModelConfig

CONFIG = REPO_ROOT / "configs" / "ship.json"
BATCH_SIZE = 32  # every trial's batch: examples_seen / BATCH_SIZE is its --max-steps
MAX_EPOCHS = 10  # a trial sees at most this many epochs of the task's training examples
SEEN = "examples_seen"  # the space's one entry that is not a finetune flag
UP_TO = "up_to_examples"  # a flag drawn only for a task of at most this many training examples (its default above)
SCALE_ABOVE = "scale_above"  # examples_seen's: on a task of more training examples, each choice grows with its size
VERBS = ("finetune", "bilstm")  # what may train a family's trials
AT_WALL_LIMIT = ("cut", "finish")  # search.at_wall_limit: a trial under way at the wall limit: cut there, or finishes
BILSTM_SIZES = {"hidden_size": "h", "embedding_size": "e", "classifier_size": "c"}  # a BiLSTM shape's, and its name's


@dataclass(frozen=True)
class Candidate:
    """A family's shape: its name in the search (`family/shape`), its config (for the estimate; None for a
    BiLSTM), the argv of the `mobilekd` stage that makes its start in `start_dir` (() for none), its Pixel estimate,
    and the shape's placeholders (`shapes`)."""
    family: str
    shape: str
    config: ModelConfig | None
    start: tuple[str, ...]
    start_dir: Path
    estimate: dict
    values: dict = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return f"{self.family}/{self.shape}"


def load_space(path: Path = CONFIG) -> dict:
    """The configuration file, checked: a family without shapes, a start or a space is named here. A file may name
    a `base` (a path beside it) and give only what it changes (`merged`)."""
    config = read_with_base(Path(path))
    if not isinstance(config.get("families"), dict) or not config["families"]:
        raise located(path, "has no families")
    for name, family in config["families"].items():
        if verb(family) not in VERBS:
            raise located(path, f"family {name!r}: verb must be one of {', '.join(VERBS)}, not {verb(family)!r}")
        missing = [k for k in ("shapes", "space", *(["start"] if verb(family) == "finetune" else []))
                   if k not in family]
        if missing:
            raise located(path, f"family {name!r} lacks {', '.join(missing)}")
        sizes = family["shapes"].get("bilstm") if isinstance(family["shapes"], dict) else None
        if (verb(family) == "bilstm") != (sizes is not None):
            raise located(path, f"family {name!r}: the bilstm verb trains bilstm shapes, and only it does")
        if sizes is not None and not (isinstance(sizes, list) and sizes and all(
                isinstance(x, dict) and {"hidden_size", "embedding_size"} <= set(x) <= set(BILSTM_SIZES)
                and all(isinstance(v, int) and v >= 1 for v in x.values()) for x in sizes)):
            raise located(path, f"family {name!r}: each bilstm shape gives hidden_size and embedding_size (and "
                                f"classifier_size if it likes), whole numbers of at least 1")
        if sizes is not None and len({bilstm_name(x) for x in sizes}) < len(sizes):
            raise located(path, f"family {name!r}: a bilstm shape given twice")
        for flag, spec in family["space"].items():
            if not ("choices" in spec or {"low", "high"} <= set(spec)):
                raise located(path, f"family {name!r}: {flag} needs choices, or low and high")
            if UP_TO in spec and not (isinstance(spec[UP_TO], int) and spec[UP_TO] >= 1):
                raise located(path, f"family {name!r}: {flag}'s {UP_TO} must be a whole number of at least 1")
            if SCALE_ABOVE in spec and not (flag == SEEN and isinstance(spec[SCALE_ABOVE], int)
                                            and spec[SCALE_ABOVE] >= 1):
                raise located(path, f"family {name!r}: {SCALE_ABOVE} is {SEEN}'s, a whole number of at least 1")
    for key in ("trials", "rungs", "reduction_factor"):
        if not isinstance(config.get("search", {}).get(key), int) or config["search"][key] < 1:
            raise located(path, f"search.{key} must be a whole number of at least 1")
    if "at_wall_limit" not in config.get("search", {}) and Path(path) != CONFIG:  # a copy made before the setting
        print(f"{path}: no search.at_wall_limit; a trial under way at the wall limit is treated as {CONFIG} says")
        config["search"]["at_wall_limit"] = read_json(CONFIG)["search"]["at_wall_limit"]
    if config["search"].get("at_wall_limit") not in AT_WALL_LIMIT:
        raise located(path, f"search.at_wall_limit must be one of {', '.join(AT_WALL_LIMIT)}")
    if "teacher" not in config and Path(path) != CONFIG:  # a copy made before the section: the shipped one's
        print(f"{path}: no teacher section; the teacher is fine-tuned as {CONFIG} says")
        config["teacher"] = read_json(CONFIG)["teacher"]
    teacher = config.get("teacher")
    if not (isinstance(teacher, dict) and isinstance(teacher.get("lr"), list) and teacher["lr"]
            and all(isinstance(x, (int, float)) and x > 0 for x in teacher["lr"])):
        raise located(path, "teacher.lr must be a list of positive learning rates")
    for key in ("small_task", "evaluations_per_epoch"):
        if not isinstance(teacher.get(key), int) or teacher[key] < 1:
            raise located(path, f"teacher.{key} must be a whole number of at least 1")
    epochs = teacher.get("epochs")
    if not (isinstance(epochs, dict) and all(isinstance(epochs.get(k), (int, float)) and epochs[k] > 0
                                             for k in ("small", "large"))):
        raise located(path, "teacher.epochs must give small and large, each a positive number of epochs")
    return config


def read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """The file's settings written over those of the file it names as its `base` (a path beside it; that one's own
    base first), if it names one."""
    config = read_json(path)
    if "base" not in config:
        return config
    base, seen = path.parent / config.pop("base"), (*seen, path.resolve())
    if not base.is_file() or base.resolve() in seen:
        raise located(path, f"its base {base} is not another configuration file (missing, or a circle)")
    return merged(read_with_base(base, seen), config)


def merged(base: dict, changes: dict) -> dict:
    """`base` with `changes` written over it: a dictionary key by key, anything else (a list, a number) whole."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def verb(spec: dict) -> str:
    """The `mobilekd` verb that trains the family's trials."""
    return spec.get("verb", "finetune")


def shapes(family: str, spec: dict, teacher: ModelConfig) -> list[tuple[str, ModelConfig | None, dict]]:
    """(shape name, its config, its placeholders) for each shape of `family` a teacher of this config allows:
    `layers` x `ffn_share` of the teacher's own layers (fewer than it has), `preset`s, or `bilstm` sizes (the
    BiLSTM's flags; no ModelConfig: it is priced as the BiLSTM it is)."""
    from mobilekd.models.presets import get_preset

    s = spec["shapes"]
    if "bilstm" in s:
        return [(bilstm_name(sizes), None, dict(sizes)) for sizes in s["bilstm"]]
    if "preset" in s:
        return [(p, get_preset(p).config, {"preset": p}) for p in s["preset"]]
    found = []
    for layers in (n for n in s["layers"] if n < teacher.num_hidden_layers):
        for share in s.get("ffn_share", [1.0]):
            ffn = None if share >= 1 else int(round(teacher.intermediate_size * share / 64) * 64)
            config = teacher.replace(num_hidden_layers=layers, intermediate_size=ffn or teacher.intermediate_size)
            found.append((f"{layers}x{teacher.hidden_size}" + (f"-ffn{ffn}" if ffn else ""), config,
                          {"layers": layers, "ffn": ffn}))
    return found


def bilstm_name(sizes: dict) -> str:
    """A BiLSTM shape's name: h150-e64, with -c200 where it sets its classifier's width."""
    return "-".join(f"{BILSTM_SIZES[k]}{sizes[k]}" for k in BILSTM_SIZES if k in sizes)


def shape_flags(spec: dict, values: dict) -> list[str]:
    """A trial's flags that give its shape, where the verb takes them (the BiLSTM's sizes); [] where a start stage
    made the shape."""
    if verb(spec) != "bilstm":
        return []
    return [x for k, v in values.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def start_argv(spec: dict, teacher: Path, start: Path, values: dict) -> tuple[str, ...]:
    """The family's start stage with the shape's placeholders filled; a flag whose value is None is left out; ()
    for a family without one."""
    fill = {"teacher": str(teacher), "start": str(start), **values}
    argv = []
    for word in spec.get("start", []):
        value = word.format(**fill) if "{" in word else word
        if word.startswith("{") and fill.get(word.strip("{}")) is None:  # e.g. {ffn}: the FFN kept whole
            argv.pop()  # its flag too
            continue
        argv.append(value)
    return tuple(argv)


def needs_head(spec: dict, values: dict) -> bool:
    """Whether this shape's start needs the teacher's masked-LM head."""
    return bool(spec.get("needs_mlm_head")) or values.get("ffn") is not None


def training_steps(examples_seen: int, train_examples: int, scale_above: int | None = None) -> int:
    """A trial's --max-steps: `examples_seen` examples at BATCH_SIZE, at most MAX_EPOCHS epochs; on a task of more
    than `scale_above` training examples, `examples_seen` times train_examples / scale_above (the epochs a task of
    `scale_above` examples sees: 20,000, 40,000 and 80,000 examples are 1, 2 and 4 epochs of SST-2's 67,349 at
    20,000, where unscaled they were 0.3 to 1.2 epochs and its best trials were its longest)."""
    if scale_above and train_examples > scale_above:
        examples_seen = examples_seen * train_examples / scale_above
    return max(1, math.ceil(min(examples_seen, MAX_EPOCHS * train_examples) / BATCH_SIZE))


def suggest(trial, family: str, spec: dict, teacher: Path, has_head: bool,
            train_examples: int) -> tuple[list[str], dict]:
    """The flags of one trial of `family` (its fixed ones, then those drawn from its space) for its verb, and the
    drawn values by name. Over TinyBERT's augmented set only the teacher's soft targets teach (--alpha 0): its
    augmented examples carry no label of their own (Jiao et al. 2020, Section 3.1; quality's -kd-aug recipes). The
    BiLSTM's --augment is Tang et al.'s transfer set (no masked LM; its new samples labelled by the teacher). A flag
    with `up_to_examples` is drawn only for a task of at most that many training examples: Jiao et al. augment every
    GLUE task, SST-2 included, on GPUs; on a CPU the set would cost more than the search it serves."""
    drawn = {}
    tinybert_set = verb(spec) == "finetune"  # TinyBERT's augmentation, from the teacher's masked LM
    for flag, s in sorted(spec["space"].items(), key=lambda kv: kv[0] != "--augment"):  # --alpha depends on it
        if flag == "--augment" and tinybert_set and not has_head:
            continue  # augmentation draws its words from the teacher's masked LM
        if train_examples > s.get(UP_TO, train_examples):
            continue  # a larger task: the flag keeps its default (configs/ship.json says why for --augment)
        if flag == "--alpha" and tinybert_set and drawn.get("--augment"):
            drawn[flag] = 0.0
            continue
        name = f"{family}:{flag.lstrip('-')}"
        drawn[flag] = (trial.suggest_categorical(name, s["choices"]) if "choices" in s else
                       trial.suggest_float(name, s["low"], s["high"], log=s.get("log", False)))
    flags = [str(x) for k, v in spec.get("finetune", {}).items() for x in (k, v)]
    for flag, value in drawn.items():
        if flag == SEEN:
            steps = training_steps(value, train_examples, spec["space"][SEEN].get(SCALE_ABOVE))
            flags += ["--max-steps", str(steps), "--batch-size", str(BATCH_SIZE)]
        elif flag == "--augment":
            flags += ["--augment", str(value), *(["--augment-model", str(teacher)] if tinybert_set else [])] \
                if value else []
        else:
            flags += [flag, f"{value:.3g}" if isinstance(value, float) else str(value)]
    return flags, drawn
