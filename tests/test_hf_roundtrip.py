"""Model directories load into transformers' Auto classes and give our logits, preset by preset and head by head,
or are labelled so that transformers refuses them."""

import json

import pytest
import torch
import transformers

from mobilekd.errors import UserError
from mobilekd.models.heads import HEADS, MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import TRANSFORMERS_NOTE, config_json, load_pretrained, save_pretrained
from mobilekd.models.presets import PRESETS

# The transformers Auto class a user loads each head of ours with (a new head fails the test below until added)
AUTO = {"pretraining": transformers.AutoModelForPreTraining,
        "classification": transformers.AutoModelForSequenceClassification,
        "qa": transformers.AutoModelForQuestionAnswering, "cmlm": transformers.AutoModelForMaskedLM}
# What each head is saved with: a classifier with labels, and a regressor (STS-B: one output)
HEAD_CASES = {"pretraining": {}, "qa": {}, "cmlm": {},
              "classification": {"id2label": {0: "negative", 1: "positive"},
                                 "problem_type": "single_label_classification"},
              "regression": {"id2label": {0: "score"}, "problem_type": "regression"}}
HEAD_OF_CASE = {"regression": "classification"}
# Every preset `mobilekd models` lists (it lists PRESETS), and shapes beyond them that transformers can also compute:
# the trigram at equal widths (its MLM head then has an empty extra matrix) and a LayerNorm MobileBERT with
# transformers' hard-coded epsilon
SHAPES = {name: p.config for name, p in PRESETS.items()} | {
    "bert_base": PRESETS["bert_base"].config.replace(num_hidden_layers=2),  # BERT_BASE's widths, 2 of its layers
    # the packaged teacher's shape (all-MiniLM-L6-v2, a transformers BERT), and the demo's student of its layers 0
    # and 5 with every FFN narrowed to 1,280 neurons: BERT layouts, saved as BERT
    "minilm_l6": PRESETS["bert_base"].config.replace(hidden_size=384, embedding_size=384, num_hidden_layers=6,
                                                     num_attention_heads=12, intermediate_size=1536),
    "minilm_subset_narrow": PRESETS["bert_base"].config.replace(hidden_size=384, embedding_size=384,
                                                                num_hidden_layers=2, num_attention_heads=12,
                                                                intermediate_size=1280),
    "trigram_at_equal_widths": PRESETS["demo_student"].config.replace(embedding_size=128),
    "layer_norm_eps_1e-5": PRESETS["demo_student"].config.replace(normalization_type="layer_norm",
                                                                  hidden_act="gelu", layer_norm_eps=1e-5),
    # a BERT layout that transformers' MobileBERT could compute too: saved as the BERT it is, with no extra tensor
    "bert_layout_eps_1e-5": PRESETS["bert_base"].config.replace(num_hidden_layers=2, layer_norm_eps=1e-5),
}


