"""The inputs and signatures of an exported file, which the converter (`litert`), the metadata writer
(`metadata`) and every reader of the files name alike: the three BERT inputs, and a length-aware file's signatures
(one per input length, the longest the default one MediaPipe runs)."""

from __future__ import annotations

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


DEFAULT_SIGNATURE = "serving_default"  # a one-signature file's, and a length-aware file's longest (--max-len)


def length_signature(n: int) -> str:
    """The signature of input length `n` in a length-aware file (`mobilekd export --lengths`): the same weights at a
    shorter static length, which an app picks when the text fits; the file's longest length is DEFAULT_SIGNATURE,
    the one MediaPipe's and the Task Library's BERT tasks run."""
    return f"seq_{n}"


def signature_length(name: str) -> int | None:
    """The input length of a length-aware file's signature `name` (`length_signature`'s inverse), else None."""
    prefix, _, n = name.partition("_")
    return int(n) if prefix == "seq" and n.isdigit() else None
