"""Per-dataset evaluation instructions of paper 000 (tDRO), for the query side of its benchmark cards.

Paper 000 evaluates every benchmark with a prompted query (Appendix "Prompted Embeddings"; Settings:
"prompt instructions are added on the query side for multi-tasks during training and evaluation"), in the
format ``Instruct: {prompt}\\nQuery: {query_text}``; documents get no prompt.  The instructions are the
Appendix lists "Prompts for Multilingual / Cross-lingual Benchmarks" and "Prompts for English BeIR
Benchmarks" (most taken from E5-Mistral), verbatim, keyed here by the harness's dataset names (BEIR folder
names; the 12 CQADupStack forums share CQADupStack's instruction).

:func:`query_prompt` gives the text a card's ``query_prompt`` holds (the instruction in the template, up to
where the query text begins); the tdro suite's paper scales set it on each benchmark, and a test checks the
suite file against this table.
"""
from __future__ import annotations

from harness.errors import ConfigError

# paper 000 Appendix "Prompted Embeddings": "Instruct: {prompt}\nQuery: {query_text}"
TEMPLATE = "Instruct: {prompt}\nQuery: "
SOURCE = "paper 000, Appendix, Prompted Embeddings"

_WIKI_QA = "Given a question, retrieve Wikipedia passages that answer the question"

# paper 000 Appendix: "Prompts for Multilingual / Cross-lingual Benchmarks"
MULTILINGUAL: dict[str, str] = {
    "miracl": _WIKI_QA,        # MIRACL (18 languages)
    "mkqa": _WIKI_QA,          # MKQA (25 languages)
}

# paper 000 Appendix: "Prompts for English BeIR Benchmarks" (printed name -> BEIR folder name)
BEIR: dict[str, str] = {
    "arguana": "Given a claim, find documents that refute the claim",
    "climate-fever": "Given a claim about climate change, retrieve documents that support or refute the claim",
    "cqadupstack": ("Given a question, retrieve detailed question descriptions from Stackexchange that are "
                    "duplicates to the given question"),
    "dbpedia-entity": "Given a query, retrieve relevant entity descriptions from DBPedia",
    "fever": "Given a claim, retrieve documents that support or refute the claim",
    "fiqa": "Given a financial question, retrieve user replies that best answer the question",
    "hotpotqa": "Given a multi-hop question, retrieve documents that can help answer the question",
    "msmarco": "Given a web search query, retrieve relevant passages that answer the query",
    "nfcorpus": "Given a question, retrieve relevant documents that best answer the question",
    "nq": _WIKI_QA,
    "quora": "Given a question, retrieve questions that are semantically equivalent to the given question",
    "scidocs": "Given a scientific paper title, retrieve paper abstracts that are cited by the given paper",
    "scifact": "Given a scientific claim, retrieve documents that support or refute the claim",
    "webis-touche2020": "Given a question, retrieve detailed and persuasive arguments that answer the question",
    "trec-covid": "Given a query on COVID-19, retrieve documents that answer the query",
}
# The names the paper prints (Table 11 / the appendix list) for each BEIR folder.
BEIR_PRINTED: dict[str, str] = {
    "arguana": "ArguAna", "climate-fever": "ClimateFEVER", "cqadupstack": "CQADupStack", "dbpedia-entity": "DBPedia",
    "fever": "FEVER", "fiqa": "FiQA2018", "hotpotqa": "HotpotQA", "msmarco": "MSMARCO", "nfcorpus": "NFCorpus",
    "nq": "NQ", "quora": "Quora", "scidocs": "SCIDOCS", "scifact": "SciFact", "webis-touche2020": "Touche2020",
    "trec-covid": "TRECCOVID",
}
INSTRUCTIONS: dict[str, str] = {**MULTILINGUAL, **BEIR}


def dataset_key(name: str) -> str:
    """The table key of a benchmark name: ``miracl-ar`` -> ``miracl``, ``mkqa-zh-cn`` -> ``mkqa``,
    ``cqadupstack-android`` (or ``cqadupstack/android``) -> ``cqadupstack``; BEIR names as they are."""
    base = name.strip().lower().replace("/", "-")
    if base in INSTRUCTIONS:
        return base
    for family in ("miracl", "mkqa", "cqadupstack"):
        if base == family or base.startswith(family + "-"):
            return family
    return base


def instruction(name: str) -> str:
    """Paper 000's evaluation instruction for a benchmark (see :func:`dataset_key` for the names taken)."""
    key = dataset_key(name)
    if key not in INSTRUCTIONS:
        raise ConfigError(f"paper 000 lists no evaluation instruction for {name!r}; known: "
                          f"{', '.join(sorted(INSTRUCTIONS))}")
    return INSTRUCTIONS[key]


def query_prompt(name: str) -> str:
    """The card's ``query_prompt`` for a benchmark: ``Instruct: <instruction>\\nQuery: `` (the query follows)."""
    return TEMPLATE.format(prompt=instruction(name))


__all__ = ["BEIR", "BEIR_PRINTED", "INSTRUCTIONS", "MULTILINGUAL", "SOURCE", "TEMPLATE", "dataset_key",
           "instruction", "query_prompt"]
