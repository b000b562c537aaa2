"""BEIR (Thakur et al., 2021): 18 zero-shot sets plus MS MARCO, nDCG@10 and Recall@100.

Protocol
    * split ``test`` for every set except MS MARCO, which is evaluated on ``dev``
      (its ``test`` qrels are TREC DL; using them is a known trap, beir-cellar/beir#143);
    * metrics nDCG@10 (the reported one) and Recall@100, trec_eval definitions,
      relevance threshold 1, averaged over queries in both run and qrels (as the BEIR
      library does through pytrec_eval);
    * query == document hits are dropped for ArguAna and Quora only.  Source: the
      BEIR maintainers (beir-cellar/beir#72: "this would be there for ArguAna and
      Quora datasets ... we move ahead and remove these queries"; the option is
      ``ignore_identical_ids`` added in beir-cellar/beir#91).  MTEB drops them for
      more tasks (FiQA, FEVER, MS MARCO, ...), so an MTEB number has a different card;
    * BM25 with the English analyzer; documents are ``title + " " + text``;
    * CQADupStack is 12 forum sub-folders, each evaluated on its own and averaged
      (:func:`suites.groupings.cqadupstack_average`);
    * Touché-2020 is BEIR's v2 qrels (the file in BEIR's zip); the data hash tells
      a v1 copy apart.

Any other BEIR-layout folder loads under the generic version of this protocol
(its folder name as dataset name; split: the only qrels file, else ``test``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.benchmark import LoadedBenchmark, RemoteFile, SuiteOption, register_suite
from harness.data.beir import DATASET_FOLDER
from harness.errors import ConfigError, InputError
from harness.io.readers import check_input_dir
from suites.benchmarks._common import (
    ANSWERS_FILE,
    BeirLayoutSuite,
    find_optional,
    load_beir_folder,
    make_card,
    read_answers,
    resolve_split,
    select_answers,
    with_options,
)
from suites.groupings import BEIR_ALL, CQADUPSTACK_FORUMS

EXCLUDE_SELF = ("arguana", "quora")
PROTOCOL_SPLIT = {"msmarco": "dev"}
METRICS = ("ndcg@10", "recall@100")

# Published MD5 checksums of the BEIR zips (BEIR's dataset table) and SHA-256 where
# established from independent records (scifact.zip, 2,816,079 bytes).
ZIP_MD5 = {
    "msmarco": "444067daf65d982533ea17ebd59501e4", "trec-covid": "ce62140cb23feb9becf6270d0d1fe6d1",
    "nfcorpus": "a89dba18a62ef92f7d323ec890a0d38d", "nq": "d4d3d2e48787a744b6f6e691ff534307",
    "hotpotqa": "f412724f78b0d91183a0e86805e16114", "fiqa": "17918ed23cd04fb15047f73e6c3bd9d9",
    "arguana": "8ad3e3c2a5867cdced806d6503f29b99", "webis-touche2020": "46f650ba5a527fc69e0a6521c5a23563",
    "cqadupstack": "4e41456d7df8ee7760a7f866133bda78", "quora": "18fb154900ba42a600f84b839c173167",
    "dbpedia-entity": "c2a39eb420a3164af735795df012ac2c", "scidocs": "38121350fc3a4d2f48850f6aff52e4a9",
    "fever": "5a818580227bfb4b35bb6fa46d9b6c03", "climate-fever": "8b66f0a9126c521bae2bde127b4dc99d",
    "scifact": "5f7d1de60b170fc8027bb7898e2efca1",
}
ZIP_SHA256 = {"scifact": "536e14446a0ba56ed1398ab1055f39fe852686ecad24a6306c80c490fa8e0165"}
BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
# Sets without a public download (BEIR gives reproduction instructions instead).
NOT_PUBLIC = ("bioasq", "signal1m", "trec-news", "robust04")


def canonical_name(name: str) -> str:
    """Lower-case BEIR name; ``cqadupstack/<forum>`` keeps its forum."""
    return name.strip().strip("/").lower()


def protocol_for(name: str) -> dict[str, Any]:
    """Split and query == doc exclusion of a BEIR dataset (generic values for unknown names)."""
    base = canonical_name(name).split("/")[0]
    return {"split": PROTOCOL_SPLIT.get(base, "test"), "exclude_self": base in EXCLUDE_SELF,
            "known": base in BEIR_ALL}


def resolve_dataset_dir(dataset_dir: str | Path, dataset: str | None) -> tuple[Path, str]:
    """Find the BEIR-layout folder and its dataset name (``dir`` itself, or ``dir/<dataset>``)."""
    root = Path(dataset_dir)
    if dataset:
        name = canonical_name(dataset)
        for candidate in (root / name, root):
            if find_optional(candidate, "corpus.jsonl"):
                return candidate, name
        if name == "cqadupstack" or (root / "cqadupstack").is_dir() and name.startswith("cqadupstack"):
            raise ConfigError("CQADupStack is evaluated per forum: use --dataset cqadupstack/<forum> "
                              f"(forums: {', '.join(CQADUPSTACK_FORUMS)}) and average with cqadupstack_average")
        raise InputError(root, f"no BEIR-layout folder for dataset {name!r} (looked for corpus.jsonl in "
                               f"{root / name} and {root})")
    check_input_dir(root, "dataset directory", DATASET_FOLDER)    # a file (corpus.jsonl) names its folder
    if root.parent.name == "cqadupstack" and root.name in CQADUPSTACK_FORUMS:
        return root, f"cqadupstack/{root.name}"
    if root.name == "cqadupstack" and not find_optional(root, "corpus.jsonl"):
        raise ConfigError("CQADupStack is evaluated per forum: point --dataset-dir at cqadupstack/<forum>")
    return root, canonical_name(root.name)


def beir_zip(name: str, base_url: str | None, target: str) -> RemoteFile:
    """One BEIR dataset's zip at its public location."""
    if name in NOT_PUBLIC:
        raise ConfigError(f"BEIR {name!r} has no public download; build it as BEIR describes")
    base = (base_url or BASE_URL).rstrip("/")
    return RemoteFile(f"{base}/{name}.zip", target, sha256=ZIP_SHA256.get(name), md5=ZIP_MD5.get(name),
                      unpack="zip", strip_top=True)


