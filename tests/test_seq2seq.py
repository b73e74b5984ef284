"""C-MLM (issue 36): the teacher's masking and soft targets, the student's loss by hand, decoding, the shipped and
the user's pairs, and a micro run from a masked LM to a `.tflite` that decodes as PyTorch does."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from helpers import BERT, one_line_error, run_module
from mobilekd.data.cmlm import CMLMSplit, copy_masks
from mobilekd.data.noise import add_noise
from mobilekd.data.pairs import load_pairs
from mobilekd.data.seq2seq import PairSplit, encode_pairs
from mobilekd.finetune.cmlm import copies_pass, pass_precision, soft_targets
from mobilekd.models.decoding import beam_search, decode_split, greedy
from mobilekd.models.heads import MobileBertForConditionalMLM
from mobilekd.models.hf import save_pretrained
from mobilekd.models.seq2seq import DecoderCache, Seq2SeqTransformer, load_seq2seq, new_seq2seq
from mobilekd.bf16 import probe_inference
from mobilekd.errors import UserError
from mobilekd.transfer import losses
from mobilekd.transfer.losses import ROWS_PER_PASS, cmlm_distillation, label_smoothed_nll, neg_log_probs


def pairs_split(tokenizer, sources, targets):
    """Word-piece ids by hand: each target gets [SEP] appended, 0 pads."""
    src = np.zeros((len(sources), max(map(len, sources))), np.int64)
    tgt = np.zeros((len(targets), max(map(len, targets)) + 1), np.int64)
    for i, (s, t) in enumerate(zip(sources, targets)):
        src[i, :len(s)] = s
        tgt[i, :len(t) + 1] = [*t, tokenizer.sep_token_id]
    return PairSplit({"source_ids": src, "target_ids": tgt}, tokenizer.cls_token_id)


def pairs_folder(folder, task: str, train: int, dev: int):
    """A user's `--task pairs --data` folder: the first `train` and `dev` pairs of a shipped task, as JSON lines."""
    folder.mkdir()
    shipped = load_pairs(task)
    for name, pairs in (("train", shipped.train[:train]), ("dev", shipped.dev[:dev])):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"source": p.source, "target": p.target}) + "\n"
                                                      for p in pairs))
    return folder


def test_copies_predict_every_target_position_once():
    assert [m.tolist() for m in copy_masks(10)] == [[0, 7], [1, 8], [2, 9], [3], [4], [5], [6]]
    assert [m.tolist() for m in copy_masks(3)] == [[0], [1], [2]]


