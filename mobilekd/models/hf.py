"""Model directories in transformers' `save_pretrained` layout: config.json, model.safetensors, tokenizer files.

A model that transformers' MobileBERT computes exactly (`ModelConfig.hf_compatible`: `mobilebert`,
`mobilebert_tiny`, `demo_student` and the h384 presets) is labelled `model_type: "mobilebert"` with its head's
architecture and loads into `AutoModelForPreTraining` / `...ForSequenceClassification` / `...ForQuestionAnswering`
as is, with our logits (tests/test_hf_roundtrip.py): our parameter names are theirs, the MLM decoder is saved tied
(its weight is the word embedding, its bias `cls.predictions.bias`). Any other model (the IB-BERT teachers, BERT
layouts, `mobilebert_no_opt`'s 1e-12 LayerNorms, the lift at equal widths of students made before `mobilebert_h384`
dropped it) is saved the same way under `model_type: "ib_bert"`, which transformers refuses by name instead of
loading it into a model that computes something else; `mobilekd_transformers_note` in its config.json says why in
one line. A model of BERT's own layout (`ModelConfig.bert_incompatibility` is None: a user's BERT teacher, its layer
subsets, narrowed FFNs, TinyBERT's shapes) is saved as what it is, `model_type: "bert"` with transformers' BERT
names (`bert.` for our `mobilebert.`), and loads into `AutoModelFor...` as a `BertFor...` with our logits.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from mobilekd.errors import located
from mobilekd.fileio import atomic_path, read_json, write_json
from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import HEADS, head_of, head_of_architectures


# The config.json key saying, in a model transformers cannot compute, why (ModelConfig.hf_incompatibility)
TRANSFORMERS_NOTE = "mobilekd_transformers_note"


def saved_as(config: ModelConfig, refused: str | None = None) -> str:
    """The model_type a model is saved under: "mobilebert" where transformers' MobileBERT computes it, "bert" for
    BERT's own layout, else "ib_bert" (refused by transformers; so is any model `refused` names a reason for)."""
    if refused is not None:
        return "ib_bert"
    if config.bert_incompatibility is None:  # BERT's own layout, even where transformers' MobileBERT computes it too
        return "bert"
    return "mobilebert" if config.hf_compatible else "ib_bert"


def config_json(config: ModelConfig, head: str, refused: str | None = None) -> dict:
    """The config.json of a model of `config` with `head` (`refused`: why transformers must not load it, where
    its config alone would let it, e.g. a multi-task model's encoder)."""
    d = config.to_dict()
    reason, d["model_type"] = refused or config.hf_incompatibility, saved_as(config, refused)
    architecture = HEADS[head].hf_architecture
    d["architectures"] = [{"mobilebert": architecture, "bert": "Bert" + architecture.removeprefix("MobileBert"),
                           "ib_bert": "IBBert"}[d["model_type"]]]
    if d["model_type"] == "ib_bert":
        d[TRANSFORMERS_NOTE] = (f"not a transformers MobileBERT: {reason}" + ("" if refused else
                                f"; nor a BERT: {config.bert_incompatibility}") +
                                "; load it with mobilekd.models.hf.load_pretrained")
    d["mobilekd_head"] = head
    d["tie_word_embeddings"] = HEADS[head].tied
    if config.id2label:
        d["label2id"] = {v: int(k) for k, v in config.id2label.items()}
    else:  # transformers reads an empty id2label as zero labels; its default (2) is what a QA head needs
        del d["id2label"]
    if d["problem_type"] is None:
        del d["problem_type"]
    return d


def save_weights(model: torch.nn.Module, out_dir, tokenizer=None, extra: dict | None = None,
                 encoder: str = "mobilebert") -> Path:
    """Write model.safetensors (atomically) and the tokenizer files when given, into `out_dir` (made if missing).
    A distillation's `projections` submodule (the student's side of its matches, trained beside it) is left out:
    it is never part of a saved model. `extra`: tensors saved beside the state dict; `encoder`: the name the
    encoder's tensors are saved under (transformers' BERT calls it `bert`)."""
    from mobilekd.data.tokenizer import save_tokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {(encoder + k.removeprefix("mobilebert") if k.startswith("mobilebert.") else k):
             v.detach().contiguous().cpu() for k, v in model.state_dict().items() if not k.startswith("projections.")}
    state.update(extra or {})
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    if tokenizer is not None:
        save_tokenizer(tokenizer, out_dir)
    return out_dir


