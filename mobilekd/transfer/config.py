"""`mobilekd distill`'s own settings, one dataclass (the plan's are `PlanSettings` and `TransferWeights`, the training
loop's `TrainConfig`): each field with a help is a flag (`mobilekd.flags.add_flags`), its default written here and
nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field

from mobilekd.train.common import EVAL_EXAMPLES, SHIPPED_CORPORA
from mobilekd.transfer.inherit import INHERIT_EXAMPLES
from mobilekd.transfer.layer_maps import RULES
from mobilekd.transfer.strategies import STRATEGIES, STRATEGY


@dataclass
class DistillConfig:
    teacher: str = field(default="runs/teacher", metadata={"help": "teacher directory"})
    student: str = field(default="mobilebert_h384", metadata={
        "help": "student preset (see `mobilekd models`), or a model directory to start from (e.g. `mobilekd init "
                "TEACHER OUT --layers spread:3`)", "default_help": "mobilebert_h384, the demo teacher's student"})
    strategy: str = field(default=STRATEGY, metadata={
        "choices": list(STRATEGIES), "default_help": f"{STRATEGY}; mobilekd.transfer.strategies",
        "help": "; ".join(f"{k}: {v.help}" for k, v in STRATEGIES.items())})
    masked_score: float | None = field(default=None, metadata={
        "type": float, "default_help": "none: additive masking",
        "help": "the student masks padding as the official TF1 code does: its attention scores there become this "
                "value (-6 officially; quantization friendly) instead of dropping by 10000; such a student is saved "
                "as model_type ib_bert, since transformers masks additively"})
    layer_map: str | None = field(default=None, metadata={
        "default_help": "student layer l reads teacher layer l; required where depths differ, refused by the "
                        "strategies that match the last layers alone (distilbert, minilm)",
        "help": "teacher layer (0-based) for each student layer, comma-separated, when depths differ, e.g. 1,3,5,7 "
                f"for a 4-layer student of an 8-layer teacher, or a rule ({', '.join(RULES)}; uniform is TinyBERT's: "
                "student layer l reads teacher layer (l + 1) * teacher depth / student depth - 1; see "
                "mobilekd.transfer.layer_maps)"})
    inherit: bool = field(default=False, metadata={
        "help": "start a MobileBERT-shaped preset's blocks from the teacher's weights through its bottlenecks (as "
                "`mobilekd init PRESET OUT --from-teacher TEACHER`; mobilekd/transfer/inherit.py), fitted over "
                "--inherit-examples training examples, instead of from random weights"})
    inherit_examples: int = field(default=INHERIT_EXAMPLES, metadata={
        "min": 1, "metavar": "N", "help": "with --inherit: the examples the start is fitted over"})
    compare: str | None = field(default=None, metadata={
        "default_help": "none", "help": "comma-separated strategies to run at equal total steps, e.g. akt,jkt,pkt; "
                                        "add 'scratch' for the student trained without a teacher"})
    corpus: list[str] = field(default_factory=lambda: list(SHIPPED_CORPORA), metadata={
        "nargs": "+", "help": "pre-training text", "default_help": "the shipped corpora"})
    eval_examples: int = field(default=EVAL_EXAMPLES, metadata={"min": 1, "help": "held-out examples to evaluate"})