def test_cmlm_masks_only_the_target_and_its_final_sep(tokenizer):
    split = CMLMSplit(pairs_split(tokenizer, [[2000, 2001]], [[2002, 2003]]), tokenizer, seed=0)
    cls, sep, mask = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
    original = [cls, 2000, 2001, sep, 2002, 2003, sep]
    final_sep_masked = 0
    for epoch in range(60):
        b = split.batch([0], epoch)
        ids, positions, labels = b["input_ids"][0].tolist(), b["masked_positions"][0], b["masked_labels"][0]
        assert b["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 1]
        chosen = positions[positions >= 0].tolist()
        assert chosen and set(chosen) <= {4, 5, 6}  # at least one, target positions only
        assert labels[labels >= 0].tolist() == [original[p] for p in chosen]
        assert ids == [mask if p in chosen else t for p, t in enumerate(original)]  # always [MASK]
        final_sep_masked += 6 in chosen
    assert 0 < final_sep_masked < 60


def test_soft_targets_are_each_position_predicted_with_its_copy_masked(tokenizer):
    torch.manual_seed(0)
    teacher = MobileBertForConditionalMLM(BERT).eval()
    targets = [[2010, 2011], list(range(2020, 2029))]  # 3 and 10 positions with [SEP]: one and two per copy
    split = pairs_split(tokenizer, [[2000, 2001, 2002], [2003]], targets)
    found = copies_pass(teacher, split, tokenizer, k=4)
    for i, (source, target) in enumerate(zip([[2000, 2001, 2002], [2003]], targets)):
        target = [*target, tokenizer.sep_token_id]
        for j in range(len(target)):  # by hand: the sequence with every position of j's copy masked
            seq = [tokenizer.cls_token_id, *source, tokenizer.sep_token_id] + [
                tokenizer.mask_token_id if q % 7 == j % 7 else t for q, t in enumerate(target)]
            types = [0] * (len(source) + 2) + [1] * len(target)
            with torch.no_grad():
                logits = teacher(torch.tensor([seq]), torch.ones(1, len(seq), dtype=torch.long),
                                 torch.tensor([types]), torch.tensor([[len(source) + 2 + j]]))[0]
            values, ids = logits.topk(4)
            assert found["teacher_topk_ids"][i, j].tolist() == ids.tolist()
            np.testing.assert_allclose(found["teacher_topk_logits"][i, j], values.numpy(), rtol=1e-4, atol=1e-5)
            assert np.isclose(found["gold_logprob"][i, j], logits.log_softmax(-1)[target[j]].item(), atol=1e-5)
        assert not found["teacher_topk_ids"][i, len(target):].any()  # padding stays 0


def test_the_copies_pass_in_bf16_keeps_the_teachers_choices_and_its_soft_targets_apart(tokenizer, tmp_path):
    torch.manual_seed(0)
    teacher = MobileBertForConditionalMLM(BERT).eval()
    save_pretrained(teacher, tmp_path / "teacher", tokenizer, "cmlm")
    rng = np.random.default_rng(0)
    sources = [rng.integers(2000, 9000, n).tolist() for n in rng.integers(3, 12, 24)]
    split = pairs_split(tokenizer, sources, [rng.integers(2000, 9000, n).tolist() for n in rng.integers(2, 12, 24)])
    real = split.arrays["target_ids"] != split.pad
    fp32, bf16 = (copies_pass(teacher, split, tokenizer, k=4, precision=p) for p in ("no", "bf16"))
    # bf16's rounding moves the logits a little and may swap near-ties, not the teacher's first choice as a rule
    assert 0 < np.abs(fp32["teacher_topk_logits"] - bf16["teacher_topk_logits"])[real].max() < 0.1
    assert (fp32["teacher_topk_ids"][..., 0] == bf16["teacher_topk_ids"][..., 0])[real].mean() > 0.9
    cached = {p: soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4, p) for p in ("no", "bf16")}
    assert not any(found[1] for found in cached.values())  # computed each, none read from the other's file
    assert np.array_equal(cached["bf16"][0]["teacher_topk_ids"], bf16["teacher_topk_ids"])
    assert len(list((tmp_path / "teacher" / "outputs").glob("cmlm_*.safetensors"))) == 2
    # a flag is obeyed; auto probes once per host and pass, and keeps its choice
    assert [pass_precision(teacher, split, tokenizer, flag)["precision"] for flag in ("no", "bf16")] == ["no", "bf16"]
    kept = tmp_path / "precision.json"
    first = pass_precision(teacher, split, tokenizer, "auto", kept)
    again = pass_precision(teacher, split, tokenizer, "auto", kept)
    assert first["precision"] in ("no", "bf16") and "cached" not in first
    assert again == {**first, "cached": True}
    assert ("fp32_seconds" in first) != ("fp32_matmul_gflops" in first)  # timed, or refused by the products alone


def test_the_inference_probe_times_each_precision_under_its_own_autocast():
    seen = []
    timed = probe_inference(lambda: seen.append(torch.is_autocast_enabled("cpu")), torch.device("cpu"),
                            products_first=False)
    assert sorted(seen) == [False] * 3 + [True] * 3  # one warm-up and two timed passes each
    assert timed["precision"] in ("no", "bf16") and timed["fp32_seconds"] >= 0 and timed["repeats"] == 2
    assert probe_inference(lambda: seen.append(None), torch.device("cpu"), "bf16") == {
        "precision": "bf16", "why": "--mixed-precision bf16"} and None not in seen  # a flag: nothing timed


def test_distillation_and_label_smoothed_losses_by_hand():
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    logits = p.log() + torch.tensor([[1.0], [-3.0]])  # a constant per row: the same distribution
    picked, every = neg_log_probs(logits, torch.tensor([[3, 3, 1], [0, 0, 1]]))  # gold, then the teacher's top 2
    w = math.e / (math.e + 1)  # softmax([10, 0] / 10)
    kd = cmlm_distillation(picked[:1, 1:], torch.tensor([[10.0, 0.0]]), temperature=10.0)
    assert kd.item() == pytest.approx(-(w * math.log(0.4) + (1 - w) * math.log(0.2)), rel=1e-5)
    xe = label_smoothed_nll(picked[:1, 0], every[:1], smoothing=0.1, vocab=4)
    by_hand = 0.9 * -math.log(0.4) + 0.1 / (4 - 2) * -sum(math.log(x) for x in (0.1, 0.2, 0.3, 0.4))
    assert xe.item() == pytest.approx(by_hand, rel=1e-5)
    assert label_smoothed_nll(picked[:, 0], every, 0.0, 4).item() == pytest.approx(-math.log(0.4) - math.log(0.25),
                                                                                  rel=1e-6)


