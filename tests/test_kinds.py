"""Every kind of model directory the toolkit writes is told apart by `mobilekd.models.kinds`, and a verb handed the
wrong kind names what it got in one line."""

import pytest
import torch
import transformers

from helpers import BERT, one_line_error, run_module
from mobilekd.errors import UserError
from mobilekd.models.bilstm import BiLSTMClassifier, BiLSTMConfig, save_bilstm
from mobilekd.models.early_exit import EarlyExitClassifier, save_early_exit
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import save_pretrained
from mobilekd.models.kinds import KINDS, NONE, kind_of, require
from mobilekd.models.multitask import MultiTaskModel, TaskHead, save_multitask
from mobilekd.models.seq2seq import new_seq2seq, save_seq2seq

LABELS = {0: "negative", 1: "positive"}


@pytest.fixture(scope="module")
def written(tmp_path_factory, tokenizer):
    """One directory of each kind, as the toolkit's own save functions (and transformers, for the foreign one)
    write them."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("kinds")
    classifier = MobileBertForSequenceClassification(BERT.replace(id2label=LABELS)).eval()
    save_pretrained(MobileBertForPreTraining(BERT), root / "bert", tokenizer)
    save_bilstm(BiLSTMClassifier(BiLSTMConfig(vocab_size=tokenizer.vocab_size, embedding_size=8, hidden_size=6,
                                              classifier_size=4, id2label=LABELS)), root / "bilstm", tokenizer)
    save_seq2seq(new_seq2seq("seq2seq_micro", tokenizer, max_positions=20), root / "seq2seq", tokenizer)
    save_multitask(MultiTaskModel(BERT, {"sst2": TaskHead(("negative", "positive"), ("accuracy",))}),
                   root / "multitask", tokenizer)
    save_early_exit(EarlyExitClassifier(classifier, width=16, heads=2), root / "early_exit", tokenizer)
    transformers.RobertaForSequenceClassification(transformers.RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        num_labels=2)).save_pretrained(root / "foreign")
    return root


def test_each_kind_is_told_apart_from_what_its_writer_saved(written, tmp_path):
    assert {kind.name: kind_of(written / kind.name).name for kind in KINDS} == {k.name: k.name for k in KINDS}
    # the multi-task and early-exit directories hold a config.json too: their own file decides
    assert all((written / name / "config.json").is_file() for name in ("multitask", "early_exit", "bert"))
    assert kind_of(tmp_path) is NONE and kind_of(tmp_path / "absent") is NONE
    assert [k.name for k in KINDS if k.encoder] == ["multitask", "early_exit", "bert"]


def test_a_verb_handed_the_wrong_kind_names_what_it_holds(written, tmp_path):
    assert require(written / "bert", "needs a BERT", "bert").name == "bert"
    with pytest.raises(UserError, match=r"bilstm: holds a BiLSTM classifier \(from mobilekd bilstm\); needs a BERT"):
        require(written / "bilstm", "needs a BERT", "bert")
    with pytest.raises(UserError, match="absent: no such model directory; needs a BERT"):
        require(tmp_path / "absent", "needs a BERT", "bert")
    proc = run_module("mobilekd", "seq2seq", "--task", "correction", "--teacher", written / "seq2seq", "--out",
                      tmp_path / "out", check=False)
    assert "seq2seq: holds a seq2seq student (an encoder-decoder) (from mobilekd seq2seq); the teacher is a C-MLM " \
           "teacher" in one_line_error(proc)
    assert not (tmp_path / "out" / "model.safetensors").exists()
    proc = run_module("mobilekd", "export", "--model", written / "bert", "--fused-lstm", "--out", tmp_path / "file",
                      check=False)
    assert "is not a BiLSTM" in one_line_error(proc)
