"""A MobileBERT-shaped student started from its teacher's weights, through the bottleneck (issue 78 item 2).

`mobilekd init PRESET OUT --from-teacher TEACHER` writes it and `mobilekd distill --student OUT` transfers from
there, or `mobilekd distill --student PRESET --inherit` does both in one run, instead of starting from random
weights. The teacher is a BERT layout (no bottleneck) as wide as the student's
inter-block feature maps (all-MiniLM-L6-v2 and the h384 presets: 384), so that those maps, which progressive
knowledge transfer matches, live in one space. Student block l starts from teacher layer `layer_map[l]`, layer by
layer, each fitted on the student's own input from the blocks below (already set), over pre-training examples:

- embeddings and pre-training heads are the teacher's (`copy_shared_weights`, as distill does); the embedding's
  NoNorm, which cannot compute LayerNorm's per-token statistics, is the elementwise affine map closest to the
  teacher's LayerNorm output in least squares;
- the block's inner width is a principal-component basis P (its leading `intra_bottleneck_size` directions,
  mean mu) of the teacher layer's input and attention output, stacked: the input bottleneck (and the shared Q/K
  bottleneck) are x -> P^T (x - mu), and every teacher weight that reads or writes the layer's hidden width is
  projected onto P (W P on the way in, P^T W on the way out). Projecting a layer onto the principal components of
  its features rather than of its weights follows Yu and Wu ("Compressing Transformers: Features Are Low-Rank, but
  Weights Are Not!", AAAI 2023: the features' covariance, not the weights, is low-rank);
- attention keeps the teacher's `num_attention_heads` most important heads (importance: the mean norm of a head's
  contribution to the attention output; Michel et al. 2019, "Are Sixteen Heads Really Better than One?", show most
  heads can be pruned, ranked by a gradient-based score this simpler proxy stands in for); a narrower head keeps the
  leading directions (uncentred) of its queries and keys together (its values alone), scaled by (d_student /
  d_teacher)^(1/4) on both queries and keys so that the 1/sqrt(d) of the scores stays the teacher's; the dropped
  heads' mean contribution goes into the output bias;
- the F stacked feed-forward networks share the teacher's FFN neurons, the F x intermediate_size most important
  (mean |activation| x the norm of the neuron's output weights: the weight-times-activation criterion of Sun et al.
  2023, "A Simple and Effective Pruning Approach for Large Language Models" (Wanda), taken per neuron rather than
  per weight), dealt out in turn by rank so that each FFN gets its share; stacked FFNs with residuals compute the
  teacher's sum of neurons to first order; ReLU stands in for GELU;
- where a normalization breaks linearity the student's NoNorms are fitted (elementwise least squares: the attention
  output against P^T (A - mu), A the teacher's LayerNorm output), and the output bottleneck (the intra-block state
  back to the feature map, plus the block input) by ridge regression against the teacher layer's output.

No official code does this: the paper starts its student from random weights (Section 4.3) and shares only the
embeddings and heads. The three papers above are cited from their text as published (none is in the stored sources
the search tools read), and only for the piece each gives; their combination through MobileBERT's bottleneck is
ours, so `summary.json` records each block's fit (relative error of its output against the teacher's on the examples
it was fitted on), and benchmarks.inherit measures what it adds at equal PKT steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mobilekd.errors import UserError
from mobilekd.transfer.strategies import copy_shared_weights

RIDGE = 1e-4  # the output bottleneck's ridge, relative to its Gram matrix's mean diagonal
INHERIT_EXAMPLES = 128  # pre-training examples the start is fitted over (about 16,000 tokens at length 128)


def check_inheritable(teacher_config, student_config) -> None:
    """Refuse, in one line, a pair this start is not defined for."""
    t, s = teacher_config, student_config
    problems = []
    if t.use_bottleneck or t.num_feedforward_networks != 1:
        problems.append("the teacher is not a BERT layout (one FFN, no bottleneck)")
    if not s.use_bottleneck:
        problems.append("the student has no bottleneck (take layers of the teacher instead: --layers)")
    if t.hidden_size != s.hidden_size:
        problems.append(f"widths differ (teacher {t.hidden_size}, student {s.hidden_size} between blocks)")
    if s.trigram_input or s.embedding_size != t.hidden_size:
        problems.append("the student's embedding is not the teacher's (a trigram, or another width)")
    if s.normalization_type != "no_norm":
        problems.append("the student's normalizations are LayerNorms (the start fits NoNorms)")
    t_head, s_head = t.true_hidden_size // t.num_attention_heads, s.true_hidden_size // s.num_attention_heads
    if s.num_attention_heads > t.num_attention_heads or s_head > t_head:
        problems.append(f"the student's heads ({s.num_attention_heads} of {s_head}) exceed the teacher's "
                        f"({t.num_attention_heads} of {t_head})")
    if s.num_feedforward_networks * s.intermediate_size > t.intermediate_size:
        problems.append(f"the student's FFN neurons ({s.num_feedforward_networks} x {s.intermediate_size}) exceed "
                        f"the teacher's {t.intermediate_size}")
    if s.vocab_size != t.vocab_size:
        problems.append(f"vocabularies differ (teacher {t.vocab_size}, student {s.vocab_size})")
    if problems:
        raise UserError("cannot start this student from the teacher's weights: " + "; ".join(problems))


def principal_basis(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (D, k) leading principal directions of the rows of `x` (N, D), and their mean."""
    mean = x.mean(0)
    centred = (x - mean).double()
    _, vectors = torch.linalg.eigh(centred.T @ centred)
    return vectors[:, -k:].flip(-1).float(), mean


