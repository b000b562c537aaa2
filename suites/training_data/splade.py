"""``splade``: paper 003's sentence-transformers training mixture, sampled per its Table 3.

Paper 003 (Mistral-SPLADE), section 4.2: "we take the 15.5M sample subset and set their sampling
probabilities proportional to their dataset size"; appendix A, Table 3 lists the 26 datasets and their
sampling ratios (percent; they add up to 100.03, so they are normalised here).  The datasets are files
of sentence-transformers/embedding-training-data (their release shapes:
:mod:`suites.training_data._release`).

BEIR-conflicting sets (option ``beir_conflicts``).  Appendix A says the probabilities are "calculated by
normalizing the size of each dataset and we exclude any dataset that conflicts with our evaluation on zero-shot
out-of-domain BEIR retrieval datasets", yet Table 3 still lists two datasets drawn from the same source as a
BEIR-13 evaluation set (:data:`BEIR_CONFLICTS`): ``quora question pairs`` (the Quora duplicate-question pairs,
from which BEIR's Quora is built) and ``specter_train_triples`` (SPECTER's Semantic Scholar citation triples;
BEIR's SCIDOCS is SPECTER's evaluation suite, from the same citation graph).  ``include`` (the default) builds
Table 3 as printed, the mixture that produced the published numbers; ``exclude`` drops those two and
normalises the other 24 ratios to sum 1.  ``msmarco_triplets`` stays in both: MS MARCO is a BEIR set but not
one of the 13 the paper evaluates on.

Sampling: the per-dataset counts are one multinomial draw of ``rows`` over the normalised ratios
(``numpy.random.default_rng(seed)``); each dataset then contributes that many of its rows, drawn
uniformly without replacement (with ``random.Random(f"{seed}:{name}")``), or every row repeated and the
remainder drawn when a file holds fewer rows than its count.  Rows keep their file order.  The
expected share of dataset i is p_i, with binomial standard deviation sqrt(p_i (1 - p_i) / rows).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from harness.data.builders import BuildContext, DataRecipe, RecipeOption, Source, SubsetResult, register_recipe
from harness.errors import ConfigError, InputError
from suites.training_data._release import iter_release_rows

ST_HUB = "sentence-transformers/embedding-training-data"
ST_LICENCE = "per file, see the dataset card of sentence-transformers/embedding-training-data"

# Table 3 name: (subset name, hub file, sampling ratio in percent)
TABLE3: dict[str, tuple[str, str, float]] = {
    "gooaq_pairs": ("gooaq_pairs", "gooaq_pairs.jsonl.gz", 20.53),
    "yahoo_answers_title_answer": ("yahoo_answers_title_answer", "yahoo_answers_title_answer.jsonl.gz", 8.17),
    "msmarco_triplets": ("msmarco_triplets", "msmarco-triplets.jsonl.gz", 3.43),
    "stackexchange_title_title": ("stackexchange_title_title",
                                  "stackexchange_duplicate_questions_title_title.jsonl.gz", 2.08),
    "eli5_question_answer": ("eli5_question_answer", "eli5_question_answer.jsonl.gz", 2.22),
    "yahoo_answers_title_question": ("yahoo_answers_title_question", "yahoo_answers_title_question.jsonl.gz", 4.50),
    "squad_pairs": ("squad_pairs", "squad_pairs.jsonl.gz", 0.60),
    "yahoo_answers_question_answer": ("yahoo_answers_question_answer", "yahoo_answers_question_answer.jsonl.gz",
                                      4.64),
    "wikihow": ("wikihow", "wikihow.jsonl.gz", 0.88),
    "amazon_qa": ("amazon_qa", "amazon-qa.jsonl.gz", 17.08),
    "quora question pairs": ("quora_question_pairs", "quora_duplicates.jsonl.gz", 1.02),
    "stackexchange_title_body_title_body": ("stackexchange_title_body_title_body",
                                            "stackexchange_duplicate_questions_title-body_title-body.jsonl.gz", 1.71),
    "stackexchange_body_body": ("stackexchange_body_body", "stackexchange_duplicate_questions_body_body.jsonl.gz",
                                1.71),
    "agnews": ("agnews", "agnews.jsonl.gz", 7.89),
    "AllNLI": ("AllNLI", "AllNLI.jsonl.gz", 2.14),
    "npr": ("npr", "npr.jsonl.gz", 4.05),
    "specter_train_triples": ("specter_train_triples", "specter_train_triples.jsonl.gz", 2.59),
    "SimpleWiki": ("SimpleWiki", "SimpleWiki.jsonl.gz", 0.70),
    "altlex": ("altlex", "altlex.jsonl.gz", 0.77),
    "ccnews_title_text": ("ccnews_title_text", "ccnews_title_text.jsonl.gz", 4.19),
    "sentence_compression": ("sentence_compression", "sentence-compression.jsonl.gz", 1.23),
    "TriviaQA_pairs": ("TriviaQA_pairs", "TriviaQA_pairs.jsonl.gz", 0.50),
    "cnn_dailymail": ("cnn_dailymail", "cnn_dailymail.jsonl.gz", 1.96),
    "flickr30k_captions": ("flickr30k_captions", "flickr30k_captions.jsonl.gz", 1.08),
    "xsum": ("xsum", "xsum.jsonl.gz", 1.54),
    "coco_captions": ("coco_captions", "coco_captions.jsonl.gz", 2.82),
}
BY_SUBSET = {subset: (table_name, hub_file, ratio) for table_name, (subset, hub_file, ratio) in TABLE3.items()}

# Table 3 datasets from the same source as a BEIR-13 evaluation set: Table 3 name -> (BEIR set, why).
BEIR_CONFLICTS: dict[str, tuple[str, str]] = {
    "quora question pairs": ("quora", "the Quora duplicate-question pairs BEIR's Quora is built from"),
    "specter_train_triples": ("scidocs", "SPECTER's Semantic Scholar citation triples; SCIDOCS is SPECTER's "
                                         "evaluation suite over the same citation graph"),
}
BEIR_CONFLICT_CHOICES = ("include", "exclude")


def selected(beir_conflicts: str = "include") -> list[str]:
    """The subset names of the mixture: Table 3 as printed (include) or without :data:`BEIR_CONFLICTS` (exclude)."""
    if beir_conflicts not in BEIR_CONFLICT_CHOICES:
        raise ConfigError(f"splade: beir_conflicts must be one of {', '.join(BEIR_CONFLICT_CHOICES)}, "
                          f"got {beir_conflicts!r}")
    drop = set(BEIR_CONFLICTS) if beir_conflicts == "exclude" else set()
    return [subset for name, (subset, _f, _r) in TABLE3.items() if name not in drop]


def probabilities(beir_conflicts: str = "include") -> dict[str, float]:
    """Subset name -> Table 3 ratio normalised to sum 1 over the selected datasets."""
    keep = selected(beir_conflicts)
    total = sum(BY_SUBSET[subset][2] for subset in keep)
    return {subset: BY_SUBSET[subset][2] / total for subset in keep}


@register_recipe("splade")
class SpladeRecipe(DataRecipe):
    """Paper 003's Table 3 mixture of sentence-transformers datasets, sampled with a seed."""

    paper = "003 Mistral-SPLADE (Echo-Mistral-SPLADE, sentence-transformers training data)"
    description = "26 sentence-transformers datasets sampled per Table 3's probabilities"
    options = {
        "rows": RecipeOption(15_500_000, "rows drawn in total",
                             "paper 003 section 4.2: the 15.5M sample subset", int),
        "seed": RecipeOption(42, "seed of the multinomial counts and the per-dataset draws", "paper 003 gives none",
                             int),
        "beir_conflicts": RecipeOption("include", "include: Table 3 as printed (26 datasets); exclude: without "
                                                  "the two drawn from a BEIR-13 set's source (quora question "
                                                  "pairs, specter_train_triples), the rest renormalised",
                                       "paper 003 appendix A, Table 3 (include: the printed list, which produced "
                                       "its numbers; its text says BEIR-conflicting sets were excluded)", str),
    }

    def check_options(self, options: dict[str, Any]) -> None:
        if options["rows"] < 1:
            raise ConfigError("splade: rows must be >= 1")
        selected(options["beir_conflicts"])

    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source(BY_SUBSET[subset][1], hub=ST_HUB, licence=ST_LICENCE)
                for subset in selected(options["beir_conflicts"])]

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return selected(options["beir_conflicts"])

    def subset_sources(self, subset: str, options: dict[str, Any]) -> list[str]:
        return [BY_SUBSET[subset][1]]

    def counts(self, options: dict[str, Any]) -> dict[str, int]:
        """Rows per subset: one seeded multinomial draw over the normalised Table 3 ratios."""
        probs = probabilities(options.get("beir_conflicts", "include"))
        drawn = np.random.default_rng(options["seed"]).multinomial(options["rows"], list(probs.values()))
        return {name: int(n) for name, n in zip(probs, drawn)}

    def preview(self, options: dict[str, Any]) -> dict[str, Any]:
        """Rows per dataset (the multinomial counts do not depend on the files)."""
        return self.counts(options)

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        if "counts" not in ctx.cache:
            ctx.cache["counts"] = self.counts(ctx.options)
        want = ctx.cache["counts"][subset]
        table_name, hub_file, ratio = BY_SUBSET[subset]
        path = ctx.path(hub_file)
        available = sum(1 for _ in iter_release_rows(path))
        if available == 0 and want:
            raise InputError(path, "no rows")
        rng = random.Random(f"{ctx.options['seed']}:{subset}")
        repeats, rest = divmod(want, available) if available else (0, 0)
        times = [repeats] * available
        for i in rng.sample(range(available), rest):
            times[i] += 1
        probability = probabilities(ctx.options["beir_conflicts"])[subset]
        stats = {"table3_name": table_name, "table3_ratio": ratio, "probability": probability,
                 "drawn": want, "rows_in_file": available, "with_replacement": repeats > 0}

        def rows() -> Iterator[dict[str, Any]]:
            for index, (line, row) in enumerate(iter_release_rows(path)):
                for _ in range(times[index]):
                    yield {**row, "language": "en", "source_line": line}

        metadata = {"language": "en", "task": table_name, "sampling_probability": probability,
                    "beir_conflicts": ctx.options["beir_conflicts"]}
        return SubsetResult(rows(), metadata, stats)