def test_soft_targets_made_in_shares_are_the_whole_pass_put_together_by_the_first_reader(tokenizer, tmp_path):
    """Shares 1 and 2 of 2 (every other batch of the pass each, cached apart; as two processes make them side by
    side) give the pass's rows bit for bit; the first call without a share puts them together into the whole
    cache file, charged what the shares cost, and the next reads that file."""
    torch.manual_seed(0)
    teacher = MobileBertForConditionalMLM(BERT).eval()
    save_pretrained(teacher, tmp_path / "teacher", tokenizer, "cmlm")
    rng = np.random.default_rng(1)
    n = 40  # batches of 16, 16 and 8 pairs: share 1 takes the first and the last, share 2 the second
    split = pairs_split(tokenizer, [rng.integers(2000, 9000, m).tolist() for m in rng.integers(3, 12, n)],
                        [rng.integers(2000, 9000, m).tolist() for m in rng.integers(2, 12, n)])
    whole = copies_pass(teacher, split, tokenizer, k=4)
    shares = [soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4, shard=(i, 2)) for i in range(2)]
    assert [len(found["pairs"]) for found, _, _ in shares] == [24, 16] and not any(c for _, c, _ in shares)
    assert sorted(np.concatenate([found["pairs"] for found, _, _ in shares]).tolist()) == list(range(n))
    for found, _, _ in shares:
        assert np.array_equal(found["teacher_topk_ids"], whole["teacher_topk_ids"][found["pairs"]])
    outputs = tmp_path / "teacher" / "outputs"
    assert len(list(outputs.glob("cmlm_*.share*of2.safetensors"))) == 2
    put, cached, seconds = soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4)
    assert cached and seconds == pytest.approx(sum(s for _, _, s in shares))  # the teacher ran no more
    for key in ("teacher_topk_ids", "teacher_topk_logits"):
        assert np.array_equal(put[key], whole[key])
    again, cached, _ = soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4)
    assert cached and np.array_equal(again["teacher_topk_logits"], whole["teacher_topk_logits"])
    for share in outputs.glob("cmlm_*.share*"):
        share.unlink()
    third, cached, _ = soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4, shard=(2, 3))
    assert cached and not list(outputs.glob("cmlm_*.share*"))  # a share of a whole already made: its rows, read
    assert np.array_equal(third["teacher_topk_ids"], whole["teacher_topk_ids"][third["pairs"]])
    with pytest.raises(UserError, match="share 4 of 4 of the soft targets has no batch"):
        soft_targets(tmp_path / "teacher", teacher, split, tokenizer, 4, shard=(3, 4))  # 3 batches


def test_the_log_partition_form_has_the_log_softmax_forms_values_and_gradients(monkeypatch):
    """`neg_log_probs` (lse - z, in blocks of ROWS_PER_PASS rows: here two and a part) against -log_softmax
    gathered, at the teacher's vocabulary size: the same loss and the same gradient, so the fast form changes
    nothing the student learns, and the logits are left as they were; in float64, float32 and bf16 (autocast's,
    whose gradient comes back in bf16, as the float32 form's cast back gives it)."""
    torch.manual_seed(0)
    rows = 2 * ROWS_PER_PASS + 3
    start = torch.randn(rows, 30522, dtype=torch.float64) * 4
    ids = torch.randint(0, 30522, (rows, 9))
    ids[0, 1:3] = ids[0, 0]  # the gold token among the teacher's too, twice: the gradient sums over repeats
    weights = torch.rand(rows, 9, dtype=torch.float64)

    def both(dtype):
        z = start.to(dtype).requires_grad_()
        kept = z.detach().clone()
        picked, every = neg_log_probs(z, ids)
        fast = (picked * weights).sum() + 0.01 * every.sum()
        (fast_grad,) = torch.autograd.grad(fast, z)
        assert torch.equal(z.detach(), kept)  # backward wrote into no input
        logp = z.to(torch.promote_types(dtype, torch.float32)).log_softmax(-1)
        slow = -(logp.gather(-1, ids) * weights).sum() - 0.01 * logp.sum()
        (slow_grad,) = torch.autograd.grad(slow, z)
        assert fast_grad.dtype == dtype
        return fast.item(), slow.item(), fast_grad, slow_grad

    fast, slow, fast_grad, slow_grad = both(torch.float64)
    assert fast == pytest.approx(slow, rel=1e-10)
    torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-9, atol=1e-12)
    for dtype, rtol in ((torch.float32, 1e-4), (torch.bfloat16, 1.6e-2)):  # float32: the two forms' rounding
        fast, slow, fast_grad, slow_grad = both(dtype)
        assert fast == pytest.approx(slow, rel=1e-5)
        torch.testing.assert_close(fast_grad, slow_grad, rtol=rtol, atol=1e-5)
    monkeypatch.setattr(losses, "ROWS_PER_PASS", rows)  # one block: the blocks change no bit
    assert both(torch.bfloat16)[0] == fast and torch.equal(both(torch.bfloat16)[2], fast_grad)


