"""A MobileBERT-shaped student started from its teacher's weights through the bottleneck (mobilekd/transfer/inherit.py),
on the packaged all-MiniLM-L6-v2 and real text."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import one_line_error, run_module
from mobilekd.data.pretraining import load_pretraining_data
from mobilekd.data.tokenizer import load_tokenizer
from mobilekd.models.heads import MobileBertForPreTraining
from mobilekd.models.hf import load_pretrained
from mobilekd.models.pretrained import model_dir
from mobilekd.transfer.inherit import feature_error
from mobilekd.transfer.strategies import copy_shared_weights


@pytest.mark.parametrize("preset", ["mobilebert_h384_l4", "mobilebert_tiny_h384_l4"])
def test_a_student_started_from_the_teacher_computes_its_feature_maps_far_better_than_a_random_one(
        tmp_path, small_corpus, preset):
    """MobileBERT's block (shared Q/K bottleneck, V from the feature map, 4 FFNs) and MobileBERT_TINY's (Q, K, V
    from the bottleneck, 2 FFNs), 4 blocks from 6 teacher layers: on held-out text each block's output is much
    nearer its teacher layer's than the random start's (embeddings and heads copied, as distill starts it)."""
    teacher_dir = model_dir("all-minilm-l6-v2")
    out = tmp_path / "student"
    run_module("mobilekd", "init", preset, out, "--from-teacher", "all-minilm-l6-v2", "--importance-examples", 16,
               "--corpus", small_corpus, "--cache-dir", tmp_path / "c")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["layer_map"] == [1, 2, 4, 5] and summary["examples"] == 16 and summary["embedding_norm"] == "fitted"
    teacher = load_pretrained(teacher_dir, "pretraining").eval()
    student = load_pretrained(out, "pretraining").eval()
    heldout = load_pretraining_data([small_corpus], load_tokenizer(teacher_dir), 128, 0, tmp_path / "c").heldout
    batches = [heldout.batch(range(i, min(i + 8, len(heldout)))) for i in range(0, min(16, len(heldout)), 8)]
    torch.manual_seed(0)
    random = MobileBertForPreTraining(student.config).eval()
    copy_shared_weights(teacher, random)
    started, fresh = (feature_error(teacher, m, summary["layer_map"], batches) for m in (student, random))
    assert all(s < 0.85 for s in started), started
    assert all(f > 0.95 for f in fresh), fresh  # the random start predicts no better than the teacher's mean
    assert all(s < f - 0.2 for s, f in zip(started, fresh)), (started, fresh)


def test_a_student_the_start_is_not_defined_for_is_refused_before_its_directory_is_made(tmp_path):
    out = tmp_path / "wide"
    proc = run_module("mobilekd", "init", "mobilebert", out, "--from-teacher", "all-minilm-l6-v2", check=False)
    assert proc.returncode != 0 and "widths differ (teacher 384, student 512" in one_line_error(proc)
    assert not out.exists()
    proc = run_module("mobilekd", "init", model_dir("all-minilm-l6-v2"), out, "--from-teacher", "all-minilm-l6-v2",
                      check=False)
    assert proc.returncode != 0 and "--from-teacher takes a preset" in one_line_error(proc) and not out.exists()


def test_distill_inherit_starts_the_preset_from_the_teacher_in_the_same_run(tmp_path, small_corpus, tokenizer):
    """`distill --student PRESET --inherit`: the start fitted over the run's own training examples, then PKT; a
    directory student (started already) and a strategy with no teacher layer for each block are refused in one
    line, before OUT is made."""
    from helpers import BERT
    from mobilekd.models.hf import save_pretrained

    torch.manual_seed(0)
    teacher = tmp_path / "teacher"  # a 384-wide BERT with its MLM and NSP heads, 4 layers
    wide = BERT.replace(hidden_size=384, embedding_size=384, intra_bottleneck_size=384, intermediate_size=1536)
    save_pretrained(MobileBertForPreTraining(wide), teacher, tokenizer)
    steps = ["--layer-steps", 1, "--pd-steps", 1, "--batch-size", 4, "--max-len", 32, "--eval-examples", 8,
             "--corpus", small_corpus, "--cache-dir", tmp_path / "c", "--threads", 1]
    run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", "mobilebert_tiny_h384_l4", "--inherit",
               "--inherit-examples", 8, "--out", tmp_path / "student", *steps)
    summary = json.loads((tmp_path / "student" / "summary.json").read_text())
    fit = summary["inherited"]
    assert fit["layer_map"] == [0, 1, 2, 3] and len(fit["relative_error"]) == 4 and max(fit["relative_error"]) < 1
    assert [s["stage"] for s in summary["stages"]] == ["pkt_L0", "pkt_L1", "pkt_L2", "pkt_L3", "pd"]
    proc = run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", tmp_path / "student",
                      "--inherit", "--out", tmp_path / "again", *steps, check=False)
    assert proc.returncode != 0 and "--inherit starts a preset" in one_line_error(proc)
    proc = run_module("mobilekd.recipes.distill", "--teacher", teacher, "--student", "mobilebert_tiny_h384_l4",
                      "--inherit", "--strategy", "distilbert", "--out", tmp_path / "again", *steps, check=False)
    assert proc.returncode != 0 and "--strategy distilbert maps none" in one_line_error(proc)
    assert not (tmp_path / "again").exists()


def test_with_a_full_basis_and_every_head_the_attention_is_the_teachers_exactly(tmp_path, tokenizer):
    """At the teacher's width and heads the basis is complete and no head is dropped, so the student's attention
    output before its norm is the teacher's (pre-LayerNorm) in the basis, to rounding: the projections of queries,
    keys, values and output, and their biases, are checked exactly (the start's fits cannot hide an error there)."""
    from helpers import BERT
    from mobilekd.models.presets import PRESETS
    from mobilekd.transfer.inherit import inherit

    torch.manual_seed(0)
    teacher = MobileBertForPreTraining(BERT).eval()  # 96 wide, 12 heads of 8, FFN 192, 4 layers
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # biases and norms away from their initial values
    config = PRESETS["demo_student"].config.replace(hidden_size=96, embedding_size=96, trigram_input=False,
                                                    embedding_transformation=False, intra_bottleneck_size=96,
                                                    num_attention_heads=12, intermediate_size=96,
                                                    num_feedforward_networks=2)
    student = MobileBertForPreTraining(config).eval()
    ids = torch.randint(1000, 5000, (4, 20))
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    inherit(teacher, student, [0, 1, 2, 3], [batch])
    with torch.no_grad():
        x = teacher.mobilebert.embeddings(ids, batch["token_type_ids"])  # the teacher's block 0 input
        t_block, s_block = teacher.mobilebert.encoder.layer[0], student.mobilebert.encoder.layer[0]
        t_ctx, _ = t_block.attention.self(x, x, x, teacher.mobilebert.block_mask(mask, x.dtype), False)
        t_pre = t_block.attention.output.dense(t_ctx) + x
        q_in, k_in, v_in, residual = s_block.bottleneck(x)
        s_ctx, _ = s_block.attention.self(q_in, k_in, v_in, student.mobilebert.block_mask(mask, x.dtype), False)
        s_pre = s_block.attention.output.dense(s_ctx) + residual
        expected = s_block.bottleneck.input.dense(t_pre)  # P^T (t_pre - mu): the input bottleneck is that map
    keep = mask.bool()
    assert (s_pre[keep] - expected[keep]).abs().max() < 1e-4 * expected[keep].abs().max()


def test_task_transfer_teaches_every_student_with_one_teacher_on_the_students_own_examples(tmp_path):
    """benchmarks.task_transfer's plan: transfer_curve's start and plain runs (found made there), one teacher per
    task fine-tuned on the very examples the students see (at the teacher's learning rate, which wins), and the KD
    and PKT-TD students of each seed taught by it from that start."""
    import argparse

    from benchmarks import task_transfer, teacher_value, transfer_curve

    plan = {j.name: j for j in task_transfer.jobs(tmp_path, ["mrpc"], [0, 1])}
    shared = {j.name: j.argv for j in transfer_curve.jobs(tmp_path, ["mrpc"], [0, 1])}
    shared_long = {j.name: j.argv for j in transfer_curve.jobs(
        tmp_path, ["mrpc"], [0, 1], argparse.Namespace(steps=[3000], transfer_only=True))}
    assert {"teacher", "distill/pkt-100", "mrpc/pkt-100/0", "mrpc/pkt-100/1"} <= set(plan)
    assert all(plan[n].argv == shared[n] for n in ("teacher", "distill/pkt-100", "mrpc/pkt-100/0"))
    assert not {"pkt-300", "pkt-1000"} & {part for n in plan for part in n.split("/")}
    assert plan["mrpc/pkt-3000-td/1"].needs == ["distill/pkt-3000", "mrpc/teacher"]
    assert plan["distill/pkt-3000"].argv == shared_long["distill/pkt-3000"]
    for preset in task_transfer.SHAPES:  # the other shapes' starts: the same transfer but for the student
        start = plan[f"distill/pkt-3000-{preset}"].argv
        assert start == [preset if a == "mobilebert_h384_l4" else a for a in plan["distill/pkt-3000"].argv
                         ][:-1] + [str(tmp_path / f"pkt-3000-{preset}")]
        assert plan[f"mrpc/pkt-3000-{preset}-td/0"].needs == [f"distill/pkt-3000-{preset}", "mrpc/teacher"]
    teacher = plan["mrpc/teacher"].argv

    def last(argv, flag):
        return argv[len(argv) - 1 - argv[::-1].index(flag) + 1]

    assert last(teacher, "--lr") == teacher_value.TEACHER_LR and last(teacher, "--seed") == "0"
    for m, method in (("pkt-100-kd", "kd"), ("pkt-100-td", "pkt-td")):
        for seed in (0, 1):
            job = plan[f"mrpc/{m}/{seed}"]
            argv = job.argv
            assert last(argv, "--method") == method and last(argv, "--seed") == str(seed)
            assert last(argv, "--teacher") == str(tmp_path / "mrpc" / "teacher")
            assert last(argv, "--model") == str(tmp_path / "pkt-100")
            assert set(job.needs) == {"distill/pkt-100", "mrpc/teacher"}
            for flag in ("--max-train-examples", "--subset-seed", "--epochs", "--max-len"):
                assert last(argv, flag) == last(teacher, flag) == last(shared["mrpc/pkt-100/0"], flag)
    tinybert = plan["mrpc/tinybert-100-td/1"]  # TinyBERT_4 at the same 500 transfer steps, the same teacher
    assert last(tinybert.argv, "--model") == str(tmp_path / "tinybert-100") and last(tinybert.argv, "--method") == \
        "tinybert" and last(tinybert.argv, "--teacher") == str(tmp_path / "mrpc" / "teacher")
    transfer = plan["distill/tinybert-100"].argv
    assert (last(transfer, "--strategy"), last(transfer, "--layer-steps"), last(transfer, "--pd-steps")) == \
        ("tinybert", "100", "100")


def test_a_transfer_made_on_a_gpu_machine_travels_within_its_limits_and_joins_the_curve(tmp_path, student_dir):
    """benchmarks.transfer_curve --transfer-only plans the teacher and the transfers alone (the GPU machine's part);
    benchmarks.device_files brings a run folder back in parts a returned file may hold, its training state left
    behind, its weights fp32 again within bf16's rounding, and the plan here then takes the transfer as done."""
    import argparse
    import shutil

    from safetensors.torch import load_file

    from benchmarks import device_files, transfer_curve
    from mobilekd.errors import UserError
    from mobilekd.rundir import completed

    args = argparse.Namespace(steps=[3000], transfer_only=True)
    plan = transfer_curve.jobs(tmp_path, ["mrpc"], [0], args)
    assert [j.name for j in plan] == ["teacher", "distill/pkt-3000"]
    full = {j.name for j in transfer_curve.jobs(tmp_path, ["mrpc"], [0], argparse.Namespace(steps=[3000],
                                                                                           transfer_only=False))}
    assert {"mrpc/pkt-3000/0"} < full

    run = tmp_path / "pkt-3000"  # a finished transfer, as the GPU machine leaves it
    shutil.copytree(student_dir, run)
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "optimizer.bin").write_bytes(b"\0" * 1024)
    (run / "complete.json").write_text(json.dumps({"argv": plan[1].argv[1:], "started": "now"}))
    with pytest.raises(UserError, match="not finished"):  # a run still going has no weights of its own yet
        device_files.pack(run, tmp_path / "out" / "pkt-3000")
    (run / "complete.json").write_text(json.dumps({"argv": plan[1].argv[1:], "finished": "now"}))
    parts = device_files.pack(run, tmp_path / "out" / "pkt-3000")
    assert parts and all(p.stat().st_size <= device_files.PART_BYTES for p in parts)
    back = tmp_path / "here" / "pkt-3000"
    device_files.unpack(tmp_path / "out" / "pkt-3000", back)
    assert not (back / "checkpoint").exists() and (back / "travelled.json").is_file()
    assert completed(back, plan[1].argv[1:])
    before, after = load_file(str(run / "model.safetensors")), load_file(str(back / "model.safetensors"))
    assert before.keys() == after.keys()
    for k in before:
        assert after[k].dtype == before[k].dtype
        torch.testing.assert_close(after[k], before[k], rtol=2 ** -8, atol=0)  # bf16 keeps 8 significant bits
        assert torch.equal(after[k], before[k].to(torch.bfloat16).to(before[k].dtype))