def transformers_extras(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Tensors transformers' MobileBERT (or BERT) expects that our model has none of: at embedding_size == hidden_size
    its `MobileBertLMPredictionHead.dense` is an empty (0, vocab) matrix (ours: no module), which it would
    report missing from the file; the embeddings' dense lift, which it builds but applies only with the trigram
    or a narrower embedding (at mobilebert_h384's equal widths: an identity in its place); and an untied
    decoder's bias, which transformers ties to `cls.predictions.bias` only while the decoder is tied. Our loader
    ignores them."""
    config = model.config
    state = model.state_dict()
    extras = {}
    if (saved_as(config) == "mobilebert" and "cls.predictions.bias" in state and "cls.predictions.dense.weight" not in state
            and config.hidden_size == config.embedding_size):
        extras["cls.predictions.dense.weight"] = torch.zeros(0, config.vocab_size)
    if saved_as(config) == "mobilebert" and "mobilebert.embeddings.embedding_transformation.weight" not in state:
        # transformers builds the embeddings' lift even where it never applies it (equal widths, no trigram:
        # mobilebert_h384); an identity fills its place, so that nothing loads at a random initialisation
        width = config.embedding_size * (3 if config.trigram_input else 1)
        extras["mobilebert.embeddings.embedding_transformation.weight"] = torch.eye(config.hidden_size, width)
        extras["mobilebert.embeddings.embedding_transformation.bias"] = torch.zeros(config.hidden_size)
    if saved_as(config) != "ib_bert" and "cls.predictions.decoder.weight" in state:  # an untied decoder (C-MLM's):
        extras["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()  # where transformers reads it
    return extras


def save_pretrained(model: torch.nn.Module, out_dir, tokenizer=None, head: str | None = None,
                    refused: str | None = None) -> Path:
    """`save_weights`, then config.json (atomically); `refused`: see `config_json`."""
    out_dir = save_weights(model, out_dir, tokenizer, transformers_extras(model),
                           encoder="bert" if saved_as(model.config, refused) == "bert" else "mobilebert")
    write_json(out_dir / "config.json", config_json(model.config, head or head_of(model), refused))
    return out_dir


def bert_as_mobilebert(d: dict) -> dict:
    """A transformers BERT config as the equivalent MobileBERT-family config (no bottleneck, one FFN,
    LayerNorm, embedding width = hidden width): BERT is the family member without MobileBERT's changes."""
    return {**d, "embedding_size": d.get("hidden_size", 768), "trigram_input": False, "use_bottleneck": False,
            "embedding_transformation": False,
            "intra_bottleneck_size": d.get("hidden_size", 768), "key_query_shared_bottleneck": False,
            "use_bottleneck_attention": False, "num_feedforward_networks": 1, "normalization_type": "layer_norm",
            "hidden_act": d.get("hidden_act", "gelu"), "classifier_activation": True,
            "hidden_dropout_prob": d.get("hidden_dropout_prob", 0.1), "intermediate_size": d.get("intermediate_size", 3072),
            "num_hidden_layers": d.get("num_hidden_layers", 12), "num_attention_heads": d.get("num_attention_heads", 12)}


def load_config(model_dir) -> tuple[ModelConfig, str]:
    """Our config.json, or transformers' MobileBERT or BERT one."""
    path = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir():
        raise located(model_dir, "no such model directory")
    d = read_json(path)
    if d.get("model_type") == "bert":
        d = bert_as_mobilebert(d)
    elif d.get("model_type") not in ("mobilebert", "ib_bert"):
        raise located(path, f"model_type {d.get('model_type')!r} is not a BERT or MobileBERT-family model")
    head = d.get("mobilekd_head") or head_of_architectures(d.get("architectures"))
    return ModelConfig.from_dict(d, source=path), head


def load_state(path) -> dict[str, torch.Tensor]:
    """Read a safetensors file (never a pickle); a corrupt or missing file is one clear UserError."""
    path = Path(path)
    if not path.is_file():
        raise located(path, "no such file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise located(path, f"not a readable safetensors file ({err})") from None


def saved_names(model_dir) -> set[str]:
    """Our names of the tensors a model directory's weights file holds (read from its header alone)."""
    from safetensors import safe_open

    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        raise located(path, "no such file")
    try:
        with safe_open(str(path), "pt") as f:
            return {_our_name(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise located(path, f"not a readable safetensors file ({err})") from None


def _our_name(key: str) -> str:
    """transformers BERT checkpoints name the encoder `bert.` (BertFor...) or nothing at all (BertModel)."""
    if key.startswith("bert."):
        return "mobilebert." + key[len("bert."):]
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        return "mobilebert." + key
    return key


def load_pretrained(model_dir, head: str | None = None, config: ModelConfig | None = None,
                    require_head: bool = False) -> torch.nn.Module:
    """Build the model class for `head` and load the directory's weights into it.

    The encoder (`mobilebert.*`, the pooler included when the config has one) must load completely: a missing
    pooler is refused, not left at a random initialisation. A head absent from the file (e.g. a classifier on a
    pre-trained encoder, or MLM/NSP heads on a transformers `BertModel`) keeps its fresh initialisation unless
    `require_head`, and weights of another head are ignored.
    """
    saved_config, saved_head = load_config(model_dir)
    config = config or saved_config
    model = HEADS[head or saved_head].model_class(config)
    path = Path(model_dir) / "model.safetensors"
    state = {_our_name(k): v for k, v in load_state(path).items()}
    own = model.state_dict()
    for key, value in state.items():
        if key in own and own[key].shape != value.shape:
            raise located(path, f"{key} has shape {tuple(value.shape)}, the config needs {tuple(own[key].shape)}")
    missing = [k for k in own if k not in state and k.startswith("mobilebert.")]
    if missing:
        what = "the pooler" if all(".pooler." in k for k in missing) else f"{len(missing)} encoder weights"
        raise located(path, f"lacks {what} for this config, e.g. {missing[0]}")
    if require_head:
        absent = [k for k in own if k not in state and not k.startswith("mobilebert.")]
        if absent:
            raise located(path, f"has no trained {head or saved_head} head (e.g. {absent[0]}); a transformers "
                                f"BertModel needs its MLM and NSP heads fitted first: scripts/train_teacher.sh "
                                f"--init-from {model_dir}")
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    return model
