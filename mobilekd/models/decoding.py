"""Decoding a seq2seq model (`mobilekd.models.seq2seq`): greedy, and beam search with GNMT's length penalty, the
C-MLM paper's decoding settings (Distill-BERT-Textgen README / run_mt.sh: `-beam_size 5 -alpha 0.6
-length_penalty wu`: a hypothesis' log-probability divided by ((5 + length) / 6) ** alpha, Wu et al. 2016, eq. 14;
`beam_search` says where its search departs from OpenNMT-py's).

Both read the source once (`encode`). With `cache` (the default) the decoder then runs one new position a step,
the earlier positions' keys and values kept (`Seq2SeqTransformer.decode_step`, `DecoderCache`); without it, over
the whole prefix at each step, as the exported file's `decode` signature does (the two agree up to rounding:
tests/test_seq2seq.py checks the tokens). A hypothesis ends at the end-of-sequence token, or after `max_len`
tokens; what comes back is its tokens without it.
"""

from __future__ import annotations

import torch

from mobilekd.models.seq2seq import DecoderCache


def next_states(model, memory, mask, prefix, cache: DecoderCache | None):
    """The decoder's state at the prefix's last position (B, d): from the cache, or over the whole prefix."""
    if cache is None:
        return model.decode(memory, mask, prefix)[:, -1]
    return model.decode_step(memory, mask, prefix[:, -1], cache)


