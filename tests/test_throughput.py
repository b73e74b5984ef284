"""Where the training loop's time goes (issue 33): length-grouped batches stay a pure function of (seed, step) and
cut SST-2's padding; the precision probe leaves the run as it found it; a fine-tuning run records its precision,
probe and padding; benchmarks.throughput writes its rows."""

import json
import shutil

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from benchmarks.rows import finetune_rows
from helpers import run_module
from mobilekd.data.tasks import encode_classification, load_task, task_data, training_subset
from mobilekd.finetune.evaluation import build_model
from mobilekd.finetune.objective import task_loss
from mobilekd.train.loop import POOL_BATCHES, Batches
from mobilekd.host import cpu_flags, cpu_model, identity
from mobilekd.train.precision import PROBE_ROUNDS, probe_precision, probe_sample


def _sst2(tokenizer, n=3000):
    task = load_task("sst2", task_data("sst2", None))
    return task, encode_classification(task, training_subset(task.train, n, 0), tokenizer, 64)


def test_length_grouped_batches_are_a_permutation_and_cut_the_padding(tokenizer):
    task, split = _sst2(tokenizer)
    accelerator = Accelerator(cpu=True)
    B = 32
    n_steps = 3 * len(split) // B + 5  # three epochs and more: epochs 1 and 2 start mid-batch (3000 % 32 != 0)
    grouped = Batches(split, B, accelerator, 1, seed=7, order="length-grouped")
    plain = Batches(split, B, accelerator, 1, seed=7, order="random")
    # every epoch is a permutation of the examples, and the same (seed, step) gives the same batch
    for epoch in range(3):
        order = np.array([grouped._index(epoch * len(split) + i)[1] for i in range(len(split))])
        assert sorted(order.tolist()) == list(range(len(split)))
    again = Batches(split, B, accelerator, 1, seed=7, order="length-grouped")
    for step in (0, 93, 94, 200, n_steps - 1):
        a, b = next(grouped.micro_batches(step)), next(again.micro_batches(step))
        assert all(torch.equal(a[k], b[k]) for k in a)

    def padding(batches):
        real = padded = 0
        for step in range(n_steps):
            mask = next(batches.micro_batches(step))["attention_mask"]
            real, padded = real + int(mask.sum()), padded + mask.numel()
        return 1 - real / padded

    assert padding(plain) > 0.5  # SST-2's short sentences in random batches of 32: mostly padding
    assert padding(grouped) < 0.1
    # the batches are shuffled: lengths do not rise steadily through a pool of POOL_BATCHES batches
    widths = [next(grouped.micro_batches(s))["attention_mask"].shape[1] for s in range(POOL_BATCHES)]
    assert widths != sorted(widths)


def test_two_processes_split_a_grouped_batch_as_one_process_reads_it(tokenizer):
    task, split = _sst2(tokenizer, 500)
    one = Batches(split, 16, Accelerator(cpu=True), 2, seed=1, order="length-grouped")  # 2 accumulation steps

    class Rank:  # a process of two, as Accelerate describes it
        def __init__(self, rank):
            self.num_processes, self.process_index = 2, rank

    ranks = [Batches(split, 16, Rank(r), 1, seed=1, order="length-grouped") for r in (0, 1)]
    for step in (0, 31, 32, 60):
        whole = [row for b in one.micro_batches(step) for row in b["input_ids"].tolist()]
        parts = [row for b in ranks for row in next(b.micro_batches(step))["input_ids"].tolist()]
        strip = lambda rows: sorted(tuple(x for x in r if x) for r in rows)  # noqa: E731
        assert strip(whole) == strip(parts)


def test_the_precision_probe_leaves_no_gradient_and_the_rng_as_it_was(student_dir, tokenizer):
    task, split = _sst2(tokenizer, 200)
    model = build_model(student_dir, task, classifier_dropout=0.1).train()
    batches = [split.batch(range(i * 16, (i + 1) * 16)) for i in range(2)]
    torch.manual_seed(3)
    state = torch.get_rng_state()
    found = probe_precision(task_loss(task, None, None), model, batches, Accelerator(cpu=True))
    if "fp32_matmul_gflops" in found:  # a host whose bf16 matrix product is slower: decided without a step
        assert found["precision"] == "no" and found["bf16_matmul_gflops"] < 0.9 * found["fp32_matmul_gflops"]
    # the step's own timing, which decides where bf16's matrix product is faster
    found = probe_precision(task_loss(task, None, None), model, batches, Accelerator(cpu=True), matmul_first=False)
    assert found["fp32_seconds"] > 0 and found["bf16_seconds"] > 0
    assert found["precision"] == ("bf16" if found["bf16_seconds"] < 0.9 * found["fp32_seconds"] else "no")
    assert 2 <= found["rounds"] <= PROBE_ROUNDS  # this small student's passes, well under a second, in rounds
    assert torch.equal(torch.get_rng_state(), state)
    assert all(p.grad is None for p in model.parameters())


