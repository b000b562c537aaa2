"""Distribution shift between a source task and target tasks (paper 001 §3.2, Figure 2, Appendix C, Table 6),
and the alignment / uniformity of representations (paper 001 Figure 5(b), Appendix H; Wang and Isola, 2020).

Paper 001 measures the shift from MS MARCO to each BEIR task with the pairwise weighted Jaccard similarity
(Ioffe, 2010; Thakur et al., 2021), Appendix C.2::

    J(S, T) = sum_k min(S_k, T_k) / sum_k max(S_k, T_k)

over every word ``k`` of either dataset, ``S_k`` / ``T_k`` the word's frequency in each.  The frequencies are
relative here (each dataset's counts divided by its total): with raw counts the similarity would mostly
measure the datasets' sizes (MS MARCO's 8.8M passages against a 3,633-document NFCorpus), while the printed
values (0.23 .. 0.51) are those of distributions.

* **Document lexical similarity**: ``J`` of the corpora's unigram distributions (lower-cased word tokens).
* **Query intent similarity**: ``J`` of the distributions over the nine query types of Ren et al. (2022),
  Appendix C.1: the seven wh-words (what, when, who, how, where, why, which) by the first word, Y/N questions
  by a first word among is/was/are/were/do/does/did/have/has/had/should/can/could/would/am/shall, the rest
  declarative.  The paper prints the last Y/N word as "small", which would make "small dog breeds" a Y/N
  question: it is read as "shall" (the auxiliary the list is made of).

A corpus's word counts are cached under the harness cache (``<cache root>/unigrams/<key>.json.gz``, written
atomically), keyed by the corpus content hash and the tokenisation: counting MS MARCO's 8.8M passages takes
minutes, and the shift layout needs them at every render.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.io import atomic_write

if TYPE_CHECKING:
    from harness.data.beir import Corpus

WH_WORDS = ("what", "when", "who", "how", "where", "why", "which")
YES_NO_WORDS = frozenset("is was are were do does did have has had should can could would am shall".split())
QUERY_TYPES = (*WH_WORDS, "y/n", "declarative")
_WORD = re.compile(r"\w+")
_PAIR_STREAM = 0xA11C     # the random stream of span_pairs (document order and chunk draws)


def words(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def query_type(query: str) -> str:
    """The query's type among :data:`QUERY_TYPES`, by its first word (paper 001 Appendix C.1)."""
    tokens = words(query)
    first = tokens[0] if tokens else ""
    if first in WH_WORDS:
        return first
    return "y/n" if first in YES_NO_WORDS else "declarative"


def distribution(counts: Mapping[str, float]) -> dict[str, float]:
    """``counts`` divided by their total (an empty or all-zero mapping stays empty)."""
    total = float(sum(counts.values()))
    return {k: v / total for k, v in counts.items() if v} if total > 0 else {}


def query_type_distribution(queries: Iterable[str]) -> dict[str, float]:
    """The share of each query type in ``queries``."""
    return distribution(Counter(query_type(q) for q in queries))


def unigram_distribution(texts: Iterable[str]) -> dict[str, float]:
    """The relative frequency of each word over ``texts``."""
    return distribution(unigram_counts(texts))


UNIGRAM_CACHE_DIR = "unigrams"
UNIGRAM_CACHE_VERSION = 1     # bump when the counting below changes: old entries are then not read