def _strip(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


@torch.no_grad()
def greedy(model, input_ids, attention_mask, max_len: int, cache: bool = True) -> list[list[int]]:
    """The most probable next token, step by step, for every source of the batch."""
    c, device = model.config, next(model.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    memory = model.encode(input_ids, attention_mask)
    prefix = torch.full((len(input_ids), 1), c.bos_token_id, dtype=torch.long, device=device)
    done = torch.zeros(len(input_ids), dtype=torch.bool, device=device)
    kept = DecoderCache(len(model.decoder)) if cache else None
    for _ in range(max_len):
        step = model.step_logits(next_states(model, memory, attention_mask, prefix, kept)).argmax(-1)
        step = torch.where(done, torch.full_like(step, c.pad_token_id), step)
        prefix = torch.cat([prefix, step[:, None]], 1)
        done |= step == c.eos_token_id
        if done.all():
            break
    return [_strip(row[1:], c.eos_token_id) for row in prefix.tolist()]


BEAM_ALPHA = 0.6  # GNMT's length penalty's alpha in the official run_mt.sh (`-alpha 0.6`)


def wu_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty (Wu et al. 2016, eq. 14; OpenNMT-py `length_wu`)."""
    return ((5 + length) / 6) ** alpha


class ModelSteps:
    """A PyTorch model as `search` steps it: the source read once, each row's next-token log-probabilities from
    the decoder (one new position a step with `cache`, else the whole prefix), rows reordered as the beam keeps
    them."""

    def __init__(self, model, input_ids, attention_mask, beam: int, cache: bool = True):
        device = next(model.parameters()).device
        self.model = model
        self.memory = model.encode(input_ids.to(device), attention_mask.to(device)).repeat_interleave(beam, 0)
        self.mask = attention_mask.to(device).repeat_interleave(beam, 0)
        self.kept = DecoderCache(len(model.decoder)) if cache else None

    def log_probs(self, prefix: torch.Tensor) -> torch.Tensor:
        states = next_states(self.model, self.memory, self.mask, prefix.to(self.memory.device), self.kept)
        return self.model.step_logits(states).float().log_softmax(-1).cpu()

    def reorder(self, rows: torch.Tensor) -> None:
        if self.kept is not None:
            self.kept.reorder(rows.to(self.memory.device))


def search(steps, sources: int, beam: int, max_len: int, alpha: float, bos: int, eos: int, pad: int) \
        -> list[list[int]]:
    """Beam search over `steps` (`ModelSteps`, or an exported file's `decode` signature in
    `mobilekd.export.seq2seq.FileSteps`: one search for both, so the two agree but for rounding): `steps.log_probs
    (prefix)` gives the next token's log-probabilities (sources x beam rows, V) at the prefix's last position, and
    `steps.reorder(rows)` keeps the rows that go on. The hypothesis of best log-probability / `wu_penalty` among
    those a beam of `beam` keeps, per source. Each step ranks the 2 x `beam` best continuations; one that ends (or
    reaches `max_len`) is kept as a finished hypothesis if it ranks among the first `beam`, the others that go on
    refill the beam; a source's search ends once `beam` hypotheses have finished (fairseq's `SequenceGenerator`).
    At beam 1 this is greedy decoding.

    Departures from the official decoding (OpenNMT-py's `BeamSearch`): it keeps `beam` candidates a step and, asked
    for one best, stops once the top-ranked candidate ends; and its length penalty counts one token more than the
    hypothesis has (its sequence holds the start token). Ours is fairseq's search and the paper's formula, with
    the length the hypothesis' tokens and its end."""
    b = sources
    prefix = torch.full((b * beam, 1), bos, dtype=torch.long)
    scores = torch.full((b, beam), float("-inf"))
    scores[:, 0] = 0.0  # one live hypothesis per source at the start
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    for t in range(1, max_len + 1):
        logp = steps.log_probs(prefix)
        vocab = logp.shape[-1]
        total = (scores.view(-1, 1) + logp).view(b, beam * vocab)
        top_scores, top = total.topk(2 * beam, dim=1)
        rows, new_scores = [], torch.full((b, beam), float("-inf"))
        for i in range(b):
            kept = 0
            for rank, (s, flat) in enumerate(zip(top_scores[i].tolist(), top[i].tolist())):
                origin, token = divmod(flat, vocab)
                if s == float("-inf") or len(ended[i]) >= beam:
                    break
                tokens = prefix[i * beam + origin, 1:].tolist()
                if token == eos or t == max_len:
                    if rank < beam:  # an end among the best `beam` candidates only (fairseq's `eos_mask[:, :beam]`)
                        ended[i].append((s / wu_penalty(t, alpha), tokens + ([] if token == eos else [token])))
                    continue
                if kept < beam:
                    rows.append((i * beam + origin, token))
                    new_scores[i, kept] = s
                    kept += 1
            while kept < beam:  # a finished source (or too few candidates): dead rows keep the shapes
                rows.append((i * beam, pad))
                kept += 1
        if all(len(e) >= beam for e in ended):
            break
        origins = torch.tensor([r for r, _ in rows])
        prefix = torch.cat([prefix[origins], torch.tensor([[tok] for _, tok in rows])], 1)
        steps.reorder(origins)
        scores = new_scores
    return [max(e, key=lambda x: x[0])[1] if e else [] for e in ended]


@torch.no_grad()
def beam_search(model, input_ids, attention_mask, max_len: int, beam: int = 5, alpha: float = BEAM_ALPHA,
                cache: bool = True) -> list[list[int]]:
    """`search` through the model's decoder, for every source of the batch."""
    c = model.config
    return search(ModelSteps(model, input_ids, attention_mask, beam, cache), len(input_ids), beam, max_len, alpha,
                  c.bos_token_id, c.eos_token_id, c.pad_token_id)


@torch.no_grad()
def decode_split(model, split, max_len: int, beam: int = 1, batch_size: int = 32, cache: bool = True) \
        -> list[list[int]]:
    """Every source of a split (`mobilekd.data.seq2seq.PairSplit`) decoded, greedy at beam 1, in batches of
    similar length (`by_length`), the token lists back in the split's order; `cache`: as `greedy`."""
    model.eval()
    out = [None] * len(split)
    batches, _ = split.by_length(batch_size)
    for indices in batches:
        b = split.batch(indices)  # the decoders move it to the model's device
        tokens = (greedy(model, b["input_ids"], b["attention_mask"], max_len, cache) if beam == 1 else
                  beam_search(model, b["input_ids"], b["attention_mask"], max_len, beam, cache=cache))
        for i, t in zip(indices, tokens):
            out[int(i)] = t
    return out