def test_the_probe_times_three_batches_at_the_sixths_of_the_windows_sizes(tokenizer):
    task, split = _sst2(tokenizer, 800)
    order = Batches(split, 16, Accelerator(cpu=True), 1, seed=0, order="length-grouped")
    window = [next(order.micro_batches(s)) for s in range(24)]
    sizes = sorted(b["input_ids"].numel() for b in window)
    assert sizes[0] * 2 < sizes[-1]  # neighbouring batches of a length-grouped order differ several-fold
    chosen = [b["input_ids"].numel() for b in probe_sample(window)]
    assert chosen == [sizes[4], sizes[12], sizes[20]]  # the 1/6, 1/2 and 5/6 quantiles of the window's sizes


def test_a_fine_tuning_run_records_its_precision_and_padding(student_dir, tmp_path):
    out = tmp_path / "ft"
    run_module("mobilekd.recipes.finetune", "--model", student_dir, "--task", "sst2", "--out", out,
               "--max-train-examples", 256, "--batch-size", 16, "--max-len", 32, "--max-steps", 8, "--threads", 1)
    [stage] = json.loads((out / "results.json").read_text())["training"]
    probe = stage["precision_probe"]
    assert stage["precision"] == probe["precision"] in ("no", "bf16")
    assert probe.get("batches") == 3 or "fp32_matmul_gflops" in probe
    assert stage["batch_order"] == "length-grouped" and 0 <= stage["padding_share"] < 0.3
    # the host its seconds were measured on, which a benchmark's rows carry beside their train_seconds
    assert stage["cpu"] == cpu_model() and stage["threads"] == 1
    assert stage["host"] == identity() and stage["host"]["cpu_flags"] == cpu_flags()
    assert finetune_rows(out)[0]["cpu"] == cpu_model()
    assert finetune_rows(out)[0]["host"] == identity()["id"] and finetune_rows(out)[0]["host_fields"] == identity()
    # a run brought back from a lent GPU without its weights: the same rows, its parameters counted from its config
    rows = finetune_rows(out)
    away = tmp_path / "away"
    shutil.copytree(out, away, ignore=shutil.ignore_patterns("*.safetensors", "checkpoint*"))
    assert not (away / "model.safetensors").exists()
    assert finetune_rows(away) == rows and rows[0]["params"] > 0 and "gpu" not in rows[0]


def test_the_throughput_benchmark_writes_rows_per_path_and_variant(tmp_path):
    results = tmp_path / "throughput.json"
    run_module("benchmarks.throughput", "--paths", "finetune", "--steps", 2, "--warmup", 1, "--profile-steps", 1,
               "--examples", 300, "--compile-paths", "--results", results)
    rows = json.loads(results.read_text())
    assert all({"path", "variant", "cpu", "threads", "precision", "metric", "value"} <= set(r) for r in rows)
    got = {(r["path"], r["variant"], r["metric"]) for r in rows}
    peak = {r["precision"]: r["value"] for r in rows if r["path"] == "host"}
    bf16 = ("bf16",) if peak["bf16"] >= 0.9 * peak["fp32"] else ()  # timed only where bf16's products are faster
    assert any(r["variant"] == "bf16" for r in rows) == bool(bf16)
    for variant in ("baseline", "length_grouped", "fused_adamw", "lazy_embeddings", *bf16, "default"):
        for metric in ("real_tokens_per_second", "useful_gflops", "peak_gflops", "fraction_of_peak",
                       "padding_share"):
            assert ("finetune", variant, metric) in got
    assert ("finetune", "default", "outside_matmul_share") in got
    assert {("host", "matmul peak fp32", "peak_gflops"), ("host", "matmul peak bf16", "peak_gflops")} <= got
    value = {(r["variant"], r["metric"]): r["value"] for r in rows if r["path"] == "finetune"}
    assert value[("baseline", "padding_share")] > 0.4 > value[("length_grouped", "padding_share")]
    assert value[("baseline", "speedup")] == 1.0
    assert not any(r["variant"] in ("layer_inputs", "torch_compile") for r in rows)  # not a distillation path