def _randomize(model, seed: int = 0):
    """Every parameter drawn afresh from a seeded generator, trained-like: matrices and embeddings N(0, 0.02),
    norm scales 1 + N(0, 0.2), biases N(0, 0.1), so that NoNorm, LayerNorm and every bias are really exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "LayerNorm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.02 * noise)
    return model.eval()


def _outputs(model, head: str, ids, mask, types) -> list[torch.Tensor]:
    """Our model's logits as transformers' class returns them."""
    if head == "pretraining":
        out = model(ids, mask, types, masked_positions=torch.arange(ids.shape[1]).expand(ids.shape[0], -1))
        return [out.mlm_logits.view(*ids.shape, -1), out.nsp_logits]
    if head == "qa":
        return list(model(ids, mask, types))
    if head == "cmlm":  # the C-MLM teacher: its own output layer, untied from the input embeddings
        return [model(ids, mask, types, torch.arange(ids.shape[1]).expand(ids.shape[0], -1)).view(*ids.shape, -1)]
    return [model(ids, mask, types)]


def _their_outputs(out, head: str) -> list[torch.Tensor]:
    if head == "pretraining":
        return [out.prediction_logits, out.seq_relationship_logits]
    if head == "qa":
        return [out.start_logits, out.end_logits]
    return [out.logits]


def test_every_head_has_a_case():
    assert set(AUTO) == set(HEADS) == {HEAD_OF_CASE.get(c, c) for c in HEAD_CASES}
    assert PRESETS["mobilebert"].config.hf_compatible  # the released config, at least, must round-trip


@pytest.mark.parametrize("case", list(HEAD_CASES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_transformers_computes_our_logits_or_refuses_the_checkpoint(shape, case, tmp_path, tokenizer):
    """Every preset `mobilekd models` lists (and the extra shapes), every head: transformers' Auto class loads
    the directory with no missing or unexpected key and gives our logits within 1e-5 on a padded batch of two
    sentence pairs; or the directory is not labelled as a transformers model and transformers refuses it."""
    head = HEAD_OF_CASE.get(case, case)
    config = SHAPES[shape].replace(**HEAD_CASES[case])
    bert = config.bert_incompatibility is None  # BERT's own layout: saved as BERT
    if not config.hf_compatible and not bert:  # the label alone decides what transformers does: no weights needed
        saved = config_json(config, head)
        (tmp_path / "config.json").write_text(json.dumps(saved))
        assert saved["model_type"] not in transformers.CONFIG_MAPPING
        assert not any(a.startswith("MobileBert") or a.startswith("Bert") for a in saved["architectures"])
        assert config.hf_incompatibility in saved[TRANSFORMERS_NOTE]
        with pytest.raises(ValueError, match="ib_bert"):
            AUTO[head].from_pretrained(tmp_path)
        return
    ours = _randomize(HEADS[head].model_class(config))
    save_pretrained(ours, tmp_path, tokenizer)
    theirs, info = AUTO[head].from_pretrained(tmp_path, output_loading_info=True)
    architecture = HEADS[head].hf_architecture
    assert type(theirs).__name__ == ("Bert" + architecture.removeprefix("MobileBert") if bert else architecture)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == ("bert" if bert else "mobilebert")
    assert not any(info.values()), info  # no missing, unexpected or mismatched key
    if config.id2label:
        assert theirs.config.id2label == config.id2label and theirs.config.problem_type == config.problem_type
    torch.manual_seed(0)
    ids = torch.randint(999, config.vocab_size, (2, 16))
    types = (torch.arange(16) >= 9).long().expand(2, -1)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    with torch.no_grad():
        expected = _outputs(ours, head, ids, mask, types)
        got = _their_outputs(theirs.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types), head)
    for a, b in zip(expected, got, strict=True):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5, (a - b).abs().max()


def test_tokenizer_and_refused_models_still_load_with_ours(tmp_path, tokenizer):
    """The tokenizer saved beside the weights is the real one; a model transformers refuses still round-trips
    through our loader, and so does one saved before the refusal (labelled `mobilebert`, as h384 students were)."""
    config = PRESETS["demo_student"].config.replace(embedding_size=128, trigram_input=False)  # h384's lift
    model = _randomize(MobileBertForPreTraining(config))
    save_pretrained(model, tmp_path, tokenizer)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path).tokenize("hello") == ["hello"]
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "ib_bert" and "skips it" in saved[TRANSFORMERS_NOTE]
    ids = torch.randint(1000, 2000, (1, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).nsp_logits, load_pretrained(tmp_path).eval()(ids).nsp_logits)
        old = {k: v for k, v in saved.items() if k != TRANSFORMERS_NOTE}
        old.update(model_type="mobilebert", architectures=["MobileBertForPreTraining"])
        (tmp_path / "config.json").write_text(json.dumps(old))
        assert torch.equal(model(ids).nsp_logits, load_pretrained(tmp_path).eval()(ids).nsp_logits)


def test_teacher_round_trips_and_transformers_refuses_it(tmp_path, tokenizer):
    torch.manual_seed(0)
    teacher = _randomize(MobileBertForPreTraining(PRESETS["demo_teacher"].config))
    save_pretrained(teacher, tmp_path, tokenizer)
    loaded = load_pretrained(tmp_path).eval()
    ids = torch.randint(1000, 2000, (1, 9))
    with torch.no_grad():
        assert torch.equal(teacher(ids).nsp_logits, loaded(ids).nsp_logits)
    with pytest.raises(ValueError, match="ib_bert"):
        transformers.AutoModel.from_pretrained(tmp_path)


def test_corrupt_or_mismatched_checkpoints_are_refused(tmp_path, tokenizer):
    save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), tmp_path, tokenizer)
    with pytest.raises(UserError, match="shape"):
        load_pretrained(tmp_path, config=PRESETS["demo_student"].config.replace(intermediate_size=64))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(UserError, match="model.safetensors: not a readable safetensors file"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="config.json: not valid JSON"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "mobilebert", "normalization_type": "batch_norm"}')
    with pytest.raises(UserError, match="normalization_type"):
        load_pretrained(tmp_path)


def test_transformers_bert_checkpoints_load_as_family_members(tmp_path):
    """BERT is the family member without MobileBERT's changes: its transformers checkpoints load as is."""
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, num_labels=3)
    torch.manual_seed(0)
    bert = transformers.BertForSequenceClassification(config).eval()
    bert.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path).eval()
    assert isinstance(ours, MobileBertForSequenceClassification) and ours.config.num_labels == 3
    ids = torch.randint(1000, 2000, (2, 12))
    with torch.no_grad():
        assert (ours(ids) - bert(input_ids=ids).logits).abs().max() <= 1e-5


