"""Answer normalisation and answer containment (MKQA / DPR top-k accuracy), for every script.

A retrieved passage *contains* an answer when the normalised answer string occurs in
the normalised passage.  The normaliser follows the DPR / SQuAD / MKQA convention
for spaced scripts and adds what those tools lack for scripts written without
spaces:

1. Unicode NFKC (full-width letters and digits become ASCII, compatibility forms
   are folded), then ``casefold`` (a stronger ``lower``: German ``ß`` -> ``ss``);
2. Arabic diacritics (harakat, U+064B-U+065F and U+0670) and the tatweel U+0640
   are removed, so a vocalised answer matches unvocalised text;
3. every punctuation or symbol character (Unicode categories ``P*`` and ``S*``)
   becomes a space, like SQuAD's ``remove_punc`` but for all scripts (``，``,
   ``。``, ``「」``, ``؟`` included), except what makes a number: a decimal point or
   thousands separator between two digits (``.`` ``,`` and the Arabic ``٫`` ``٬``) and
   the percent sign (``%``, ``٪``; a space between a number and it is dropped).  So
   ``3.5`` is not ``3, 5``, ``10,000`` does not contain ``10`` and ``18%`` is not found
   in ``18 July 2000`` (SQuAD's rule, which drops them, matches all three);
4. English articles (``a``, ``an``, ``the``) are removed when the language is
   English, as DPR and MKQA do;
5. runs of whitespace collapse to one space, and whitespace next to a character of
   an unspaced script (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, Tibetan)
   is dropped, so ``北京 市`` and ``北京市`` normalise alike.

Containment then requires the occurrence to sit on token boundaries in spaced
scripts (``"art"`` is not found in ``"party"``; a percent sign also ends a token, so
``"30"`` is found in ``"30%"``), while inside unspaced scripts every character
position is a boundary.  So ``北京`` *is* found in
``中国的首都是北京，…`` (the DPR ``SimpleTokenizer`` treats the whole Han run as one
token and misses it), ``กรุงเทพ`` is found in ``…คือกรุงเทพมหานคร``, and mixed answers
such as ``2017 5月 18`` work too.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

import numpy as np

# Recorded in protocol cards: change the version whenever the rules above change.
NORMALIZER_ID = "nfkc-casefold-nopunct-numbers-articles(en)-unspaced-substring/v2"

_ARABIC_MARKS = re.compile("[\u064B-\u065F\u0670\u0640]")
_ENGLISH_ARTICLES = re.compile(r"(?<!\S)(?:a|an|the)(?!\S)")
_SPACES = re.compile(r"\s+")
# Kept inside numbers: a decimal point / thousands separator between two digits (ASCII, and
# the Arabic decimal and thousands separators, which NFKC leaves alone), and percent signs.
_NUMBER_SEPARATOR = re.compile(r"(?<=\d)[.,\u066B\u066C](?=\d)")
_PERCENT = frozenset("%\u066A")  # NFKC already folds the full-width and small forms to "%"
_SPACE_BEFORE_PERCENT = re.compile(r"(?<=\d) (?=[%\u066A])")

# Scripts written without spaces between words (code point ranges).
_UNSPACED_RANGES = (
    (0x0E00, 0x0E7F),    # Thai
    (0x0E80, 0x0EFF),    # Lao
    (0x0F00, 0x0FFF),    # Tibetan
    (0x1000, 0x109F),    # Myanmar
    (0x1780, 0x17FF),    # Khmer
    (0x19E0, 0x19FF),    # Khmer symbols
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),    # 々 〆 〇
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK extension A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0xFF66, 0xFF9F),    # half-width Katakana (NFKC folds most of them)
    (0x20000, 0x3134F),  # CJK extensions B-G
)


def is_unspaced_char(ch: str) -> bool:
    """True for characters of scripts that do not separate words with spaces."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _UNSPACED_RANGES)


