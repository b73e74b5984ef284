"""A transformers classifier of another architecture teaches a student through its logits, read with its own
tokenizer (mobilekd/models/foreign.py): five architectures, each small, randomly initialised and built here, each
with a WordPiece vocabulary of its own trained on SST-2's sentences (so the student's token ids would be wrong for
it). Layer by layer (TinyBERT's intermediate step, MobileBERT's transfer over the task), a RoBERTa with its own
byte-level BPE teaches a student that reads its tokenizer; a student that does not is refused in one line."""

import json

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from helpers import BERT, one_line_error, run_module
from mobilekd.data.tasks import load_task, task_data, training_subset
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.hf import save_pretrained

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=80, initializer_range=0.3)  # logits that differ by example
ARCHITECTURES = {
    "roberta": lambda v, pad: transformers.RobertaConfig(vocab_size=v, pad_token_id=pad, **SMALL),
    "deberta-v2": lambda v, pad: transformers.DebertaV2Config(vocab_size=v, pad_token_id=pad, **SMALL),
    "electra": lambda v, pad: transformers.ElectraConfig(vocab_size=v, pad_token_id=pad, embedding_size=16, **SMALL),
    "mpnet": lambda v, pad: transformers.MPNetConfig(vocab_size=v, pad_token_id=pad, **SMALL),
    "distilbert": lambda v, pad: transformers.DistilBertConfig(vocab_size=v, pad_token_id=pad, dim=32, n_layers=2,
                                                               n_heads=2, hidden_dim=64, max_position_embeddings=80,
                                                               initializer_range=0.3),
}
COMMON = ["--task", "sst2", "--seed", 0, "--max-train-examples", 64, "--max-steps", 3, "--batch-size", 16,
          "--max-len", 32, "--eval-every", 0, "--skip-dev", "--threads", 1]


@pytest.fixture(scope="module")
def sst2():
    return load_task("sst2", task_data("sst2"))


@pytest.fixture(scope="module")
def own_tokenizer(sst2):
    """A 600-word WordPiece vocabulary trained on SST-2's training sentences: not the student's."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator([e.text_a for e in sst2.train[:3000]], trainers.WordPieceTrainer(
        vocab_size=600, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


@pytest.fixture(scope="module")
def student(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("student")
    save_pretrained(MobileBertForPreTraining(BERT), out, tokenizer)
    return out


def make_teacher(kind, out, own_tokenizer, sst2, default_labels=False, **sizes):
    config = ARCHITECTURES[kind](len(own_tokenizer), own_tokenizer.pad_token_id)
    config = type(config)(**{**config.to_dict(), **sizes}) if sizes else config
    config.num_labels = 2
    if not default_labels:
        config.id2label, config.label2id = dict(sst2.id2label), {v: k for k, v in sst2.id2label.items()}
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    model.save_pretrained(out)
    own_tokenizer.save_pretrained(out)
    return model


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_a_transformers_classifier_of_another_architecture_teaches_through_its_own_tokenizer(
        kind, tmp_path, own_tokenizer, tokenizer, student, sst2):
    teacher = make_teacher(kind, tmp_path / "teacher", own_tokenizer, sst2, default_labels=kind == "electra")
    proc = run_module("mobilekd.recipes.finetune", "--model", student, "--teacher", tmp_path / "teacher",
                      "--out", tmp_path / "student", "--method", "kd", *COMMON)
    assert f"teacher outputs ({kind}, through its own tokenizer) over 64 training examples" in proc.stdout
    results = json.loads((tmp_path / "student" / "results.json").read_text())
    assert results["teacher"] == str(tmp_path / "teacher") and results["method"] == "kd"
    kd = results["training"][0]["mean"]["kd"]  # the distillation term was in the loss it trained on
    assert np.isfinite(kd) and kd > 0
    # the cached logits are the teacher's own on each example drawn, one at a time through its tokenizer (no
    # padding, no batching), and its ids are not the student's
    logits = load_file(str(next((tmp_path / "teacher" / "outputs").glob("*-foreign.safetensors"))))["teacher_logits"]
    drawn = training_subset(sst2.train, 64, 0)
    with torch.no_grad():
        singles = np.stack([teacher(**{k: v for k, v in own_tokenizer(e.text_a, truncation=True, max_length=32,
                                                                      return_tensors="pt").items()
                                       if k in ("input_ids", "attention_mask")}).logits[0].numpy() for e in drawn])
    assert logits.shape == (64, 2) and np.abs(logits - singles).max() < 1e-4 * max(1, np.abs(singles).max())
    assert np.abs(singles - singles.mean(0)).max() > 0.05  # the examples' logits differ: the comparison can fail
    text = drawn[0].text_a
    assert own_tokenizer(text)["input_ids"] != tokenizer(text)["input_ids"]


@pytest.fixture(scope="module")
def bpe_tokenizer(sst2):
    """RoBERTa's kind of tokenizer: byte-level BPE (800 tokens trained on SST-2's sentences), <s> ... </s>, padding
    id 1 and no token types: nothing of it is BERT's."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([e.text_a for e in sst2.train[:3000]], trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", model_input_names=["input_ids", "attention_mask"])


