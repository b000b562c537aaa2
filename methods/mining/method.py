"""The ``mined`` training method (paper 004): mine hard negatives, then fine-tune with the uniform
recipe on the mined rows, optionally in monolingual topic-diverse batches with loss weights.

Stage 1, mining (``mine: true``, the default): each training source is mined with
:func:`methods.mining.rows.mine_rows` -- candidates from ``retrievers`` (fused by ``fusion``) over
the source's own passages or the BEIR ``corpus`` given for it, selection by ``strategy`` with its
parameter, the LLM false-negative ``judge`` (``filter_mode``; ``judge_rows`` judges only a seeded
subset of rows and ``judge_depth`` only their first candidates, to bound the calls at small scales)
and negative ``generate``-ion.  The mined rows
are a dependency keyed by content (the source's fingerprint and the mining settings), stored under
``cells/mined/<key>/`` of a suite (else ``<cache root>/mined/<key>/``) with their provenance and
reports: variants that mine alike share them, and a killed mining run resumes.  With ``truth``
(a synthetic world's ``truth.json``), the filter's precision and recall against the planted false
negatives and the planted false negatives left among the selected negatives are reported.

Stage 2, training: the uniform recipe (``presets`` are uniform's at tiny and small scale; at paper scale
paper 004's Tevatron recipe per backbone, :mod:`methods.mining.tevatron`) on the mined rows.  With
``batches: language_topic`` every micro-batch comes from
:func:`methods.mining.language_topic_batches` over all training rows (one language per batch,
topics round-robin; METHODS.md M6) instead of the sampler; epoch e uses seed ``spec.seed + e``, so
the batch of a step is a function of the step (a resumed run continues identically).  ``weights``
(``constant`` 0.45/0.4 or ``portion``, METHODS.md M7) applies w_l + w_t as ``weighting`` says:
``batch`` multiplies each micro-batch's loss by the mean w_l + w_t of its rows (the released code,
xir_BDUMDR trainer.py ``compute_loss``); ``sample`` weights each query's own InfoNCE term by its
w_l + w_t and averages (the paper's text, Sec. 3.5: "for each data point ... the weight assigned to
each negative").  Languages and topics come from :mod:`methods.mining.topics`.

Why ``sample`` exists (the clipping decision): the released recipe trains with the Hugging Face
Trainer, whose default ``max_grad_norm`` of 1.0 the README's command does not change, so it clips
like our TrainSpec default.  A per-batch scalar weight only rescales that batch's gradient, and
clipping to norm 1 undoes any rescale of a gradient whose norm exceeds 1 -- which every step of the
small suite's did -- so ``batch`` weights cannot change the update there.  ``sample`` weights
change the gradient's direction (a batch is monolingual but mixes topics, so w_t and, in ``portion``
mode, the weights differ within it) and survive clipping.  Constant weights (0.45 + 0.4 for every
row) are a global loss scale in either mode: AdamW is invariant to it up to ``adam_eps``, clipped or
not (METHODS.md 5.5: report that honestly).

Exports (``<run>/method/``): ``mining.json`` (per source: the mining report, the settings and the
truth statistics) and, with batches or weights, ``batches.json`` (label counts, weight tables) and
``topics.tsv``, the language and topic of every training row the batches used (:data:`TOPICS_FILE`; paper 004
Table 13 counts them, the layout kind ``topic-distribution``).
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.data.beir import read_corpus
from harness.data.collections import TrainingData
from harness.data.training import read_training_rows
from harness.encoders.cache import cache_root
from harness.errors import ConfigError
from harness.io import atomic_write_json, atomic_write_text
from harness.io.claims import claim
from harness.io.paths import check_component
from harness.keys import content_key
from harness.method import Method, register_method
from harness.method.portable import portable_paths
from harness.recipe import BaseLossOptions, option
from harness.retrieval.bm25 import resolve_language
from harness.retrieval.pool import FUSIONS, CandidatePool, DenseSource, named_sources
from harness.train.api import DataStage, Prepared, Stage, StageResult
from methods.mining.batches import WEIGHT_MODES, language_topic_batches, loss_weights
from methods.mining.fill import GENERATION_MODES, Generation
from methods.mining.generate import TextCache, make_generator
from methods.mining.judge import TruthJudge
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter
from methods.mining.judge_spec import JUDGE_SPECS, make_judge
from methods.mining.mift import SOURCE as MIFT_SOURCE
from methods.mining.mift import MiftSettings, mift_train, read_instruction_rows, summarisation_examples
from methods.mining.plan import describe, mining_estimate
from methods.mining.rows import MiningSettings, mine_rows, passage_id
from methods.mining.selection import POS_AGGREGATES, STRATEGIES
from methods.mining.tevatron import TEVATRON_PRESETS
from methods.mining.topics import language_labels, topic_labels
from methods.mining.votes import FILTER_MODES
from methods.uniform import Uniform

if TYPE_CHECKING:
    from harness.data.collections import TrainingSource
    from harness.train.api import TrainSpec

log = logging.getLogger(__name__)

# The per-row label assignment a run's batches used (columns: training source, row index in it, the row's
# query_id where the data has one, language, topic), one line per training row after a header line.
TOPICS_FILE = "topics.tsv"
TOPICS_HEADER = ("source", "row", "query_id", "language", "topic")

# Table 7's four compositions: sampler (neither: Tevatron's mix), language (same language only: w/o topic
# balance), topic (topic balance only: w/o same language), language_topic (both, the full method).
BATCHES = ("sampler", "language_topic", "language", "topic")
# How w_l + w_t enter the loss: the batch mean times the batch loss (code) or per query (paper text).
WEIGHTINGS = ("batch", "sample")
MINING_OPTIONS = ("retrievers", "bm25_language", "fusion", "depth", "corpus", "strategy", "k", "shift", "window",
                  "threshold", "margin", "percent", "pos_agg", "mining_seed", "judge", "filter_mode", "judge_mode",
                  "judge_rows", "judge_depth", "judge_batch_size", "judge_max_tokens", "generate",
                  "generate_max_tokens")
_P = "paper 004"
JUDGE_REFERENCES = ("positive", "none")
# Mining options added later: part of a pool's key only when set off their default, so earlier pools keep theirs.
LATER_MINING_OPTIONS = {"judge_reference": "positive", "judge_error": 0.0, "generate_mode": "pdbg", "mift": None}
_BDUMDR = "xir_BDUMDR"


@dataclass(frozen=True)
class MinedOptions(BaseLossOptions):
    """The mining method's options: candidates, selection, LLM filter and generation, batches and weights."""

    # ---- mining (stage 1)
    mine: bool = option(True, doc="mine hard negatives before training (false: train on the data's negatives)",
                        source=_P + " (mined negatives are the method)")
    retrievers: list[str] = option(["minilm"], doc="retrievers whose scores are fused into the candidates "
                                                   "(models, or 'bm25')",
                                   source="harness default: one small dense model (paper 004 fuses mE5-large and "
                                          "BGE-M3; METHODS.md 5.1)")
    bm25_language: str | dict[str, str] | None = option(None, doc="BM25's analyzer: one code or {source: code} "
                                                                  "(null: the source's language)",
                                                        source="harness default: the source's own language")
    fusion: str = option("mean", doc="score fusion of the retrievers: mean of cosines, or a rank fusion",
                         choices=tuple(FUSIONS), source="METHODS.md 5.1 choice: parameter-free mean, so absolute "
                                                        "thresholds keep their meaning")
    depth: int = option(40, doc="candidates per query (top N0, positives excluded)", bounds="[1, inf)",
                        source=_P + " (N0 = 40) / " + _BDUMDR + " README.md (depth 40)")
    corpus: str | dict[str, str] | None = option(None, doc="a BEIR corpus to mine from, one or {source: corpus} "
                                                           "(null: the source's own passages)",
                                                 source="harness default: the source's own passages")
    strategy: str = option("perc_pos", doc="selection of the negative pool from the ranked candidates",
                           choices=STRATEGIES, source=_P + " (TopK-PercPos, its best strategy; METHODS.md 5.2)")
    k: int = option(30, doc="negative pool size K", bounds="[1, inf)",
                    source=_P + " pipeline (40 -> filter -> 30; METHODS.md 5.2)")
    shift: int = option(10, doc="shifted strategies: ranks dropped before the pool", bounds="[0, inf)",
                        source=_P + " (Top-K shifted, best N = 10)")
    window: int | None = option(None, doc="shifted_random(_after): draw from ranks shift+1..window (null: no window)",
                                source="harness default: none (FlagEmbedding's range_for_sampling when set)")
    threshold: float = option(0.6, doc="abs strategy: keep candidates scoring <= threshold", unit="cosine",
                              source=_P + " (TopK-Abs, best 0.6)")
    margin: float = option(0.15, doc="margin_pos strategy: keep candidates <= positive - margin", unit="cosine",
                           source=_P + " (TopK-MarginPos, best 0.15)")
    percent: float = option(0.9, doc="perc_pos strategy: keep candidates <= positive - |positive| * (1 - percent)",
                            bounds="(0, 1]", unit="fraction (0.9 for 90%)", source=_P + " (TopK-PercPos, best 90%)")
    pos_agg: str = option("min", doc="score of several positives: the minimum or the maximum",
                          choices=POS_AGGREGATES,
                          source="NVIDIA/NeMo-Curator tutorials/nemo-retriever-synthetic-data-generation/"
                                 "retriever_hardnegative_miner.py (minimum; paper 004 says maximum)")
    mining_seed: int = option(0, doc="seed of random selections (shifted_random, judged subsets)",
                              source="harness default: fixed, so mining is reproducible")
    judge: str = option("none", doc="LLM false-negative judge: " + JUDGE_SPECS + " | oracle (a synthetic world's "
                                    "planted truth, wrong on judge_error of the triples; needs truth)",
                        source=_P + " §4.3: the compared strategies (Table 2) select without a judge; the full "
                               "method's judge is GPT-4o (App. B.2; METHODS.md 5.3)")
    filter_mode: str = option("keep_zero", doc="which judged candidates stay: vote 0 only (code) or all but vote 2 "
                                               "(paper)", choices=tuple(FILTER_MODES),
                              source=_BDUMDR + " Src/hard_neg/llm_fitering.py (keep only 0; METHODS.md 5.3)")
    judge_mode: str | None = option(None, doc="how the judge is asked (null: the judge's default)",
                                    source="harness default: the judge's own")
    judge_rows: int | None = option(None, doc="judge only a seeded subset of N rows (null: every row)",
                                    bounds="[1, inf)", source="harness default: every row")
    judge_depth: int | None = option(None, doc="judge only the first N candidates of a row (null: all)",
                                     bounds="[1, inf)", source="harness default: every candidate")
    judge_batch_size: int = option(16, doc="prompts per judge or generator call", bounds="[1, inf)",
                                   source="harness default: fits a small local model")
    judge_max_tokens: int | None = option(None, doc="tokens the judge may answer with (null: the judge's default)",
                                          source="harness default: the judge's own")
    generate: str = option("none", doc="LLM hard-negative generation (fills pools to k): " + JUDGE_SPECS,
                           source=_P + " §4.3: the compared strategies (Table 2) generate nothing; the full method "
                                  "generates with a fine-tuned Llama-3.1-70B (§3.4; METHODS.md 5.4)")
    generate_max_tokens: int = option(64, doc="tokens per generated summary or query", bounds="[1, inf)",
                                      source="harness default: short queries (the released code allows 128)")
    judge_reference: str = option("positive", doc="what the judge reads as the Standard Answer: the query's positive, "
                                                  "or none (Table 5's w/o ground-truth)", choices=JUDGE_REFERENCES,
                                  source=_P + " App. B.2 (the positive is the reference); " + _BDUMDR +
                                  " Src/hard_neg/llm_fitering.py")
    judge_error: float = option(0.0, doc="judge 'oracle': share of the triples it answers wrong", bounds="[0, 1]",
                                source="harness default: a judge that knows the planted truth, exactly")
    generate_mode: str = option("pdbg", doc="pdbg: summarise the positive, then write a query (paper §3.4); direct: "
                                            "write the query from the positive (Table 6's w/o PDBG)",
                                choices=GENERATION_MODES,
                                source=_P + " §3.4 (positive-driven back-forward generation); " + _BDUMDR
                                + " Src/LLM_generation/generate_summary.py, generate_query.py")
    mift: str | None = option(None, doc="Alpaca-style instruction file: LoRA-fine-tune the generator on its "
                                        "summarisation instructions before generating (MIFT; null: the vanilla "
                                        "generator)", source=_P + " §3.4 (MIFT); " + MIFT_SOURCE)
    truth: str | None = option(None, doc="a synthetic world's truth.json: report the filter against the planted "
                                         "false negatives", source="harness default: none (real data has no truth)")
    # ---- batches and weights (stage 2)
    batches: str = option("sampler", doc="micro-batches from the sampler (neither), monolingual topic-diverse batches "
                                         "(language_topic), monolingual only (language) or topic-balanced only "
                                         "(topic)",
                          choices=BATCHES, source=_BDUMDR + " Src/tevatron (Tevatron's shuffled mix of all languages, "
                                                  "paper 004 §4.1; the full method's batches are language_topic)")
    languages: str | dict[str, str] = option("source", doc="row languages: the source's, column:<key> or "
                                                            "index:<tsv file> (one or {source: spec})",
                                             source="harness default: one language per source")
    topics: str | dict[str, str] = option("kmeans", doc="row topics: kmeans over query embeddings or a classifier "
                                                         "(one or {source: spec})",
                                          source="harness default: kmeans (paper 004's fastText classifiers are "
                                                 "an extra)")
    n_topics: int = option(12, doc="kmeans topics", bounds="[1, inf)", source=_P + " (12 merged topics)")
    topic_threshold: float = option(0.5, doc="classifier confidence below which a row's topic is Others",
                                    bounds="[0, 1]", source="harness default: a majority-confidence cut")
    topic_model: str | None = option(None, doc="dense model for kmeans topics (null: the first dense retriever)",
                                     source="harness default: the first dense retriever")
    weights: str = option("none", doc="loss weights w_l + w_t: none, constant (0.45 / 0.4) or portion",
                          choices=("none", *WEIGHT_MODES),
                          source=_BDUMDR + " Src/tevatron/src/tevatron/loss.py (Tevatron's unweighted loss; the full "
                                           "method weights)")
    weighting: str = option("batch", doc="batch: batch loss times the mean w_l + w_t (code); sample: each query's "
                                         "term by its own (paper text)", choices=WEIGHTINGS,
                            source=_BDUMDR + " Src/tevatron/src/tevatron/trainer.py compute_loss")
    language_weight: float = option(0.45, doc="w_l", source=_P + " Table 9 (best w_l 0.45)")
    topic_weight: float = option(0.4, doc="w_t", source=_P + " Table 9 (best w_t 0.4)")
    plan_queries: int | None = option(None, doc="dry-run estimate of the mining cost: training queries",
                                      source="harness default: no estimate")
    plan_docs: int | None = option(None, doc="dry-run estimate of the mining cost: corpus documents",
                                   source="harness default: no estimate")