@lru_cache(maxsize=4096)
def _is_punct_or_symbol(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def normalize_answer(text: str, lang: str | None = "en") -> str:
    """Normalise an answer or a passage for containment matching (see the module docstring)."""
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _ARABIC_MARKS.sub("", text)
    text = _punctuation_to_spaces(text)
    text = _SPACES.sub(" ", text).strip()
    if "%" in text or "\u066A" in text:
        text = _SPACE_BEFORE_PERCENT.sub("", text)  # "18 %" (French typography) is "18%"
    if lang is None or lang.lower().startswith("en"):
        text = _SPACES.sub(" ", _ENGLISH_ARTICLES.sub(" ", text)).strip()
    return _drop_spaces_near_unspaced(text)


def _punctuation_to_spaces(text: str) -> str:
    """Rule 3: punctuation and symbols become spaces, except number separators and percent signs."""
    keep = {m.start() for m in _NUMBER_SEPARATOR.finditer(text)}
    return "".join(ch if ch in _PERCENT or (keep and i in keep) else " " if _is_punct_or_symbol(ch) else ch
                   for i, ch in enumerate(text))


def _drop_spaces_near_unspaced(text: str) -> str:
    if " " not in text:
        return text
    out = []
    n = len(text)
    for i, ch in enumerate(text):
        if ch == " ":
            prev_ch = text[i - 1] if i > 0 else ""
            next_ch = text[i + 1] if i + 1 < n else ""
            if (prev_ch and is_unspaced_char(prev_ch)) or (next_ch and is_unspaced_char(next_ch)):
                continue
        out.append(ch)
    return "".join(out)


def _boundary(text: str, left: int, right: int) -> bool:
    """Whether there is a token boundary between ``text[left]`` and ``text[right]`` (indices may be out of range)."""
    if left < 0 or right >= len(text):
        return True
    a, b = text[left], text[right]
    # A percent sign ends a number token: "30" is found in "30%" (but "30%" is not in "30").
    return a == " " or b == " " or is_unspaced_char(a) or is_unspaced_char(b) or b in _PERCENT


def contains_normalized(passage: str, answer: str) -> bool:
    """Containment of an already-normalised ``answer`` in an already-normalised ``passage``."""
    if not answer:
        return False
    start = passage.find(answer)
    while start != -1:
        end = start + len(answer)
        if _boundary(passage, start - 1, start) and _boundary(passage, end - 1, end):
            return True
        start = passage.find(answer, start + 1)
    return False


def has_answer(passage: str, answers: Iterable[str], lang: str | None = "en") -> bool:
    """True when the passage contains any of the answers (each normalised first)."""
    norm_passage = normalize_answer(passage, lang)
    return any(contains_normalized(norm_passage, a) for a in normalize_answers(answers, lang))


def normalize_answers(answers: Iterable[str], lang: str | None = "en") -> list[str]:
    """Normalised, de-duplicated, non-empty answer strings (aliases are just more answers)."""
    seen: dict[str, None] = {}
    for answer in answers:
        norm = normalize_answer(answer, lang)
        if norm:
            seen.setdefault(norm, None)
    return list(seen)


class AnswerMatcher:
    """Answer containment over one corpus, normalising each passage at most once."""

    def __init__(self, doc_ids: Sequence[str], passages: Sequence[str], lang: str | None = "en"):
        self._index = {d: i for i, d in enumerate(doc_ids)}
        self._passages = passages
        self._lang = lang
        self._cache: dict[int, str] = {}

    def normalized_passage(self, doc_id: str) -> str:
        i = self._index.get(doc_id)
        if i is None:
            raise KeyError(f"document {doc_id!r} is not in the corpus")
        cached = self._cache.get(i)
        if cached is None:
            cached = self._cache[i] = normalize_answer(self._passages[i], self._lang)
        return cached

    def first_hit_rank(self, ranked_doc_ids: Iterable[str], norm_answers: Sequence[str], depth: int) -> int | None:
        """1-based rank of the first passage among the top ``depth`` that contains an answer, else None."""
        for rank, doc_id in enumerate(ranked_doc_ids, start=1):
            if rank > depth:
                break
            passage = self.normalized_passage(doc_id)
            if any(contains_normalized(passage, a) for a in norm_answers):
                return rank
        return None


def accuracy_at_k(run, matcher: AnswerMatcher, answers: Mapping[str, Sequence[str]], ks: Sequence[int],
                  lang: str | None = "en",
                  query_ids: Sequence[str] | None = None) -> tuple[list[str], dict[str, np.ndarray]]:
    """Per-query top-k accuracy: 1.0 when any of the top ``k`` passages contains any answer.

    ``answers`` maps query id -> answer strings (raw; normalised here).  Every query in
    ``query_ids`` (default: all queries with answers) is scored; a query absent from
    the run scores 0.  Returns ``(query ids, {"acc@k": values})``.
    """
    qids = list(query_ids) if query_ids is not None else list(answers)
    depth = max(ks)
    ranked = {q: docs for q, docs, _ in run.groups()}
    first_hit = np.full(len(qids), np.inf)
    for i, q in enumerate(qids):
        docs = ranked.get(q)
        if docs is None:
            continue
        rank = matcher.first_hit_rank(docs.tolist(), normalize_answers(answers[q], lang), depth)
        if rank is not None:
            first_hit[i] = rank
    return qids, {f"acc@{k}": (first_hit <= k).astype(np.float64) for k in ks}
