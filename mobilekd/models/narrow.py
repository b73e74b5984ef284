"""Narrower feed-forward networks: keep each FFN's most important neurons (DynaBERT's width reduction).

DynaBERT (Hou et al., NeurIPS 2020, Section 2.1, paragraph "Network Rewiring") scores each FFN neuron by how much
the loss would change without it, estimated to first order. The official code (huawei-noah/Pretrained-Language-Model,
DynaBERT/run_glue.py, `compute_neuron_head_importance`) adds, for every batch,

    |sum_j W1[i, j] dL/dW1[i, j] + b1[i] dL/db1[i]| + |sum_k W2[k, i] dL/dW2[k, i]|

to neuron i's importance (W1, b1: the FFN's first layer, whose row i makes the neuron; W2: the second, whose column
i reads it), and `reorder_neuron_head` sorts the neurons by it, so a width multiplier keeps the first ones. Here the
neurons above the `size` most important are dropped, which is that reordering cut at `size`.

Departures, and why:
- The loss is the masked-LM loss over shipped pre-training text, not a task's loss over its dev set: the narrowed
  model is a task-agnostic start (like the layer subset it is cut from), and a dev set is what students are scored on.
- The importance is measured in the whole model, every layer in place, before layers are taken from it
  (`mobilekd init MODEL OUT --layers spread:2 --intermediate-size 1280`): the layers' neurons are scored where they
  were trained to work.
- Attention heads are kept: DynaBERT narrows heads and FFNs by the same multiplier; here only the FFN width is a
  knob (it is the larger share of a block's work: 2 x 384 x 1536 of the 4 x 384^2 + 2 x 384 x 1536 weights).
- Each batch adds its own first-order term: the gradients are zeroed between batches. The official loop never
  zeroes them, so there batch b adds |W x (the gradients of batches 1..b summed)|, counting the first batches'
  gradients again in every later term; here the importance is the sum of the batches' own estimates.
- No width-adaptive distillation follows here; the students' own fine-tuning (with task KD) does that work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mobilekd.errors import UserError


def ffn_pairs(block) -> list[tuple[torch.nn.Linear, torch.nn.Linear]]:
    """A block's feed-forward networks as (first layer, second layer): MobileBERT's stacked FFNs, then the last."""
    return [(f.intermediate.dense, f.output.dense) for f in block.ffn] + [(block.intermediate.dense,
                                                                           block.output.dense)]


def neuron_importance(model, batches) -> list[list[torch.Tensor]]:
    """DynaBERT's importance of every FFN neuron (module docstring), per layer and per FFN, summed over `batches`
    (masked-LM batches as `PretrainingSplit.batch` draws them) of `model` (a `MobileBertForPreTraining`)."""
    was_training = model.training
    model.eval()  # no dropout: the loss of the model as it is
    blocks = model.mobilebert.encoder.layer
    scores = [[torch.zeros(w1.out_features) for w1, _ in ffn_pairs(b)] for b in blocks]
    for batch in batches:
        model.zero_grad(set_to_none=True)
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["masked_positions"])
        labels = batch["masked_labels"][batch["masked_labels"] >= 0]
        F.cross_entropy(out.mlm_logits.float(), labels).backward()
        with torch.no_grad():
            for block, per_ffn in zip(blocks, scores):
                for (w1, w2), score in zip(ffn_pairs(block), per_ffn):
                    score += ((w1.weight * w1.weight.grad).sum(1) + w1.bias * w1.bias.grad).abs()
                    score += (w2.weight * w2.weight.grad).sum(0).abs()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return scores


def importance_over(model, split, examples: int, batch_size: int = 32) -> list[list[torch.Tensor]]:
    """`neuron_importance` over the first `examples` of a `PretrainingSplit` (epoch 0's masks), `batch_size` at a
    time."""
    return neuron_importance(model, split.first_batches(examples, batch_size))


def check_size(config, size: int) -> None:
    """Refuse an FFN width outside 1..the model's own, in one line."""
    if not 0 < size <= config.intermediate_size:
        raise UserError(f"--intermediate-size must be in 1..{config.intermediate_size} (the model's), got {size}")


def narrow_ffns(model, size: int, importance: list[list[torch.Tensor]]):
    """A new model of `model`'s class whose every FFN keeps its `size` most important neurons (in their order);
    `importance[l][f]`: layer l's FFN f, as `neuron_importance` returns them (for the model's own layers)."""
    check_size(model.config, size)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    names = {id(m): n for n, m in model.named_modules()}
    for block, per_ffn in zip(model.mobilebert.encoder.layer, importance):
        for (w1, w2), score in zip(ffn_pairs(block), per_ffn):
            keep = torch.topk(score, size).indices.sort().values
            first, second = names[id(w1)], names[id(w2)]
            state[f"{first}.weight"] = w1.weight.detach()[keep].clone()
            state[f"{first}.bias"] = w1.bias.detach()[keep].clone()
            state[f"{second}.weight"] = w2.weight.detach()[:, keep].clone()
    narrow = type(model)(model.config.replace(intermediate_size=size))
    narrow.load_state_dict(state, strict=True)
    return narrow
