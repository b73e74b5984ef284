"""Student directories load into transformers' MobileBERT classes and give the same logits."""

import pytest
import torch
import transformers

from mobilekd.errors import UserError
from mobilekd.models.heads import (MobileBertForPreTraining, MobileBertForQuestionAnswering,
                                   MobileBertForSequenceClassification)
from mobilekd.models.hf import load_pretrained, save_pretrained
from mobilekd.models.presets import PRESETS


def _randomize(model):
    """Move norms and biases off their initial values so NoNorm and biases are really exercised."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.parametrize("name", ["mobilebert", "mobilebert_tiny"])
def test_transformers_loads_our_students(name, tmp_path, tokenizer):
    torch.manual_seed(0)
    config = PRESETS[name].config
    ids = torch.tensor([tokenizer("the film is a charming and often affecting journey", "a second segment")
                        ["input_ids"]])
    types = torch.tensor([tokenizer("the film is a charming and often affecting journey", "a second segment")
                          ["token_type_ids"]])
    pre = _randomize(MobileBertForPreTraining(config))
    save_pretrained(pre, tmp_path / "mlm", tokenizer)
    hf = transformers.MobileBertForMaskedLM.from_pretrained(tmp_path / "mlm").eval()
    positions = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        ours = pre(ids, token_type_ids=types, masked_positions=positions).mlm_logits
        theirs = hf(input_ids=ids, token_type_ids=types).logits[0]
    assert (ours - theirs).abs().max() <= 1e-5

    cls = MobileBertForSequenceClassification(config.replace(id2label={0: "negative", 1: "positive"}))
    cls.mobilebert.load_state_dict(pre.mobilebert.state_dict())
    _randomize(cls)
    save_pretrained(cls, tmp_path / "cls", tokenizer)
    hf = transformers.MobileBertForSequenceClassification.from_pretrained(tmp_path / "cls").eval()
    assert hf.config.id2label == {0: "negative", 1: "positive"}
    with torch.no_grad():
        assert (cls(ids, token_type_ids=types) - hf(input_ids=ids, token_type_ids=types).logits).abs().max() <= 1e-5

    qa = _randomize(MobileBertForQuestionAnswering(config))
    save_pretrained(qa, tmp_path / "qa", tokenizer)
    hf = transformers.MobileBertForQuestionAnswering.from_pretrained(tmp_path / "qa").eval()
    with torch.no_grad():
        start, end = qa(ids, token_type_ids=types)
        out = hf(input_ids=ids, token_type_ids=types)
    assert (start - out.start_logits).abs().max() <= 1e-5 and (end - out.end_logits).abs().max() <= 1e-5
    # And back: the tokenizer saved beside the weights is the real one.
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "qa").tokenize("hello") == ["hello"]


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
