"""The fast BERT WordPiece tokenizer over a vocab file (the shipped bert-base-uncased vocab by default)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, BertTokenizerFast, PreTrainedTokenizerBase

from mobilekd.errors import located
from mobilekd.fileio import REPO_ROOT, read_json, read_lines

DEFAULT_VOCAB = REPO_ROOT / "data" / "vocab" / "vocab.txt"
_PROBE = "the quick brown fox jumps over the lazy dog"


def load_tokenizer(path=DEFAULT_VOCAB, lowercase: bool = True) -> PreTrainedTokenizerBase:
    """A vocab.txt file, or a directory holding tokenizer files (a model directory we or transformers wrote).

    transformers 5 silently ignores `vocab_file=` and maps every token to [UNK], so the vocab is passed as a
    dict, and the result is checked on a probe sentence.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "vocab.txt").is_file():  # the WordPiece list itself; casing from tokenizer_config.json
            settings = path / "tokenizer_config.json"
            lower = read_json(settings).get("do_lower_case", lowercase) if settings.is_file() else lowercase
            return load_tokenizer(path / "vocab.txt", lower)
        if not (path / "tokenizer.json").is_file():
            raise located(path, "holds no tokenizer (tokenizer.json or vocab.txt)")
        tokenizer = AutoTokenizer.from_pretrained(path)
    else:
        vocab = {}
        for number, line in read_lines(path):
            token = line.strip()
            if not token:
                raise located(path, "empty vocabulary entry", number)
            vocab.setdefault(token, number - 1)
        missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in vocab]
        if missing:
            raise located(path, f"vocabulary lacks the special tokens {missing}")
        tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=lowercase)
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    if all(i == tokenizer.unk_token_id for i in ids):
        raise located(path, "tokenizer maps every word of an English probe sentence to [UNK]")
    return tokenizer


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, out_dir) -> None:
    """tokenizer.json + tokenizer_config.json, and, for a WordPiece tokenizer, vocab.txt for tools (TFLite
    metadata) that want the list. Another kind (a RoBERTa teacher's byte-level BPE) gets none: `load_tokenizer`
    would read a vocab.txt as WordPiece."""
    out_dir = Path(out_dir)
    tokenizer.save_pretrained(out_dir)
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)  # a slow one writes its own files
    if type(model).__name__ != "WordPiece":
        return
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    (out_dir / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")

