"""COCO span pairs cut from target-corpus documents (METHODS.md 2.1), as the released code does.

``COCO/helper/create_train_co_short.py`` of OpenMatch/COCO-DR: a document is split into
sentences; sentences are packed greedily into chunks of at most ``span_tokens`` tokens
(counted by the model's tokenizer, without special tokens); before a sentence is added the
current chunk is closed if the sentence would overflow it *or* with probability
``early_close`` (0.1); a single longer sentence stays whole.  Documents with one sentence,
with fewer than two chunks, or whose first chunk has at most 2 tokens are dropped.  Each
training example then draws 2 distinct chunks of its document (``random.sample``).

Sentence splitting: the released code uses nltk's punkt model, which needs a data download
the harness cannot do at run time; a rule splitter stands in (a break after ``.``, ``!``,
``?`` followed by whitespace, and after the CJK full stops ``。！？``).  The early closes
are drawn from a generator seeded by (seed, corpus, document), so the chunks do not depend
on the order in which documents are processed.

The chunks of every kept document become one :class:`TrainingSource` per corpus (a row per
document: ``query`` = document id, ``pos`` = its chunks), so the trainer's sampler walks the
documents in shuffled epochs and logs counts per corpus.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.beir import find_file, read_corpus
from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.errors import ConfigError

_CHUNK_STREAM = 0xC0C0
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (rule-based; see the module docstring), stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def pack_chunks(sentence_tokens: Sequence[int], span_tokens: int, early_close: float,
                rng: np.random.Generator) -> list[list[int]]:
    """Sentence indices per chunk, from each sentence's token count (the released packing rule)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(sentence_tokens):
        if n == 0:
            continue
        # One draw per sentence, as random.random() in the released loop (drawn even when the
        # length rule alone would close the chunk).
        close_early = rng.random() <= early_close
        if size + n > span_tokens or close_early:
            if current:
                chunks.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        chunks.append(current)
    return chunks


def document_chunks(text: str, tokenizer: Any, span_tokens: int = 30, early_close: float = 0.1,
                    rng: np.random.Generator | None = None) -> list[str]:
    """The chunk texts of one document, or [] when the released rules drop it."""
    sentences = split_sentences(text)
    if len(sentences) <= 1:
        return []
    ids = tokenizer(sentences, add_special_tokens=False)["input_ids"]
    rng = rng if rng is not None else np.random.default_rng(0)
    chunks = pack_chunks([len(x) for x in ids], span_tokens, early_close, rng)
    if len(chunks) < 2 or sum(len(ids[i]) for i in chunks[0]) <= 2:
        return []
    return [" ".join(sentences[i] for i in chunk) for chunk in chunks]


def corpus_dir(path: str | Path) -> Path:
    """A BEIR-layout folder (``corpus.jsonl[.gz]``) or the corpus file itself."""
    path = Path(path)
    return path if path.is_file() else find_file(path, "corpus.jsonl")


def span_sources(corpora: Sequence[str | Path], tokenizer: Any, *, span_tokens: int = 30,
                 early_close: float = 0.1, seed: int = 0) -> TrainingData:
    """One training source per corpus: its documents with at least two chunks.

    Refuses (ConfigError) a corpus in which no document yields two spans."""
    if not corpora:
        raise ConfigError("COCO needs at least one pretraining corpus: method option 'corpora' "
                          "(BEIR-layout folders or corpus.jsonl files)")
    if span_tokens < 1 or not 0 <= early_close <= 1:
        raise ConfigError(f"COCO span_tokens must be >= 1 and early_close in [0, 1]; got {span_tokens}, "
                          f"{early_close}")
    sources = []
    for c, entry in enumerate(corpora):
        file = corpus_dir(entry)
        corpus = read_corpus(file)
        rows = []
        for d, (doc_id, text) in enumerate(zip(corpus.ids, corpus.passages())):
            rng = np.random.default_rng([seed, _CHUNK_STREAM, c, d])
            chunks = document_chunks(text, tokenizer, span_tokens, early_close, rng)
            if chunks:
                rows.append(TrainingRow(doc_id, chunks, []))
        name = file.parent.name if file.name.startswith("corpus.") else file.name.split(".")[0]
        if not rows:
            raise ConfigError(f"COCO corpus {file}: none of its {len(corpus)} documents yields two spans "
                              f"(sentence chunks of <= {span_tokens} tokens); it is too short for span pairs")
        options = f"{corpus.content_hash()}:{span_tokens}:{early_close}:{seed}"
        sources.append(TrainingSource(name=name, rows=rows, path=str(file),
                                      fingerprint="coco-" + hashlib.sha256(options.encode()).hexdigest()[:16]))
    names = [s.name for s in sources]
    for i, s in enumerate(sources):            # source names must be unique: number repeated folder names
        if names.count(s.name) > 1:
            s.name = f"{s.name}-{i}"
    return TrainingData(sources)
