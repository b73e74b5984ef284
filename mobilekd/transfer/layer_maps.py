"""Which teacher layer each student layer learns from, or starts from, by the source documents' rules. Layers are
0-based block indices; N is the teacher's depth, M the student's.

    uniform   TinyBERT (Jiao et al. 2020, Section 3.1, g(m) = m * N / M; general_distill.py, `main`:
              `teacher_atts[i * layers_per_block + layers_per_block - 1]`): student layer l reads teacher layer
              (l + 1) * N / M - 1. The official code asserts that M divides N; here a fraction rounds half up
              (6 -> 4: teacher layers 1, 2, 4, 5), so that TinyBERT_4's depth fits a 6-layer teacher
    spread    DistilBERT's initialisation (scripts/extract_distilbert.py: teacher layers [0, 2, 4, 7, 9, 11] for
              12 -> 6): M layers spread evenly from the first to the last, round(l * (N - 1) / (M - 1))
    first     BERT-PKD's initialisation (Sun et al. 2019, Section 4.1; the student loads the pre-trained
              checkpoint's first M layers, `load_model(..., mode='student')`): layers 0 .. M - 1
    pkd_skip  PKD-Skip's patience layers (Section 3.2; `--fc_layer_idx 1,3,5,7,9` for 12 -> 6 in
              src/argument_parser.py): for student layers 0 .. M - 2, teacher layers (l + 1) * N / M - 1
    pkd_last  PKD-Last's: for student layers 0 .. M - 2, the teacher's layers N - M .. N - 2 (12 -> 3: 9, 10)

The patience maps leave out the student's last layer: its knowledge comes through the logits
(`student_patience = torch.stack(full_output[:-1])` in NLI_KD_training.py).
"""

from __future__ import annotations

from mobilekd.errors import UserError

RULES = ("uniform", "spread", "first", "pkd_skip", "pkd_last")


def _multiple(rule: str, n: int, m: int) -> None:
    if n % m:
        raise UserError(f"layer map {rule} needs the teacher's depth ({n}) to be a multiple of the student's ({m})")


def layer_map(rule: str, teacher_depth: int, student_depth: int) -> list[int]:
    """The teacher layer for each student layer (for the patience rules: each student layer but the last)."""
    n, m = teacher_depth, student_depth
    if not 1 <= m <= n:
        raise UserError(f"layer map {rule}: a {m}-layer student cannot map onto a {n}-layer teacher")
    if rule == "uniform":
        return [int((l + 1) * n / m + 0.5) - 1 for l in range(m)]
    if rule == "spread":
        return [int(l * (n - 1) / (m - 1) + 0.5) for l in range(m)] if m > 1 else [0]
    if rule == "first":
        return list(range(m))
    if rule == "pkd_skip":
        _multiple(rule, n, m)
        return [(l + 1) * n // m - 1 for l in range(m - 1)]
    if rule == "pkd_last":
        return list(range(n - m, n - 1))
    raise UserError(f"unknown layer map {rule!r}: choose from {', '.join(RULES)}")


def map_problem(mapping: list[int], teacher_depth: int, student_depth: int) -> str | None:
    """Why `mapping` cannot pair a `student_depth`-layer student with a `teacher_depth`-layer teacher; None if it
    can (one teacher layer in range for each student layer)."""
    if len(mapping) != student_depth or not all(0 <= t < teacher_depth for t in mapping):
        return f"--layer-map needs {student_depth} teacher layers in 0..{teacher_depth - 1}, got {mapping}"
    return None


def parse_layer_map(text: str | None, teacher_depth: int, student_depth: int) -> list[int] | None:
    """A --layer-map flag: comma-separated teacher layers, or the name of a rule above."""
    if not text:
        return None
    if text in RULES:
        return layer_map(text, teacher_depth, student_depth)
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--layer-map must be comma-separated integers or one of {', '.join(RULES)}, "
                        f"got {text!r}") from None
