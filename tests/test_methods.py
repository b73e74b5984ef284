"""The source documents' distillation family (issue 16): DistilBERT, BERT-PKD and TinyBERT's losses against hand
computations, their layer maps, layer-subset students, TinyBERT's augmentation, the cached teacher outputs, and
each recipe end to end at micro scale."""

import argparse
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock

from helpers import BERT, one_line_error, run_module
from mobilekd.bf16 import bf16_products_pay, matmul_peak
from mobilekd.data.augment import M, Augmentor, augmented, words
from mobilekd.data.candidate_store import CandidateStore, store_path
from mobilekd.data.examples import TextExample, write_examples
from mobilekd.data.tasks import default_data, encode_classification, load_task
from mobilekd.errors import UserError
from mobilekd.fileio import write_json
from mobilekd.finetune.example_store import _add_segment, example_keys
from mobilekd.finetune.teacher_outputs import outputs_key, outputs_precision, teacher_outputs
from mobilekd.models.heads import MobileBertForPreTraining, MobileBertForSequenceClassification
from mobilekd.models.hf import load_pretrained, save_pretrained
from mobilekd.models.mobilebert import EncoderOutput
from mobilekd.models.narrow import narrow_ffns, neuron_importance
from mobilekd.models.presets import PRESETS
from mobilekd.models.pretrained import model_dir
from mobilekd.models.subset import take_layers
from mobilekd.train.precision import pass_flag, pass_setting
from mobilekd.transfer.layer_maps import layer_map
from mobilekd.transfer.losses import logit_distillation, patience_loss
from mobilekd.transfer.objectives import Features, distilbert_matches, evaluate, pkd_matches, tinybert_matches



def test_layer_maps_pick_the_documented_teacher_layers():
    assert layer_map("spread", 12, 6) == [0, 2, 4, 7, 9, 11]  # extract_distilbert.py
    assert layer_map("uniform", 12, 4) == [2, 5, 8, 11]  # TinyBERT_4 of BERT_BASE
    assert layer_map("uniform", 6, 4) == [1, 2, 4, 5]  # rounded half up where 4 does not divide 6
    assert layer_map("pkd_skip", 12, 6) == [1, 3, 5, 7, 9]  # --fc_layer_idx 1,3,5,7,9 (PKD-Skip, 6 layers)
    assert layer_map("pkd_last", 12, 6) == [6, 7, 8, 9, 10]  # the paper's PKD-Last: teacher layers 7-11 (1-based)
    assert layer_map("pkd_last", 12, 3) == [9, 10]  # the official 3-layer student's '9,10'
    assert layer_map("first", 6, 3) == [0, 1, 2]
    with pytest.raises(UserError, match="pkd_skip needs the teacher's depth"):
        layer_map("pkd_skip", 6, 4)


def test_patience_loss_is_the_mse_of_normalised_cls_vectors():
    t, s = torch.tensor([[3.0, 4.0], [1.0, 0.0]]), torch.tensor([[0.0, 2.0], [2.0, 0.0]])
    # normalised: t -> (0.6, 0.8), (1, 0); s -> (0, 1), (1, 0); squared differences 0.36 + 0.04 + 0 + 0 over 4
    assert patience_loss(t, s).item() == pytest.approx(0.1)
    # as matches: two student layers, the weighted terms averaged over them (the official mean over layers)
    cls = [torch.randn(3, 1, 8) for _ in range(4)]
    teacher = Features(EncoderOutput(cls[-1], feature_maps=cls))
    mine = [torch.randn(3, 1, 8) for _ in range(3)]
    student = Features(EncoderOutput(mine[-1], feature_maps=mine))
    terms = evaluate(pkd_matches([1, 3], 500.0), teacher, student)
    expected = 500.0 * (patience_loss(cls[1][:, 0], mine[0][:, 0]) + patience_loss(cls[3][:, 0], mine[1][:, 0])) / 2
    assert terms["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert set(terms) == {"pkd_cls_L0", "pkd_cls_L1", "loss"}


def test_kd_reductions_by_hand():
    t, s = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[0.5, 0.5, 0.0]])
    T = 10.0
    p, q = torch.softmax(t / T, -1), torch.softmax(s / T, -1)
    kl = (p * (p / q).log()).sum().item()
    assert logit_distillation(t, s, T).item() == pytest.approx(kl * T * T, rel=1e-5)
    # BERT-PKD's KLDivLoss(reduction='mean') and TinyBERT's soft cross-entropy average over the classes too
    assert logit_distillation(t, s, T, "mean").item() == pytest.approx(kl * T * T / 3, rel=1e-5)


