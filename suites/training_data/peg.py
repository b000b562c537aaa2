"""``peg-public``: the public datasets paper 002 (PEG) names for fine-tuning, as a substitute for its mixture.

What paper 002 trained on is **not public**: "We collected 110 million data for fine-tuning ... The vast
majority of our data comes from open-sourced datasets while only a small portion of our dataset are
privately constructed" ("Dataset Source"), with LLM-generated questions for split passages and 5 hard
negatives per query mined with text2vec and filtered by an LLM ("Data Processing"); neither the 110M
pairs, the in-house books and journals, nor the generated questions were released.  This recipe builds
the part a user can rebuild: the open-sourced datasets the paper lists (:data:`PUBLIC`, by its three task
groups), each from a file the user places (the datasets come from many hosts and licences; each source's
note says where), turned into PEG's training rows.  The output is named ``peg-public`` everywhere: it is
a substitute mixture, not the paper's.  (Wudao, its pre-training corpus, goes to the RetroMAE stage, not
here; THUCNews and Wudao title-body pairs are summarisation pairs listed below.)

Input: one ``<name>.jsonl`` per dataset (``.gz`` allowed), each line one of

* a release row (``{"query", "pos", "neg"}``, a pair/triplet list, ``{"set": [...]}``; the shapes of
  :mod:`suites.training_data._release`);
* a title-passage row ``{"title", "text"}`` (summarisation sets: the title is the query; ``content`` or
  ``passage`` may name the text);
* a labelled pair ``{"sentence1", "sentence2", "label"}`` (matching and NLI sets; ``text_a``/``text_b``,
  ``gold_label`` accepted): a positive pair where the label is 1 / "1" / "entailment"; for NLI, the
  premise's "contradiction" hypotheses become its negatives (as BGE's and SimCSE's NLI pairs do); other
  labels are dropped and counted.

Processing (each choice's source in its option): long passages are split into pieces of at most
``passage_chars`` characters at sentence ends (paper 002 splits raw texts "into shorter passages"; the
length is not stated), a title-passage row then pairs its title with its first piece (the paper pairs
each passage with an LLM-generated question, which is not public); identical (query, positive) pairs are
kept once; at most ``negatives`` (5, the paper's) negatives are kept per row, in the file's order.  Rows
then need hard negatives mined as the paper did (the mining suite's ``mined`` method, paper 004, mines
and LLM-filters them).  Every subset's ``domains.json`` entry records its task group and the BGE query
instruction paper 002 adds ("Implementation details").
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.data.builders import (
    BuildContext,
    DataRecipe,
    RecipeOption,
    Source,
    SubsetResult,
    iter_release_jsonl,
    register_recipe,
)
from harness.errors import ConfigError, InputError
from suites.training_data._release import release_row

INSTRUCTION = "为这个句子生成表示以用于检索相关文章："
GROUPS = ("summarization", "qa", "matching")
# name -> (task group as paper 002 "Dataset Source" groups it, the paper's citation / link)
PUBLIC: dict[str, tuple[str, str]] = {
    "wudao-title": ("summarization", "Wudao (Yuan et al. 2021), title-body pairs"),
    "lcsts": ("summarization", "LCSTS (Hu, Chen, and Zhu 2015)"),
    "weixin-public-corpus": ("summarization", "WeiXin Public Corpus (github nonamestreet/weixin_public_corpus)"),
    "csl": ("summarization", "CSL (Li et al. 2022)"),
    "nlpcc2017": ("summarization", "NLPCC 2017 (Huang et al. 2018)"),
    "drcd": ("summarization", "DRCD (Shao et al. 2018)"),
    "thucnews": ("summarization", "THUCNews (Sun et al. 2016)"),
    "dureader-retrieval": ("qa", "DuReader-Retrieval (Qiu et al. 2022), train split"),
    "webqa": ("qa", "WebQA (Li et al. 2016)"),
    "t2ranking": ("qa", "T2Ranking (Xie et al. 2023)"),
    "mmarco-zh": ("qa", "mMARCO (Bonifacio et al. 2021), Chinese"),
    "chinese-medical-dialogue": ("qa", "Chinese Medical Dialogue (Chen et al. 2020)"),
    "baidu-zhidao": ("qa", "BaiDu-Zhidao (github liuhuanyong/MiningZhiDaoQACorpus)"),
    "dureader-robust": ("qa", "DuReader-Robust (Tang et al. 2020)"),
    "dureader-checklist": ("qa", "DuReader-Checklist (github baidu/DuReader)"),
    "cmnli": ("matching", "CMNLI (Xu et al. 2020)"),
    "ocnli": ("matching", "OCNLI (Hu et al. 2020)"),
    "lcqmc": ("matching", "LCQMC (Liu et al. 2018)"),
    "paws-x-zh": ("matching", "PAWS-X (Yang et al. 2019), Chinese"),
    "ccks2018": ("matching", "CCKS2018 (Zhang et al. 2019b)"),
    "covid19": ("matching", "COVID19 (Wang et al. 2020)"),
    "chinese-sts": ("matching", "ChineseSTS (github IAdmireu/ChineseSTS)"),
    "cmrc": ("matching", "CMRC (Cui et al. 2019)"),
    "advertisegen": ("matching", "AdvertiseGen (hub shibing624/AdvertiseGen)"),
    "atec": ("matching", "ATEC (github IceFlameWorm/NLP_Datasets)"),
    "bq": ("matching", "BQ (icrc.hitsz.edu.cn)"),
    "gaiic2021-oppo": ("matching", "GAIIC2021-OPPO (tianchi competition 531851)"),
    "cail2019-scm": ("matching", "CAIL2019-SCM (Xiao et al. 2019)"),
    "pku-paraphrase-bank": ("matching", "PKU-Paraphrase-Bank (Zhang et al. 2019a)"),
}
POSITIVE_LABELS = {1, "1", "entailment"}
NEGATIVE_LABELS = {"contradiction"}
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])")
_DATASET_SOURCE = "paper 002 \"Dataset Source\" (the open-sourced datasets it lists)"


def datasets(option: str) -> list[str]:
    """The datasets named by the ``datasets`` option ("all", a task group, or a comma list of names)."""
    text = option.strip()
    if text in ("", "all"):
        return list(PUBLIC)
    if text in GROUPS:
        return [n for n, (g, _) in PUBLIC.items() if g == text]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PUBLIC]
    if unknown:
        raise ConfigError(f"peg-public: unknown dataset(s) {', '.join(unknown)}; known: all, "
                          f"{', '.join(GROUPS)}, {', '.join(PUBLIC)}")
    return list(dict.fromkeys(names))


def split_passage(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut after sentence ends where possible (a sentence
    longer than ``limit`` is cut at ``limit``); ``limit`` 0 keeps the text whole."""
    text = text.strip()
    if limit <= 0 or len(text) <= limit:
        return [text] if text else []
    pieces: list[str] = []
    current = ""
    for sentence in (s for s in _SENTENCE_END.split(text) if s):
        while len(sentence) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(sentence[:limit])
            sentence = sentence[limit:]
        if len(current) + len(sentence) > limit:
            pieces.append(current)
            current = ""
        current += sentence
    if current.strip():
        pieces.append(current)
    return [p.strip() for p in pieces if p.strip()]


