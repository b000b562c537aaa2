"""The project's synthetic world as a benchmark: one dataset per domain, BEIR layout.

Protocol: test split, nDCG@10 and Recall@100 (trec_eval definitions, relevance
threshold 1), plus Acc@10 by answer containment when the domain ships
``answers.jsonl`` (the CJK and Thai-like domains are written without spaces, which is
exactly where naive answer matching fails).  BM25 uses the analyzer that the world's
``train/domains.json`` names for the domain's script (``bm25_language``).

``--dataset-dir`` is a written world (``eval/<domain>/`` + ``train/domains.json``) with
``--dataset <domain>``, one ``eval/<domain>`` folder, or the word ``default`` for the
embedded default world (materialised once in the cache by
:func:`harness.synthetic.default_world_dir`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.benchmark import LoadedBenchmark, SuiteOption, register_suite
from harness.errors import ConfigError, InputError
from harness.io.readers import read_input_text
from harness.synthetic import default_world_dir
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

METRICS = ("ndcg@10", "recall@100")


def _world_root(dataset_dir: str | Path) -> Path:
    root = Path(dataset_dir)
    if str(dataset_dir) == "default" and not root.exists():
        return Path(default_world_dir())
    return root


def _domain_metadata(world: Path) -> dict[str, Any]:
    path = world / "train" / "domains.json"
    if not path.exists():
        return {}
    try:
        return json.loads(read_input_text(path, "metadata file"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON ({exc.msg})", exc.lineno) from None
    except (RecursionError, ValueError) as exc:
        raise InputError(path, f"malformed JSON ({type(exc).__name__}: {exc})") from None


@register_suite("synthetic")
class SyntheticSuite(BeirLayoutSuite):
    """Evaluation sets of the synthetic world (one per domain)."""

    description = "Synthetic world: per-domain BEIR-layout eval sets; nDCG@10, Recall@100, Acc@10"
    options = (SuiteOption("language", str, None, "language of the BM25 analyzer (default: the world's)"),)
    answer_lang = "und"

    def load(self, dataset_dir: str | Path, *, dataset: str | None = None, split: str | None = None,
             **options: Any) -> LoadedBenchmark:
        root = _world_root(dataset_dir)
        if (root / "eval").is_dir():
            domains = sorted(p.name for p in (root / "eval").iterdir() if p.is_dir())
            if not dataset:
                raise ConfigError(f"pick a domain with --dataset: {', '.join(domains)}")
            if dataset not in domains:
                raise ConfigError(f"unknown domain {dataset!r}; the world has {', '.join(domains)}")
            folder, world, name = root / "eval" / dataset, root, dataset
        elif find_optional(root, "corpus.jsonl"):
            folder, world, name = root, root.parent.parent, dataset or root.name
        else:
            raise InputError(root, "not a synthetic world (eval/) nor a BEIR-layout folder")
        info = _domain_metadata(world).get(name, {})
        language = options.pop("language", None) or info.get("bm25_language") or "en"
        split = resolve_split(folder, split, "test")
        ds, meta = load_beir_folder(folder, split)
        answers = None
        metrics: tuple[str, ...] = METRICS
        answers_file = find_optional(folder, ANSWERS_FILE)
        if answers_file:
            known = set(ds.queries.ids)
            answers = {q: a for q, a in select_answers(read_answers(answers_file), "answers").items() if q in known}
            metrics = METRICS + ("acc@10",)
        meta.update({"answer_lang": "und", "domain": info})
        card = make_card("synthetic", name, split, ds, metrics=metrics, answers=answers, bm25_language=language,
                         extra={"language": info.get("language", ""), "role": info.get("role", "")},
                         notes="synthetic world domain")
        return LoadedBenchmark(ds, with_options(card, options), answers, meta)