def test_distilbert_cosine_covers_real_tokens_only():
    torch.manual_seed(0)
    t, s = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    terms = evaluate(distilbert_matches(4, 1), Features(EncoderOutput(t, feature_maps=[None] * 3 + [t]),
                                                        attention_mask=mask),
                     Features(EncoderOutput(s, feature_maps=[s]), attention_mask=mask))
    cos = [torch.nn.functional.cosine_similarity(s[b, i], t[b, i], dim=0).item()
           for b in range(2) for i in range(5) if mask[b, i]]
    assert terms["loss"].item() == pytest.approx(float(np.mean([1 - c for c in cos])), rel=1e-5)
    s2 = s.clone()
    s2[0, 3:] = 100.0  # padding changes nothing
    again = evaluate(distilbert_matches(4, 1), Features(EncoderOutput(t, feature_maps=[None] * 3 + [t]),
                                                        attention_mask=mask),
                     Features(EncoderOutput(s2, feature_maps=[s2]), attention_mask=mask))
    assert torch.equal(terms["loss"], again["loss"])


def test_tinybert_matches_compare_masked_scores_and_projected_states():
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(BERT).eval()
    student = MobileBertForPreTraining(BERT.replace(hidden_size=48, embedding_size=48, intra_bottleneck_size=48,
                                                    num_hidden_layers=2)).eval()
    ids = torch.randint(1000, 5000, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])
    t = teacher.mobilebert(ids, mask, output_feature_maps=True, output_attentions=True)
    s = student.mobilebert(ids, mask, output_feature_maps=True, output_attentions=True)
    matches = tinybert_matches(layer_map("uniform", 4, 2), [0, 1])
    assert [(m.name, m.teacher_layer) for m in matches] == [
        ("mse_embeddings", None), ("mse_scores_L0", 1), ("mse_L0", 1), ("mse_scores_L1", 3), ("mse_L1", 3)]
    proj = torch.nn.ModuleDict({k: torch.nn.Linear(48, 96) for k in ("embeddings", "L0", "L1")})
    terms = evaluate(matches, Features(t, attention_mask=mask), Features(s, attention_mask=mask), proj)
    zero = mask[:, None, None, :] == 0
    t_scores = t.attention_scores[1].masked_fill(zero, 0.0)
    s_scores = s.attention_scores[0].masked_fill(zero, 0.0)
    assert (t.attention_scores[1][0, :, :, 4:] < -1e3).all()  # the -10000 mask the official code zeroes
    assert terms["mse_scores_L0"].item() == pytest.approx(((t_scores - s_scores) ** 2).mean().item(), rel=1e-5)
    hidden = ((proj["L1"](s.feature_maps[1]) - t.feature_maps[3]) ** 2).mean()
    assert terms["mse_L1"].item() == pytest.approx(hidden.item(), rel=1e-5)


def test_a_student_of_the_first_layers_computes_the_teachers_first_layers():
    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(BERT).eval()
    ids = torch.randint(1000, 5000, (2, 7))
    first = take_layers(teacher, [0, 1]).eval()
    assert first.config.num_hidden_layers == 2
    with torch.no_grad():
        a = teacher.mobilebert(ids, num_layers=2).last_hidden_state
        b = first.mobilebert(ids).last_hidden_state
    assert torch.equal(a, b)
    spread = take_layers(teacher, [0, 3])
    assert torch.equal(spread.mobilebert.encoder.layer[1].output.dense.weight,
                       teacher.mobilebert.encoder.layer[3].output.dense.weight)
    with pytest.raises(UserError, match="layers must be in 0..3"):
        take_layers(teacher, [0, 4])


def test_narrowing_keeps_the_neurons_the_loss_needs_and_drops_those_it_cannot_feel(small_corpus, tokenizer, tmp_path):
    """DynaBERT's importance (narrow.py) on real masked-LM batches, in MobileBERT's block (bottlenecks, 4 stacked
    FFNs, NoNorm): neurons whose output weights are zero cannot move the loss, score exactly 0, and are the ones
    dropped, a different 42 of 128 in each layer and FFN, so the narrowed model computes what the wide one did."""
    from mobilekd.data.pretraining import load_pretraining_data
    from mobilekd.models.narrow import ffn_pairs
    from mobilekd.models.presets import PRESETS

    torch.manual_seed(0)
    config = PRESETS["demo_student"].config.replace(hidden_act="gelu")  # relu: a live neuron may sit at 0 here
    model = MobileBertForPreTraining(config).eval()
    width, blocks = config.intermediate_size, model.mobilebert.encoder.layer
    dead = {(l, f): torch.arange((l + f) % 3, 126, 3) for l in range(len(blocks)) for f in range(4)}  # 42 each
    with torch.no_grad():
        for l, block in enumerate(blocks):
            for f, (_, second) in enumerate(ffn_pairs(block)):
                second.weight[:, dead[l, f]] = 0.0
    split = load_pretraining_data([small_corpus], tokenizer, 32, 0, tmp_path / "c").train
    batches = [split.batch(range(i, i + 4)) for i in (0, 4)]
    scores = neuron_importance(model, batches)
    size = width - max(len(d) for d in dead.values())
    for (l, f), d in dead.items():
        assert torch.all(scores[l][f][d] == 0) and (scores[l][f] > 0).sum() == width - len(d)
    narrow = narrow_ffns(model, size, scores).eval()
    assert narrow.config.intermediate_size == size
    assert narrow.mobilebert.encoder.layer[2].ffn[1].intermediate.dense.weight.shape == (size, config.true_hidden_size)
    b = batches[0]

    def mlm(m):
        with torch.no_grad():
            return m(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["masked_positions"]).mlm_logits

    wide_out = mlm(model)
    assert torch.allclose(wide_out, mlm(narrow), atol=1e-5)
    assert not torch.allclose(wide_out, mlm(narrow_ffns(model, size - 1, scores).eval()), atol=1e-5)  # a live one
    shifted = [scores[(l + 1) % len(scores)] for l in range(len(scores))]  # another layer's scores: wrong neurons
    assert not torch.allclose(wide_out, mlm(narrow_ffns(model, size, shifted).eval()), atol=1e-5)
    with pytest.raises(UserError, match="--intermediate-size must be in 1.."):
        narrow_ffns(model, width + 1, scores)


