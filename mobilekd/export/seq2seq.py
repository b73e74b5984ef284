"""A seq2seq student (`mobilekd.models.seq2seq`) as one `.tflite` with two signatures, run by the app as a greedy
loop, the decoder's keys and values kept between steps (issue 79; `Seq2SeqTransformer.decode_step` in PyTorch):

    encode(input_ids, attention_mask)      -> memory_keys, memory_values   (1, S) int32 each
                                                                           -> (layers, 1, heads, S, d/heads) float32
    decode(memory_keys, memory_values, attention_mask, token, step, keys, values)
                                           -> logits, next_token, keys, values
                                              token, step: (1,) int32; keys, values: (layers, 1, heads, L, d/heads)

The source is padded to S word pieces (`attention_mask` 0 there); `encode` returns what every decoder layer's
cross-attention reads of it, once. `decode` runs the decoder at one position, `step`, for its input `token` ([CLS]
at step 0, then the token generated before): it writes that position's self-attention keys and values into slot
`step` of the caches it is given and returns them, attending slots 0..step only (the later ones, still zeros, are
masked), so each step costs one position, not the whole prefix. The app:

    mk, mv = encode(ids, mask); keys = values = zeros; token = CLS
    for step in 0 .. L-1: token, keys, values = decode(mk, mv, mask, token, step, keys, values)
                          stop at [SEP]

`convert_seq2seq(..., cache=False)` writes the earlier format instead (a file such as `mobilekd export` wrote
before the cache), whose `decode(memory, attention_mask, prefix, step)` reruns the decoder over the whole prefix
at each step; `GreedyFile` runs either.

`GreedyFile` is that loop on the LiteRT interpreter, exactly as an app runs it (docs/seq2seq.md gives it in
Kotlin); `seq2seq_parity` compares its output with PyTorch's greedy decoding (`mobilekd.models.decoding.greedy`)
sentence by sentence. `GreedyFile.beam_search` is the app's beam search over the same `decode` (one pair of caches
per hypothesis, `FileSteps`), by the very search PyTorch's `beam_search` runs (`mobilekd.models.decoding.search`);
`beam_parity` compares the two. `mobilekd latency` times such a file per sentence of GENERATED_TOKENS tokens
(`SentenceTiming`) and estimates it on phones from the same sentence's operators (`sentence_graph`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mobilekd.data.seq2seq import PairSplit
from mobilekd.errors import UserError
from mobilekd.export.graph import Op, read_graph, subgraph_names
from mobilekd.export.litert import convert_signatures
from mobilekd.models.decoding import BEAM_ALPHA, decode_split, search
from mobilekd.models.seq2seq import NEG, Seq2SeqTransformer

ENCODE, DECODE = "encode", "decode"


class Encode(nn.Module):
    """The source's memory as every decoder layer's cross-attention reads it: its keys and values, stacked."""

    def __init__(self, model: Seq2SeqTransformer):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        memory = self.model.encode(input_ids.long(), attention_mask.long())
        keys, values = zip(*(layer.cross_attn.keys_values(memory) for layer in self.model.decoder))
        return {"memory_keys": torch.stack(keys), "memory_values": torch.stack(values)}


class Decode(nn.Module):
    """One decoder position with fixed-size caches (`DecoderLayer.step`, whose `write` here blends the position's
    keys and values into slot `step` by a one-hot mask: elementwise operators every converter and delegate take,
    exact, since the mask is 0 or 1)."""

    def __init__(self, model: Seq2SeqTransformer):
        super().__init__()
        self.model = model

    def forward(self, memory_keys, memory_values, attention_mask, token, step, keys, values):
        m, step = self.model, step.long()
        slots = torch.arange(keys.shape[3], device=keys.device)
        at = (slots == step).to(keys.dtype).view(1, 1, -1, 1)
        seen = torch.where(slots <= step, 0.0, NEG).to(keys.dtype).view(1, 1, 1, -1)  # slots after step: empty
        y, memory_bias = m._embed(token.long()[:, None], step), m.padding_bias(attention_mask.long())
        kept_keys, kept_values = [], []
        for i, layer in enumerate(m.decoder):
            def write(k, v, i=i):
                kept_keys.append(keys[i] * (1 - at) + k * at)
                kept_values.append(values[i] * (1 - at) + v * at)
                return kept_keys[-1], kept_values[-1]
            y = layer.step(y, write, (memory_keys[i], memory_values[i]), memory_bias, seen)
        logits = m.logits(m.decoder_norm(y)[:, 0])
        return {"logits": logits, "next_token": logits.argmax(-1).to(torch.int32),
                "keys": torch.stack(kept_keys), "values": torch.stack(kept_values)}


class PrefixEncode(nn.Module):
    """The earlier format's encode: the memory itself."""

    def __init__(self, model: Seq2SeqTransformer):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return {"memory": self.model.encode(input_ids.long(), attention_mask.long())}