def test_a_beam_of_one_is_greedy_decoding(tokenizer):
    torch.manual_seed(0)
    model = new_seq2seq("seq2seq_micro", tokenizer, max_positions=20).eval()
    split = pairs_split(tokenizer, [[2000, 2001, 2002], [2003, 2004], [2005]], [[2010], [2011], [2012]])
    b = split.batch(range(3))
    assert beam_search(model, b["input_ids"], b["attention_mask"], 12, beam=1) == \
        greedy(model, b["input_ids"], b["attention_mask"], 12)


def test_the_decoding_output_layer_gives_the_trained_ones_logits_and_follows_the_table_as_it_changes(tokenizer):
    """`step_logits` (PyTorch decoding's output layer: at one row, a transposed copy of the table) gives `logits`'
    values, at one row and at several, and after an optimizer step changes the table in place it reads the new
    table, not its old copy; with gradients on (training) the table itself gets its gradient, as through `logits`;
    a table made under `torch.inference_mode` (no version to follow) takes `logits`."""
    torch.manual_seed(0)
    model = Seq2SeqTransformer(dataclasses.replace(new_seq2seq("seq2seq_micro", tokenizer).config,
                                                   embedding_size=16)).eval()
    one, several = torch.randn(1, 32), torch.randn(5, 32)
    with torch.no_grad():
        for states in (one, several):
            torch.testing.assert_close(model.step_logits(states), model.logits(states), rtol=1e-5, atol=1e-5)
        before = model.step_logits(one)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model.logits(one).logsumexp(-1).sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = model.step_logits(one)
        torch.testing.assert_close(after, model.logits(one), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after, before)
    model.zero_grad()
    model.step_logits(one).logsumexp(-1).sum().backward()  # gradients on: the tied table's own product
    through_step = model.embeddings.weight.grad.clone()
    model.zero_grad()
    model.logits(one).logsumexp(-1).sum().backward()
    assert through_step.abs().sum() > 0
    torch.testing.assert_close(through_step, model.embeddings.weight.grad)
    with torch.inference_mode():
        made_there = Seq2SeqTransformer(model.config).eval()
        torch.testing.assert_close(made_there.step_logits(one), made_there.logits(one))


