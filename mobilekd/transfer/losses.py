"""Knowledge-transfer objectives (MobileBERT paper, Section 4.1-4.2), with the official code's definitions.

Every function takes teacher and student tensors of the same shape and returns a scalar that is zero when
they are identical.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def feature_map_transfer(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """FMT, eq. (2): mean squared error between the inter-block feature maps of one layer, (B, T, N).

    As the official code does, both maps first go through a LayerNorm without parameters (so the loss compares
    shapes, not scales); the weight (100 in the official config) is applied by the caller.
    """
    size = teacher.shape[-1:]
    return F.mse_loss(F.layer_norm(student.float(), size), F.layer_norm(teacher.float(), size))


def attention_transfer(teacher: torch.Tensor, student: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """AT, eq. (3): KL(teacher || student) of the per-head attention distributions (B, A, T, T), summed over
    the attended positions and averaged over batch, heads and query positions.

    The official code minimises the cross-entropy -sum p_t log p_s, which differs from this KL only by the
    teacher's entropy: the same gradient, but zero for identical distributions.
    """
    t, s = teacher.float(), student.float()
    return (t * (torch.log(t + eps) - torch.log(s + eps))).sum(-1).mean()


def mean_transfer(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """The official code's "beta" term: squared difference of each token's feature mean (weight 5000)."""
    return (student.float().mean(-1) - teacher.float().mean(-1)).pow(2).mean()


def variance_transfer(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """The official code's "gamma" term: absolute difference of each token's feature variance (weight 5)."""
    return (student.float().var(-1, unbiased=False) - teacher.float().var(-1, unbiased=False)).abs().mean()


def logit_distillation(teacher_logits: torch.Tensor, student_logits: torch.Tensor,
                       temperature: float = 1.0, reduction: str = "batchmean") -> torch.Tensor:
    """KD (Hinton et al. 2015): KL between the teacher's and the student's softened distributions, scaled by T^2
    so gradients keep their size across temperatures. Used for pre-training distillation of the MLM head (eq. 4),
    DistilBERT's soft-target loss (distiller.py, `Distiller.step`: `KLDivLoss(reduction="batchmean")` times T^2)
    and task distillation.

    `reduction`: "batchmean" sums over classes and averages over rows; "mean" averages over rows and classes, as
    BERT-PKD's `distillation_loss` (src/KD_loss.py, `reduction_kd='mean'`) and TinyBERT's `soft_cross_entropy`
    (task_distill.py: `(- targets_prob * student_likelihood).mean()`, the same gradient as this KL at T = 1)
    do: the batchmean value divided by the number of classes."""
    t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    kl = F.kl_div(s, t, log_target=True, reduction="batchmean")
    return kl * temperature**2 / (student_logits.shape[-1] if reduction == "mean" else 1)


def logit_mse(teacher_logits: torch.Tensor, student_logits: torch.Tensor) -> torch.Tensor:
    """Tang et al. 2019's distillation loss (Section 3.2, eq. 3: ||z_t - z_s||^2 on the logits, which they found
    slightly better than KL), averaged over rows and classes as castorini/d-bert's distill_birnn.py computes it
    (`kd_criterion = nn.MSELoss()`): the squared distance divided by the number of classes."""
    return F.mse_loss(student_logits.float(), teacher_logits.float())


def cosine_hidden(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """DistilBERT's cosine embedding loss between hidden states: mean of 1 - cos over tokens."""
    return (1 - F.cosine_similarity(student.float(), teacher.float(), dim=-1)).mean()


