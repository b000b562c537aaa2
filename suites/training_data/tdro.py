"""``tdro``: the 25 training sets of paper 000 (tDRO), deduplicated against the evaluation queries.

Sets, languages, categories and deduplicated sizes: paper 000, Table 2; set names as in the released
configuration (tdro config/uniform_sampling_s0.json).  Sources: 17 sets come from the
sentence-transformers training data on the hub (tDRO README, "Dataset sources"); the other 8 (dureader,
hotpotqa, medmcqa, miracl, mr_tydi_combined, msmarco, t2ranking, and tDRO's nq/trivia preparations are
from elsewhere) are placed by hand as ``<set>.jsonl`` in any release row shape
(:mod:`suites.training_data._release`).  tDRO mined hard negatives for several English sets with
bge-base-en-v1.5 (tdro data/HN_mine.md; the paper says BGE-large-en-1.5); the hub files carry only their own
negatives (AllNLI, quora triplets), so an exact reproduction places tDRO's processed files under the same names,
or mines them here: ``--option mine_negatives=BAAI/bge-base-en-v1.5`` (the code) or ``BAAI/bge-large-en-v1.5``
(the paper), :mod:`suites.training_data.tdro_mining`.

Deduplication (:mod:`suites.training_data.dedup`): ``--option eval_queries=PATH[,PATH...]`` names the
evaluation queries (BEIR ``queries.jsonl`` files or folders, MIRACL ``topics*.tsv``); each set's rows
whose query matches one are dropped, counted per level in ``build.json`` (``stats``).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.data.builders import BuildContext, DataRecipe, RecipeOption, Source, SubsetResult, register_recipe
from harness.errors import ConfigError
from suites.training_data._release import iter_release_rows, read_eval_queries
from suites.training_data.dedup import LEVELS, EvalIndex
from suites.training_data.tdro_mining import CODE_MODEL, MINED_SETS, PAPER_MODEL, mine_set, parse_depth

ST_HUB = "sentence-transformers/embedding-training-data"
ST_LICENCE = "per file, see the dataset card of sentence-transformers/embedding-training-data"

# name: (language, category, deduplicated size in Table 2, hub file or None = placed by hand, note)
SETS: dict[str, tuple[str | list[str], str, int, str | None, str]] = {
    "agnews": ("en", "News", 1_157_745, "agnews.jsonl.gz", ""),
    "AllNLI": ("en", "NLI", 277_230, "AllNLI.jsonl.gz", ""),
    "altlex": ("en", "Wikipedia Pair", 112_696, "altlex.jsonl.gz", ""),
    "amazon_review_2018_1m": ("en", "Amazon", 999_999, "amazon_review_2018.jsonl.gz",
                              "tDRO keeps 999,999 rows of this file"),
    "cnn_dailymail": ("en", "News", 311_971, "cnn_dailymail.jsonl.gz", ""),
    "codesearchnet": ("en", "Github", 1_375_067, "codesearchnet.jsonl.gz", ""),
    "dureader": ("zh", "Web Collections", 86_395, None,
                 "DuReader-retrieval train with its own hard negatives (tDRO README, HN mine)"),
    "eli5_question_answer": ("en", "Reddit", 325_390, "eli5_question_answer.jsonl.gz", ""),
    "gooaq_pairs": ("en", "Web Collections", 3_012_347, "gooaq_pairs.jsonl.gz", ""),
    "hotpotqa": ("en", "Wikipedia QA", 85_000, None, "HotpotQA train pairs, negatives mined with bge-base-en-v1.5"),
    "medmcqa": ("en", "Medical", 160_865, None, "MedMCQA pairs, negatives mined with bge-base-en-v1.5"),
    "miracl": (["ar", "bn", "en", "es", "fa", "fi", "fr", "hi", "id", "ja", "ko", "ru", "sw", "te", "th", "zh"],
               "Multilingual Wikipedia", 32_405, None,
               "MIRACL train with its judged negatives (`harness data build mining` writes it per language)"),
    "mr_tydi_combined": (["ar", "bn", "en", "fi", "id", "ja", "ko", "ru", "sw", "te", "th"],
                         "Multilingual Wikipedia", 48_475, None,
                         "Mr. TyDi train (castorini/mr-tydi) with its negatives"),
    "msmarco": ("en", "Web Collections", 502_854, None, "MS MARCO passage train prepared as in bowdpr"),
    "nq": ("en", "Wikipedia QA", 58_800, "NQ-train_pairs.jsonl.gz", "tDRO's negatives follow bowdpr"),
    "quora_duplicates_triplets": ("en", "Forum Duplicates", 97_011, "quora_duplicates_triplets.jsonl.gz", ""),
    "searchQA_top5_snippets": ("en", "Web Collections", 117_219, "searchQA_top5_snippets.jsonl.gz", ""),
    "sentence-compression": ("en", "News", 180_000, "sentence-compression.jsonl.gz", ""),
    "SimpleWiki": ("en", "Wikipedia Pair", 102_225, "SimpleWiki.jsonl.gz", ""),
    "squad_pairs": ("en", "Wikipedia QA", 87_595, "squad_pairs.jsonl.gz", ""),
    "stackexchange_duplicate_questions_title-body_title-body": (
        "en", "Forum Duplicates", 250_516, "stackexchange_duplicate_questions_title-body_title-body.jsonl.gz", ""),
    "t2ranking": ("zh", "Web Collections", 200_376, None, "T2Ranking train with its own hard negatives"),
    "trivia": ("en", "Wikipedia QA", 60_370, "TriviaQA_pairs.jsonl.gz", "tDRO's negatives follow bowdpr"),
    "xsum": ("en", "News", 226_711, "xsum.jsonl.gz", ""),
    "yahoo_answers_title_answer": ("en", "Yahoo", 1_198_018, "yahoo_answers_title_answer.jsonl.gz", ""),
}


# Instructions: paper 000 appendix "Prompts for Training Sets", verbatim (two prompts where it lists (1) and
# (2), drawn per example by the trainer).
_WIKI_QA = ["Given a question, retrieve Wikipedia passages that answer the question",
            "Retrieve Wikipedia passages that answer the question"]
PROMPTS: dict[str, str | list[str]] = {
    "agnews": "Given a news title, retrieve the news descriptions that match the title",
    "AllNLI": ["Given a premise, retrieve a hypothesis that is entailed by the premise",
               "Retrieve semantically similar text."],
    "altlex": ["Given a sentence, retrieve a paraphrase Wikipedia sentence",
               "Given a passage, retrieve a Wikipedia passage that forms paraphrase pairs"],
    "amazon_review_2018_1m": ["Given a title, retrieve the corresponding reviews from Amazon",
                              "Given a title, retrieve a Amazon review"],
    "cnn_dailymail": "Given highlight sentences, retrieve an relevant article that match the sentences",
    "codesearchnet": "Given a comment of the function code, retrieve the corresponding code blocks",
    "dureader": "Given a Chinese search query, retrieve web passages that answer the question",
    "eli5_question_answer": "Provided a user question, retrieve the highest voted answers on Reddit ELI5 forum",
    "gooaq_pairs": "Given a web search query, retrieve the corresponding answers from Google",
    "hotpotqa": "Given a multi-hop question, retrieve documents that can help answer the question",
    "medmcqa": ["Given a medical query, retrieve relevant passages that answer the query",
                "Given a medical question, retrieve passages that answer the question"],
    "miracl": _WIKI_QA,
    "mr_tydi_combined": _WIKI_QA,
    "msmarco": "Given a web search query, retrieve relevant passages that answer the query",
    "nq": _WIKI_QA,
    "quora_duplicates_triplets": ["Given a question, retrieve questions that are semantically equivalent to the "
                                  "given question", "Find questions that have the same meaning as the input question"],
    "searchQA_top5_snippets": ["Given a question, retrieve text snippets that answer the question",
                               "Retrieve text snippets that answer the question"],
    "sentence-compression": "Given a sentence, retrieve a short sentence that is semantically equivalent to the "
                            "given sentence",
    "SimpleWiki": ["Given a Wikipedia sentence, retrieve sentences that are semantically equivalent to the given "
                   "sentence", "Retrieve semantically similar text."],
    "squad_pairs": _WIKI_QA,
    "stackexchange_duplicate_questions_title-body_title-body": "Retrieve duplicate questions and passages from "
                                                               "StackOverflow forum",
    "t2ranking": "Given a Chinese search query, retrieve web passages that answer the question",
    "trivia": _WIKI_QA,
    "xsum": "Given a news summary, retrieve articles that match the summary",
    "yahoo_answers_title_answer": "Given a title, retrieve Yahoo answers that match the title",
}
# Symmetric sets also prompt their passages (tdro src/tdro/finetune/data_utils.py, METHODS.md 0.2).
SYMMETRIC = {"AllNLI", "altlex", "SimpleWiki", "quora_duplicates_triplets",
             "stackexchange_duplicate_questions_title-body_title-body"}


def source_file(name: str) -> str:
    """The set's file in the sources folder."""
    return f"{name}.jsonl.gz" if SETS[name][3] else f"{name}.jsonl"