@pytest.mark.parametrize("width", [None, 16])  # OpenNMT-py's layout, and a table narrower than the model
def test_the_cached_decoder_computes_what_the_whole_prefix_gives(tokenizer, width):
    """`decode_step` with its key/value cache gives `decode`'s state at each position, and greedy and beam search
    through it give the tokens they give over the whole prefix, on the correction task's real dev sources."""
    torch.manual_seed(0)
    model = new_seq2seq("seq2seq_micro", tokenizer, max_positions=64).eval()
    if width:
        model = Seq2SeqTransformer(dataclasses.replace(model.config, embedding_size=width)).eval()
    dev, _ = encode_pairs(load_pairs("correction").dev[:48], tokenizer, 64, refuse_long=False)
    b = dev.batch(range(48))
    prefix = torch.randint(1000, 2000, (48, 12))
    with torch.no_grad():
        memory = model.encode(b["input_ids"], b["attention_mask"])
        whole = model.decode(memory, b["attention_mask"], prefix)
        cache = DecoderCache(len(model.decoder))
        steps = torch.stack([model.decode_step(memory, b["attention_mask"], prefix[:, t], cache) for t in range(12)], 1)
    torch.testing.assert_close(steps, whole, rtol=1e-5, atol=1e-5)
    assert cache.position == 12 and cache.layers[0]["self"][0].shape == (48, 2, 12, 16)
    inputs = (b["input_ids"], b["attention_mask"], 24)
    assert greedy(model, *inputs, cache=True) == greedy(model, *inputs, cache=False)
    # the exported graph's decode: fixed-size caches written slot by slot give the same logits
    from mobilekd.export.seq2seq import Decode, Encode, cache_shape

    one = {k: v[:1].int() for k, v in b.items() if k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        encoded, kept = Encode(model)(**one), DecoderCache(len(model.decoder))
        keys = values = torch.zeros(cache_shape(model, 12))
        memory = model.encode(one["input_ids"].long(), one["attention_mask"].long())
        for step in range(12):
            token = prefix[:1, step].int()
            got = Decode(model)(encoded["memory_keys"], encoded["memory_values"], one["attention_mask"], token,
                                torch.tensor([step], dtype=torch.int32), keys, values)
            keys, values = got["keys"], got["values"]
            mine = model.logits(model.decode_step(memory, one["attention_mask"].long(), token.long(), kept))
            torch.testing.assert_close(got["logits"], mine, rtol=1e-5, atol=1e-5)
    assert beam_search(model, *inputs, beam=3, cache=True) == beam_search(model, *inputs, beam=3, cache=False)


def test_the_cached_file_and_the_earlier_whole_prefix_file_decode_as_pytorch(tokenizer, tmp_path):
    """Both file formats through the app's loop (`GreedyFile`) give PyTorch's greedy tokens; the earlier format's
    files still run."""
    from mobilekd.export.seq2seq import GreedyFile, convert_seq2seq

    torch.manual_seed(0)
    model = new_seq2seq("seq2seq_micro", tokenizer, max_positions=20).eval()
    sources = [[2000, 2001, 2002], [2003, 2004], [2005, 2006, 2007, 2008]]
    b = pairs_split(tokenizer, sources, [[2010]] * 3).batch(range(3))
    mine = greedy(model, b["input_ids"], b["attention_mask"], 12)
    for cache in (True, False):
        path = convert_seq2seq(model, 12, 12, tmp_path / f"{cache}.tflite", cache=cache)
        runner = GreedyFile(path, model.config.bos_token_id, model.config.eos_token_id)
        assert runner.cached == cache and runner.target_len == 12
        assert [runner(s)[0] for s in sources] == mine


def test_beam_search_on_the_file_gives_pytorchs_hypotheses(tokenizer, tmp_path):
    """The app's beam search over the cached file (`GreedyFile.beam_search`: one row's caches per hypothesis) and
    over the earlier whole-prefix file give PyTorch's beam search's tokens on real correction dev sources, and
    beam 4 differs from greedy decoding somewhere there (so the comparison can fail)."""
    from mobilekd.export.seq2seq import beam_parity, convert_seq2seq

    torch.manual_seed(0)
    model = new_seq2seq("seq2seq_micro", tokenizer, max_positions=24).eval()
    dev, _ = encode_pairs(load_pairs("correction").dev[:48], tokenizer, 24, refuse_long=False)
    for cache in (True, False):
        path = convert_seq2seq(model, 24, 24, tmp_path / f"{cache}.tflite", cache=cache)
        report, outputs, mine = beam_parity(model, path, dev, beam=4)
        assert report["identical"] == 1.0 and outputs == mine and report["beam"] == 4 and report["pairs"] == len(dev)
    assert mine != decode_split(model, dev, 24)


def test_paraphrase_pairs_keep_dev_sentences_out_of_training():
    task = load_pairs("paraphrase")
    assert (len(task.train), len(task.dev)) == (3772, 543)
    dev = {" ".join(s.lower().split()) for p in task.dev for s in (p.source, p.target)}
    assert not any(" ".join(s.lower().split()) in dev for p in task.train for s in (p.source, p.target))


def test_correction_noise_is_seeded_and_changes_about_one_word_in_seven():
    task = load_pairs("correction")
    assert len(task.dev) == 1000 and not {p.target for p in task.dev} & {p.target for p in task.train}
    sample = task.dev[:300]
    assert all(p.source != p.target for p in sample)
    changed = sum(len(set(p.target.split()) - set(p.source.split())) for p in sample) / sum(
        len(p.target.split()) for p in sample)
    assert 0.1 < changed < 0.2, changed
    assert add_noise(sample[0].target, 0, 7) == add_noise(sample[0].target, 0, 7) != add_noise(sample[0].target, 1, 7)


def test_a_validation_carve_keeps_pairs_that_share_a_sentence_on_one_side():
    """Paraphrase's training pairs (a pair and its reverse share a group) and correction's: seeded, about the
    fraction asked, no sentence on both sides; refused in one line when shared sentences link every pair."""
    from mobilekd.data.pairs import TextPair
    from mobilekd.finetune.selection import carve_pairs

    for name in ("paraphrase", "correction"):
        pairs = load_pairs(name).train[:3000]
        carved = carve_pairs(pairs, seed=0, fraction=0.1)
        assert carved.record["size"] == len(carved.validation) and 290 <= len(carved.validation) <= 300
        assert len(carved.train) + len(carved.validation) == len(pairs)
        sides = [{s for p in side for s in (p.target, p.source)} for side in (carved.train, carved.validation)]
        assert not sides[0] & sides[1]
        assert carve_pairs(pairs, seed=0, fraction=0.1).validation == carved.validation
        assert carve_pairs(pairs, seed=1, fraction=0.1).validation != carved.validation
    with pytest.raises(UserError, match="none fits a validation split"):
        carve_pairs([TextPair(f"source {i}", "the one target") for i in range(10)], seed=0)
    # one large group beside small ones: the split stays within the size asked (whole groups only)
    lopsided = [TextPair(f"source {i}", "the big target") for i in range(90)] + \
        [TextPair(f"alone {i}", f"target {i}") for i in range(10)]
    assert all(len(carve_pairs(lopsided, seed=s, fraction=0.1).validation) == 10 for s in range(20))


@pytest.mark.parametrize("rows, problem", [
    ("source\ttext\nhello there\tgeneral kenobi\n", "train.tsv:2: record has no 'target' field"),
    ("source\ttarget\nhello there\tgeneral kenobi\nthe quick fox\t\n", "train.tsv:3: empty target"),
    ("source\ttarget\nhello there\tgeneral kenobi\nhi\t" + "word " * 20 + "\n",
     "train.tsv:3: the target is 21 word pieces with [SEP], over --max-len 8"),
])
def test_bad_pair_files_are_refused_in_one_line(tmp_path, rows, problem):
    (tmp_path / "train.tsv").write_text(rows)
    (tmp_path / "dev.tsv").write_text("source\ttarget\nhello\tgeneral\n")
    proc = run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", tmp_path, "--method", "ce",
                      "--max-len", 8, "--max-steps", 1, "--out", tmp_path / "out", check=False)
    assert problem in one_line_error(proc)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_micro_cmlm_run_from_a_masked_lm_to_a_tflite_that_decodes_as_pytorch(demo_teacher_dir, tmp_path):
    data = pairs_folder(tmp_path / "pairs", "paraphrase", 48, 12)
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    run_module("mobilekd", "cmlm", "--teacher", demo_teacher_dir, "--task", "pairs", "--data", data, "--max-len", 48,
               "--max-steps", 6, "--batch-size", 8, "--out", teacher)
    scored = json.loads((teacher / "results.json").read_text())
    assert scored["complete"] and 0 <= scored["metrics"]["dev"]["token_accuracy"] <= 1
    # the teacher's soft targets alone, as a plan runs them once the teacher exists, in two shares side by side:
    # cached, no student
    for i in (1, 2):
        run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher", teacher,
                   "--max-len", 48, "--soft-targets-only", "--soft-targets-share", f"{i}/2", "--out",
                   tmp_path / f"soft{i}")
    soft = [json.loads((tmp_path / f"soft{i}" / "results.json").read_text()) for i in (1, 2)]
    assert all(s["complete"] and not s["cached_before"] and s["soft_target_seconds"] > 0 for s in soft)
    assert [s["share"] for s in soft] == ["1/2", "2/2"] and sum(s["share_pairs"] for s in soft) == 48
    assert soft[0]["train_pairs"] == 48 and not (tmp_path / "soft1" / "model.safetensors").exists()
    proc = run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher",
                      teacher, "--preset", "seq2seq_micro", "--max-len", 48, "--max-steps", 30, "--lr", "3e-3",
                      "--batch-size", 8, "--beam", 2, "--out", student)
    assert "C-MLM soft targets over 48 training pairs: from the cache" in proc.stdout
    result = json.loads((student / "results.json").read_text())
    assert result["complete"] and {"dev", "dev_beam", "dev_copy"} <= set(result["metrics"])
    losses = result["training"][0]
    assert losses["end"]["kd"] < losses["start"]["kd"] and losses["end"]["xe"] < losses["start"]["xe"]
    assert list((teacher / "outputs").glob("cmlm_*.safetensors"))  # the soft targets, cached
    run_module("mobilekd", "export", "--model", student, "--parity-examples", 12, "--quantize", "none",
               "dynamic-int8", "--out", tmp_path / "tflite")
    reports = json.loads((tmp_path / "tflite" / "parity.json").read_text())
    parity, int8 = reports["model_seq2seq.tflite"], reports["model_seq2seq_dynamic_int8.tflite"]
    assert parity["pairs"] == 12 and parity["identical"] == 1.0
    beam = parity["beam_search"]  # the beam the student was scored with (--beam 2), run on the file too
    assert beam["beam"] == 2 and beam["pairs"] == 12 and beam["identical"] == 1.0
    assert beam["scores"]["file"] == beam["scores"]["pytorch"] and beam["host_ms"]["per_sentence"] > 0
    card = (tmp_path / "tflite" / "README.md").read_text()  # the model card: BLEU in the file beside PyTorch's
    assert "pipeline_tag: text2text-generation" in card and "| model_seq2seq.tflite |" in card and "BLEU" in card
    assert parity["scores"]["file"] == parity["scores"]["pytorch"] == int8["scores"]["pytorch"]
    assert parity["flex_or_custom_ops"] == [] and parity["host_ms"]["per_token"] > 0
    assert int8["pairs"] == 12 and 0 <= int8["identical"] <= 1 and int8["size_bytes"] < 0.5 * parity["size_bytes"]
    from mobilekd.host import identity
    assert parity["host"]["id"] == identity()["id"]  # the machine its milliseconds were measured on
    assert parity["model"] == int8["model"] == str(student)  # which model each file was made from
    run_module("mobilekd", "export", "--model", student, "--parity-examples", 4, "--quantize", "fp16", "--out",
               tmp_path / "fp16")
    assert [p.name for p in (tmp_path / "fp16").glob("*.tflite")] == ["model_seq2seq_fp16.tflite"]
    assert not list((tmp_path / "fp16").glob(".float-*"))  # the float file made to be quantized is gone

    # `mobilekd latency` times and estimates the file per generated sentence
    from android_bench.host import load_runner, random_inputs
    from android_bench.report import _params
    from mobilekd.export.graph import read_graph
    from mobilekd.export.seq2seq import GENERATED_TOKENS, sentence_graph

    path = tmp_path / "tflite" / "model_seq2seq.tflite"
    runner = load_runner(path, 1)
    assert len(runner(**random_inputs(runner.inputs))) == GENERATED_TOKENS
    encode, decode = read_graph(path, 0), read_graph(path, 1)
    assert len(sentence_graph(path)) == len(encode) + GENERATED_TOKENS * len(decode)
    params = sum(p.numel() for p in load_seq2seq(student).parameters())
    assert abs(_params(sentence_graph(path)) - params / 1e6) <= 0.1  # the shared table counted once