def patience_loss(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """BERT-PKD's patient-teacher loss for one layer pair (Sun et al. 2019, eq. 5; src/KD_loss.py,
    `patience_loss` with `normalized_patience`): mean squared error between the L2-normalised [CLS] vectors (B, N),
    averaged over batch and width (`F.mse_loss`)."""
    return F.mse_loss(F.normalize(student.float(), p=2, dim=-1), F.normalize(teacher.float(), p=2, dim=-1))


ROWS_PER_PASS = 16  # rows of (N, V) logits a CPU pass of `neg_log_probs` takes at once: 2 MB of float32 at 30,522


class _NegLogProbs(torch.autograd.Function):
    """`neg_log_probs`' forward and its gradient: with upstream gradients a (N, K) at the ids and b (N,) at the row
    sums, d/dz = softmax(z) (sum_k a_k + V b) - b - scatter(ids, a). On a CPU both passes go ROWS_PER_PASS rows at
    a time, each block brought up to float32 (bf16 logits under autocast) and its passes (max, exp, sums, gather)
    made while it sits in cache; the gradient is written in the logits' own dtype, block by block. One pass over
    the whole (N, V) float32 copy, as autograd's graph of the same expression makes them (a cast, logsumexp, sum,
    gather, then five (N, V) tensors in backward and the cast back), runs at memory speed: over the teacher's
    30,522 word pieces a bf16 `seq2seq_tiny` step at 32 pairs is 1.35x as fast in blocks as in one (docs/seq2seq.md's
    step-time table), and in bf16 the values and gradients are the same to the bit
    (tests/test_seq2seq.py). Elsewhere (a GPU) one block. The logits are left as they were (backward works on a
    copy of each block)."""

    @staticmethod
    def forward(ctx, logits, ids):
        n, v = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)  # bf16 up to float32, float64 kept
        rows = ROWS_PER_PASS if logits.device.type == "cpu" else max(n, 1)
        lse = logits.new_empty(n, dtype=dtype)
        at_ids, total = logits.new_empty(ids.shape, dtype=dtype), logits.new_empty(n, dtype=dtype)
        for i in range(0, n, rows):
            z = logits[i:i + rows].to(dtype)
            torch.logsumexp(z, -1, out=lse[i:i + rows])
            torch.gather(z, -1, ids[i:i + rows], out=at_ids[i:i + rows])
            torch.sum(z, -1, out=total[i:i + rows])
        ctx.save_for_backward(logits, ids, lse)
        ctx.rows = rows
        return lse[:, None] - at_ids, v * lse - total

    @staticmethod
    def backward(ctx, at_ids, every):
        logits, ids, lse = ctx.saved_tensors
        at_ids = torch.zeros(ids.shape, dtype=lse.dtype, device=lse.device) if at_ids is None else at_ids
        every = torch.zeros_like(lse) if every is None else every
        scale = at_ids.sum(-1) + logits.shape[-1] * every
        grad = torch.empty_like(logits)
        for i in range(0, logits.shape[0], ctx.rows):
            block = slice(i, i + ctx.rows)
            g = logits[block].to(lse.dtype, copy=True).sub_(lse[block, None]).exp_()  # a copy: logits kept
            g.mul_(scale[block, None]).sub_(every[block, None]).scatter_add_(-1, ids[block], -at_ids[block])
            grad[block] = g
        return grad, None


def neg_log_probs(logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-log p at `ids` (N, K) and -sum_v log p_v over the vocabulary (N,), p = softmax(`logits` (N, V)), from the
    log-partition alone: log p_v = z_v - logsumexp(z), computed in float32 (float64 kept). The seq2seq student's
    two losses read nothing else, so neither needs the (N, V) log-probabilities: over the teacher's 30,522 word
    pieces those (a log-softmax per loss, each kept for backward, and a gather's dense gradient each) took a quarter
    of a C-MLM training step (docs/seq2seq.md, "The student", whose step-time table times the blocks)."""
    return _NegLogProbs.apply(logits, ids.long())


def label_smoothed_nll(gold: torch.Tensor, every: torch.Tensor, smoothing: float, vocab: int) -> torch.Tensor:
    """The seq2seq student's cross-entropy, summed over tokens, as Distill-BERT-Textgen-ONMT's
    `BertKDLossCompute.__call__` (onmt/utils/loss.py) computes it: (1 - smoothing) x NLL of the gold token plus
    smoothing / (V - 2) x the sum of -log p over the whole vocabulary (its own form: every column, the gold one and
    padding included, and a cross-entropy rather than OpenNMT's KL `LabelSmoothingLoss`). `gold` (N,) and `every`
    (N,) are `neg_log_probs`' two parts at the gold tokens."""
    if not smoothing:
        return gold.sum()
    return (1 - smoothing) * gold.sum() + smoothing / (vocab - 2) * every.sum()


def cmlm_distillation(at_topk: torch.Tensor, topk_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """C-MLM's word-level distillation (Chen et al. 2020, eq. 5), summed over tokens, as Distill-BERT-Textgen-ONMT's
    `kd_loss` (onmt/utils/loss.py) computes it: the teacher's top-k logits (its cached k; `bert_kd_dataset.py`
    keeps the first 8 of 128) divided by `temperature` and softmaxed over those k, the student's log-softmax over
    the whole vocabulary at temperature 1 (no T^2: "kind of non-standard, as we observe better empirical
    performance this way"), and their cross-entropy -sum_k p_t log p_s. `at_topk` (N, k): the student's -log p at
    the teacher's top-k ids (`neg_log_probs`); `topk_logits` (N, k)."""
    target = (topk_logits.float() / temperature).softmax(-1)
    return (at_topk * target).sum()