def leading_directions(x: torch.Tensor, k: int) -> torch.Tensor:
    """The (k, D) leading directions of the rows of `x` (N, D), uncentred: a head's vectors are compared by dot
    products, not around their mean."""
    x = x.double()
    _, vectors = torch.linalg.eigh(x.T @ x)
    return vectors[:, -k:].flip(-1).T.float()


def affine_fit(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The elementwise y_d ~ a_d x_d + c_d closest in least squares (a NoNorm's weight and bias)."""
    xm, ym = x.mean(0), y.mean(0)
    a = ((x - xm) * (y - ym)).mean(0) / (x - xm).pow(2).mean(0).clamp_min(1e-12)
    return a, ym - a * xm


def linear_fit(x: torch.Tensor, y: torch.Tensor, ridge: float = RIDGE) -> tuple[torch.Tensor, torch.Tensor]:
    """The (out, in) weight and bias of y ~ x W^T + b by ridge regression."""
    xm, ym = x.mean(0), y.mean(0)
    xc, yc = (x - xm).double(), (y - ym).double()
    gram = xc.T @ xc
    gram += ridge * gram.diagonal().mean() * torch.eye(len(gram), dtype=gram.dtype, device=gram.device)
    w = torch.linalg.solve(gram, xc.T @ yc).T.float()
    return w, ym - w @ xm


def _set(linear: torch.nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    linear.weight.copy_(weight)
    linear.bias.copy_(bias)


def _tokens(batches: list[torch.Tensor], masks: list[torch.Tensor]) -> torch.Tensor:
    """The non-padding positions of (B, T, D) batches as one (N, D) matrix."""
    return torch.cat([x[m.bool()] for x, m in zip(batches, masks)])


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    b, t, _ = x.shape
    return x.view(b, t, n, -1).transpose(1, 2)


class TeacherLayer:
    """What one teacher layer computes over the examples: its inputs, queries, keys, values, attention outputs and
    FFN activations as (N, ...) token matrices, and per head the summed norm and sum of its contribution to the
    attention output."""

    def __init__(self, block, inputs: list[torch.Tensor], masks: list[torch.Tensor], additive: list[torch.Tensor]):
        att, n = block.attention.self, block.attention.self.num_heads
        wo = block.attention.output.dense.weight
        d = wo.shape[1] // n
        q, k, v, a, act = [], [], [], [], []
        self.norm_sum, self.contrib_sum = wo.new_zeros(n), wo.new_zeros(n, wo.shape[0])
        for x, mask, keep in zip(inputs, additive, masks):
            h, (probs, _, values) = block.attention(x, x, x, x, mask, True)
            context = probs @ values  # (B, heads, T, d)
            for i in range(n):
                contrib = (context[:, i] @ wo[:, i * d:(i + 1) * d].T)[keep.bool()]
                self.norm_sum[i] += contrib.norm(dim=-1).sum()
                self.contrib_sum[i] += contrib.sum(0)
            q.append(att.query(x))
            k.append(att.key(x))
            v.append(att.value(x))
            a.append(h)
            act.append(block.intermediate(h))
        self.x, self.q, self.k, self.v, self.a, self.act = (_tokens(t, masks) for t in (inputs, q, k, v, a, act))
        self.heads, self.head_size = n, d


def _choose_heads(layer: TeacherLayer, count: int) -> tuple[list[int], torch.Tensor]:
    """The `count` most important heads (in their order) and the dropped heads' mean contribution."""
    kept = sorted(torch.topk(layer.norm_sum, count).indices.tolist())
    dropped = [i for i in range(layer.heads) if i not in kept]
    return kept, layer.contrib_sum[dropped].sum(0) / len(layer.x)


def _deal_neurons(block, layer: TeacherLayer, ffns: int, size: int) -> list[torch.Tensor]:
    """The teacher FFN's ffns x size most important neurons, dealt out in turn by rank."""
    importance = layer.act.abs().mean(0) * block.output.dense.weight.norm(dim=0)
    ranked = torch.argsort(importance, descending=True)[: ffns * size]
    return [ranked[i::ffns].sort().values for i in range(ffns)]


@torch.no_grad()
def inherit_block(student_block, teacher_block, student_config, s_inputs, s_masks, t_inputs, t_outputs,
                  masks, t_additive) -> float:
    """Set `student_block` from `teacher_block` (module docstring); returns the relative error of its output
    against the teacher layer's on these examples."""
    s = student_config
    layer = TeacherLayer(teacher_block, t_inputs, masks, t_additive)
    basis, mean = principal_basis(torch.cat([layer.x, layer.a]), s.intra_bottleneck_size)
    bottleneck = student_block.bottleneck
    for part in [bottleneck.input, getattr(bottleneck, "attention", None)]:
        if part is not None:
            _set(part.dense, basis.T, -basis.T @ mean)
            _reset_norm(part.LayerNorm)

    att_t, att_s = teacher_block.attention.self, student_block.attention.self
    kept, dropped = _choose_heads(layer, s.num_attention_heads)
    d_t, d_s = layer.head_size, s.true_hidden_size // s.num_attention_heads
    scale = (d_s / d_t) ** 0.25
    qk_from_basis = s.use_bottleneck_attention or s.key_query_shared_bottleneck
    v_from_basis = s.use_bottleneck_attention
    rows = {name: ([], []) for name in ("query", "key", "value")}
    out_cols = []
    wo, bo = teacher_block.attention.output.dense.weight, teacher_block.attention.output.dense.bias
    for head in kept:
        cut = slice(head * d_t, (head + 1) * d_t)
        qk = leading_directions(torch.cat([layer.q[:, cut], layer.k[:, cut]]), d_s) * scale
        cv = leading_directions(layer.v[:, cut], d_s)
        for name, c, from_basis in [("query", qk, qk_from_basis), ("key", qk, qk_from_basis),
                                    ("value", cv, v_from_basis)]:
            lin = getattr(att_t, name)
            w, b = c @ lin.weight[cut], c @ lin.bias[cut]
            if from_basis:  # x ~ P h + mu
                w, b = w @ basis, b + w @ mean
            rows[name][0].append(w)
            rows[name][1].append(b)
        out_cols.append(basis.T @ wo[:, cut] @ cv.T)
    for name, (ws, bs) in rows.items():
        _set(getattr(att_s, name), torch.cat(ws), torch.cat(bs))
    _set(student_block.attention.output.dense, torch.cat(out_cols, 1), basis.T @ (bo + dropped))

    # the attention output's NoNorm against the teacher's LayerNorm output, in the basis
    pre = []
    for x, m in zip(s_inputs, s_masks):
        q_in, k_in, v_in, residual = bottleneck(x)
        context, _ = att_s(q_in, k_in, v_in, m, False)
        pre.append(student_block.attention.output.dense(context) + residual)
    pre = _tokens(pre, masks)
    norm = student_block.attention.output.LayerNorm
    if not isinstance(norm, torch.nn.LayerNorm):
        a, c = affine_fit(pre, (layer.a - mean) @ basis)
        norm.weight.copy_(a)
        norm.bias.copy_(c)

    ffns = [(f.intermediate.dense, f.output.dense, f.output.LayerNorm) for f in student_block.ffn]
    ffns.append((student_block.intermediate.dense, student_block.output.dense, student_block.output.LayerNorm))
    w1, b1 = teacher_block.intermediate.dense.weight, teacher_block.intermediate.dense.bias
    w2, b2 = teacher_block.output.dense.weight, teacher_block.output.dense.bias
    for (first, second, ffn_norm), neurons in zip(ffns, _deal_neurons(teacher_block, layer, len(ffns),
                                                                      s.intermediate_size)):
        _set(first, w1[neurons] @ basis, w1[neurons] @ mean + b1[neurons])
        _set(second, basis.T @ w2[:, neurons], basis.T @ b2 / len(ffns))
        _reset_norm(ffn_norm)

    # the output bottleneck: the intra-block state plus the block input, against the teacher layer's output
    states = []
    for x, m in zip(s_inputs, s_masks):
        q_in, k_in, v_in, residual = bottleneck(x)
        h, _ = student_block.attention(q_in, k_in, v_in, residual, m, False)
        for f in student_block.ffn:
            h = f(h)
        out = student_block.output
        states.append(out.LayerNorm(out.dense(student_block.intermediate(h)) + h))
    states, x_s, target = _tokens(states, masks), _tokens(s_inputs, masks), _tokens(t_outputs, masks)
    final = student_block.output.bottleneck
    _set(final.dense, *linear_fit(states, target - x_s))
    if not isinstance(final.LayerNorm, torch.nn.LayerNorm):  # and its NoNorm, elementwise, against the same
        _reset_norm(final.LayerNorm)
        a, c = affine_fit(states @ final.dense.weight.T + final.dense.bias + x_s, target)
        final.LayerNorm.weight.copy_(a)
        final.LayerNorm.bias.copy_(c)
    got = _tokens([student_block(x, m)[0] for x, m in zip(s_inputs, s_masks)], masks)
    return float((got - target).pow(2).sum() / (target - target.mean(0)).pow(2).sum())


def _reset_norm(norm) -> None:
    if not isinstance(norm, torch.nn.LayerNorm):  # NoNorm at the identity
        norm.weight.fill_(1.0)
        norm.bias.zero_()


@torch.no_grad()
def inherit(teacher, student, layer_map: list[int], batches) -> dict:
    """Start `student` (a `MobileBertForPreTraining` with bottlenecks) from `teacher` (a BERT-layout one) over
    `batches` (dicts of input_ids, attention_mask, token_type_ids); returns what was done and each block's fit."""
    check_inheritable(teacher.config, student.config)
    device = next(teacher.parameters()).device  # where the teacher is (distill's accelerator), the student too
    teacher.eval()
    student.eval().to(device)
    copied = copy_shared_weights(teacher, student)
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    masks = [b["attention_mask"] for b in batches]
    t_out = [teacher.mobilebert(b["input_ids"], b["attention_mask"], b["token_type_ids"], output_feature_maps=True)
             for b in batches]
    t_maps = [[o.embeddings, *o.feature_maps] for o in t_out]  # index t: layer t's input; t + 1: its output
    t_additive = [teacher.mobilebert.block_mask(m, torch.float32) for m in masks]
    s_additive = [student.mobilebert.block_mask(m, torch.float32) for m in masks]

    embeddings = student.mobilebert.embeddings
    fitted_embedding_norm = not isinstance(embeddings.LayerNorm, torch.nn.LayerNorm)
    if fitted_embedding_norm:  # NoNorm against the teacher's LayerNorm output, elementwise
        _reset_norm(embeddings.LayerNorm)
        raw = _tokens([embeddings(b["input_ids"], b["token_type_ids"]) for b in batches], masks)
        a, c = affine_fit(raw, _tokens([m[0] for m in t_maps], masks))
        embeddings.LayerNorm.weight.copy_(a)
        embeddings.LayerNorm.bias.copy_(c)
    s_inputs = [embeddings(b["input_ids"], b["token_type_ids"]) for b in batches]
    errors = []
    for l, t in enumerate(layer_map):
        block = student.mobilebert.encoder.layer[l]
        errors.append(inherit_block(block, teacher.mobilebert.encoder.layer[t], student.config, s_inputs,
                                    s_additive, [m[t] for m in t_maps], [m[t + 1] for m in t_maps], masks,
                                    t_additive))
        s_inputs = [block(x, m)[0] for x, m in zip(s_inputs, s_additive)]
    return {"copied_from_teacher": len(copied), "layer_map": layer_map,
            "embedding_norm": "fitted" if fitted_embedding_norm else "copied",
            "relative_error": [round(e, 4) for e in errors],
            "tokens": int(sum(int(m.sum()) for m in masks))}


def feature_error(teacher, student, layer_map: list[int], batches) -> list[float]:
    """Each student block's output against its teacher layer's: squared error over the teacher's variance, on the
    non-padding positions of `batches` (what PKT's feature-map transfer starts from)."""
    batches = list(batches)
    masks = [b["attention_mask"] for b in batches]
    with torch.no_grad():
        t = [teacher.mobilebert(b["input_ids"], b["attention_mask"], b["token_type_ids"], output_feature_maps=True)
             for b in batches]
        s = [student.mobilebert(b["input_ids"], b["attention_mask"], b["token_type_ids"], output_feature_maps=True)
             for b in batches]
    out = []
    for l, layer in enumerate(layer_map):
        target = _tokens([o.feature_maps[layer] for o in t], masks)
        got = _tokens([o.feature_maps[l] for o in s], masks)
        out.append(float(F.mse_loss(got, target, reduction="sum") / (target - target.mean(0)).pow(2).sum()))
    return out