@pytest.mark.parametrize("kind, method", [("roberta", "tinybert"), ("roberta", "pkt-td"),
                                          *((k, "tinybert") for k in sorted(ARCHITECTURES) if k != "roberta")])
def test_a_transformers_teacher_of_another_architecture_teaches_layer_by_layer(kind, method, tmp_path,
                                                                              bpe_tokenizer, own_tokenizer, sst2):
    """A teacher of each architecture (RoBERTa with its own byte-level BPE, the others with their own WordPiece)
    teaches a MobileBERT-shaped student that reads its tokenizer (`mobilekd init PRESET OUT --vocab TEACHER`)
    through TinyBERT's intermediate step (RoBERTa also through MobileBERT's progressive transfer): its hidden states
    and attention probabilities, as transformers gives them, are what the run's teacher store keeps and the
    student's layers are matched against."""
    tokenizer = bpe_tokenizer if kind == "roberta" else own_tokenizer
    teacher = make_teacher(kind, tmp_path / "teacher", tokenizer, sst2, num_hidden_layers=4, num_attention_heads=4)
    assert teacher.config.num_hidden_layers == 4 and teacher.config.num_attention_heads == 4
    run_module("mobilekd", "init", "demo_student", tmp_path / "start", "--vocab", tmp_path / "teacher")
    config = json.loads((tmp_path / "start" / "config.json").read_text())
    assert config["vocab_size"] == len(tokenizer) and config["pad_token_id"] == tokenizer.pad_token_id
    if kind == "roberta":  # padding id 1; a BPE vocabulary is not WordPiece's list
        assert tokenizer.pad_token_id == 1 and not (tmp_path / "start" / "vocab.txt").exists()
    proc = run_module("mobilekd.recipes.finetune", "--model", tmp_path / "start", "--teacher", tmp_path / "teacher",
                      "--out", tmp_path / "student", "--method", method, "--intermediate-epochs", 1, *COMMON)
    results = json.loads((tmp_path / "student" / "results.json").read_text())
    terms = set().union(*(st["mean"] for st in results["training"] if st["stage"].startswith("intermediate")))
    # each student layer against its teacher layer: attention distributions (KL) and hidden states
    for layer in range(4):
        assert f"at_L{layer}" in terms and ({f"mse_L{layer}", f"fmt_L{layer}"} & terms), terms
    assert results["teacher_store_hit_rate"] == 0 and "teacher store" in proc.stdout
    # every example the store keeps is transformers' own output for one of the examples drawn, token by token
    # (float16 on disk): the last layer's hidden states and the first layer's attention probabilities
    segment = next((tmp_path / "teacher" / "outputs").glob("*-features/segment-*"))
    lengths = np.load(segment / "lengths.npy")
    teacher.set_attn_implementation("eager")  # transformers' fused attention gives no probabilities
    with torch.no_grad():
        own = [teacher(**{k: v for k, v in tokenizer(e.text_a, truncation=True, max_length=32,
                                                     return_tensors="pt").items()
                          if k in ("input_ids", "attention_mask")}, output_hidden_states=True, output_attentions=True)
               for e in training_subset(sst2.train, 64, 0)]
    hidden, attention = np.load(segment / "hidden_3.npy"), np.load(segment / "attention_0.npy")
    token_at, pair_at = np.cumsum([0, *lengths]), np.cumsum([0, *(4 * lengths ** 2)])
    for i, n in enumerate(lengths):
        h = hidden[token_at[i]:token_at[i + 1]].astype(np.float32)
        a = attention[pair_at[i]:pair_at[i + 1]].astype(np.float32).reshape(4, n, n)
        assert any(o.hidden_states[4].shape[1] == n and np.abs(o.hidden_states[4][0].numpy() - h).max() < 1e-2 and
                   np.abs(o.attentions[0][0].numpy() - a).max() < 1e-3 for o in own), i
    assert len(lengths) >= 50 and len(set(lengths)) > 5  # examples of many lengths: a mismatch cannot hide