def test_a_bert_layout_classifier_runs_in_transformers_pipeline_with_our_labels_on_all_of_sst2_dev(tmp_path,
                                                                                                   tokenizer):
    """The demo's student is a BERT layout (two of its teacher's layers): fine-tuned briefly by `mobilekd finetune`
    and saved with its tokenizer, it runs in `pipeline("text-classification", model=DIR)` with no other argument,
    and labels every SST-2 dev sentence as our own prediction does."""
    from conftest import ROOT
    from helpers import run_module
    from mobilekd.data.tasks import encode_classification, load_task
    from mobilekd.finetune.evaluation import predict

    run_module("mobilekd", "init", "all-minilm-l6-v2", tmp_path / "start", "--layers", "0,5")  # the packaged BERT's
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "start", "--task", "sst2", "--out", tmp_path / "ft",
               "--max-train-examples", 1000, "--max-steps", 40, "--batch-size", 32, "--max-len", 64, "--lr", 4e-4,
               "--eval-every", 0, "--threads", 1)
    assert json.loads((tmp_path / "ft" / "config.json").read_text())["model_type"] == "bert"
    task = load_task("sst2", ROOT / "data/glue/SST-2", eval_only=True)
    dev = task.dev["dev"]
    ours = load_pretrained(tmp_path / "ft").eval()
    expected = [task.labels[i] for i in predict(ours, encode_classification(task, dev, tokenizer, 128)).argmax(-1)]
    classify = transformers.pipeline("text-classification", model=str(tmp_path / "ft"), device="cpu")
    got = [r["label"] for r in classify([e.text_a for e in dev], batch_size=64, truncation=True, max_length=128)]
    assert len(got) == len(dev) == 872 and got == expected
    assert min(expected.count(label) for label in task.labels) > 50  # both labels occur: the comparison can fail


def test_a_users_transformers_mobilebert_is_a_start_and_a_teacher(tmp_path, tokenizer):
    """A transformers MobileBERT directory (as a user's copy of the public pre-trained one is laid out; here a small
    one built from a transformers config) loads with transformers' logits, fine-tunes, and teaches a student."""
    from helpers import run_module

    config = transformers.MobileBertConfig(vocab_size=30522, hidden_size=128, embedding_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=128, intra_bottleneck_size=64,
                                           true_hidden_size=64, num_feedforward_networks=2)
    torch.manual_seed(0)
    theirs = transformers.MobileBertForPreTraining(config).eval()
    theirs.save_pretrained(tmp_path / "mobilebert")
    tokenizer.save_pretrained(str(tmp_path / "mobilebert"))
    ours = load_pretrained(tmp_path / "mobilebert").eval()
    ids = torch.randint(1000, 2000, (2, 12))
    with torch.no_grad():
        expected = theirs(input_ids=ids).prediction_logits
        got = ours(ids, masked_positions=torch.arange(12).expand(2, -1)).mlm_logits.view(2, 12, -1)
    assert (expected - got).abs().max() <= 1e-4
    common = ["--task", "sst2", "--max-train-examples", 200, "--max-steps", 4, "--batch-size", 16, "--max-len", 32,
              "--eval-every", 0, "--threads", 1]
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "mobilebert", "--out", tmp_path / "teacher", *common)
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "mobilebert", "--teacher", tmp_path / "teacher",
               "--out", tmp_path / "student", *common)
    student = json.loads((tmp_path / "student" / "results.json").read_text())
    assert student["teacher"] == str(tmp_path / "teacher") and "dev" in student["metrics"]


def test_a_transformers_mobilebert_at_equal_widths_without_the_trigram_loads_without_its_unused_lift(tmp_path,
                                                                                                     tokenizer):
    """transformers builds the embeddings' dense lift always but applies it only with the trigram or a narrower
    embedding: at mobilebert_h384's layout (equal widths, no trigram) its file holds a lift at a random
    initialisation that must not be applied, and the config says nothing of it."""
    config = transformers.MobileBertConfig(vocab_size=30522, hidden_size=96, embedding_size=96, trigram_input=False,
                                           num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                                           intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=2)
    torch.manual_seed(0)
    theirs = transformers.MobileBertForPreTraining(config).eval()
    theirs.save_pretrained(tmp_path)
    ours = load_pretrained(tmp_path).eval()
    assert ours.mobilebert.embeddings.embedding_transformation is None and ours.config.hf_compatible
    ids = torch.randint(1000, 2000, (2, 12))
    with torch.no_grad():
        expected = theirs(input_ids=ids).prediction_logits
        got = ours(ids, masked_positions=torch.arange(12).expand(2, -1)).mlm_logits.view(2, 12, -1)
    assert (expected - got).abs().max() <= 1e-4


@pytest.mark.parametrize("head", ["pretraining", "classification", "cmlm", "qa"])
def test_a_runs_parameters_are_counted_from_its_config_where_its_weights_stayed_elsewhere(tmp_path, head):
    """Every head's count from config.json alone (`benchmarks.rows.parameters`, on the meta device) is the weights
    file's, the extras transformers reads (an untied C-MLM decoder's bias: `transformers_extras`) included."""
    from benchmarks.rows import parameters

    save_pretrained(HEADS[head].model_class(PRESETS["demo_student"].config), tmp_path, head=head)
    full = parameters(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    assert parameters(tmp_path) == full > 0