@register_suite("beir")
class BeirSuite(BeirLayoutSuite):
    """BEIR datasets (and any BEIR-layout folder) under the BEIR protocol."""

    description = "BEIR: 18 zero-shot sets + MS MARCO dev; nDCG@10, Recall@100; ArguAna/Quora drop query==doc"
    options = (SuiteOption("language", str, "en", "language of the BM25 analyzer"),)

    def datasets(self) -> list[str]:
        return list(BEIR_ALL)

    def remote_files(self, dataset: str | None, *, base_url: str | None = None,
                     with_corpus: bool = False) -> tuple[str, list[RemoteFile]]:
        """``<base>/<name>.zip`` (default base: the BEIR UKP host), checked against BEIR's published MD5."""
        if not dataset:
            raise ConfigError("pick a BEIR dataset with --dataset (e.g. scifact)")
        return dataset, [beir_zip(dataset, base_url, ".")]

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        folder, name = resolve_dataset_dir(dataset_dir, dataset)
        protocol = protocol_for(name)
        split = resolve_split(folder, split, protocol["split"])
        language = options.pop("language", None) or "en"
        ds, meta = load_beir_folder(folder, split)
        answers = None
        answers_file = find_optional(folder, ANSWERS_FILE)
        if answers_file:
            answers = select_answers(read_answers(answers_file), "answers")
        meta.update({"beir_known": protocol["known"], "answer_lang": language})
        notes = "BEIR protocol" + ("" if protocol["known"] else " (generic BEIR-layout folder)")
        if name.startswith("cqadupstack/"):
            notes += "; one CQADupStack forum: report the 12-forum average"
        card = make_card("beir", name, split, ds, metrics=METRICS, answers=answers,
                         exclude_self=protocol["exclude_self"], bm25_language=language, notes=notes)
        card = with_options(card, options)
        return LoadedBenchmark(ds, card, answers, meta)