# Judges and generators loaded in this process, by their options (a model is loaded once for all sources).
_LOADED: dict[str, Any] = {}


def _judge_subset(n: int, size: int | None, seed: int) -> frozenset[int] | None:
    if size is None or size >= n:
        return None
    rng = np.random.default_rng([seed, 0x4A5])
    return frozenset(int(i) for i in rng.choice(n, size=size, replace=False))


def truth_statistics(provenance: Sequence[Mapping[str, Any]], rows, truth: Mapping[str, Any]) -> dict[str, Any]:
    """The filter and the selection against a synthetic world's planted false negatives.

    A planted false negative of a row is the passage the world put among its negatives as a twin of
    its positive (``false_negative_negs`` of the row's truth).  Returns the judge's precision and
    recall on the judged candidates (dropped = predicted false negative) and how many planted false
    negatives the final negatives still hold."""
    by_id = {t["id"]: t for t in truth.get("train", [])}
    for domain in (truth.get("domains") or {}).values():     # a synthetic world's truth.json
        by_id.update({t["id"]: t for t in domain.get("train", [])})

    tp = fp = fn = 0
    planted_total = planted_candidates = planted_selected = 0
    for p, row in zip(provenance, rows):
        t = by_id.get(row.meta.get("id"))
        planted = {passage_id(row.neg[j]) for j in (t or {}).get("false_negative_negs", []) if j < len(row.neg)}
        planted_total += len(planted)
        if "judge" in p:
            for item in p["judge"]["judged"]:
                dropped, is_fn = not item["kept"], item["doc_id"] in planted
                tp += dropped and is_fn
                fp += dropped and not is_fn
                fn += (not dropped) and is_fn
        retrieved = {n["doc_id"] for n in p["negatives"]}
        planted_selected += len(planted & retrieved)
        planted_candidates += len(planted & ({i["doc_id"] for i in p["judge"]["judged"]} if "judge" in p
                                             else retrieved))
    out: dict[str, Any] = {"planted": planted_total, "planted_selected": planted_selected}
    if any("judge" in p for p in provenance):
        out.update({"judged_planted": planted_candidates, "true_positives": tp, "false_positives": fp,
                    "false_negatives": fn, "precision": tp / (tp + fp) if tp + fp else None,
                    "recall": tp / (tp + fn) if tp + fn else None})
    return out