@pytest.fixture(scope="module")
def augmentor(tokenizer):
    torch.manual_seed(0)
    return Augmentor(MobileBertForPreTraining(BERT).eval(), tokenizer)


def test_augmentation_is_deterministic_keeps_labels_and_the_original(augmentor):
    examples = [TextExample("the film is a wonderfully unpredictable masterpiece", None, "positive", "t:1"),
                TextExample("a dull and tedious affair", None, "negative", "t:2")]
    once, twice = augmentor.augment(examples, 5, seed=3), augmentor.augment(examples, 5, seed=3)
    assert [e.text_a for e in once] == [e.text_a for e in twice]
    assert once[0] == examples[0]  # the original first
    assert {e.label for e in once if e.source.startswith("t:1")} == {"positive"}
    assert {e.label for e in once if e.source.startswith("t:2")} == {"negative"}
    assert len(once) > 2 and len({e.text_a for e in once}) == len(once)  # new and distinct
    other = augmentor.augment(examples, 5, seed=4)
    assert [e.text_a for e in other] != [e.text_a for e in once]
    cands = augmentor.candidates(["the film is a wonderfully unpredictable masterpiece"])[0]
    ws = words(augmentor.tokenizer, "the film is a wonderfully unpredictable masterpiece")
    assert set(cands) == {1, 4, 5, 6}  # film, wonderfully, unpredictable, masterpiece: stop words keep
    assert all(0 < len(c) <= 15 for c in cands.values()) and ws[1] == "film"
    # pairs: each new example changes one sentence
    pair = [TextExample("he said it was fine", "he stated it was good", "1", "p:1")]
    out = augmentor.augment(pair, 4, seed=0)
    assert all(e.text_a == pair[0].text_a or e.text_b == pair[0].text_b for e in out)


def test_a_run_waits_for_the_augmented_set_another_run_is_computing(tmp_path, tokenizer):
    """Two runs of the same augmented set started together (a benchmark's seeds): the second waits on the first's
    lock and reads its file, loading no model and computing nothing."""
    model_dir = tmp_path / "mlm"
    save_pretrained(MobileBertForPreTraining(BERT), model_dir, tokenizer)
    examples = [TextExample("a dull and tedious affair", None, "negative", "t:1")]
    loads = []

    def load(path):
        loads.append(path)
        return load_pretrained(path, "pretraining").eval(), tokenizer

    run = lambda: augmented(examples, model_dir, 3, 0, tmp_path / "cache", load)  # noqa: E731
    _, made, _ = run()  # the file, and its path: the only one under augmented/
    assert not made.cached and made.seconds >= 0 and len(loads) == 1
    path, = (tmp_path / "cache" / "augmented").glob("*.json")
    path.unlink()
    first = FileLock(f"{path}.lock")
    first.acquire()  # the first run, computing
    second = {}
    thread = threading.Thread(target=lambda: second.update(zip(("examples", "made"), run())), daemon=True)
    thread.start()
    thread.join(2.0)
    assert thread.is_alive() and not path.exists()  # waiting, not computing
    written = [TextExample("written by the first run", None, "negative", "t:1")]
    write_examples(written, path)
    first.release()
    thread.join(60)
    assert not thread.is_alive() and second["made"].cached and second["examples"] == written and len(loads) == 1
    assert second["made"] == (True, made.seconds, made.name)  # what making it cost: the seconds kept beside it
    assert run()[:2] == (written, (True, made.seconds, made.name))


