"""Paper 000's evaluation instructions (Appendix "Prompted Embeddings") and the card prompt they make."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from suites.benchmarks.prompts import BEIR, BEIR_PRINTED, dataset_key, instruction, query_prompt


def test_the_fifteen_beir_sets_and_the_two_multilingual_benchmarks():
    assert len(BEIR) == 15 and set(BEIR) == set(BEIR_PRINTED)
    assert instruction("miracl-sw") == instruction("mkqa-zh-hk") == instruction("nq") == (
        "Given a question, retrieve Wikipedia passages that answer the question")
    assert instruction("scidocs") == ("Given a scientific paper title, retrieve paper abstracts that are cited by the "
                                      "given paper")
    assert instruction("trec-covid") == "Given a query on COVID-19, retrieve documents that answer the query"


def test_names_and_template():
    assert [dataset_key(n) for n in ("miracl-ar", "mkqa-zh-cn", "cqadupstack/gis", "cqadupstack-android", "fiqa")] == [
        "miracl", "mkqa", "cqadupstack", "cqadupstack", "fiqa"]
    assert query_prompt("fiqa") == ("Instruct: Given a financial question, retrieve user replies that best answer "
                                    "the question\nQuery: ")
    with pytest.raises(ConfigError, match="no evaluation instruction for 'robust04'"):
        instruction("robust04")