def test_a_student_with_a_validation_split_is_evaluated_there_and_scores_dev_once(tmp_path):
    """--validation-fraction: every evaluation (history.json) reads the validation split carved from the training
    pairs, the final greedy and beam scores of the choice are there too, and dev is scored once, at the end."""
    data = pairs_folder(tmp_path / "pairs", "correction", 64, 8)
    out = tmp_path / "student"
    run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "ce", "--preset",
               "seq2seq_micro", "--max-len", 48, "--max-steps", 8, "--eval-every", 4, "--batch-size", 8, "--beam", 2,
               "--validation-fraction", 0.25, "--out", out)
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] and result["evaluated_on"] == "validation"
    assert {"validation", "validation_beam", "dev", "dev_beam", "dev_copy"} <= set(result["metrics"])
    from mobilekd.rundir import dev_scores

    assert dev_scores(result["metrics"]) == result["metrics"]["dev"]  # what the model card and the rows read
    held = result["validation_split"]["size"]
    assert 12 <= held <= 20 and result["train_pairs"] == 64 - held
    history = json.loads((out / "history.json").read_text())
    assert [h["step"] for h in history] == [4, 8] and all(set(h["metrics"]) == {"validation"} for h in history)
    assert len((out / "validation_generations.jsonl").read_text().splitlines()) == held
    assert len((out / "dev_generations.jsonl").read_text().splitlines()) == 8