def test_a_second_training_split_reads_its_seen_sentences_word_candidates_from_the_store(tmp_path, tokenizer,
                                                                                       augmentor):
    """Another seed's training split (half its sentences seen before) computes the word candidates of its new
    sentences only and reads the others from the store: what the store holds is what the variants draw from."""
    model_dir = tmp_path / "mlm"
    save_pretrained(augmentor.model, model_dir, tokenizer)
    sentences = ["the film is a wonderfully unpredictable masterpiece", "a dull and tedious affair",
                 "quiet rivers run deep", "he said it was fine", "storms batter coastal villages",
                 "children laughed loudly outside"]
    load = lambda path: (load_pretrained(path, "pretraining").eval(), tokenizer)  # noqa: E731
    cache = tmp_path / "cache"

    def run(chosen, seed):
        return augmented([TextExample(s, None, "negative", f"t:{i}") for i, s in enumerate(chosen)], model_dir, 3,
                         seed, cache, load)

    _, made, record = run(sentences[:4], 0)
    assert not made.cached and record["candidate_sentences"] == 4 and record["candidates_stored_share"] == 0
    store = CandidateStore(store_path(cache, model_dir, M, "no", "cpu"))
    assert set(store.get(sentences)) == set(sentences[:4])
    planted = sentences[4]  # a new sentence of the second split, its candidates put there by hand
    store.put({planted: {i: ["zebra"] for i in range(len(words(tokenizer, planted)))}})
    out, made, record = run(sentences[2:], 1)
    assert not made.cached and record["candidate_sentences"] == 4 and record["candidates_stored_share"] == 0.75
    variants = [e.text_a for e in out if e.source.startswith("t:2")]
    assert len(variants) > 1 and all(w in planted.split() + ["zebra"] for v in variants for w in v.split())
    assert "zebra" in " ".join(variants)
    assert set(store.get(sentences)) == set(sentences)  # the one sentence computed here, kept
    assert "candidate_sentences" not in run(sentences[2:], 1)[2]  # a cached set asks the store nothing
    # a set made through the store is the one a fresh run makes (same candidates, drawn in the words' order)
    through_store = run([sentences[0], *sentences[2:4], sentences[5]], 2)
    cache = tmp_path / "fresh"
    fresh = run([sentences[0], *sentences[2:4], sentences[5]], 2)
    assert through_store[2]["candidates_stored_share"] == 1.0 and fresh[2]["candidates_stored_share"] == 0
    assert through_store[0] == fresh[0]


def test_two_runs_over_the_same_sentences_split_the_masked_lm_pass_through_claimed_chunks(tmp_path, augmentor):
    """A run beside another over the same sentences (ship's two augmented trials on one split) computes the chunks
    no one holds, waits for the chunk the other holds, and then reads that chunk's candidates from the store rather
    than computing them: each sentence is computed once between the two. A holder that lets its chunk go without
    keeping it (a run that died) leaves the chunk to the run that waited."""
    sentences = ["the film is a wonderfully unpredictable masterpiece", "a dull and tedious affair",
                 "quiet rivers run deep", "he said it was fine", "storms batter coastal villages",
                 "children laughed loudly outside", "markets rallied after the announcement",
                 "a dull and tedious affair", "the committee postponed its vote"]
    store = CandidateStore(tmp_path / "candidates.sqlite")
    beside = CandidateStore(store.path)  # the other run's handle on the same file
    held_chunk = sentences[:2]  # the first chunk of two distinct sentences
    out = {}
    with beside.claim(held_chunk, wait=False) as held:
        assert held
        with store.claim(held_chunk, wait=False) as also:
            assert not also  # held: a run without waiting passes it by
        thread = threading.Thread(target=lambda: out.update(found=augmentor.candidates(sentences, store, chunk=2)))
        thread.start()
        for _ in range(1200):
            if store.computed == 6:
                break
            thread.join(0.1)
        assert store.computed == 6 and thread.is_alive()  # the other chunks computed; it waits on the held one
        planted = {s: {0: ["zebra"]} for s in held_chunk}
        beside.put(planted)  # what the other run computed, kept before it lets the chunk go
    thread.join(120)
    assert not thread.is_alive()
    # the held chunk's (and its sentence's repeat) read from the store, not computed again; the rest a fresh pass's
    assert out["found"][:2] == [planted[s] for s in held_chunk] and out["found"][7] == planted[sentences[1]]
    assert store.record() == {"candidate_sentences": 8, "candidates_stored_share": 0.0, "candidates_computed": 6}
    rest = [2, 3, 4, 5, 6, 8]
    assert [out["found"][i] for i in rest] == augmentor._candidates([sentences[i] for i in rest])

    alone = CandidateStore(tmp_path / "other.sqlite")
    with CandidateStore(alone.path).claim(held_chunk, wait=False):
        thread = threading.Thread(target=lambda: out.update(found=augmentor.candidates(sentences, alone, chunk=2)))
        thread.start()
        thread.join(2)
    thread.join(120)
    assert not thread.is_alive() and alone.record()["candidates_computed"] == 8
    assert out["found"][:2] == augmentor._candidates(held_chunk)


def test_each_candidate_word_is_replaced_with_probability_p(augmentor):
    sentence = " ".join(["alpha"] * 10)
    cands = {i: [f"w{i}_{k}" for k in range(50)] for i in range(10)}
    out = augmentor.variants(sentence, cands, 300, np.random.default_rng(0))
    replaced = [w != "alpha" for s in out[1:] for w in s.split()]
    assert len(out) > 250  # nearly every try is new
    assert np.mean(replaced) == pytest.approx(0.4, abs=0.03)


def saved_teacher(out, tokenizer):
    """A small random SST-2 classifier saved in `out`, and ten SST-2 training sentences encoded for it."""
    task = load_task("sst2", default_data("sst2"))
    torch.manual_seed(0)
    model = MobileBertForSequenceClassification(BERT.replace(id2label=task.id2label)).eval()
    save_pretrained(model, out, tokenizer)
    return model, encode_classification(task, task.train[:10], tokenizer, 32)


