"""Benchmark groupings (which datasets make up a reported average) and the averaging helpers.

BEIR
    ``BEIR_18``: the 18 zero-shot test sets of the BEIR paper (Thakur et al., 2021);
    MS MARCO is the in-domain training set and is evaluated on its dev split, outside
    the average.  ``BEIR_13``: the 13 "readily available" sets of paper 003 (Echo-Mistral-
    SPLADE, Table 1), i.e. BEIR-18 without CQADupStack, BioASQ, Signal-1M, TREC-NEWS
    and Robust04.  ``BEIR_15_PUBLIC``: every set with a public download, i.e. BEIR-13
    plus CQADupStack plus MS MARCO (the MTEB English retrieval selection).
MIRACL
    18 languages; 16 have training data.  German (de) and Yoruba (yo) are the
    "surprise" languages with a dev split only (paper 004, appendix A: "We use 16
    languages from MIRACL, except for German (de) and Yoruba (yo), due to the lack of
    training data").
MKQA
    26 languages; the cross-lingual retrieval protocol (BGE-M3, FlagEmbedding) asks
    the 25 non-English ones against an English Wikipedia corpus.
C-MTEB
    8 retrieval tasks (nDCG@10) and 4 reranking tasks (MAP), as listed by paper 002.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from harness.errors import ConfigError
from harness.evaluation_result import EvaluationResult

BEIR_18 = (
    "trec-covid", "bioasq", "nfcorpus", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news", "robust04",
    "arguana", "webis-touche2020", "cqadupstack", "quora", "dbpedia-entity", "scidocs", "fever",
    "climate-fever", "scifact",
)
BEIR_13 = (
    "trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "quora",
    "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact",
)
BEIR_15_PUBLIC = BEIR_13 + ("cqadupstack", "msmarco")
BEIR_ALL = ("msmarco",) + BEIR_18
CQADUPSTACK_FORUMS = (
    "android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats", "tex",
    "unix", "webmasters", "wordpress",
)

MIRACL_LANGUAGES = ("ar", "bn", "de", "en", "es", "fa", "fi", "fr", "hi", "id", "ja", "ko", "ru", "sw", "te",
                    "th", "yo", "zh")
MIRACL_WITHOUT_TRAINING = ("de", "yo")
MIRACL_WITH_TRAINING = tuple(lang for lang in MIRACL_LANGUAGES if lang not in MIRACL_WITHOUT_TRAINING)

MKQA_LANGUAGES = ("ar", "da", "de", "en", "es", "fi", "fr", "he", "hu", "it", "ja", "km", "ko", "ms", "nl", "no",
                  "pl", "pt", "ru", "sv", "th", "tr", "vi", "zh_cn", "zh_hk", "zh_tw")
MKQA_QUERY_LANGUAGES = tuple(lang for lang in MKQA_LANGUAGES if lang != "en")

CMTEB_RETRIEVAL = ("T2Retrieval", "MMarcoRetrieval", "DuRetrieval", "CovidRetrieval", "CmedqaRetrieval",
                   "EcomRetrieval", "MedicalRetrieval", "VideoRetrieval")
CMTEB_RERANKING = ("T2Reranking", "MMarcoReranking", "CMedQAv1-reranking", "CMedQAv2-reranking")

GROUPS: dict[str, tuple[str, ...]] = {
    "beir-13": BEIR_13,
    "beir-15-public": BEIR_15_PUBLIC,
    "beir-18": BEIR_18,
    "cqadupstack": tuple(f"cqadupstack/{f}" for f in CQADUPSTACK_FORUMS),
    "miracl-18": MIRACL_LANGUAGES,
    "miracl-16": MIRACL_WITH_TRAINING,
    "mkqa-25": MKQA_QUERY_LANGUAGES,
    "cmteb-retrieval": CMTEB_RETRIEVAL,
    "cmteb-reranking": CMTEB_RERANKING,
}


def group(name: str) -> tuple[str, ...]:
    """The members of a named grouping (``beir-13``, ``miracl-16``, ...)."""
    try:
        return GROUPS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown grouping {name!r}; known: {', '.join(sorted(GROUPS))}") from None


def macro_average(results: Mapping[str, EvaluationResult], metric: str,
                  members: Sequence[str] | None = None) -> float:
    """Mean over datasets of each dataset's mean (BEIR/MIRACL/C-MTEB averages).

    With ``members`` every listed dataset must be present: an average over a
    partial group is a different number and is refused.
    """
    names = list(members) if members is not None else list(results)
    missing = [n for n in names if n not in results]
    if missing:
        raise ConfigError(f"cannot average {metric}: missing results for {', '.join(missing)}")
    if not names:
        raise ConfigError(f"cannot average {metric} over no datasets")
    values = []
    for n in names:
        if metric not in results[n].aggregate:
            raise ConfigError(f"result {n!r} has no metric {metric!r}")
        values.append(results[n].aggregate[metric])
    return float(np.mean(values))


def cqadupstack_average(forum_results: Mapping[str, EvaluationResult]) -> dict[str, float]:
    """CQADupStack score as BEIR reports it: each metric averaged over the 12 forums.

    Keys may be bare forum names (``android``) or ``cqadupstack/android``.
    """
    by_forum = {k.split("/")[-1]: v for k, v in forum_results.items()}
    unknown = sorted(set(by_forum) - set(CQADUPSTACK_FORUMS))
    if unknown:
        raise ConfigError(f"not CQADupStack forums: {', '.join(unknown)}")
    metrics = sorted(set.intersection(*(set(r.aggregate) for r in by_forum.values()))) if by_forum else []
    return {m: macro_average(by_forum, m, CQADUPSTACK_FORUMS) for m in metrics}


def per_group_average(result: EvaluationResult, key_of) -> dict[str, dict[str, float]]:
    """Split one result's queries into groups (``key_of(query id) -> group``) and average each.

    Used for per-language MKQA/XQuAD numbers from one combined run.
    """
    groups: dict[str, list[int]] = {}
    for i, qid in enumerate(result.query_ids):
        groups.setdefault(key_of(qid), []).append(i)
    return {g: {m: float(v[idx].mean()) for m, v in result.per_query.items()}
            for g, idx in sorted(groups.items())}


def language_of_query(query_id: str) -> str:
    """Language prefix of an id ``<lang>-<id>`` (the XQuAD / MKQA convention used here)."""
    head, sep, _ = query_id.partition("-")
    if not sep:
        raise ConfigError(f"query id {query_id!r} has no '<lang>-' prefix")
    return head