@register_method("mined")
class Mined(Method):
    """Paper 004's hard-negative mining, then the uniform recipe (see the module docstring)."""

    # 2: rows that share their query text are one query (their positives are avoided and threshold together)
    revision = 2
    description = "hard negatives mined (paper 004: ensemble candidates, selection, LLM FN filter, generation), " \
                  "uniform recipe; optional monolingual topic-diverse batches and loss weights"
    # tiny/small: the uniform recipe; paper: paper 004's Tevatron recipe of BGE-M3 (its Table 2 backbone), and
    # 'tevatron-<backbone>' for the four backbones of Table 1 / Tables 15-16 (methods/mining/tevatron.py)
    presets = {**Uniform.presets, "paper": TEVATRON_PRESETS["tevatron-bge-m3"], **TEVATRON_PRESETS}
    Options = MinedOptions

    def __init__(self) -> None:
        self._mining: dict[str, Any] = {}
        self._examples: list[tuple[int, int]] = []
        self._languages: list[str] = []
        self._topics: list[str] = []
        self._weights: np.ndarray | None = None
        self._epochs: dict[int, list[list[int]]] = {}
        self._position: dict[tuple[int, int], int] = {}
        self._batch_mode = "sampler"

    # ------------------------------------------------------------------ options
    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        opts = super().resolve_options(options)
        if not opts["retrievers"]:
            raise ConfigError("mined: option 'retrievers' must be a non-empty list of models (or 'bm25')")
        # k-means topics embed the queries with topic_model or the first dense retriever: refuse before any work
        # (a dry run) what would otherwise fail after mining, when the batches are labelled
        if self._uses_kmeans(opts) and not (opts["batches"] == "sampler" and opts["weights"] == "none") \
                and not opts["topic_model"] and all(str(r).lower() == "bm25" for r in opts["retrievers"]):
            raise ConfigError("mined: topics: kmeans needs a dense model (topic_model, or a dense retriever); "
                              f"retrievers are {opts['retrievers']} and topic_model is unset")
        return opts

    @staticmethod
    def _uses_kmeans(opts: Mapping[str, Any]) -> bool:
        topics = opts["topics"]
        return topics == "kmeans" or (isinstance(topics, Mapping) and "kmeans" in topics.values())

    def stages(self, spec: TrainSpec) -> list[Stage | DataStage]:
        """Mining before training (``mine: true``): a data stage the engine schedules; its pools are keyed
        by content per source (``build_stage``)."""
        opts = self.resolve_options(dict(spec.method_options))
        if not opts["mine"]:
            return []
        config = {k: opts[k] for k in MINING_OPTIONS}
        config.update({k: opts[k] for k, default in LATER_MINING_OPTIONS.items() if opts[k] != default})
        if opts["judge"] == "oracle":          # the oracle reads the planted truth: part of its pool's identity
            config["truth"] = opts["truth"]
        return [DataStage("mined", "hard-negative mining", config)]

    def plan_notes(self, spec: TrainSpec) -> list[str]:
        """The mining estimate of a dry run, for ``plan_queries`` queries over ``plan_docs`` documents
        (the sizes of data a dry run may not have; :mod:`methods.mining.plan`)."""
        opts = self.resolve_options(dict(spec.method_options))
        if not opts["mine"] or not opts["plan_queries"] or not opts["plan_docs"]:
            return []
        return [describe(mining_estimate(opts, int(opts["plan_queries"]), int(opts["plan_docs"])))]

    # ------------------------------------------------------------------ stage 1: mining
    def _pool(self, src: TrainingSource, root: Path, mining: Mapping[str, Any]) -> tuple[Path, Path, str]:
        """The folder, rows file and key of one source's mined pool under ``root``."""
        # portable: the same pool wherever the corpus lies (the settings hold its resolved path)
        key = content_key({"format": self.revision, "source": src.fingerprint, "name": src.name,
                           "mining": portable_paths(dict(mining))})
        folder = root / key
        # the pool's files are named after the source (a domains.json key, a data entry's name): one component
        return folder, folder / f"{check_component(src.name, 'training source name')}.jsonl", key

    def build_stage(self, stage: DataStage, spec: TrainSpec, data: TrainingData, root: Path) -> None:
        """Mine every source whose pool does not exist yet (one claimed folder per source: variants that mine
        a source alike share it, and a killed mining run resumes)."""
        opts = self.resolve_options(dict(spec.method_options))
        for src in data.sources:
            folder, out, _ = self._pool(src, root, stage.config)
            with claim(folder, f"mining {src.name} for {self.name}"):
                if not out.is_file():
                    self._mine_source(src, out, opts)

    def mined_data(self, data: TrainingData, stage: StageResult,
                   opts: Mapping[str, Any]) -> tuple[TrainingData, dict[str, Any]]:
        """The training data with the mined negatives of the built stage, and the mining report."""
        assert isinstance(stage.stage, DataStage)
        mining = dict(stage.stage.config)
        sources = []
        report_all: dict[str, Any] = {"settings": mining, "sources": {}}
        for src in data.sources:
            folder, out, key = self._pool(src, stage.path, mining)
            report = json.loads(out.with_name(f"{src.name}.report.json").read_text(encoding="utf-8"))
            entry: dict[str, Any] = {"dir": str(folder), "report": report["report"]}
            mined_rows = read_training_rows(out)
            if opts["truth"]:
                if not Path(opts["truth"]).is_file():
                    raise ConfigError(f"mined: truth file {opts['truth']} does not exist (a synthetic world's "
                                      "truth.json, e.g. synthetic:peg/truth.json)")
                truth = json.loads(Path(opts["truth"]).read_text(encoding="utf-8"))
                prov = [json.loads(line) for line in
                        out.with_name(f"{src.name}.provenance.jsonl").read_text(encoding="utf-8").splitlines()]
                entry["truth"] = truth_statistics(prov, src.rows, truth)
            report_all["sources"][src.name] = entry
            for old, new in zip(src.rows, mined_rows):
                new.meta = {**old.meta, "line": old.meta.get("line")}
            sources.append(replace(src, rows=mined_rows, fingerprint=f"{src.fingerprint}:mined:{key}"))
        return TrainingData(sources), report_all

    def _mine_source(self, src: TrainingSource, out: Path, opts: dict[str, Any]) -> None:
        settings = MiningSettings(strategy=opts["strategy"], k=opts["k"], shift=opts["shift"], window=opts["window"],
                                  threshold=opts["threshold"], margin=opts["margin"], percent=opts["percent"],
                                  pos_agg=opts["pos_agg"], seed=opts["mining_seed"])
        uses_bm25 = any(str(r).lower() == "bm25" for r in opts["retrievers"])
        sources = named_sources(list(opts["retrievers"]),
                                self._bm25_language(src, opts["bm25_language"]) if uses_bm25 else "en")
        if opts["judge"] == "oracle":
            judge = self._oracle(src, opts)
        else:
            judge_key = json.dumps(["judge", opts["judge"], opts["judge_mode"], opts["judge_max_tokens"],
                                    opts["judge_batch_size"]])
            if judge_key not in _LOADED:
                _LOADED[judge_key] = make_judge(opts["judge"], mode=opts["judge_mode"],
                                                max_new_tokens=opts["judge_max_tokens"],
                                                max_tokens=opts["judge_max_tokens"],
                                                batch_size=opts["judge_batch_size"])
            judge = _LOADED[judge_key]
        cache = cache_root()
        flt = None
        if judge is not None:
            flt = JudgeFilter(judge, opts["filter_mode"], VoteCache(cache), batch_size=opts["judge_batch_size"],
                              only_rows=_judge_subset(len(src.rows), opts["judge_rows"], opts["mining_seed"]),
                              depth=opts["judge_depth"], reference=opts["judge_reference"] == "positive")
        generation = None
        if opts["generate"] != "none":
            spec = self._mift_generator(opts["generate"], opts["mift"], cache) if opts["mift"] else opts["generate"]
            gen_key = json.dumps(["generate", spec, opts["generate_max_tokens"], opts["judge_batch_size"]])
            if gen_key not in _LOADED:
                _LOADED[gen_key] = make_generator(spec, max_new_tokens=opts["generate_max_tokens"],
                                                  batch_size=opts["judge_batch_size"])
            generation = Generation(_LOADED[gen_key], TextCache(cache), batch_size=opts["judge_batch_size"],
                                    mode=opts["generate_mode"])
        corpus_opt = opts["corpus"]
        corpus_path = corpus_opt.get(src.name) if isinstance(corpus_opt, Mapping) else corpus_opt
        corpus = read_corpus(corpus_path) if corpus_path else None

        def factory(c):
            return CandidatePool(sources, c, depth=opts["depth"], fusion=opts["fusion"])

        log.info("mining %d rows of %s (%s, k=%d)", len(src.rows), src.name, opts["strategy"], opts["k"])
        mine_rows(src.rows, factory, out, settings, corpus=corpus, progress=True, overwrite=True, judge_filter=flt,
                  generation=generation)

    @staticmethod
    def _oracle(src: TrainingSource, opts: Mapping[str, Any]) -> TruthJudge:
        """The informative tiny judge: the source's planted false negatives from ``truth``."""
        if not opts["truth"] or not Path(opts["truth"]).is_file():
            raise ConfigError("mined: judge 'oracle' needs option 'truth', a synthetic world's truth.json "
                              f"(got {opts['truth']!r})")
        truth = json.loads(Path(opts["truth"]).read_text(encoding="utf-8"))
        by_id = {t["id"]: t for t in truth.get("train", [])}
        for domain in (truth.get("domains") or {}).values():
            by_id.update({t["id"]: t for t in domain.get("train", [])})
        planted = [(row.query, row.neg[j]) for row in src.rows
                   for j in by_id.get(row.meta.get("id"), {}).get("false_negative_negs", []) if j < len(row.neg)]
        return TruthJudge(planted, error=float(opts["judge_error"]), seed=int(opts["mining_seed"]))

    @staticmethod
    def _mift_generator(generate: str, instructions: str, cache: Path) -> str:
        """The generator spec after MIFT: the generator's model LoRA-fine-tuned on the summarisation
        instructions of ``instructions`` (``methods.mining.mift``), merged, kept under ``<cache>/mift/<key>``."""
        kind, _, model = generate.partition(":")
        if kind not in ("transformers", "vllm") or not model:
            raise ConfigError(f"mined: mift fine-tunes a local model (generate: transformers:<model> or vllm:<model>), "
                              f"got generate {generate!r}")
        rows = read_instruction_rows(instructions)
        examples = summarisation_examples(rows)
        settings = MiftSettings()
        from methods.mining.judge_hf import _resolve

        base, gguf, _ = _resolve(model)
        key = content_key({"mift": 1, "base": base, "gguf": gguf, "examples": examples, "settings": settings.__dict__})
        folder = cache / "mift" / key
        with claim(folder, f"MIFT of {model}"):
            if not (folder / "mift.json").is_file():
                mift_train(base, examples, folder, settings, gguf_file=gguf)
        return f"{kind}:{folder}"

    @staticmethod
    def _bm25_language(src: TrainingSource, option: Any) -> str:
        """BM25's analyzer: the option (one code or ``{source: code}``), else the source's language when
        it has one BM25 knows, else whitespace tokenisation (the ``sw`` analyzer) for mixed sources."""
        given = option.get(src.name) if isinstance(option, Mapping) else option
        if given:
            return str(given)
        langs = src.language if isinstance(src.language, list) else [src.language]
        if len(langs) == 1:
            try:
                return resolve_language(str(langs[0])).code
            except ConfigError:
                pass
        log.info("BM25 over source %s (languages %s): whitespace tokenisation", src.name, langs)
        return "sw"

    # ------------------------------------------------------------------ stage 2: training
    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """The mined rows (when mining) and the language/topic labels and loss weights of the batches."""
        opts = self.resolve_options(dict(spec.method_options))
        mining: dict[str, Any] = {}
        if opts["mine"]:
            data, mining = self.mined_data(data, stages["mined"], opts)
        return Prepared(data, values={"mining": mining, **self._batch_labels(spec, data, opts)})

    def _batch_labels(self, spec: TrainSpec, data: TrainingData, opts: dict[str, Any]) -> dict[str, Any]:
        """Each training row's (source, row), language and topic, and the loss weights (none needed: empty)."""
        if opts["batches"] == "sampler" and opts["weights"] == "none":
            return {}

        examples: list[tuple[int, int]] = []
        languages: list[str] = []
        topics: list[str] = []

        embed = None
        if self._uses_kmeans(opts):
            embed = self._query_embedder(opts, spec)
        for s, src in enumerate(data.sources):
            langs = language_labels(src, opts["languages"])
            tops = topic_labels(src, langs, opts["topics"], n_topics=int(opts["n_topics"]),
                                threshold=float(opts["topic_threshold"]), seed=spec.seed, embed=embed)
            examples.extend((s, r) for r in range(len(src.rows)))
            languages.extend(langs)
            topics.extend(tops)
        weights = None
        if opts["weights"] != "none":
            weights = loss_weights(languages, topics, mode=opts["weights"],
                                   language_weight=float(opts["language_weight"]),
                                   topic_weight=float(opts["topic_weight"]))
        return {"examples": examples, "languages": languages, "topics": topics, "weights": weights,
                "batches": opts["batches"]}

    @staticmethod
    def _query_embedder(opts: dict[str, Any], spec: TrainSpec):
        name = opts["topic_model"] or next((r for r in opts["retrievers"] if str(r).lower() != "bm25"), None)
        if name is None:
            raise ConfigError("mined: topics: kmeans needs a dense model (topic_model, or a dense retriever)")
        key = json.dumps(["topic-embedder", str(name)])
        if key not in _LOADED:
            source = named_sources([str(name)])[0]
            assert isinstance(source, DenseSource)
            _LOADED[key] = (source.encoder, {})
        encoder, memo = _LOADED[key]

        def embed(texts: Sequence[str]) -> np.ndarray:
            # The batches variants of a suite label the same queries: encode them once per process.
            digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
            if digest not in memo:
                memo[digest] = np.asarray(encoder.encode_queries(list(texts), progress=False), dtype=np.float32)
            return memo[digest].copy()

        return embed

    def use_prepared(self, prepared: Mapping[str, Any]) -> None:
        """Take the mining report, the rows' labels and loss weights ``prepare`` computed."""
        self._mining = dict(prepared.get("mining") or {})
        self._examples = list(prepared.get("examples") or [])
        self._languages = list(prepared.get("languages") or [])
        self._topics = list(prepared.get("topics") or [])
        self._weights = prepared.get("weights")
        self._position = {ex: i for i, ex in enumerate(self._examples)}
        self._epochs = {}
        self._batch_mode = str(prepared.get("batches") or "language_topic")

    def configure(self, ctx) -> None:
        self.use_prepared(ctx.prepared)
        self._batch_mode = ctx.options["batches"]
        if self._batch_mode != "sampler" and ctx.world_size > 1:
            raise ConfigError(f"mined: {self._batch_mode} batches run on one process (the batch of a step is drawn "
                              "whole); train without accelerate's several processes")

    def _epoch(self, epoch: int, size: int, seed: int) -> list[list[int]]:
        """Epoch ``epoch``'s batches (the current and the first epoch are kept)."""
        if epoch not in self._epochs:
            keep = {e: b for e, b in self._epochs.items() if e == 0}
            # Table 7's compositions: a label a mode ignores is one value for every row
            n = len(self._examples)
            langs = self._languages if self._batch_mode in ("language_topic", "language") else ["all"] * n
            tops = self._topics if self._batch_mode in ("language_topic", "topic") else ["all"] * n
            keep[epoch] = language_topic_batches(langs, tops, size, shuffle=True, seed=seed + epoch)
            self._epochs = keep
        return self._epochs[epoch]

    def make_batch(self, examples: list[tuple[int, int]], ctx, micro_index: int):
        if ctx.options["batches"] == "sampler":
            return super().make_batch(examples, ctx, micro_index)

        size = len(examples)
        per_epoch = len(self._epoch(0, size, ctx.spec.seed))     # the same count every epoch
        batch = self._epoch(micro_index // per_epoch, size, ctx.spec.seed)[micro_index % per_epoch]
        chosen = [self._examples[i] for i in batch]
        # lazy (start-up speed): imports torch (every CLI command loads this module through `harness mine`)
        from harness.train.api import build_batch, tokenize_batch

        built = build_batch(chosen, ctx.data, ctx.spec, micro_index, ctx.rank, ctx.world_size)
        return tokenize_batch(built, ctx.tokenizer, ctx.spec, bool(ctx.encoding.get("append_eos", False)))

    def batch_weight(self, examples: Sequence[tuple[int, int]]) -> float:
        """The mean w_l + w_t of a batch's rows (1 without weights)."""
        if self._weights is None:
            return 1.0
        return float(np.mean([self._weights[self._position[(int(s), int(r))]] for s, r in examples]))

    def sample_weights(self, examples: Sequence[tuple[int, int]]) -> np.ndarray:
        """Each row's w_l + w_t, in the order of ``examples`` (ones without weights)."""
        if self._weights is None:
            return np.ones(len(examples), dtype=np.float64)
        return np.array([self._weights[self._position[(int(s), int(r))]] for s, r in examples], dtype=np.float64)

    def reduce(self, out, ctx):
        if self._weights is None:
            return out.losses.mean()
        if ctx.options["weighting"] == "sample":
            import torch

            examples = ctx.batch.examples
            if len(examples) != out.losses.shape[0]:
                raise ConfigError(f"mined: weighting 'sample' needs one loss per query of the batch, got "
                                  f"{out.losses.shape[0]} losses for {len(examples)} queries")
            w = torch.as_tensor(self.sample_weights(examples), dtype=out.losses.dtype, device=out.losses.device)
            return (out.losses * w).mean()
        return out.losses.mean() * self.batch_weight(ctx.batch.examples)

    # ------------------------------------------------------------------ outputs
    def export(self, ctx, directory: Path) -> None:
        if self._mining:
            atomic_write_json(directory / "mining.json", self._mining)
        if self._examples:
            def counts(labels: list[str]) -> dict[str, int]:
                return {k: labels.count(k) for k in dict.fromkeys(labels)}

            tables: dict[str, Any] = {"batches": ctx.options["batches"], "weights": ctx.options["weights"],
                                      "languages": counts(self._languages), "topics": counts(self._topics)}
            if self._weights is not None:
                langs = np.asarray(self._languages)
                tables["mean_weight_by_language"] = {lang: float(self._weights[langs == lang].mean())
                                                     for lang in tables["languages"]}
                tables["mean_weight"] = float(self._weights.mean())
            atomic_write_json(directory / "batches.json", tables)
            atomic_write_text(directory / TOPICS_FILE, self._assignment(ctx.data))

    def _assignment(self, data: TrainingData) -> str:
        """The ``topics.tsv`` text: each training row's source, row, query_id, language and topic."""
        lines = ["\t".join(TOPICS_HEADER)]
        for (s, r), lang, topic in zip(self._examples, self._languages, self._topics):
            src = data.sources[s]
            qid = str(src.rows[r].meta.get("query_id") or "")
            lines.append("\t".join(" ".join(str(x).split()) for x in (src.name, r, qid, lang, topic)))
        return "\n".join(lines) + "\n"


__all__ = ["BATCHES", "MINING_OPTIONS", "TOPICS_FILE", "TOPICS_HEADER", "WEIGHTINGS", "Mined", "truth_statistics"]