def test_teacher_outputs_are_cached_and_invalidated_when_the_teacher_changes(tmp_path, tokenizer):
    model, split = saved_teacher(tmp_path, tokenizer)
    first, made = teacher_outputs(tmp_path, model, split)
    assert not made.cached and made.seconds >= 0 and made.name.startswith("outputs/")
    assert first["teacher_logits"].shape == (10, 2) and first["teacher_cls"].shape == (10, 4, 96)
    with torch.no_grad():
        logits = model(*(torch.from_numpy(split.arrays[k]) for k in ("input_ids", "attention_mask",
                                                                      "token_type_ids")))
    assert np.allclose(first["teacher_logits"], logits.numpy(), atol=1e-5)
    again, read = teacher_outputs(tmp_path, model, split)
    assert read.cached and np.array_equal(again["teacher_cls"], first["teacher_cls"])
    assert (read.seconds, read.name) == (made.seconds, made.name)  # the computing run's seconds, read back
    with torch.no_grad():
        model.classifier.bias += 1.0
    save_pretrained(model, tmp_path, tokenizer)
    changed, remade = teacher_outputs(tmp_path, model, split)
    assert not remade.cached and remade.name != made.name
    assert np.allclose(changed["teacher_logits"], first["teacher_logits"] + 1.0, atol=1e-5)


def flipped(kept: Path) -> None:
    """Turn every choice kept in the precision file `kept` into the other precision: what a host where the other
    one pays would have kept."""
    write_json(kept, {key: {**found, "precision": "no" if found["precision"] == "bf16" else "bf16"}
                      for key, found in json.loads(kept.read_text()).items()})


def test_teacher_outputs_in_bf16_stay_near_fp32_are_cached_apart_and_auto_keeps_its_choice(tmp_path, tokenizer):
    model, split = saved_teacher(tmp_path, tokenizer)
    fp32, _ = teacher_outputs(tmp_path, model, split)
    bf16, made = teacher_outputs(tmp_path, model, split, precision="bf16")
    assert not made.cached and len(list((tmp_path / "outputs").glob("*-bf16-outputs"))) == 1  # not fp32's store
    scale = np.abs(fp32["teacher_logits"]).max()
    assert 0 < np.abs(fp32["teacher_logits"] - bf16["teacher_logits"]).max() < 0.05 * scale
    assert np.abs(fp32["teacher_cls"].astype(np.float32) - bf16["teacher_cls"].astype(np.float32)).max() < 0.1
    flags = ("no", "bf16", "fp16")  # the pass has no fp16 branch: fp32
    assert [outputs_precision(model, split, flag)["precision"] for flag in flags] == ["no", "bf16", "no"]
    kept = tmp_path / "precision.json"
    first = outputs_precision(model, split, "auto", kept)
    assert first["precision"] in ("no", "bf16") and "cached" not in first
    assert outputs_precision(model, split, "auto", kept) == {**first, "cached": True}
    assert ("fp32_seconds" in first) != ("fp32_matmul_gflops" in first)  # timed, or refused by the products alone
    flipped(kept)  # the kept choice, not a new probe, decides: the other precision's outputs, from their file
    other = outputs_precision(model, split, "auto", kept)["precision"]
    assert other != first["precision"]
    found, made = teacher_outputs(tmp_path, model, split, precision=other)
    assert made.cached and np.array_equal(found["teacher_logits"], {"no": fp32, "bf16": bf16}[other]["teacher_logits"])


def test_a_sentence_gets_the_same_candidates_alone_or_among_others_with_a_real_teachers_shape(tokenizer):
    """all-minilm-l6-v2's shape (384 wide, 6 layers) in the precision this host's probe would choose: each batch
    of at least FILL_TOKENS tokens, so a sentence computed alone (few rows) gets what it gets among 24 sentences
    (full batches). On an AMX Xeon in bf16, small batches rounded differently (`Augmentor._masked_lm`)."""
    torch.manual_seed(0)
    model = MobileBertForPreTraining(load_pretrained(model_dir("all-minilm-l6-v2")).config).eval()
    pays = bf16_products_pay(matmul_peak(torch.float32, 256, 3), matmul_peak(torch.bfloat16, 256, 3))
    augmentor = Augmentor(model, tokenizer, precision="bf16" if pays else "no")
    real = [e.text_a for e in load_task("sst2", default_data("sst2")).train[:24]]
    assert augmentor.candidates(real) == [augmentor.candidates([s])[0] for s in real]