def test_a_resumed_run_knows_its_data_by_content_and_a_tsv_has_no_quoting(tmp_path):
    """Two --data folders of as many pairs differ in their digest (what a checkpoint's run settings hold, so a
    resume onto other files is refused); a TSV's quote is text and a row is a line; a JSON side that is no text is
    refused at its line."""
    from mobilekd.data.pairs import files_digest, read_pairs
    from mobilekd.errors import UserError

    a, b = pairs_folder(tmp_path / "a", "correction", 8, 4), pairs_folder(tmp_path / "b", "paraphrase", 8, 4)
    digests = {files_digest(load_pairs("pairs", folder)) for folder in (a, b, a)}
    assert len(digests) == 2
    tsv = tmp_path / "quoted.tsv"
    tsv.write_text('source\ttarget\n"Yes," she said.\tShe agreed.\n"Hi there\tfoo\nsecond\tbar\n')
    assert [(p.source, p.target) for p in read_pairs(tsv)] == [('"Yes," she said.', "She agreed."),
                                                               ('"Hi there', "foo"), ("second", "bar")]
    jsonl = tmp_path / "typed.jsonl"
    jsonl.write_text(json.dumps({"source": "ok", "target": "fine"}) + "\n" + json.dumps({"source": 1, "target": "x"}))
    with pytest.raises(UserError, match=r"typed.jsonl:2: source is int, not a text"):
        read_pairs(jsonl)