def test_layer_matching_needs_the_teachers_tokenizer_and_patience_its_cls(tmp_path, own_tokenizer, student, sst2):
    make_teacher("roberta", tmp_path / "teacher", own_tokenizer, sst2)
    line = one_line_error(run_module("mobilekd.recipes.finetune", "--model", student, "--teacher",
                                     tmp_path / "teacher", "--out", tmp_path / "student", "--method", "tinybert",
                                     *COMMON, check=False))
    assert "does not read the teacher's tokenizer" in line and "mobilekd init PRESET OUT --vocab" in line
    line = one_line_error(run_module("mobilekd.recipes.finetune", "--model", student, "--teacher",
                                     tmp_path / "teacher", "--out", tmp_path / "student", "--method", "pkd-skip",
                                     *COMMON, check=False))
    assert "BERT-PKD's patience loss reads the teacher's cached [CLS] vectors" in line
    # task-agnostic distillation needs a BERT-family teacher: refused before the corpus is read
    line = one_line_error(run_module("mobilekd", "distill", "--teacher", tmp_path / "teacher", "--student",
                                     "demo_student", "--out", tmp_path / "distilled", check=False))
    assert "model_type 'roberta' is not a BERT or MobileBERT-family model" in line
    line = one_line_error(run_module("mobilekd", "ship", "--teacher", tmp_path / "teacher", "--task", "sst2",
                                     "--out", tmp_path / "shipped", check=False))
    assert "a transformers roberta teacher: ship's families start from a BERT-family teacher" in line
    assert "mobilekd finetune --method tinybert --teacher TEACHER" in line and not (tmp_path / "shipped").exists()
    # a run refused before any work leaves no OUT behind (not even its lock and under-way mark)
    assert not (tmp_path / "student").exists() and not (tmp_path / "distilled").exists()