def _embedding_steps(optimizer_cls, sparse: bool, batches, **kw):
    torch.manual_seed(0)
    table = torch.nn.Embedding(6, 3, sparse=sparse)
    head = torch.nn.Linear(3, 1)
    optimizer = optimizer_cls([{"params": [table.weight, *head.parameters()], "weight_decay": 0.01}], lr=0.1, **kw)
    for ids in batches:
        optimizer.zero_grad(set_to_none=True)
        head(table(torch.tensor(ids))).pow(2).sum().backward()
        optimizer.step()
    return table.weight.detach(), head.weight.detach(), optimizer


@pytest.mark.parametrize("fused", [None, True])
def test_lazy_adamw_is_adamw_for_rows_in_every_batch_and_leaves_the_others(fused):
    from mobilekd.train.lazy_adamw import LazyAdamW

    every = [[0, 1, 2, 3, 4, 5, 1]] * 4  # every row each step (row 1 twice): the lazy rule is AdamW's
    dense, dense_head, _ = _embedding_steps(torch.optim.AdamW, False, every, fused=fused)
    lazy, lazy_head, _ = _embedding_steps(LazyAdamW, True, every, fused=fused)
    assert torch.allclose(dense, lazy, atol=1e-6) and torch.allclose(dense_head, lazy_head, atol=1e-6)
    # rows 4 and 5 never in a batch: not moved, no moments (dense AdamW's weight decay would move them)
    start, _, _ = _embedding_steps(LazyAdamW, True, [])
    table, _, optimizer = _embedding_steps(LazyAdamW, True, [[0, 1], [2, 3], [0, 3]])
    assert torch.equal(table[4:], start[4:]) and not torch.equal(table[:4], start[:4])
    state = optimizer.state[optimizer.param_groups[0]["params"][0]]
    assert state["exp_avg"][4:].abs().sum() == 0 and state["exp_avg_sq"][1].sum() > 0
    # its state is AdamW's: it loads into a fresh optimizer and continues alike
    again = LazyAdamW(optimizer.param_groups[0]["params"], lr=0.1)
    again.load_state_dict(optimizer.state_dict())
    assert torch.equal(again.state[again.param_groups[0]["params"][0]]["exp_avg"], state["exp_avg"])


@pytest.mark.parametrize("fused", [None, True])
def test_a_kept_table_gradient_is_adamws_update_in_one_buffer(fused):
    """--kept-table-gradient (the default): the table's sparse gradient added into a kept dense buffer gives torch's
    AdamW on the dense gradient, rows never in a batch moved by its weight decay alike; the buffer is the same
    memory every step (no fresh allocation)."""
    from mobilekd.train.lazy_adamw import LazyAdamW

    batches = [[0, 1], [2, 3, 3], [0, 3]]  # rows 4 and 5 never read; row 3 twice in one batch
    dense, dense_head, _ = _embedding_steps(torch.optim.AdamW, False, batches, fused=fused)
    kept, kept_head, optimizer = _embedding_steps(LazyAdamW, True, batches, fused=fused, lazy_rows=False)
    assert torch.allclose(dense, kept, atol=1e-6) and torch.allclose(dense_head, kept_head, atol=1e-6)
    start, _, _ = _embedding_steps(torch.optim.AdamW, False, [])
    assert not torch.equal(kept[4:], start[4:])  # weight decay moved them, as dense AdamW does
    (buffer,) = optimizer._kept.values()
    address = buffer.data_ptr()
    table = optimizer.param_groups[0]["params"][0]
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.embedding(torch.tensor([1, 5]), table, sparse=True).sum().backward()
    optimizer.step()
    assert table.grad.is_sparse and optimizer._kept[id(table)].data_ptr() == address
    assert optimizer._kept[id(table)][[1, 5]].eq(1).all() and optimizer._kept[id(table)].sum() == 6  # only them


def test_a_kept_table_gradient_only_where_it_is_adamws_and_lazy_rows_never_under_fp16(tmp_path):
    from mobilekd.errors import UserError
    from mobilekd.models.heads import MobileBertForSequenceClassification
    from mobilekd.models.presets import PRESETS
    from mobilekd.train.loop import TrainConfig, sparse_embeddings

    model = MobileBertForSequenceClassification(PRESETS["demo_student"].config)
    table = model.sparse_embeddings()[0]
    for settings, processes, device, sparse in (({}, 1, "cpu", True), ({}, 2, "cpu", False), ({}, 1, "cuda", False),
                                                ({"optimizer": "lamb"}, 1, "cpu", False),
                                                ({"mixed_precision": "fp16"}, 1, "cpu", False),
                                                ({"kept_table_gradient": False}, 1, "cpu", False),
                                                ({"embedding_updates": "lazy"}, 1, "cuda", True)):
        assert sparse_embeddings(model, TrainConfig(out_dir=tmp_path, **settings), processes, device) == sparse
        assert table.sparse == sparse
    with pytest.raises(UserError, match="--embedding-updates lazy does not combine with --mixed-precision fp16"):
        sparse_embeddings(model, TrainConfig(out_dir=tmp_path, embedding_updates="lazy", mixed_precision="fp16"), 1)


