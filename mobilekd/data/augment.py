"""TinyBERT's data augmentation (Jiao et al. 2020, Section 3.3 and Algorithm 1; TinyBERT/data_augmentation.py,
`DataAugmentor` and `AugmentProcessor`), on our components.

Each sentence is split into words by BERT's basic tokenization (our tokenizer's normaliser and pre-tokenizer, as
`basic_tokenizer.tokenize` there). A word made of letters only and not a stop word gets up to M candidates:

- a word that is one WordPiece: the pre-trained teacher's masked-LM top M at its position, the input being
  `[CLS] sentence with the word masked [SEP] sentence [SEP]` (`_masked_language_model`), candidates starting
  with "##" dropped; the word itself is not excluded (neither is it there);
- a word of several pieces: the official code takes its M nearest GloVe neighbours by cosine (`_word_distance`).
  GloVe cannot be downloaded here, so the word's vector is the mean of its pieces' rows in the teacher's word
  embedding table, and its neighbours are the M whole-word entries of that table (letters only, no "##")
  nearest to it by cosine: a static embedding we can build from the teacher itself;
- no candidate: the word stays.

Then N tries: a copy of the words in which each candidate word is replaced, with probability p, by one of its
candidates drawn uniformly (the draw made first, then the test `x < p`, as there); a try equal to the original or
an earlier one is dropped; the original comes first. Defaults: M 15, p 0.4, N per task (SST-2 20; CoLA, MRPC,
STS-B and RTE 30; `main` there). New sentences are the words joined by spaces.

Pairs: the official `read_augment_write` augments each column of the row in turn; its rows for the second column
keep the last augmented first sentence (the row is edited in place). Here the other column keeps its original
text, so each new example changes one sentence. Labels are kept. Randomness comes from numpy generators seeded by
(seed, example, column), so the same seed gives the same augmented set in any order of work.

The masked-LM pass runs under bf16 autocast where this host runs it faster (`augment_precision`, `--mixed-precision
auto`): a departure from the official fp32 pass, cached under a key of its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from mobilekd.data.candidate_store import CHUNK, VERSION, CandidateStore, store_path
from mobilekd.data.examples import TextExample, read_examples, write_examples
from mobilekd.fileio import Made, cached_timed, file_digest
from mobilekd.bf16 import decide_inference_precision, read_only_flag

FILL_TOKENS = 512  # a masked-LM batch filled to this many tokens, or its full rows (`Augmentor._masked_lm`): over AMX
# bf16's 384, with a margin
N_PER_TASK = {"sst2": 20, "cola": 30, "mrpc": 30, "stsb": 30, "rte": 30, "mnli": 10, "qqp": 10, "qnli": 20}
M, P = 15, 0.4

# NLTK's English stop words with "'s" and "'re", the list data_augmentation.py carries (`StopWordsList`)
STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves this that that'll these
those am is are was were be been being have has had having do does did doing a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there all any both each few more most other some such
no nor not only own same so than too very s t can will just don don't should should've now d ll m o re ve y ain
aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn
mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
wouldn't 's 're""".split())


def words(tokenizer, text: str) -> list[str]:
    """BERT's basic tokenization: normalised (lower-cased, accents stripped for an uncased vocab), split on
    whitespace and punctuation."""
    backend = tokenizer.backend_tokenizer
    normal = backend.normalizer.normalize_str(text) if backend.normalizer else text
    return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(normal)]


def eligible(word: str) -> bool:
    return re.fullmatch("[a-z]+", word.lower()) is not None and word.lower() not in STOP_WORDS