class PrefixDecode(nn.Module):
    """The earlier format's decode: the decoder over the whole prefix, the logits at position `step`."""

    def __init__(self, model: Seq2SeqTransformer):
        super().__init__()
        self.model = model

    def forward(self, memory, attention_mask, prefix, step):
        states = self.model.decode(memory, attention_mask.long(), prefix.long())
        logits = self.model.logits(states.index_select(1, step.long())[:, 0])
        return {"logits": logits, "next_token": logits.argmax(-1).to(torch.int32)}


def cache_shape(model: Seq2SeqTransformer, length: int) -> tuple[int, ...]:
    c = model.config
    return len(model.decoder), 1, c.heads, length, c.d_model // c.heads


def sample_inputs(model: Seq2SeqTransformer, source_len: int, target_len: int, cache: bool = True) -> dict[str, dict]:
    ones = torch.ones(1, source_len, dtype=torch.int32)
    one = torch.zeros(1, dtype=torch.int32)
    encode = {"input_ids": torch.zeros(1, source_len, dtype=torch.int32), "attention_mask": ones}
    if not cache:
        return {ENCODE: encode, DECODE: {"memory": torch.zeros(1, source_len, model.config.d_model),
                                         "attention_mask": ones, "step": one,
                                         "prefix": torch.zeros(1, target_len, dtype=torch.int32)}}
    # every input its own tensor: an exporter reads two arguments given one tensor as one input
    memory, kept = (cache_shape(model, n) for n in (source_len, target_len))
    return {ENCODE: encode, DECODE: {"memory_keys": torch.zeros(memory), "memory_values": torch.zeros(memory),
                                     "attention_mask": ones, "token": one.clone(), "step": one.clone(),
                                     "keys": torch.zeros(kept), "values": torch.zeros(kept)}}


def convert_seq2seq(model: Seq2SeqTransformer, source_len: int, target_len: int, out_path, cache: bool = True) \
        -> Path:
    """Both signatures in one file, written atomically; `cache`: the decoder's keys and values kept between steps
    (else the earlier format, which reruns the decoder over the prefix)."""
    if max(source_len, target_len) > model.config.max_positions:
        raise UserError(f"--max-len {max(source_len, target_len)} exceeds the model's {model.config.max_positions} "
                        f"positions")
    model.eval()
    samples = sample_inputs(model, source_len, target_len, cache)
    encode, decode = (Encode, Decode) if cache else (PrefixEncode, PrefixDecode)
    return convert_signatures([(ENCODE, encode(model).eval(), samples[ENCODE]),
                               (DECODE, decode(model).eval(), samples[DECODE])], out_path, "the seq2seq model")


