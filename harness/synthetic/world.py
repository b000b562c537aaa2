"""The in-memory synthetic world and its generator :func:`make_world`."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.synthetic.domains import DomainData, generate_domain
from harness.synthetic.spec import GENERATOR_VERSION, WorldSpec
from harness.synthetic.vocab import Language, make_language

# Words of the query-instruction template (E5 style "Instruct: ...\nQuery: ...") that
# tiny tokenizers should know as whole words, besides the domains' own prompts.
TEMPLATE_WORDS = ("instruct", "query", "passage", "document", "title", "text", "question", "answer")


def world_fingerprint(spec: WorldSpec, seed: int) -> str:
    """Identity of the world ``make_world(spec, seed)`` would generate (no generation needed)."""
    return hashlib.sha256(f"{spec.fingerprint()}:{int(seed)}".encode()).hexdigest()


@dataclass
class World:
    """A generated world: its spec and seed, languages, and one :class:`DomainData` per domain."""

    spec: WorldSpec
    seed: int
    languages: dict[str, Language]
    domains: dict[str, DomainData]

    @property
    def fingerprint(self) -> str:
        return world_fingerprint(self.spec, self.seed)

    def domain_names(self) -> list[str]:
        return list(self.domains)

    def domain_metadata(self) -> dict:
        """The ``train/domains.json`` mapping (training-collection metadata contract)."""
        out = {}
        for name, data in self.domains.items():
            spec, lang = data.spec, data.language
            out[name] = {
                "file": f"{name}.jsonl", "language": lang.code, "task": spec.task, "symmetric": spec.symmetric,
                "prompt": spec.prompt, "only_hn": spec.only_hn, "role": spec.role,
                "script": lang.script.iso15924, "spaced": lang.script.spaced,
                "bm25_language": lang.spec.bm25_language, "n_rows": len(data.train_rows),
                "eval": f"eval/{name}", "planted": spec.planted(),
            }
        return out

    def truth(self) -> dict:
        """Ground truth for every training row and test query (the ``truth.json`` content)."""
        domains = {}
        for name, data in self.domains.items():
            entry: dict[str, Any] = {"language": data.language.code, "role": data.spec.role, "task": data.spec.task,
                     "train": data.train_truth, "test": data.test_truth}
            if data.spec.synonym_rate > 0:
                n_topics = data.spec.n_topics or data.language.spec.n_topics
                entry["synonyms"] = {w: data.language.synonyms[w]
                                     for topic in data.language.topics[:n_topics] for w in topic}
            domains[name] = entry
        return {"world": self.summary(), "domains": domains}

    def summary(self) -> dict:
        """Name, seed, fingerprints and sizes: the ``world.json`` content (plus the spec)."""
        return {
            "name": self.spec.name, "seed": self.seed, "fingerprint": self.fingerprint,
            "spec_fingerprint": self.spec.fingerprint(), "generator_version": GENERATOR_VERSION,
            "domains": {name: {"role": d.spec.role, "language": d.language.code, "task": d.spec.task,
                               "train_rows": len(d.train_rows), "docs": len(d.corpus), "queries": len(d.queries)}
                        for name, d in self.domains.items()},
        }

    def texts(self) -> Iterator[str]:
        """Every string of the world: queries, passages, titles, prompts, vocabulary words."""
        for data in self.domains.values():
            yield data.spec.prompt
            for row in data.train_rows:
                yield row["query"]
                yield from row["pos"]
                yield from row["neg"]
            for _, title, text in data.corpus:
                yield title
                yield text
            for _, text in data.queries:
                yield text
        for lang in self.languages.values():
            yield from lang.words()
        yield " ".join(TEMPLATE_WORDS)

    def prompt_words(self) -> list[str]:
        """Lower-cased words of the prompts and the instruction template."""
        words = set(TEMPLATE_WORDS)
        for data in self.domains.values():
            words.update(w.lower() for w in re.findall(r"\w+", data.spec.prompt))
        return sorted(words)


def make_world(spec: WorldSpec | None = None, seed: int = 0) -> World:
    """Generate a world deterministically from ``spec`` (default :meth:`WorldSpec.default`) and ``seed``.

    Each language and each domain draws from its own random stream (keyed by seed
    and name), so adding or changing one domain leaves the others unchanged.
    """
    spec = spec or WorldSpec.default()
    languages = {lang.code: make_language(lang, seed) for lang in spec.languages}
    domains = {d.name: generate_domain(d, languages[d.language], seed) for d in spec.domains}
    return World(spec, int(seed), languages, domains)
