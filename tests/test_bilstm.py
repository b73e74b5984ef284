"""Distillation into a BiLSTM (issue 18): the transfer set's three rules on real sentences with the real tagger
(deterministic under a seed, labels kept, probabilities respected over many draws), the siamese features and the
loss by hand, the packed and the unrolled LSTM alike on dev sentences, and the recipe, export and parity at micro
scale."""

import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import one_line_error, run_module
from mobilekd.data.examples import TextExample
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.data.transfer_set import MASK, PosVocabulary, load_tagger, pair_choice, perturb, tag, transfer_set
from mobilekd.finetune.objective import Distillation, task_loss
from mobilekd.models.bilstm import BiLSTMClassifier, BiLSTMConfig, segment_masks, siamese_features
from mobilekd.models.config import ModelConfig
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.hf import save_pretrained
from mobilekd.recipes.bilstm import transfer_labels
from mobilekd.transfer.losses import logit_mse

SENTENCES = ["the quick brown fox jumps over the lazy dog near the old river bank today",
             "a charming and often affecting journey through a small town in winter",
             "she quietly reads long novels while the children play outside"]


@pytest.fixture(scope="module")
def tagger():
    return load_tagger()


@pytest.fixture(scope="module")
def tagged(tagger):
    return tag(tagger, SENTENCES)


def test_the_tagger_gives_penn_treebank_tags(tagged):
    assert [t for _, t in tagged[0][:5]] == ["DT", "JJ", "JJ", "NN", "VBZ"]
    assert dict(tagged[2])["reads"] == "VBZ" and dict(tagged[1])["journey"] == "NN"


def test_pos_vocabulary_draws_a_tags_words_by_their_frequency():
    vocab = PosVocabulary([[("cat", "NN"), ("dog", "NN"), ("cat", "NN"), ("cat", "NN"), ("ran", "VBD")]])
    rng = np.random.default_rng(0)
    draws = Counter(vocab.draw("NN", rng) for _ in range(8000))
    assert set(draws) == {"cat", "dog"} and draws["cat"] / 8000 == pytest.approx(0.75, abs=0.02)
    assert vocab.draw("VBD", rng) == "ran" and vocab.draw("JJ", rng) is None


def test_masking_and_pos_replacement_happen_at_their_rates(tagged):
    vocab = PosVocabulary(tagged)
    rng = np.random.default_rng(1)
    sentence = tagged[0]
    masked = replaced = words = 0
    for _ in range(3000):
        sample = perturb(sentence, vocab, rng, p_mask=0.2, p_pos=0.3, p_ng=0.0)
        if sample is None:  # every word changed (chance 0.5^15): dropped, as all_replaced is there
            continue
        sample = sample.split(" ")
        assert len(sample) == len(sentence)  # no n-gram cut at p_ng 0
        for new, (old, t) in zip(sample, sentence):
            words += 1
            masked += new == MASK
            if new not in (MASK, old):
                replaced += 1
                assert new in vocab.words[t]  # a word of the same tag
    assert masked / words == pytest.approx(0.2, abs=0.01)
    # a replacement may draw the word itself: expected rate p_pos x (1 - the word's share of its tag)
    counts = Counter(w for s in tagged for w in s)
    expected = np.mean([0.3 * (1 - counts[(w, t)] / sum(n for (_, t2), n in counts.items() if t2 == t))
                        for w, t in sentence])
    assert replaced / words == pytest.approx(expected, abs=0.01) and expected > 0.15


def test_ngram_sampling_cuts_to_one_to_five_consecutive_words(tagged):
    vocab = PosVocabulary(tagged)
    rng = np.random.default_rng(2)
    words = [w for w, _ in tagged[0]]
    lengths = Counter()
    for _ in range(2000):
        sample = perturb(tagged[0], vocab, rng, p_mask=0.0, p_pos=0.0, p_ng=1.0).split(" ")
        lengths[len(sample)] += 1
        assert any(words[i:i + len(sample)] == sample for i in range(len(words)))
    assert set(lengths) == {1, 2, 3, 4, 5} and min(lengths.values()) > 330  # uniform: 400 each
    cut = sum(len(perturb(tagged[0], vocab, rng, 0.0, 0.0, 0.25).split(" ")) < len(words) for _ in range(4000))
    assert cut / 4000 == pytest.approx(0.25, abs=0.02)


def test_pairs_perturb_both_sentences_a_third_of_the_time():
    rng = np.random.default_rng(3)
    counts = Counter(pair_choice(rng) for _ in range(9000))
    assert set(counts) == {(True, True), (True, False), (False, True)}
    assert all(n / 9000 == pytest.approx(1 / 3, abs=0.02) for n in counts.values())