def unigram_counts(texts: Iterable[str]) -> Counter[str]:
    """The count of each word (:func:`words`) over ``texts``."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(words(text))
    return counts


def unigram_cache_key(corpus: Corpus) -> str:
    """The cache key of a corpus's word counts: its content hash, the tokeniser and the cache version."""
    blob = json.dumps({"version": UNIGRAM_CACHE_VERSION, "corpus": corpus.content_hash(),
                       "tokens": _WORD.pattern, "lower": True, "fields": "titles + texts"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def unigram_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the word counts are cached: ``<cache root>/unigrams`` (root: ``cache_dir``, else the harness's)."""
    from harness.encoders.cache import cache_root  # lazy (start-up speed): the encoder cache module loads numpy

    return cache_root(cache_dir) / UNIGRAM_CACHE_DIR


def corpus_unigram_counts(corpus: Corpus, cache_dir: str | Path | None = None) -> Counter[str]:
    """The word counts of a corpus's titles and texts (``title + ' ' + text`` has the same words: a word never
    spans the space), read from the harness cache when an entry for this content exists, else counted and
    written there atomically (a concurrent writer of the same key writes the same counts)."""
    path = unigram_cache_dir(cache_dir) / f"{unigram_cache_key(corpus)}.json.gz"
    if path.exists():
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return Counter(json.load(handle)["counts"])
    counts = unigram_counts(corpus.titles) + unigram_counts(corpus.texts)
    with atomic_write(path) as handle:
        json.dump({"version": UNIGRAM_CACHE_VERSION, "documents": len(corpus), "counts": dict(counts)}, handle,
                  ensure_ascii=False)
    return counts


def weighted_jaccard(source: Mapping[str, float], target: Mapping[str, float]) -> float:
    """``sum_k min(S_k, T_k) / sum_k max(S_k, T_k)`` over the words of either (paper 001 Appendix C.2);
    0 when both are empty."""
    keys = set(source) | set(target)
    top = sum(min(source.get(k, 0.0), target.get(k, 0.0)) for k in keys)
    bottom = sum(max(source.get(k, 0.0), target.get(k, 0.0)) for k in keys)
    return top / bottom if bottom > 0 else 0.0


def shift_similarities(source_queries: Iterable[str], source_docs: Iterable[str], target_queries: Iterable[str],
                       target_docs: Iterable[str]) -> tuple[float, float]:
    """``(query intent similarity, document lexical similarity)`` of a target task with the source task."""
    return (weighted_jaccard(query_type_distribution(source_queries), query_type_distribution(target_queries)),
            weighted_jaccard(unigram_distribution(source_docs), unigram_distribution(target_docs)))


def _normalized(x: Any) -> Any:
    import torch  # lazy (start-up speed): the text statistics above need no torch

    x = torch.as_tensor(x, dtype=torch.float64)
    return torch.nn.functional.normalize(x, dim=-1)


def alignment(x: Any, y: Any, alpha: float = 2.0) -> float:
    """``E ||f(x) - f(x+)||^alpha`` over positive pairs (rows of ``x`` and ``y``), the embeddings L2-normalised
    first: paper 001 Appendix H (alpha 2), the released code of Wang and Isola (2020) (``align_loss``)."""
    x, y = _normalized(x), _normalized(y)
    return float((x - y).norm(p=2, dim=1).pow(alpha).mean())


def uniformity(x: Any, t: float = 2.0) -> float:
    """``log E exp(-t ||f(x) - f(y)||^2)`` over the distinct pairs of rows of ``x`` (L2-normalised): paper 001
    Appendix H (t 2), Wang and Isola's ``uniform_loss`` (``torch.pdist``: each unordered pair once)."""
    import torch  # lazy (start-up speed)

    x = _normalized(x)
    return float(math.log(float(torch.pdist(x, p=2).pow(2).mul(-t).exp().mean())))


def span_pairs(texts: Sequence[str], tokenizer: Any, *, documents: int, span_tokens: int = 30,
               early_close: float = 0.1, seed: int = 0) -> tuple[list[str], list[str]]:
    """Positive pairs for :func:`alignment` as COCO draws its training pairs (paper 001 §4.1: "two text
    sequences from the same document"; the released chunking of :mod:`methods.coco_spans`): documents in a
    seeded random order, each cut into sentence chunks of at most ``span_tokens`` tokens of ``tokenizer``, and
    two distinct chunks of it drawn (``random.sample`` in the released loader), until ``documents`` documents
    gave a pair; documents the released rules drop (one sentence, fewer than two chunks) are skipped.

    Paper 001 Appendix H does not say which positive pairs Figure 5(b) uses: COCO's own are the ones whose
    alignment the pretraining optimises, so they show what COCO changes on each target corpus."""
    import numpy as np  # lazy (start-up speed)

    from methods.coco_spans import document_chunks

    rng = np.random.default_rng([seed, _PAIR_STREAM])
    first: list[str] = []
    second: list[str] = []
    for d in rng.permutation(len(texts)):
        if len(first) >= documents:
            break
        chunks = document_chunks(texts[d], tokenizer, span_tokens, early_close,
                                 np.random.default_rng([seed, _PAIR_STREAM, int(d)]))
        if chunks:
            i, j = rng.choice(len(chunks), size=2, replace=False)
            first.append(chunks[i])
            second.append(chunks[j])
    return first, second


def alignment_uniformity(encoder: Any, first: Sequence[str], second: Sequence[str]) -> tuple[float, float]:
    """``(alignment, uniformity)`` of ``encoder``'s document embeddings: alignment over the pairs
    ``(first[i], second[i])``, uniformity over ``first`` (one span per document, so no pair of it is a
    positive pair; Wang and Isola's ``uniform_loss`` over the data distribution)."""
    x = encoder.encode_docs(list(first))
    y = encoder.encode_docs(list(second))
    return alignment(x, y), uniformity(x)