class GreedyFile:
    """The app's greedy loop over a seq2seq `.tflite`: `runner(source_ids)` -> the generated token ids ([SEP] and
    what follows left out), and the seconds its encode and each decode step took."""

    def __init__(self, path, bos: int, eos: int, threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=threads)
        names = self.interpreter.get_signature_list()
        if set(names) != {ENCODE, DECODE}:
            raise UserError(f"{path}: not a seq2seq file (signatures {sorted(names)}, expected encode and decode)")
        self.encode = self.interpreter.get_signature_runner(ENCODE)
        self.decode = self.interpreter.get_signature_runner(DECODE)
        self.source_len = int(self.encode.get_input_details()["input_ids"]["shape"][1])
        self.target_len = target_length(self.decode)
        self.cache_input = self.decode.get_input_details().get("keys")  # None: the earlier, whole-prefix format
        self.cached = self.cache_input is not None
        self.bos, self.eos = bos, eos

    def padded(self, source_ids) -> tuple[np.ndarray, np.ndarray]:
        """A source as `encode` takes it: its ids and mask padded to the file's source length."""
        if len(source_ids) > self.source_len:
            raise UserError(f"a source of {len(source_ids)} word pieces is over the file's {self.source_len}")
        ids = np.zeros((1, self.source_len), np.int32)
        mask = np.zeros((1, self.source_len), np.int32)
        ids[0, :len(source_ids)], mask[0, :len(source_ids)] = source_ids, 1
        return ids, mask

    def __call__(self, source_ids) -> tuple[list[int], float, list[float]]:
        return self.generate(*self.padded(source_ids), self.target_len)

    def beam_search(self, source_ids, beam: int, alpha: float = BEAM_ALPHA) -> tuple[list[int], float]:
        """The app's beam search over the file (`mobilekd.models.decoding.search`, the search PyTorch's
        `beam_search` runs, through `FileSteps`): the best hypothesis' tokens and the seconds it took."""
        start = time.perf_counter()
        steps = FileSteps(self, *self.padded(source_ids))
        tokens = search(steps, 1, beam, self.target_len, alpha, self.bos, self.eos, pad=self.eos)[0]
        return tokens, time.perf_counter() - start

    def generate(self, ids, mask, tokens: int, stop: bool = True) -> tuple[list[int], float, list[float]]:
        """Encode the padded source, then up to `tokens` decode steps, each feeding its token back (ending at [SEP]
        unless `stop` is off)."""
        start = time.perf_counter()
        encoded = self.encode(input_ids=ids, attention_mask=mask)
        encode_seconds, steps = time.perf_counter() - start, []
        prefix = np.zeros((1, self.target_len), np.int32)  # the earlier format's input
        prefix[0, 0] = self.bos
        if self.cached:
            keys = values = np.zeros(self.cache_input["shape"], self.cache_input["dtype"])
        out, token = [], self.bos
        for step in range(min(tokens, self.target_len)):
            start = time.perf_counter()
            at = np.array([step], np.int32)
            if self.cached:
                got = self.decode(memory_keys=encoded["memory_keys"], memory_values=encoded["memory_values"],
                                  attention_mask=mask, token=np.array([token], np.int32), step=at, keys=keys,
                                  values=values)
                keys, values = got["keys"], got["values"]
            else:
                got = self.decode(memory=encoded["memory"], attention_mask=mask, prefix=prefix, step=at)
            token = int(got["next_token"][0])
            steps.append(time.perf_counter() - start)
            if stop and token == self.eos:
                break
            out.append(token)
            if step + 1 < self.target_len:
                prefix[0, step + 1] = token
        return out, encode_seconds, steps


class FileSteps:
    """A file's `decode` signature as beam search steps it (`mobilekd.models.decoding.search`), for one source: a
    row per hypothesis, each with its own caches, since `decode` takes one row (the app keeps `beam` pairs of cache
    arrays and, when the beam reorders its hypotheses, their caches with them). Rows with the same prefix hold the
    same caches, so each distinct prefix is decoded once a step (at the first step, every row is [CLS])."""

    def __init__(self, runner: GreedyFile, ids: np.ndarray, mask: np.ndarray):
        self.runner, self.mask = runner, mask
        self.encoded = runner.encode(input_ids=ids, attention_mask=mask)
        if runner.cached:
            empty = np.zeros(runner.cache_input["shape"], runner.cache_input["dtype"])
            self.caches = {(): (empty, empty)}  # the caches each row's prefix (before its last token) left

    def log_probs(self, prefix: torch.Tensor) -> torch.Tensor:
        rows, done = [tuple(r) for r in prefix.tolist()], {}
        for row in rows:
            if row not in done:
                done[row] = self._decode(row, prefix.shape[1] - 1)
        if self.runner.cached:
            self.caches = {row: kept for row, (_, kept) in done.items()}
        return torch.from_numpy(np.stack([done[row][0] for row in rows])).float().log_softmax(-1)

    def _decode(self, row: tuple[int, ...], step: int):
        r, at = self.runner, np.array([step], np.int32)
        if r.cached:
            keys, values = self.caches[row[:-1]]
            got = r.decode(memory_keys=self.encoded["memory_keys"], memory_values=self.encoded["memory_values"],
                           attention_mask=self.mask, token=np.array([row[-1]], np.int32), step=at, keys=keys,
                           values=values)
            return got["logits"][0], (got["keys"], got["values"])
        prefix = np.zeros((1, r.target_len), np.int32)
        prefix[0, :len(row)] = row
        got = r.decode(memory=self.encoded["memory"], attention_mask=self.mask, prefix=prefix, step=at)
        return got["logits"][0], None

    def reorder(self, rows: torch.Tensor) -> None:
        """Nothing to move: each row's caches are found by its prefix."""


GENERATED_TOKENS = 20  # a sentence, for timing: about the mean target of paraphrase and correction (20 word pieces)