def test_the_transfer_set_is_deterministic_keeps_labels_and_originals(tagger):
    task = load_task("mrpc", default_data("mrpc"))
    examples = task.train[:12]
    a = transfer_set(examples, tagger, n_iter=8, seed=0)
    assert a == transfer_set(examples, tagger, n_iter=8, seed=0)
    assert a != transfer_set(examples, tagger, n_iter=8, seed=1)
    assert a[:12] == examples and 12 + 12 * 4 < len(a) <= 12 + 12 * 8
    by_source = {e.source: e for e in examples}
    keys = [(e.text_a, e.text_b) for e in a]
    assert len(keys) == len(set(keys))  # no duplicates
    for e in a[12:]:
        original = by_source[e.source.removesuffix(" (transfer set)")]
        assert e.label == original.label and e.text_b is not None
    assert sum(MASK in e.text_a + e.text_b for e in a[12:]) > len(a[12:]) / 2
    single = transfer_set([TextExample(SENTENCES[1], None, "positive", "x:1")], tagger, n_iter=20, seed=0)
    assert all(e.text_b is None and e.label == "positive" for e in single) and len(single) > 10


def test_siamese_features_and_the_loss_by_hand():
    h1, h2 = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 0.5]])
    assert siamese_features(h1, h2).tolist() == [[1.0, -2.0, 3.0, 0.5, 3.0, -1.0, 2.0, 2.5]]
    t, s = torch.tensor([[2.0, -1.0], [0.0, 1.0]]), torch.tensor([[1.0, 1.0], [0.5, 0.0]])
    by_hand = ((1 ** 2 + 2 ** 2) + (0.5 ** 2 + 1 ** 2)) / 4  # mean over rows and classes
    assert logit_mse(t, s).item() == pytest.approx(by_hand)

    class Fixed(torch.nn.Module):  # a stand-in student whose logits are `s`
        def forward(self, *inputs):
            return s

    batch = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3),
             "token_type_ids": torch.zeros(2, 3), "labels": torch.tensor([0, 1]), "teacher_logits": t}
    task = load_task("sst2", default_data("sst2"), eval_only=True)
    terms = task_loss(task, None, Distillation(alpha=0.3, logits="mse"))(Fixed(), batch)
    ce = -(math.log(math.exp(1) / (math.exp(1) + math.exp(1))) + math.log(1 / (1 + math.exp(0.5)))) / 2
    assert terms["loss"].item() == pytest.approx(0.3 * ce + 0.7 * by_hand, rel=1e-6)


def pair_model(tokenizer, pooling: str) -> BiLSTMClassifier:
    torch.manual_seed(0)
    return BiLSTMClassifier(BiLSTMConfig(vocab_size=tokenizer.vocab_size, embedding_size=24, hidden_size=16,
                                         classifier_size=8, pair=True, pooling=pooling, id2label={0: "a", 1: "b"},
                                         cls_token_id=tokenizer.cls_token_id,
                                         sep_token_id=tokenizer.sep_token_id)).eval()