def _label(obj: dict[str, Any]) -> Any:
    label = obj.get("label", obj.get("gold_label"))
    return label.strip().lower() if isinstance(label, str) else label


def read_rows(path: Path, passage_chars: int, stats: dict[str, int]) -> Iterator[dict[str, Any]]:
    """``{"query","pos","neg"}`` rows of one input file (see the module docstring), labelled pairs grouped by
    their first sentence (positives and contradictions of one premise form one row, in first-seen order)."""
    grouped: dict[str, dict[str, list[str]]] = {}
    for line, obj in iter_release_jsonl(path):
        if isinstance(obj, dict) and ("sentence1" in obj or "text_a" in obj):
            a, b = obj.get("sentence1", obj.get("text_a")), obj.get("sentence2", obj.get("text_b"))
            if not isinstance(a, str) or not isinstance(b, str) or not a.strip() or not b.strip():
                raise InputError(path, "a labelled pair needs two non-empty strings (sentence1/sentence2 or "
                                       "text_a/text_b)", line)
            label = _label(obj)
            entry = grouped.setdefault(a.strip(), {"pos": [], "neg": []})
            if label in POSITIVE_LABELS:
                entry["pos"].append(b.strip())
            elif label in NEGATIVE_LABELS:
                entry["neg"].append(b.strip())
            else:
                stats["pairs_dropped_label"] += 1
            continue
        if isinstance(obj, dict) and "title" in obj and "query" not in obj:
            text = next((obj[k] for k in ("text", "content", "passage") if isinstance(obj.get(k), str)), None)
            if not isinstance(obj["title"], str) or text is None:
                raise InputError(path, "a title-passage row needs string 'title' and 'text' (or 'content', "
                                       "'passage')", line)
            pieces = split_passage(text, passage_chars)
            if not obj["title"].strip() or not pieces:
                stats["rows_dropped_empty"] += 1
                continue
            stats["passages_split"] += len(pieces) > 1
            yield {"query": obj["title"].strip(), "pos": pieces[:1], "neg": []}
            continue
        row = release_row(obj, path, line)
        pos = [p for text in row["pos"] for p in split_passage(text, passage_chars)[:1]]
        yield {"query": row["query"].strip(), "pos": pos, "neg": row["neg"]}
    for query, entry in grouped.items():
        if entry["pos"]:
            yield {"query": query, "pos": entry["pos"], "neg": entry["neg"]}
        else:
            stats["premises_without_positive"] += 1