def test_masked_lm_candidates_in_bf16_are_near_fp32s_and_their_augmented_set_is_cached_apart(tmp_path, tokenizer,
                                                                                             augmentor):
    sentences = ["the film is a wonderfully unpredictable masterpiece", "a dull and tedious affair",
                 "he said it was fine"]
    in_bf16 = Augmentor(augmentor.model, tokenizer, precision="bf16")
    queries = augmentor.median_queries(sentences)
    fp32_logits, bf16_logits = augmentor._logits(queries), in_bf16._logits(queries)
    assert 0 < (fp32_logits - bf16_logits).abs().max() < 0.05 * fp32_logits.abs().max()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # an fp32 augmentor leaves a probe's autocast on
        assert torch.equal(augmentor._logits(queries), bf16_logits)
    fp32, bf16 = augmentor.candidates(sentences), in_bf16.candidates(sentences)
    # a sentence's candidates do not depend on the sentences beside it in the pass (unpadded one-length batches),
    # in bf16 too, where padding to a longer sentence's width reorders near-tied candidates
    real = [e.text_a for e in load_task("sst2", default_data("sst2")).train[:60]]
    assert in_bf16.candidates(real) == [in_bf16.candidates([s])[0] for s in real]
    pairs = [(a, b) for f, g in zip(fp32, bf16) for a, b in ((f[i], g[i]) for i in f)]
    assert np.mean([len(set(a) & set(b)) / len(a) for a, b in pairs]) > 0.6  # mostly the same top M
    model_dir = tmp_path / "mlm"
    save_pretrained(augmentor.model, model_dir, tokenizer)
    examples = [TextExample(s, None, "negative", f"t:{i}") for i, s in enumerate(sentences)]
    loads = []

    def load(path):
        loads.append(path)
        return load_pretrained(path, "pretraining").eval(), tokenizer

    run = lambda flag, kept=None: augmented(examples, model_dir, 3, 0, tmp_path / "cache", load, flag, kept)  # noqa
    runs = {flag: run(flag) for flag in ("no", "bf16")}
    assert [runs[f][2]["precision"] for f in ("no", "bf16")] == ["no", "bf16"]
    assert not any(r[1].cached for r in runs.values()) and runs["no"][1].name != runs["bf16"][1].name
    assert len(list((tmp_path / "cache" / "augmented").glob("*-bf16.json"))) == 1 and len(loads) == 2
    kept = tmp_path / "precision.json"
    first = run("auto", kept)
    assert first[1].cached and first[0] == runs[first[2]["precision"]][0]  # the chosen precision's set, cached
    timed = "fp32_seconds" in first[2]  # the pass was timed, else bf16's products were refused first (no bf16 units)
    assert len(loads) == 2 + timed  # loaded only to time the pass
    assert run("auto", kept)[2] == {**first[2], "cached": True} and len(loads) == 2 + timed  # kept: nothing loaded
    flipped(kept)
    other = run("auto", kept)
    assert other[2]["precision"] != first[2]["precision"] and other[1].cached
    assert other[0] == runs[other[2]["precision"]][0]


def test_a_resumed_run_reads_its_checkpoints_pass_precision(tmp_path):
    args = argparse.Namespace(out=tmp_path, resume=False, mixed_precision="auto")
    assert pass_flag(args, "teacher_outputs_precision") == "auto"  # a new run: the flag
    assert pass_flag(argparse.Namespace(**{**vars(args), "mixed_precision": "fp16"}), "augment_precision") == "no"
    args.resume = True
    assert pass_flag(args, "teacher_outputs_precision") == "auto"  # nothing to resume
    (tmp_path / "checkpoint").mkdir()
    write_json(tmp_path / "checkpoint" / "trainer.json", {"run": {"teacher_outputs_precision": "bf16"}})
    assert pass_flag(args, "teacher_outputs_precision") == "bf16"
    assert pass_flag(args, "augment_precision") == "no"  # a checkpoint without the setting had the fp32 pass
    assert pass_setting({"precision": "bf16"}) == "bf16" and pass_setting({"precision": "no"}) is None


def test_a_run_waits_for_the_teacher_outputs_another_run_is_computing(tmp_path, tokenizer):
    """Two runs started together: the second waits on the first's lock and reads its segment, computing nothing."""
    model, split = saved_teacher(tmp_path, tokenizer)
    folder = tmp_path / "outputs" / outputs_key(tmp_path, True, "no")
    folder.mkdir(parents=True)
    first = FileLock(f"{folder}.lock")
    first.acquire()  # the first run, computing
    second = {}
    thread = threading.Thread(target=lambda: second.update(zip(("arrays", "made"),
                                                                teacher_outputs(tmp_path, model, split))))
    thread.start()
    thread.join(2.0)
    assert thread.is_alive() and not list(folder.glob("segment-*"))  # waiting, not computing
    written = {"teacher_logits": np.full((10, 2), 7.0, np.float32), "teacher_cls": np.zeros((10, 4, 96), np.float16)}

    def make(part, tmp):
        for name, values in written.items():
            np.save(tmp / f"{name}.npy", values)
        return {}

    _add_segment(folder, split, example_keys(split), make)
    first.release()
    thread.join(60)
    assert not thread.is_alive() and second["made"].cached
    assert np.array_equal(second["arrays"]["teacher_logits"], written["teacher_logits"])