def test_teachers_of_other_labels_untrained_heads_or_fewer_positions_refused(tmp_path, own_tokenizer, student, sst2):
    make_teacher("roberta", tmp_path / "teacher", own_tokenizer, sst2)
    config = json.loads((tmp_path / "teacher" / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "no", "1": "yes", "2": "maybe"}, {"no": 0, "yes": 1, "maybe": 2}
    (tmp_path / "teacher" / "config.json").write_text(json.dumps(config))
    line = one_line_error(run_module("mobilekd.recipes.finetune", "--model", student, "--teacher",
                                     tmp_path / "teacher", "--out", tmp_path / "student", *COMMON, check=False))
    assert "config.json: teacher's labels ['no', 'yes', 'maybe'] do not fit task sst2" in line
    assert not (tmp_path / "student" / "model.safetensors").exists()
    # a checkpoint that is not a fine-tuned classifier (its head would start at random) is refused, not distilled
    body = transformers.AutoModel.from_config(ARCHITECTURES["roberta"](len(own_tokenizer), own_tokenizer.pad_token_id))
    body.save_pretrained(tmp_path / "body")
    own_tokenizer.save_pretrained(tmp_path / "body")
    line = one_line_error(run_module("mobilekd.recipes.finetune", "--model", student, "--teacher", tmp_path / "body",
                                     "--out", tmp_path / "student", *COMMON, check=False))
    assert "model.safetensors: lacks" in line and "not a fine-tuned classifier" in line
    line = one_line_error(run_module("mobilekd.recipes.finetune", "--model", student, "--teacher", tmp_path / "body",
                                     "--out", tmp_path / "student", *COMMON[:-2], "--max-len", 200, "--threads", 1,
                                     check=False))
    assert "--max-len 200 exceeds the teacher's 78 positions" in line


def to_roberta(bert_dir, out) -> None:
    """Copy a BERT sequence classifier (transformers' layout, as `mobilekd finetune` saves it) into
    `RobertaForSequenceClassification`, the same function: encoder weights by name; RoBERTa's positions count from
    padding id + 1 (transformers' `create_position_ids_from_input_ids`), so the position table gains one row in
    front; BERT's pooler (dense + tanh) and classifier become RoBERTa's classification head
    (`RobertaClassificationHead`: dense, tanh, out_proj on the first token). The test below checks the logits."""
    bert = transformers.BertForSequenceClassification.from_pretrained(bert_dir, use_safetensors=True).eval()
    c = bert.config
    config = transformers.RobertaConfig(**{**c.to_dict(), "model_type": "roberta", "architectures": None,
                                           "max_position_embeddings": c.max_position_embeddings + c.pad_token_id + 1})
    roberta = transformers.RobertaForSequenceClassification(config).eval()
    state = {k.replace("bert.", "roberta.", 1): v for k, v in bert.state_dict().items()
             if k.startswith("bert.") and ".pooler." not in k}
    pos = state["roberta.embeddings.position_embeddings.weight"]
    state["roberta.embeddings.position_embeddings.weight"] = torch.cat([pos.new_zeros(c.pad_token_id + 1, pos.shape[1]),
                                                                        pos])
    state.update({"classifier.dense.weight": bert.bert.pooler.dense.weight,
                  "classifier.dense.bias": bert.bert.pooler.dense.bias,
                  "classifier.out_proj.weight": bert.classifier.weight,
                  "classifier.out_proj.bias": bert.classifier.bias})
    missing, unexpected = roberta.load_state_dict(state, strict=False)
    assert not unexpected and not [k for k in missing if "position_ids" not in k], (missing, unexpected)
    roberta.save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(bert_dir).save_pretrained(out)


def test_one_function_through_our_classes_and_through_transformers_gives_the_same_features(tmp_path, tokenizer,
                                                                                           sst2):
    """A BERT classifier and its RoBERTa copy (`to_roberta`: the same function in another layout) read on SST-2's
    dev sentences: the copy, read as a foreign teacher (`ForeignEncoder`), gives the
    embedding output, every layer's output and attention probabilities that our own classes give for the BERT, and
    the same logits; so the foreign path's features mean what the matches take them to mean."""
    from mobilekd.data.tasks import INPUTS, encode_classification
    from mobilekd.finetune.evaluation import build_model
    from mobilekd.models.foreign import ForeignEncoder, load_foreign_teacher

    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=80,
                                     initializer_range=0.3, num_labels=2, id2label=dict(sst2.id2label),
                                     label2id={v: k for k, v in sst2.id2label.items()})
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    to_roberta(tmp_path / "bert", tmp_path / "roberta")
    ours = build_model(tmp_path / "bert", sst2, "teacher").eval()
    foreign = load_foreign_teacher(tmp_path / "roberta", sst2, 32, layers=True)
    theirs = ForeignEncoder(foreign.model).eval()
    assert json.loads((tmp_path / "roberta" / "config.json").read_text())["model_type"] == "roberta"
    dev = next(iter(sst2.dev.values()))[:48]
    batch = encode_classification(sst2, dev, tokenizer, 32).arrays
    inputs = [torch.from_numpy(batch[k]) for k in INPUTS]
    with torch.no_grad():
        a = ours.mobilebert(*inputs, output_feature_maps=True, output_attentions=True)
        b = theirs.mobilebert(*inputs)
        logits = foreign.logits([e.text_a for e in dev], None, 32)
        assert (ours(*inputs) - logits).abs().max() < 1e-4
    real = inputs[1].bool()  # padded positions differ by design (RoBERTa gives them position id 0)
    assert (a.embeddings - b.embeddings)[real].abs().max() < 1e-4
    assert len(a.feature_maps) == len(b.feature_maps) == 3 and len(b.attentions) == 3
    for x, y, p, q in zip(a.feature_maps, b.feature_maps, a.attentions, b.attentions):
        assert (x - y)[real].abs().max() < 1e-4 and (p - q)[real[:, None, :, None].expand_as(p)].abs().max() < 1e-5
    assert a.feature_maps[-1].std() > 0.1  # features that differ: the comparison can fail