@register_recipe("peg-public")
class PegPublicRecipe(DataRecipe):
    """The public datasets paper 002 lists, as PEG training rows: a substitute for its 110M-pair mixture."""

    paper = "002 PEG (progressive learning; its 110M-pair fine-tuning mixture is not public)"
    description = "peg-public: the open-sourced datasets paper 002 lists, user-placed, as a substitute mixture"
    options = {
        "datasets": RecipeOption("all", "which public datasets: all, a task group (summarization, qa, matching) "
                                        "or a comma list of names", _DATASET_SOURCE, str),
        "negatives": RecipeOption(5, "negatives kept per row (in file order)",
                                  "paper 002 \"Data Processing\": five hard negatives per query", int),
        "passage_chars": RecipeOption(512, "longest passage piece in characters (0: no splitting)",
                                      "paper 002 \"Data Processing\" splits raw texts into shorter passages (the "
                                      "length is not stated; 512 characters: about the 256-token passage limit "
                                      "of its fine-tuning for Chinese text)", int),
    }

    def check_options(self, options: dict[str, Any]) -> None:
        if options["negatives"] < 0 or options["passage_chars"] < 0:
            raise ConfigError("peg-public: negatives and passage_chars must be >= 0")
        datasets(options["datasets"])

    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source(f"{name}.jsonl", note=f"{PUBLIC[name][1]}: place its training pairs here as JSON lines "
                                             "(release rows, {title, text} or {sentence1, sentence2, label}); "
                                             "licence: that dataset's own")
                for name in datasets(options["datasets"])]

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return datasets(options["datasets"])

    def subset_sources(self, subset: str, options: dict[str, Any]) -> list[str]:
        return [f"{subset}.jsonl"]

    def preview(self, options: dict[str, Any]) -> dict[str, Any]:
        return {name: PUBLIC[name][0] for name in datasets(options["datasets"])}

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        group, citation = PUBLIC[subset]
        keep = int(ctx.options["negatives"])
        stats: dict[str, int] = {"rows_in": 0, "duplicates_dropped": 0, "pairs_dropped_label": 0,
                                 "premises_without_positive": 0, "rows_dropped_empty": 0, "passages_split": 0,
                                 "negatives_cut": 0, "rows": 0}
        path = ctx.path(f"{subset}.jsonl")

        def rows() -> Iterator[dict[str, Any]]:
            seen: set[tuple[str, str]] = set()
            for row in read_rows(path, int(ctx.options["passage_chars"]), stats):
                stats["rows_in"] += 1
                pos = [p for p in row["pos"] if (row["query"], p) not in seen]
                if not row["query"] or not pos:
                    stats["duplicates_dropped" if row["pos"] else "rows_dropped_empty"] += 1
                    continue
                seen.update((row["query"], p) for p in pos)
                stats["negatives_cut"] += max(len(row["neg"]) - keep, 0)
                stats["rows"] += 1
                yield {"query": row["query"], "pos": pos, "neg": row["neg"][:keep], "language": "zh"}

        metadata = {"language": "zh", "task": group, "source": citation, "prompt": INSTRUCTION,
                    "symmetric": group == "matching", "mixture": "peg-public (substitute; not paper 002's mixture)"}
        return SubsetResult(rows(), metadata, stats)