def test_another_carve_of_the_training_set_reads_the_stored_outputs_and_adds_the_rest(tmp_path, tokenizer):
    """Outputs are stored per example: a second split sharing some examples reads those and computes the others,
    in its own order; and the seconds charged are the shares of both passes."""
    model, split = saved_teacher(tmp_path, tokenizer)
    first, made = teacher_outputs(tmp_path, model, split.subset(np.arange(6)))
    other = split.subset(np.array([9, 2, 7, 0]))  # two stored (2, 0), two new, in another order
    got, read = teacher_outputs(tmp_path, model, other)
    store = lambda name: name.rsplit("/", 1)[0]  # noqa: E731  the store, without the set's digest
    assert not read.cached and store(read.name) == store(made.name) and read.name != made.name  # one store, two sets
    assert np.array_equal(got["teacher_logits"][[1, 3]], first["teacher_logits"][[2, 0]])
    alone, _ = teacher_outputs(tmp_path / "t2", *saved_teacher(tmp_path / "t2", tokenizer)[:1], other)
    assert np.allclose(got["teacher_logits"], alone["teacher_logits"], atol=1e-5)
    again, cached = teacher_outputs(tmp_path, model, other)
    assert cached.cached and cached.seconds == read.seconds and np.array_equal(again["teacher_cls"], got["teacher_cls"])
    segments = sorted((tmp_path / "outputs" / outputs_key(tmp_path)).glob("segment-*"))
    assert [json.loads((d / "manifest.json").read_text())["examples"] for d in segments] == [6, 2]