class Augmentor:
    """Candidates from a pre-trained model with an MLM head (`MobileBertForPreTraining`) and its tokenizer."""

    def __init__(self, model, tokenizer, m: int = M, p: float = P, batch_size: int = 64, precision: str = "no"):
        self.model, self.tokenizer, self.m, self.p, self.batch_size = model.eval(), tokenizer, m, p, batch_size
        self.precision = precision  # bf16: the masked-LM pass under bf16 autocast (`augment_precision`)
        vocab = tokenizer.get_vocab()
        self.whole = np.array(sorted(i for t, i in vocab.items() if re.fullmatch("[a-z]+", t)))
        self.id_to_token = {i: t for t, i in vocab.items()}
        table = model.mobilebert.embeddings.word_embeddings.weight.detach().float().cpu()
        self.table = torch.nn.functional.normalize(table, dim=-1)
        self.whole_table = self.table[torch.from_numpy(self.whole)]

    def _neighbours(self, pieces: list[int]) -> list[str]:
        """Multi-piece words: the M whole words nearest to the mean of the pieces' embeddings."""
        v = torch.nn.functional.normalize(self.table[pieces].mean(0), dim=0)
        sims = self.whole_table @ v
        top = torch.topk(sims, min(self.m, len(self.whole))).indices.numpy()
        return [self.id_to_token[int(self.whole[i])] for i in top]

    @torch.no_grad()
    def _logits(self, chunk: list[tuple[list[int], int]]) -> torch.Tensor:
        """The masked-LM logits (float32) at the masked position of each query of `chunk`, in `self.precision`."""
        tok = self.tokenizer
        rows = []
        for pieces, at in chunk:
            masked = pieces[:at] + [tok.mask_token_id] + pieces[at + 1:]
            ids = [tok.cls_token_id, *masked, tok.sep_token_id, *pieces, tok.sep_token_id][:512]
            types = [0] * (len(masked) + 2) + [1] * (len(pieces) + 1)
            rows.append((ids, types[:len(ids)], at + 1))
        width = max(len(r[0]) for r in rows)
        ids = torch.tensor([r[0] + [tok.pad_token_id] * (width - len(r[0])) for r in rows])
        types = torch.tensor([r[1] + [0] * (width - len(r[1])) for r in rows])
        mask = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in rows])
        positions = torch.tensor([[r[2]] for r in rows])
        device = next(self.model.parameters()).device
        with torch.autocast(device.type, dtype=torch.bfloat16) if self.precision == "bf16" else nullcontext():
            logits = self.model(*(t.to(device) for t in (ids, mask, types, positions))).mlm_logits
        return logits.float().cpu()

    def _masked_lm(self, queries: list[tuple[list[int], int]]) -> list[list[str]]:
        """Single-piece words: (sentence pieces, index of the word's piece) -> the MLM's top M, "##" dropped.

        Batches hold queries of one length only, unpadded, so a query's logits do not depend on the other queries
        of its batch: a sentence gets the same candidates whichever sentences share the run (a seed's training
        split, a store filled by another run), as in data_augmentation.py, which asks one query at a time. Padded
        to a longer query's width, a bf16 pass reordered near-tied candidates of 29 of 300 SST-2 sentences. A batch
        of fewer than FILL_TOKENS tokens is filled with copies of its last query (their logits dropped) up to that
        many, or to `batch_size` rows: on an AMX Xeon in bf16 a query's logits were bitwise those of a full batch
        wherever its batch held over 384 tokens (rows x width; six widths, 9 to 93, every row count to 64), and
        differed below (a group's last batch: 44 of 400 SST-2 sentences' candidates differed between one pass and
        two); filling every batch to 64 rows made the pass 1.47x slower."""
        by_length: dict[int, list[int]] = {}
        for q, (pieces, _) in enumerate(queries):
            by_length.setdefault(len(pieces), []).append(q)
        batches = [group[i:i + self.batch_size] for _, group in sorted(by_length.items())
                   for i in range(0, len(group), self.batch_size)]
        out = [None] * len(queries)
        for batch in tqdm(batches, desc="augmentation: masked-LM candidates", leave=False):
            width = 2 * len(queries[batch[0]][0]) + 3  # [CLS] masked [SEP] sentence [SEP]
            rows = max(len(batch), min(self.batch_size, -(-FILL_TOKENS // width)))
            logits = self._logits([queries[q] for q in batch + [batch[-1]] * (rows - len(batch))])[:len(batch)]
            for q, row in zip(batch, torch.topk(logits, self.m, dim=-1).indices.tolist()):
                out[q] = [t for t in (self.id_to_token[i] for i in row) if not t.startswith("##")]
        return out

    def median_queries(self, sentences: list[str]) -> list[tuple[list[int], int]]:
        """A batch of queries from the sentence of median length (each of its pieces masked in turn): what the
        masked-LM pass reads in a typical batch, for timing it."""
        pieces = sorted((self.tokenizer(s, add_special_tokens=False)["input_ids"] for s in sentences), key=len)
        middle = pieces[len(pieces) // 2] or [self.tokenizer.unk_token_id]
        return [(middle, i % len(middle)) for i in range(self.batch_size)]

    def candidates(self, sentences: list[str], store: CandidateStore | None = None,
                   chunk: int = CHUNK) -> list[dict[int, list[str]]]:
        """For each sentence, word index -> its candidates (the word itself when none), for eligible words; with a
        `store`, those it has are read from it, and the missing ones computed and kept there in chunks of `chunk`:
        first the chunks no run beside this one has claimed (`CandidateStore.claim`), then, waiting for it, those
        it had, each read from the store again before it is computed (so two runs started together over the same
        sentences, which find the same ones missing, split the masked-LM pass)."""
        if store is None:
            return self._candidates(sentences)
        found = store.get(sentences)
        missing = list(dict.fromkeys(s for s in sentences if s not in found))
        pending = [missing[i:i + chunk] for i in range(0, len(missing), chunk)]
        with tqdm(total=sum(map(len, pending)), desc="augmentation: sentences not in the store", unit="sentence",
                  leave=False, disable=len(pending) <= 1) as bar:
            for wait in (False, True):
                claimed, pending = pending, []
                for part in claimed:
                    with store.claim(part, wait) as held:
                        if not held:
                            pending.append(part)
                            continue
                        found.update(store.read(part))
                        todo = [s for s in part if s not in found]
                        if todo:
                            made = dict(zip(todo, self._candidates(todo)))
                            store.put(made)
                            found.update(made)
                    bar.update(len(part))
        return [found[s] for s in sentences]

    def _candidates(self, sentences: list[str]) -> list[dict[int, list[str]]]:
        tok = self.tokenizer
        found: list[dict[int, list[str]]] = []
        queries, where = [], []
        split = [words(tok, sentence) for sentence in sentences]
        for s, ws in enumerate(tqdm(split, desc="augmentation candidates", leave=False)):
            piece_lists = [tok.convert_tokens_to_ids(tok.tokenize(w)) for w in ws]
            flat = [p for ps in piece_lists for p in ps]
            found.append({})
            offset = 0
            for i, (w, ps) in enumerate(zip(ws, piece_lists)):
                if eligible(w) and ps:
                    if len(ps) == 1 and offset < 510:
                        queries.append((flat, offset))
                        where.append((s, i))
                    elif len(ps) > 1:
                        found[s][i] = self._neighbours(ps)
                offset += len(ps)
        for (s, i), cands in zip(where, self._masked_lm(queries)):
            found[s][i] = cands
        # in the words' order, as data_augmentation.py's `augment` fills `candidate_words` (its draws go in this
        # order): not multi-piece words first, as they are found here
        return [{i: found[s][i] or [ws[i]] for i in sorted(found[s])} for s, ws in enumerate(split)]

    def variants(self, sentence: str, cands: dict[int, list[str]], n: int, rng: np.random.Generator) -> list[str]:
        """The original and up to n distinct new sentences (Algorithm 1)."""
        ws = words(self.tokenizer, sentence)
        out = [sentence]
        for _ in range(n):
            new = list(ws)
            for i, options in cands.items():
                choice = options[int(rng.integers(len(options)))]
                if rng.random() < self.p:
                    new[i] = choice
            text = " ".join(new)
            if text not in out:
                out.append(text)
        return out

    def augment(self, examples: list[TextExample], n: int, seed: int,
                store: CandidateStore | None = None) -> list[TextExample]:
        """Each example, then its new variants (first sentence, then second), labels kept; the candidates through
        `store` where one is given."""
        columns = ["text_a"] + (["text_b"] if examples and examples[0].text_b is not None else [])
        cands = {c: self.candidates([getattr(e, c) for e in examples], store) for c in columns}
        out = []
        for k, e in enumerate(examples):
            out.append(e)
            for j, c in enumerate(columns):
                rng = np.random.default_rng((seed, k, j))
                for text in self.variants(getattr(e, c), cands[c][k], n, rng)[1:]:
                    out.append(TextExample(**{**e.__dict__, c: text, "source": f"{e.source} (augmented)"}))
        return out


def augmented(examples: list[TextExample], model_dir: Path, n: int, seed: int, cache_dir: Path, load,
              flag: str = "no", precision_cache: Path | None = None) -> tuple[list[TextExample], Made, dict]:
    """`examples` augmented by the model in `model_dir` (`load(model_dir)` -> (model, tokenizer)), cached in
    `cache_dir` under a key of the model's weights, the examples, n, M, p, the seed, the candidates' VERSION and
    the masked-LM pass's precision; whether it was cached and what making it cost (`Made`); and that precision
    (`augment_precision` by `--mixed-precision` `flag`, an auto choice kept in `precision_cache`), with, where the
    set was made here, the candidate store's record (`CandidateStore.record`). Runs of the same set started
    together (a benchmark's seeds) compute it once (`cached_timed`); a cached set loads no model. A set of other
    examples (another seed's training split) reads the word candidates of every sentence an earlier set had from
    the store in `cache_dir` (`mobilekd.data.candidate_store`), so its masked-LM pass runs over its new sentences
    only."""
    @functools.cache
    def loaded():
        model, tokenizer = load(model_dir)
        if torch.cuda.is_available():  # the masked-LM candidates are most of the cost: on the GPU where there is one
            model = model.cuda()
        return model, tokenizer

    found = augment_precision(loaded, Path(model_dir), examples, flag, precision_cache)
    h = hashlib.sha256(file_digest(Path(model_dir) / "model.safetensors").encode())
    # VERSION: sets made before the candidates kept the words' order (and came from unpadded batches) are not read
    h.update(json.dumps([[[e.text_a, e.text_b, e.label] for e in examples], n, M, P, seed, VERSION]).encode())
    suffix = "-bf16" if found["precision"] == "bf16" else ""
    path = Path(cache_dir) / "augmented" / f"{h.hexdigest()[:20]}{suffix}.json"

    stores = []  # the candidates' store, opened where the set is made

    def make():
        model, tokenizer = loaded()
        device = next(model.parameters()).device.type
        stores.append(CandidateStore(store_path(cache_dir, Path(model_dir), M, found["precision"], device)))
        return Augmentor(model, tokenizer, precision=found["precision"]).augment(examples, n, seed, stores[0])
    made = cached_timed(path, read_examples, make, write_examples)
    return (*made, {**found, **(stores[0].record() if stores and stores[0].asked else {})})


PROBE_SENTENCES = 2000  # the sentences whose median length the probe's queries take


def augment_precision(loaded, model_dir: Path, examples: list[TextExample], flag: str = "no",
                      cache: Path | None = None) -> dict:
    """The precision of the masked-LM candidates' pass by `--mixed-precision` `flag` (bf16, else fp32; `pass_flag`):
    with auto, bf16 where a batch of queries from the median sentence (of the first PROBE_SENTENCES) runs faster in
    it on this host, the choice kept in `cache` (`mobilekd.train.precision.decide_inference_precision`, keyed by
    the model's size as its file stores it). `loaded()` -> (model, tokenizer) is called only to probe. bf16 departs
    from the official fp32 `_masked_language_model` where it pays: its rounding can reorder near-ties among a word's
    top M candidates, and so change which words the draws pick."""
    if flag != "auto":
        return {"precision": read_only_flag(flag), "why": f"--mixed-precision {flag}"}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    @functools.cache
    def probe_batch():  # at the probe's first (untimed) pass, outside its autocast
        with torch.autocast(device.type, enabled=False):
            augmentor = Augmentor(*loaded())  # in fp32 itself: the probe times it under its own autocast
            return augmentor, augmentor.median_queries([e.text_a for e in examples[:PROBE_SENTENCES]])

    def forward():
        augmentor, queries = probe_batch()
        augmentor._logits(queries)

    with safe_open(str(Path(model_dir) / "model.safetensors"), "pt") as f:
        size = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    return decide_inference_precision("augment-mlm", size, forward, device, flag, cache)