@register_recipe("tdro")
class TdroRecipe(DataRecipe):
    """Paper 000's 25 training sets, deduplicated against the evaluation queries."""

    paper = "000 tDRO (Task-level Distributionally Robust Optimization for LLM-based Dense Retrieval)"
    description = "25 heterogeneous sets (Table 2), queries deduplicated against the evaluation sets' queries"
    options = {
        "sets": RecipeOption("", "comma-separated subset of the 25 sets (default: all)"),
        "eval_queries": RecipeOption("", "comma-separated evaluation query files or folders to deduplicate "
                                         "against (BEIR queries.jsonl, MIRACL topics*.tsv)",
                                     "paper 000 Table 2 caption; tdro data/inspect_duplicates.py (BEIR test "
                                     "queries, MIRACL dev topics)"),
        "dedup": RecipeOption("simhash", f"deduplication level: {', '.join(LEVELS)} (each includes the ones "
                                         "before it)", "paper 000 Table 2 caption: SimHash"),
        "simhash_distance": RecipeOption(2, "largest Hamming distance of two 64-bit SimHashes that counts as a "
                                            "duplicate", "tdro data/inspect_duplicates.py: SimhashIndex(k=2)", int),
        "max_rows": RecipeOption(0, "keep at most this many rows per set after deduplication (0: all)",
                                 "amazon_review_2018_1m keeps 999,999 rows (paper 000 Table 2)", int),
        "mine_negatives": RecipeOption("", f"mine the hard negatives of the sets tDRO mined ({len(MINED_SETS)}, "
                                           f"suites/training_data/tdro_mining.py) with this dense model: "
                                           f"{PAPER_MODEL} (the paper) or {CODE_MODEL} (the released recipe); "
                                           "empty: keep each row's own negatives",
                                       "paper 000 Datasets (BGE-large-en-1.5) / tdro data/HN_mine.md "
                                       "(bge-base-en-v1.5)"),
        "mine_depth": RecipeOption("2,100", "rank range 'start,end' the mined negatives are drawn from",
                                   "tdro data/build_train_hn_dp.py: depth [2, 100], top-100"),
        "mine_samples": RecipeOption(16, "mined negatives drawn per row", "tdro data/build_train_hn_dp.py: n_sample 16",
                                     int),
    }

    def selected(self, options: dict[str, Any]) -> list[str]:
        if not options["sets"]:
            return list(SETS)
        names = [n.strip() for n in str(options["sets"]).split(",") if n.strip()]
        unknown = [n for n in names if n not in SETS]
        if unknown:
            raise ConfigError(f"tdro: unknown set(s) {', '.join(unknown)}; sets: {', '.join(SETS)}")
        return names

    def check_options(self, options: dict[str, Any]) -> None:
        self.selected(options)
        EvalIndex(options["dedup"], options["simhash_distance"])
        if options["max_rows"] < 0:
            raise ConfigError("tdro: max_rows must be >= 0")
        parse_depth(options["mine_depth"])
        if options["mine_samples"] < 1:
            raise ConfigError("tdro: mine_samples must be >= 1")

    def inputs(self, options: dict[str, Any]) -> list[Path]:
        return [Path(p.strip()).expanduser() for p in str(options["eval_queries"]).split(",") if p.strip()]

    def sources(self, options: dict[str, Any]) -> list[Source]:
        out = []
        for name in self.selected(options):
            hub_file, note = SETS[name][3], SETS[name][4]
            if hub_file:
                out.append(Source(source_file(name), hub=ST_HUB, hub_file=hub_file, licence=ST_LICENCE, note=note))
            else:
                out.append(Source(source_file(name), note=f"{note}; one row per line in a release row shape"))
        return out

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return self.selected(options)

    def subset_sources(self, subset: str, options: dict[str, Any]) -> list[str]:
        return [source_file(subset)]

    def _index(self, ctx: BuildContext) -> EvalIndex:
        if "eval_index" not in ctx.cache:
            index = EvalIndex(ctx.options["dedup"], ctx.options["simhash_distance"])
            count = 0
            for path in self.inputs(ctx.options):
                for text, _file, _line in read_eval_queries(path):
                    index.add(text)
                    count += 1
            ctx.cache["eval_index"] = index
            ctx.cache["eval_count"] = count
        return ctx.cache["eval_index"]

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        language, category, paper_size, _hub, _note = SETS[subset]
        index = self._index(ctx)
        stats: dict[str, Any] = {"rows_read": 0, "removed_exact": 0, "removed_normalised": 0, "removed_simhash": 0,
                                 "eval_queries": ctx.cache["eval_count"], "dedup": ctx.options["dedup"],
                                 "paper_deduped_size": paper_size}
        limit = ctx.options["max_rows"]
        single = language if isinstance(language, str) else None

        def rows() -> Iterator[dict[str, Any]]:
            kept = 0
            for line, row in iter_release_rows(ctx.path(source_file(subset))):
                stats["rows_read"] += 1
                level = index.match(row["query"])
                if level is not None:
                    stats[f"removed_{level}"] += 1
                    continue
                if limit and kept >= limit:
                    continue
                kept += 1
                if single:
                    row["language"] = single
                row["source_line"] = line
                yield row
            stats["rows_kept"] = kept

        metadata = {"language": language, "task": category, "prompt": PROMPTS[subset],
                    "symmetric": subset in SYMMETRIC, "paper_size": paper_size}
        model = str(ctx.options["mine_negatives"] or "")
        if model and subset in MINED_SETS:
            def mined() -> Iterator[dict[str, Any]]:
                kept = list(rows())
                stats.update({"mined_with": model, "mined_rows": len(kept)})
                yield from mine_set(kept, model, depth=parse_depth(ctx.options["mine_depth"]),
                                    n_sample=int(ctx.options["mine_samples"]))

            metadata["negatives"] = f"mined with {model}"
            return SubsetResult(mined(), metadata, stats)
        return SubsetResult(rows(), metadata, stats)