def test_each_recipe_end_to_end_at_micro_scale(tmp_path, small_corpus, tokenizer):
    """DistilBERT and TinyBERT general distillation, then FT, KD, PKD-Skip and TinyBERT task distillation with
    augmentation, on real data with real components (a small random BERT teacher)."""
    torch.manual_seed(0)
    teacher = tmp_path / "teacher"
    save_pretrained(MobileBertForPreTraining(BERT), teacher, tokenizer)
    steps = ["--layer-steps", 2, "--pd-steps", 2, "--batch-size", 4, "--max-len", 32, "--eval-examples", 8,
             "--corpus", small_corpus, "--cache-dir", tmp_path / "c"]
    run_module("mobilekd", "init", teacher, tmp_path / "spread", "--layers", "spread:2")
    run_module("mobilekd", "init", teacher, tmp_path / "slim", "--layers", "spread:2", "--intermediate-size", 160,
               "--corpus", small_corpus, "--importance-examples", 8, "--cache-dir", tmp_path / "c")
    slim = json.loads((tmp_path / "slim" / "config.json").read_text())
    assert (slim["num_hidden_layers"], slim["intermediate_size"]) == (2, 160)
    assert json.loads((tmp_path / "slim" / "summary.json").read_text())["importance_examples"] == 8
    rows = load_pretrained(tmp_path / "slim", "pretraining").mobilebert.encoder.layer[1].intermediate.dense.weight
    blocks = load_pretrained(teacher, "pretraining").mobilebert.encoder.layer
    wide = [blocks[l].intermediate.dense.weight for l in (0, 3)]
    assert all(any(torch.equal(r, w) for w in wide[1]) for r in rows)  # student layer 1 is teacher layer 3, narrowed
    assert not any(torch.equal(r, w) for r in rows for w in wide[0])
    proc = run_module("mobilekd", "init", "demo_student", tmp_path / "no", "--intermediate-size", 160, check=False)
    assert proc.returncode != 0 and "--intermediate-size take a model directory" in one_line_error(proc)
    run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", tmp_path / "spread", "--strategy",
               "distilbert", "--out", tmp_path / "distilbert", *steps)
    summary = json.loads((tmp_path / "distilbert" / "summary.json").read_text())
    assert summary["total_steps"] == 6 and {"kd_ce", "mlm", "cos"} <= set(summary["stages"][0]["end"])
    narrow = tmp_path / "narrow"
    save_pretrained(MobileBertForPreTraining(BERT.replace(hidden_size=48, embedding_size=48,
                                                          intra_bottleneck_size=48, num_hidden_layers=2)),
                    narrow, tokenizer)
    run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", narrow, "--strategy", "tinybert",
               "--layer-map", "uniform", "--out", tmp_path / "tinybert", *steps)
    ends = json.loads((tmp_path / "tinybert" / "summary.json").read_text())["stages"][0]["end"]
    assert {"mse_embeddings", "mse_scores_L1", "mse_L1"} <= set(ends)

    ft = ["--task", "sst2", "--max-train-examples", 24, "--subset-seed", 0, "--epochs", 1, "--batch-size", 8,
          "--max-len", 32, "--eval-every", 0, "--threads", 1, "--cache-dir", tmp_path / "c"]
    run_module("mobilekd.recipes.finetune", "--model", teacher, *ft, "--out", tmp_path / "t_sst2")
    proc = run_module("mobilekd.recipes.finetune", "--model", tmp_path / "distilbert", "--teacher",
                      tmp_path / "t_sst2", "--method", "pkd-skip", *ft, "--out", tmp_path / "pkd")
    assert "computed and cached" in proc.stdout
    result = json.loads((tmp_path / "pkd" / "results.json").read_text())
    assert result["method"] == "pkd-skip" and result["complete"]
    taught_by = json.loads((tmp_path / "t_sst2" / "results.json").read_text())["metrics"]["dev"]
    assert result["teacher_dev"] == taught_by and len(result["teacher_digest"]) == 16  # the teacher that taught it
    from benchmarks.rows import finetune_rows
    assert {r["metric"]: r["teacher_value"] for r in finetune_rows(tmp_path / "pkd")} == {
        m: round(v, 4) for m, v in taught_by.items()}
    proc = run_module("mobilekd.recipes.finetune", "--model", tmp_path / "distilbert", "--teacher",
                      tmp_path / "t_sst2", "--method", "kd", *ft, "--out", tmp_path / "kd")
    assert "from the cache" in proc.stdout  # one teacher pass per training set, whatever the method
    made, read = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("pkd", "kd"))
    assert made["shared_outputs"] == read["shared_outputs"] and made["outputs_made_seconds"] > 0  # its cost kept ...
    assert read["outputs_made_seconds"] == made["outputs_made_seconds"]  # ... read back (at this size, reading the
    # store costs what computing did: the saving is measured at scale, benchmarks.teacher_store)
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "tinybert", "--teacher", tmp_path / "t_sst2",
               "--method", "tinybert", "--augment", 2, "--augment-model", teacher, *ft, "--out", tmp_path / "tiny")
    result = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert result["augment_precision"] in ("no", "bf16") and result["teacher_outputs_precision"] in ("no", "bf16")
    assert result["set_made_seconds"] > 0 and result["set_seconds"] >= result["set_made_seconds"]  # it made the set
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "tinybert", "--teacher", tmp_path / "t_sst2",
               "--method", "tinybert", "--augment", 2, "--augment-model", teacher, *ft, "--max-steps", 1,
               "--out", tmp_path / "tiny2")
    again = json.loads((tmp_path / "tiny2" / "results.json").read_text())  # read from the cache: its making's cost
    assert (again["shared_set"], again["set_made_seconds"]) == (result["shared_set"], result["set_made_seconds"])
    # the teacher's layer features: computed once into its store by the first run, read by the second
    assert (result["teacher_store_hit_rate"], again["teacher_store_hit_rate"]) == (0, 1)
    assert again["teacher_store"] == result["teacher_store"] and again["teacher_store_bytes"] > 0
    assert result["teacher_store_made_seconds"] == again["teacher_store_made_seconds"] > 0
    assert again["set_seconds"] < result["set_made_seconds"]
    assert result["train_examples"] > 24 and result["steps"] == 2 * int(np.ceil(result["train_examples"] / 8))
    # MobileBERT's objectives in TinyBERT's two steps: one PKT stage a student layer (lower layers frozen), through
    # a projection where widths differ (the student's 128 against the teacher's 96), then the prediction step
    mobile = tmp_path / "mobile"
    save_pretrained(MobileBertForPreTraining(PRESETS["demo_student"].config), mobile, tokenizer)
    run_module("mobilekd.recipes.finetune", "--model", mobile, "--teacher", tmp_path / "t_sst2", "--method", "pkt-td",
               *ft, "--intermediate-epochs", 4, "--out", tmp_path / "pkt_td")
    result = json.loads((tmp_path / "pkt_td" / "results.json").read_text())
    stages = result["training"]
    assert [st["stage"] for st in stages] == [f"intermediate_L{l}" for l in range(4)] + ["finetune"]
    student = MobileBertForSequenceClassification(PRESETS["demo_student"].config)
    for l in (1, 3):  # a stage trains its layer and its projection alone
        own = sum(p.numel() for n, p in student.named_parameters() if n.startswith(f"mobilebert.encoder.layer.{l}."))
        assert stages[l]["trainable_params"] == own + 128 * 96 + 96
        assert {m.split("_L")[-1] for m in stages[l]["matches"]} == {str(l)}
    assert result["complete"] and result["steps"] == 4 * 3 + 3  # 4 epochs of 3 steps over 4 stages, then 1 epoch
    # on a regression task too its prediction step fits the teacher's outputs (alpha 0), not the labels: a departure
    # from task_distill.py (mobilekd/finetune/methods.py)
    stsb = [("stsb" if a == "sst2" else a) for a in ft]
    run_module("mobilekd.recipes.finetune", "--model", teacher, *stsb, "--out", tmp_path / "t_stsb")
    run_module("mobilekd.recipes.finetune", "--model", tmp_path / "tinybert", "--teacher", tmp_path / "t_stsb",
               "--method", "tinybert", *stsb, "--out", tmp_path / "tiny_stsb")
    run = json.loads((tmp_path / "tiny_stsb" / "checkpoint" / "trainer.json").read_text())["run"]
    assert (run["alpha"], run["temperature"], run["intermediate"]) == (0.0, 1.0, True)
    proc = run_module("mobilekd.recipes.finetune", "--model", tmp_path / "distilbert", "--method", "pkd-last", *ft,
                      "--out", tmp_path / "x", check=False)
    assert "--method pkd-last needs --teacher" in one_line_error(proc)