def target_length(decode) -> int:
    """The longest target a file's `decode` signature runner takes: its caches' slots, or the earlier format's
    prefix length."""
    inputs = decode.get_input_details()
    return int(inputs["keys"]["shape"][3]) if "keys" in inputs else int(inputs["prefix"]["shape"][1])


def is_seq2seq_file(path) -> bool:
    return set(subgraph_names(path)) == {ENCODE, DECODE}


def sentence_tokens(path) -> int:
    """The tokens of a timed sentence: GENERATED_TOKENS, or the file's target length where that is shorter."""
    from ai_edge_litert.interpreter import Interpreter

    return min(GENERATED_TOKENS, target_length(Interpreter(model_path=str(path)).get_signature_runner(DECODE)))


def sentence_graph(path, tokens: int | None = None) -> list[Op]:
    """The operators one generated sentence of `tokens` tokens (default `sentence_tokens`) runs, in order: encode's,
    then decode's once per token (what a cost model sums, dispatches included)."""
    names = subgraph_names(path)
    return read_graph(path, names.index(ENCODE)) + (tokens or sentence_tokens(path)) * read_graph(
        path, names.index(DECODE))


class SentenceTiming(GreedyFile):
    """A seq2seq file as a timing harness runs a classifier file (`android_bench.host`): `inputs` are encode's,
    and a call generates one sentence of `sentence_tokens` tokens, whatever they are (a full-length source)."""

    def __init__(self, path, threads: int = 1):
        super().__init__(path, bos=0, eos=-1, threads=threads)
        self.inputs = self.encode.get_input_details()

    def __call__(self, **feed):  # `generate` stops at the file's target length, as `sentence_tokens` counts
        return self.generate(feed["input_ids"], feed["attention_mask"], GENERATED_TOKENS, stop=False)[0]


def seq2seq_parity(model: Seq2SeqTransformer, path, split: PairSplit, batch_size: int = 32,
                   mine: list[list[int]] | None = None) -> tuple[dict, list[list[int]]]:
    """PyTorch's greedy decoding (over the file's target length; `mine` where it is decoded already) and the file's
    app loop, sentence by sentence: the share of identical outputs, the first that differ (their index), and the
    file's host latency (median encode, per generated token, per sentence; one thread); and the file's outputs (a
    quantized file's differ: the caller scores what that costs)."""
    runner = GreedyFile(path, model.config.bos_token_id, model.config.eos_token_id)
    if mine is None:
        mine = decode_split(model, split, runner.target_len, batch_size=batch_size)
    encode, step, sentence, outputs = [], [], [], []
    for source in sources(split):
        tokens, e, steps = runner(source)
        outputs.append(tokens)
        encode.append(e)
        step += steps
        sentence.append(e + sum(steps))
    return {**agreement(outputs, mine),
            "host_ms": {"encode": _ms(encode), "per_token": _ms(step), "per_sentence": _ms(sentence)},
            "source_len": runner.source_len, "target_len": runner.target_len}, outputs


def beam_parity(model: Seq2SeqTransformer, path, split: PairSplit, beam: int, batch_size: int = 32,
                mine: list[list[int]] | None = None) -> tuple[dict, list[list[int]], list[list[int]]]:
    """PyTorch's beam search (over the file's target length; `mine` where it is decoded already) and the file's
    (`GreedyFile.beam_search`, the same `search` over the file's `decode`, both at BEAM_ALPHA), sentence by
    sentence, as `seq2seq_parity`: the share identical, the first that differ, the file's median host milliseconds
    a sentence (one thread); and both sides' outputs."""
    runner = GreedyFile(path, model.config.bos_token_id, model.config.eos_token_id)
    if mine is None:
        mine = decode_split(model, split, runner.target_len, beam=beam, batch_size=batch_size)
    outputs, seconds = zip(*(runner.beam_search(source, beam) for source in sources(split)))
    return {"beam": beam, **agreement(list(outputs), mine), "host_ms": {"per_sentence": _ms(seconds)}}, \
        list(outputs), mine


def sources(split: PairSplit):
    """Each source's word pieces, padding left out, in the split's order."""
    for source in split.arrays["source_ids"]:
        yield source[source != split.pad].tolist()


def agreement(outputs: list[list[int]], mine: list[list[int]]) -> dict:
    """The share of sentences the file decodes as PyTorch does, and the first (up to 5) that differ."""
    differ = [i for i, (a, b) in enumerate(zip(outputs, mine)) if a != b]
    return {"pairs": len(mine), "identical": (len(mine) - len(differ)) / len(mine), "first_differing": differ[:5]}


def _ms(seconds) -> float:
    return round(1000 * float(np.median(seconds)), 3)