def test_a_stage_that_raises_leaves_the_table_as_it_came(student_dir, tokenizer, tmp_path):
    """A stage that raises (here from on_eval) ends run_plan mid-stage: the word table it gave a sparse gradient is
    dense again, as the model came (an exported graph has no use for sparse gradients)."""
    from mobilekd.train.loop import Stage, TrainConfig, run_plan

    task, split = _sst2(tokenizer, 64)
    model = build_model(student_dir, task)
    (table,) = model.sparse_embeddings()
    seen = []

    def stops(model, step):
        seen.append(table.sparse)
        raise RuntimeError("stopped")

    stage = Stage(name="finetune", steps=4, loss=task_loss(task, None, None), lr=1e-4)
    cfg = TrainConfig(out_dir=tmp_path, global_batch_size=16, eval_every=2, mixed_precision="no")
    with pytest.raises(RuntimeError, match="stopped"):
        run_plan([stage], model, split, cfg, Accelerator(cpu=True), on_eval=stops)
    assert seen == [True] and not table.sparse  # sparse while it trained, dense after


def test_clipping_with_a_sparse_gradient_is_torchs_on_the_dense_one():
    from mobilekd.train.lazy_adamw import clip_grad_norm

    torch.manual_seed(0)
    grads = {}
    for sparse in (True, False):
        table, head = torch.nn.Embedding(6, 3, sparse=sparse), torch.nn.Linear(3, 1)
        torch.manual_seed(1)
        for m in (table, head):
            for p in m.parameters():
                torch.nn.init.normal_(p)
        (10 * head(table(torch.tensor([0, 2, 2, 5])))).sum().backward()
        params = [table.weight, *head.parameters()]
        norm = clip_grad_norm(params, 1.0) if sparse else torch.nn.utils.clip_grad_norm_(params, 1.0)
        grads[sparse] = (norm, [p.grad.to_dense() for p in params])
    assert grads[True][0].item() == pytest.approx(grads[False][0].item(), rel=1e-6) and grads[True][0] > 1
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[True][1], grads[False][1]))


def test_a_run_with_the_kept_table_gradient_trains_the_weights_a_fresh_gradient_does(student_dir, tmp_path):
    from safetensors.torch import load_file

    weights = {}
    for kept in ("--kept-table-gradient", "--no-kept-table-gradient"):
        run_module("mobilekd.recipes.finetune", "--model", student_dir, "--task", "sst2", "--out", tmp_path / kept,
                   "--max-train-examples", 64, "--batch-size", 16, "--max-len", 32, "--max-steps", 4,
                   "--threads", 1, "--mixed-precision", "no", "--eval-every", 0, kept)
        weights[kept] = load_file(tmp_path / kept / "model.safetensors")
        (stage,) = json.loads((tmp_path / kept / "results.json").read_text())["training"]
        assert stage["sparse_gradient_tables"] == (kept == "--kept-table-gradient")  # the word table's, or none
    a, b = weights.values()
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


@pytest.mark.parametrize("updates", ["lazy", "dense"])
def test_lazy_embedding_updates_move_only_the_rows_a_run_reads(student_dir, tmp_path, updates):
    """--embedding-updates lazy (opt-in) moves the word table's rows of the training batches' tokens and no other;
    dense (the default) is AdamW's rule, whose weight decay moves every row."""
    from safetensors.torch import load_file

    from mobilekd.models.heads import WORD_EMBEDDINGS
    out = tmp_path / updates
    run_module("mobilekd.recipes.finetune", "--model", student_dir, "--task", "sst2", "--out", out,
               "--max-train-examples", 64, "--batch-size", 16, "--max-len", 32, "--max-steps", 4, "--threads", 1,
               "--mixed-precision", "no", "--embedding-updates", updates, "--eval-every", 0)
    before = load_file(student_dir / "model.safetensors")[WORD_EMBEDDINGS]
    after = load_file(out / "model.safetensors")[WORD_EMBEDDINGS]
    moved = (before != after).any(dim=1)
    if updates == "dense":
        assert moved.float().mean() > 0.99
    else:
        assert 0 < moved.sum() < 64 * 32  # at most the batches' tokens