@pytest.mark.parametrize("pooling", ["final", "max"])
def test_packed_and_unrolled_lstm_agree_on_dev_pairs(tokenizer, pooling):
    """Training's packed LSTM and the export's unrolled one (what torch.export traces) read each sentence of a
    pair alone, alike; the siamese encoder reads words only, so a pair of equal sentences has h1 = h2."""
    task = load_task("mrpc", default_data("mrpc"), eval_only=True)
    dev = encode_classification(task, next(iter(task.dev.values()))[:16], tokenizer, 96).arrays
    model = pair_model(tokenizer, pooling)
    ids, mask, types = (torch.from_numpy(dev[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    special = (tokenizer.cls_token_id, tokenizer.sep_token_id)
    for m in segment_masks(ids, mask, types, special):
        assert (m.sum(1) > 0).all() and not (m.bool() & ((ids == special[0]) | (ids == special[1]))).any()
        x = model.embeddings(ids)
        torch.testing.assert_close(model._packed(x, m), model._unrolled(x, m), atol=1e-5, rtol=1e-5)
    exported = torch.export.export(model, (ids, mask, types), strict=False).module()
    with torch.no_grad():
        torch.testing.assert_close(exported(ids, mask, types), model(ids, mask, types), atol=1e-5, rtol=1e-5)
    # what lies outside a sentence changes nothing: sentence a alone gives the same vector
    a, _ = segment_masks(ids, mask, types, special)
    torch.testing.assert_close(model.encode(ids, a), model.encode(torch.where(a.bool(), ids, 0), a))
    same = tokenizer(["the cat sat on the mat"], ["the cat sat on the mat"], return_tensors="pt")
    h1, h2 = [model.encode(same["input_ids"], m) for m in
              segment_masks(same["input_ids"], same["attention_mask"], same["token_type_ids"], special)]
    torch.testing.assert_close(h1, h2)


MICRO_BERT = ModelConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                         hidden_act="gelu", embedding_size=64, trigram_input=False, embedding_transformation=False,
                         use_bottleneck=False, intra_bottleneck_size=64, key_query_shared_bottleneck=False,
                         num_feedforward_networks=1, normalization_type="layer_norm")


def micro_teacher_and_bilstm(tmp_path, tokenizer, task: str):
    """A small random BERT fine-tuned on 48 of `task`'s examples (tmp_path/teacher), distilled into a BiLSTM over a
    transfer set for 8 steps (tmp_path/bilstm); the random BERT's directory and the flags both runs shared."""
    torch.manual_seed(0)
    base = tmp_path / "base"
    save_pretrained(MobileBertForPreTraining(MICRO_BERT), base, tokenizer)
    common = ["--task", task, "--max-train-examples", 48, "--max-len", 32, "--threads", 1]
    run_module("mobilekd", "finetune", "--model", base, *common, "--epochs", 1, "--eval-every", 0,
               "--out", tmp_path / "teacher")
    run_module("mobilekd", "bilstm", "--teacher", tmp_path / "teacher", *common, "--augment", 3, "--max-steps", 8,
               "--embedding-size", 16, "--hidden-size", 12, "--cache-dir", tmp_path / "cache", "--out",
               tmp_path / "bilstm")
    return base, common


def test_new_samples_take_the_teachers_class_or_score():
    logits = np.array([[4.2], [0.5], [3.0]], np.float32)
    labels = transfer_labels(SimpleNamespace(is_regression=True), np.array([1.0, 2.0, 0.0], np.float32), logits, 1)
    assert labels.tolist() == [1.0, 0.5, 3.0]  # the original keeps its gold score
    labels = transfer_labels(SimpleNamespace(is_regression=False), np.array([1, 0, 0]),
                             np.array([[0.1, 0.9], [2.0, -1.0], [0.0, 3.0]]), 1)
    assert labels.tolist() == [1, 0, 1]


def test_a_regression_task_distils_into_one_output_fitting_the_teachers_scores(tmp_path, tokenizer):
    """STS-B (ours, not the paper's): one output, the new samples' targets the teacher's scores, Pearson on dev, and
    a file that agrees with PyTorch."""
    micro_teacher_and_bilstm(tmp_path, tokenizer, "stsb")
    result = json.loads((tmp_path / "bilstm" / "results.json").read_text())
    assert result["complete"] and result["best_metric"] == "pearson" and 48 < result["train_examples"] <= 48 * 4
    assert -1 <= result["metrics"]["dev"]["pearson"] <= 1
    assert json.loads((tmp_path / "bilstm" / "bilstm.json").read_text())["id2label"] == {"0": "score"}
    run_module("mobilekd", "export", "--model", tmp_path / "bilstm", "--max-len", 32, "--parity-examples", 16,
               "--out", tmp_path / "tflite")
    parity = json.loads((tmp_path / "tflite" / "parity.json").read_text())["model_none.tflite"]
    assert parity["max_abs_diff"] < 1e-4 and parity["metadata"] is False  # a score: no classifier metadata


def test_recipe_export_and_parity_at_micro_scale(tmp_path, tokenizer):
    """Fine-tune a small BERT teacher on SST-2, distil it into a BiLSTM over a transfer set, export: the file agrees
    with PyTorch on dev sentences and carries MediaPipe's metadata; bad input gives one-line errors."""
    base, common = micro_teacher_and_bilstm(tmp_path, tokenizer, "sst2")
    result = json.loads((tmp_path / "bilstm" / "results.json").read_text())
    assert result["complete"] and result["original_examples"] == 48 and 48 < result["train_examples"] <= 48 * 4
    assert result["training"][0]["cpu"] and result["training"][0]["precision"] in ("no", "bf16")  # its rows' CPU
    assert result["teacher_outputs_precision"] in ("no", "bf16") and result["set_made_seconds"] > 0  # made its set
    assert result["shared_outputs"].startswith("outputs/") and result["outputs_made_seconds"] > 0  # and the logits
    assert result["teacher_dev"] == json.loads((tmp_path / "teacher" / "results.json").read_text())["metrics"]["dev"]
    assert 0.3 < result["metrics"]["dev"]["accuracy"] < 0.8  # 872 sentences after 8 steps
    predictions = (tmp_path / "bilstm" / "dev_predictions.tsv").read_text().splitlines()
    assert len(predictions) == 873 and predictions[1].split("\t")[2] in ("negative", "positive")
    stored = list((tmp_path / "teacher" / "outputs").glob("*-outputs/segment-*"))
    assert len(stored) == 1  # the teacher's logits over the transfer set, computed once

    run_module("mobilekd", "export", "--model", tmp_path / "bilstm", "--max-len", 32, "--parity-examples", 64,
               "--out", tmp_path / "tflite")
    parity = json.loads((tmp_path / "tflite" / "parity.json").read_text())["model_none.tflite"]
    assert parity["agreement"] == 1.0 and parity["max_abs_diff"] < 1e-5 and parity["metadata"]
    assert parity["accuracy_exported"] == parity["accuracy_torch"]
    assert parity["op_count"] > 100  # litert-torch unrolls 32 steps x 2 directions (the fused file: test_fused_lstm)
    assert "| model_none.tflite |" in (tmp_path / "tflite" / "README.md").read_text()
    from mediapipe.tasks.python import text

    with text.TextClassifier.create_from_model_path(str(tmp_path / "tflite" / "model_none.tflite")) as classifier:
        categories = classifier.classify("a gorgeous , witty , seductive movie .").classifications[0].categories
    assert {c.category_name for c in categories} == {"negative", "positive"}
    assert sum(c.score for c in categories) == pytest.approx(1.0, abs=1e-4)

    config = tmp_path / "bilstm" / "bilstm.json"
    saved = json.loads(config.read_text())
    assert saved["cls_token_id"] == tokenizer.cls_token_id and saved["embedding_size"] == 16
    for bad in ({"pooling": "mean"}, {"dropout": 1.5}, {"hidden_size": 10.5}, {"id2label": {"0": "a", "5": "b"}}):
        config.write_text(json.dumps({**saved, **bad}))
        proc = run_module("mobilekd", "export", "--model", tmp_path / "bilstm", "--out", tmp_path / "x", check=False)
        assert "bilstm.json" in one_line_error(proc), bad
    config.write_text(json.dumps({**saved, "hidden_size": 13}))
    proc = run_module("mobilekd", "export", "--model", tmp_path / "bilstm", "--out", tmp_path / "x", check=False)
    assert "model.safetensors" in one_line_error(proc)
    assert not list((tmp_path / "x").glob("*.tflite"))
    proc = run_module("mobilekd", "bilstm", "--teacher", base, *common, "--out", tmp_path / "y", check=False)
    assert "not a fine-tuned classifier" in one_line_error(proc)
    proc = run_module("mobilekd", "bilstm", "--teacher", tmp_path / "teacher", *common, "--p-mask", 0.8, "--p-pos",
                      0.5, "--out", tmp_path / "y", check=False)
    assert "--p-mask + --p-pos" in one_line_error(proc)
    proc = run_module("mobilekd", "bilstm", "--teacher", tmp_path / "teacher", *common, "--loss", "ce", "--augment", 2,
                      "--out", tmp_path / "y", check=False)
    assert "--augment needs --loss kd" in one_line_error(proc)
    assert not (tmp_path / "y" / "model.safetensors").exists()


def test_a_saved_bilstm_loads_back_and_a_directory_that_does_not_fit_is_refused_in_one_line(tmp_path, tokenizer):
    from mobilekd.errors import UserError
    from mobilekd.models.bilstm import load_bilstm, save_bilstm

    with pytest.raises(UserError, match="bilstm.json: missing: not a BiLSTM model directory"):
        load_bilstm(tmp_path)
    torch.manual_seed(0)
    model = BiLSTMClassifier(BiLSTMConfig(vocab_size=tokenizer.vocab_size, embedding_size=8, hidden_size=6,
                                          classifier_size=4, id2label={0: "negative", 1: "positive"})).eval()
    save_bilstm(model, tmp_path, tokenizer)
    ids = torch.randint(1000, 2000, (2, 9))
    ones = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.equal(load_bilstm(tmp_path)(ids, ones, 0 * ones), model(ids, ones, 0 * ones))
    config = json.loads((tmp_path / "bilstm.json").read_text())
    (tmp_path / "bilstm.json").write_text(json.dumps({**config, "hidden_size": 7}))
    with pytest.raises(UserError, match=r"model.safetensors: does not hold this bilstm.json's weights: .* is \("):
        load_bilstm(tmp_path)
    (tmp_path / "bilstm.json").write_text(json.dumps(config))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:500])
    with pytest.raises(UserError, match="model.safetensors: not a readable safetensors file"):
        load_bilstm(tmp_path)