def test_a_cmlm_teacher_and_its_student_hold_out_the_same_validation_pairs(demo_teacher_dir, tmp_path):
    """`mobilekd cmlm --validation-fraction F --validation-seed S` trains the teacher without a carved split and
    scores it there (what a choice of its learning rate reads) and on dev; a student of another --seed with the same
    F and S holds out the very same pairs, so its validation split is one its teacher never trained on."""
    data = pairs_folder(tmp_path / "pairs", "correction", 64, 8)
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    split = ["--validation-fraction", 0.25, "--validation-seed", 0]
    run_module("mobilekd", "cmlm", "--teacher", demo_teacher_dir, "--task", "pairs", "--data", data, "--max-len", 48,
               "--max-steps", 2, "--batch-size", 8, *split, "--out", teacher)
    scored = json.loads((teacher / "results.json").read_text())
    assert list(scored["metrics"]) == ["dev", "validation"]  # dev first: what the rows and the card read
    assert scored["best_score"] == scored["metrics"]["validation"]["token_accuracy"]
    run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher", teacher,
               "--preset", "seq2seq_micro", "--max-len", 48, "--max-steps", 2, "--batch-size", 8, "--seed", 1, *split,
               "--out", student)
    result = json.loads((student / "results.json").read_text())
    assert result["validation_split"] == scored["validation_split"] and result["validation_split"]["seed"] == 0
    assert result["train_pairs"] == scored["train_pairs"] == 64 - scored["validation_split"]["size"]
    generated = (student / "validation_generations.jsonl").read_text().splitlines()
    sources = {json.loads(line)["source"] for line in generated}
    from mobilekd.data.pairs import load_pairs
    from mobilekd.finetune.selection import carve_pairs

    held = carve_pairs(load_pairs("pairs", data).train, 0, 0.25).validation
    assert sources == {p.source for p in held}
    # without --validation-seed a student holds out what its teacher did; with another seed it is refused, as is a
    # split when the teacher held none out
    run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher", teacher,
               "--preset", "seq2seq_micro", "--max-len", 48, "--max-steps", 1, "--batch-size", 8, "--seed", 2,
               "--validation-fraction", 0.25, "--out", tmp_path / "default")
    assert json.loads((tmp_path / "default" / "results.json").read_text())["validation_split"]["seed"] == 0
    other = run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher",
                       teacher, "--preset", "seq2seq_micro", "--max-len", 48, "--max-steps", 1, "--seed", 2,
                       "--validation-fraction", 0.25, "--validation-seed", 2, "--out", tmp_path / "other", check=False)
    assert (f"{teacher / 'results.json'}: the teacher held out {{'rule'" in one_line_error(other) and
            "pass --validation-seed 0 --validation-fraction 0.25 (the teacher's)" in one_line_error(other))
    assert not (tmp_path / "other" / "model.safetensors").exists()
    bad = run_module("mobilekd", "cmlm", "--teacher", demo_teacher_dir, "--task", "pairs", "--data", data,
                     "--validation-fraction", 1.5, "--out", tmp_path / "bad", check=False)
    assert "--validation-fraction must lie in [0, 1), got 1.5" in one_line_error(bad)
    bad = run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "ce",
                     "--soft-targets-only", "--out", tmp_path / "bad-soft", check=False)
    assert "--soft-targets-only needs --method cmlm" in one_line_error(bad)
    assert not (tmp_path / "bad-soft").exists()
    bad = run_module("mobilekd", "seq2seq", "--task", "pairs", "--data", data, "--method", "cmlm", "--teacher",
                     teacher, "--soft-targets-only", "--soft-targets-share", "3/2", "--out", tmp_path / "bad-share",
                     check=False)
    assert "--soft-targets-share takes I/N with 1 <= I <= N (such as 1/2), got '3/2'" in one_line_error(bad)
    assert not (tmp_path / "bad-share").exists()


def test_a_seq2seq_directory_that_does_not_fit_is_refused_in_one_line(tokenizer, tmp_path):
    from mobilekd.errors import UserError
    from mobilekd.models.seq2seq import save_seq2seq

    save_seq2seq(new_seq2seq("seq2seq_micro", tokenizer, max_positions=20), tmp_path, tokenizer)
    assert load_seq2seq(tmp_path).config.d_model == 32
    config = json.loads((tmp_path / "seq2seq.json").read_text())
    (tmp_path / "seq2seq.json").write_text(json.dumps({**config, "d_model": 48, "heads": 4}))
    with pytest.raises(UserError, match=r"model.safetensors: does not hold this seq2seq.json's weights: .* is \("):
        load_seq2seq(tmp_path)
    (tmp_path / "seq2seq.json").write_text(json.dumps(config))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(UserError, match="model.safetensors: not a readable safetensors file"):
        load_seq2seq(tmp_path)


def test_a_transformers_bert_for_masked_lm_starts_a_cmlm_teacher_with_its_own_logits(tokenizer, tmp_path):
    import transformers

    from mobilekd.recipes.cmlm import load_masked_lm

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64)
    theirs = transformers.BertForMaskedLM(config).eval()
    theirs.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ours = load_masked_lm(tmp_path)[0].eval()
    ids = torch.randint(1000, 2000, (2, 8))
    with torch.no_grad():
        mine = ours(ids, torch.ones_like(ids), torch.zeros_like(ids), torch.arange(8).expand(2, -1)).view(2, 8, -1)
        assert (mine - theirs(input_ids=ids).logits).abs().max() < 1e-5
