"""AdamW that updates an embedding table's rows lazily: only the rows in the batch.

A classifier's word-embedding table is most of a small student (11.7M of the demo student's 14.9M parameters), and
AdamW with a dense gradient touches every row every step: zeroing the gradient, the backward's scatter into it,
clipping's norm and the update each pass over 47 MB for the few hundred rows a batch of short sentences uses.
With the table's gradient sparse (`nn.Embedding(sparse=True)`, set by the loop on the embeddings a model lists in
`sparse_embeddings()`), this optimizer updates those rows alone and everything else with torch's AdamW (fused).

The lazy rule is TensorFlow's LazyAdamOptimizer (tensorflow/contrib/opt/python/training/lazy_adam_optimizer.py,
`_apply_sparse_shared`; tfa.optimizers.LazyAdam): a row's moments move only when the row is in the batch, bias
correction uses the optimizer's step count. One departure, stated: the decoupled weight decay of AdamW
(Loshchilov and Hutter 2019, Algorithm 2, line 12: p <- p - lr * wd * p) is applied to the touched rows only, as
the moments are; TensorFlow's lazy optimizer has no weight decay. It is not dense AdamW: a row absent from a batch
keeps its moments and is not moved by their momentum. `benchmarks.throughput --accuracy` measures the difference:
for a table trained from random initialisation it is large (a dense AdamW step moves a row seen once about ten
times as far in all, as its momentum decays over the following steps), so the loop uses this rule only when asked
(`--embedding-updates lazy`).

With `lazy_rows=False` it is plain AdamW for such a table too, the table's gradient assembled from the batch's rows
into a dense buffer the optimizer keeps across steps (zeroed, then the rows added: `_kept_gradient`), not the fresh
dense tensor autograd's embedding backward allocates every step. The update is AdamW's (torch's, fused where asked,
over that buffer); what it saves is the allocation: a table over glibc's largest reused block (32 MB: the teacher's
30,522 x 384 is 47 MB) comes from the kernel as new pages each step, and filling them with zeros took 40 ms where
zeroing the kept buffer takes 3 (one-off timings, one AVX2 EPYC, one thread): 12% of a fine-tuning step of the
throughput benchmark's student in torch's profiler, and the step 1.10x as fast with the buffer kept
(`--kept-table-gradient`, on by default; docs/throughput.md).
"""

from __future__ import annotations

import math

import torch


class LazyAdamW(torch.optim.AdamW):
    """torch's AdamW for dense gradients (fused where asked); for sparse ones the lazy row update, or with
    `lazy_rows=False` AdamW's own over the gradient made dense in a kept buffer."""

    def __init__(self, params, *args, lazy_rows: bool = True, **kw):
        super().__init__(params, *args, **kw)
        self.lazy_rows = lazy_rows
        self._kept = {}  # id(parameter) -> its dense gradient's buffer (not state: nothing to checkpoint)

    @torch.no_grad()
    def step(self, closure=None):
        sparse, kept = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    if self.lazy_rows:
                        sparse.append((group, p, p.grad))
                        p.grad = None  # AdamW's own step skips a parameter without a gradient
                    else:
                        kept.append((p, p.grad))
                        p.grad = self._kept_gradient(p, p.grad)
        loss = super().step(closure)
        for group, p, grad in sparse:
            self._lazy_step(group, p, grad.coalesce())
            p.grad = grad
        for p, grad in kept:
            p.grad = grad
        return loss

    def _kept_gradient(self, p: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """The dense gradient of a sparse one, in the buffer kept for `p`: zeroed, then each (row, value) added in
        the order the batch gave them (a row twice in the batch: both added, as the dense backward does)."""
        buffer = self._kept.get(id(p))
        if buffer is None:
            buffer = self._kept[id(p)] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        buffer.zero_()
        return buffer.index_add_(0, grad._indices()[0], grad._values().to(buffer.dtype))

    def _lazy_step(self, group: dict, p: torch.Tensor, grad: torch.Tensor) -> None:
        state = self.state[p]
        if not state:  # AdamW's own state, so checkpoints save and load it alike
            state["step"] = torch.tensor(0.0, dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        t = float(state["step"])
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        rows, values = grad.indices()[0], grad.values()
        m, v, w = state["exp_avg"][rows], state["exp_avg_sq"][rows], p[rows]
        w.mul_(1 - lr * group["weight_decay"])
        m.lerp_(values, 1 - beta1)
        v.mul_(beta2).addcmul_(values, values, value=1 - beta2)
        denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(group["eps"])
        w.addcdiv_(m, denom, value=-lr / (1 - beta1 ** t))
        state["exp_avg"][rows], state["exp_avg_sq"][rows], p[rows] = m, v, w


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` for gradients of which some are sparse (its norm refuses them): the
    global L2 norm over every gradient's values, and every gradient scaled by max_norm / norm where it exceeds."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = [(g.coalesce().values() if g.is_sparse else g).float().norm() for g in grads]
    total = torch.stack(norms).norm() if norms else torch.tensor(0.0)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total
