"""What a synthetic world contains: languages, domains and their planted structure.

A :class:`WorldSpec` is plain data (frozen dataclasses of numbers and strings).  Its
:meth:`WorldSpec.fingerprint` keys caches; generation is a pure function of
``(spec, seed)``.  The presets :meth:`WorldSpec.default`, :meth:`WorldSpec.tdro` and
:meth:`WorldSpec.peg` are documented where they are defined.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.errors import ConfigError

# Bump when the generator changes what a given (spec, seed) produces: it is part of
# the fingerprint, so cached worlds from an older generator are not reused.
GENERATOR_VERSION = 2

SCRIPTS = ("latin", "latin-ext", "cyrillic", "cjk", "thai")
ROLES = ("easy", "hard", "noise")


@dataclass(frozen=True)
class LanguageSpec:
    """A pseudo-language: a script and a vocabulary of topic clusters.

    ``bm25_language`` names the real language whose analyzer suits the script
    (spaced scripts: "en"/"ru"; unspaced: "zh"/"th"), for BM25 baselines.
    """

    code: str
    script: str
    n_topics: int = 12
    topic_size: int = 30
    n_function_words: int = 24
    n_question_words: int = 5
    bm25_language: str = "en"


@dataclass(frozen=True)
class DomainSpec:
    """One domain ("dataset"): its language, task, sizes, difficulty and planted effects.

    Documents are bags of ``doc_terms`` content words from one topic (plus function
    words and one unique entity name, the answer).  A query asks for
    ``query_terms`` of its target document's content words (its *concepts*); a
    document is relevant exactly when it contains all of them.

    Difficulty knobs:
      * ``query_terms``: fewer concepts means less lexical evidence per query.
      * ``synonym_rate``: share of query concepts written as their hidden synonym
        (a word that never occurs in documents); 1.0 gives a domain that lexical
        matching cannot solve but a trained model can learn (the mapping is fixed).
      * ``n_topics``: use only the first topics of the language (small vocabulary,
        so every synonym pair recurs often in training).
      * ``near_duplicate_rate``: share of training hard negatives that are near
        duplicates of the positive (the rest are other documents of its topic);
        ``near_duplicate_keep`` query concepts survive in a near duplicate.
      * ``eval_near_duplicates``: near duplicates added to the corpus per test query.

    Planted label errors (all recorded in the ground truth):
      * ``label_noise``: share of training rows and test queries whose positive is a
        random unrelated document (1.0 makes the domain unlearnable noise).
      * ``false_positive_rate``: share of training rows whose positive is replaced by
        an unrelated passage; ``eval_false_positive_rate``: share of test queries
        with an extra labelled but unrelated document.
      * ``false_negative_rate``: share of training rows with a relevant passage among
        their negatives; ``eval_false_negative_rate``: share of test queries with a
        second relevant document left unlabelled.
    """

    name: str
    language: str
    role: str = "easy"
    task: str = "retrieval"
    symmetric: bool = False
    prompt: str = "Given a question, retrieve passages that answer it"
    only_hn: bool = False
    n_train: int = 300
    n_docs: int = 300
    n_test_queries: int = 80
    n_hard_negatives: int = 3
    doc_terms: int = 8
    doc_words: int = 24
    query_terms: int = 3
    n_topics: int | None = None
    synonym_rate: float = 0.0
    near_duplicate_rate: float = 0.34
    near_duplicate_keep: int = 1
    eval_near_duplicates: int = 1
    label_noise: float = 0.0
    false_positive_rate: float = 0.0
    false_negative_rate: float = 0.0
    eval_false_positive_rate: float = 0.0
    eval_false_negative_rate: float = 0.0

    def planted(self) -> dict:
        """The planting knobs, as written to ``domains.json``."""
        keys = ("synonym_rate", "label_noise", "false_positive_rate", "false_negative_rate",
                "eval_false_positive_rate", "eval_false_negative_rate", "near_duplicate_rate",
                "near_duplicate_keep", "eval_near_duplicates", "query_terms")
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class WorldSpec:
    """A whole synthetic world: languages and domains."""

    languages: tuple[LanguageSpec, ...]
    domains: tuple[DomainSpec, ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        object.__setattr__(self, "languages", tuple(self.languages))
        object.__setattr__(self, "domains", tuple(self.domains))
        validate_spec(self)

    # ----- identity -------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": self.name, "generator_version": GENERATOR_VERSION,
                "languages": [asdict(x) for x in self.languages],
                "domains": [asdict(d) for d in self.domains]}

    @classmethod
    def from_dict(cls, data: dict) -> WorldSpec:
        try:
            languages = tuple(LanguageSpec(**x) for x in data["languages"])
            domains = tuple(DomainSpec(**d) for d in data["domains"])
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"invalid world spec: {exc}") from None
        return cls(languages, domains, name=data.get("name", "custom"))

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON of the spec and the generator version."""
        canon = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()

    def language(self, code: str) -> LanguageSpec:
        for lang in self.languages:
            if lang.code == code:
                return lang
        raise ConfigError(f"unknown language {code!r}; the spec defines {[x.code for x in self.languages]}")

    def domain(self, name: str) -> DomainSpec:
        for dom in self.domains:
            if dom.name == name:
                return dom
        raise ConfigError(f"unknown domain {name!r}; the spec defines {[d.name for d in self.domains]}")

    def with_domain(self, domain: str, /, **changes) -> WorldSpec:
        """A copy with one domain's fields changed (e.g. ``false_positive_rate=0.3``)."""
        self.domain(domain)
        domains = tuple(replace(d, **changes) if d.name == domain else d for d in self.domains)
        return replace(self, domains=domains, name=f"{self.name}*")

    def without_domains(self, *names: str) -> WorldSpec:
        """A copy without the named domains (e.g. switch the noise domain off)."""
        for n in names:
            self.domain(n)
        return replace(self, domains=tuple(d for d in self.domains if d.name not in names), name=f"{self.name}*")

    # ----- presets --------------------------------------------------------------------
    @classmethod
    def default(cls) -> WorldSpec:
        """The embedded default benchmark: 6 domains in 5 scripts, every planted effect mild.

        * ``latin_qa`` (Latin, easy QA retrieval, 400 rows; 5% false-positive training
          rows, 10% unlabelled relevant documents in the test set);
        * ``latin_synonyms`` (Latin with diacritics; small hard-but-learnable domain,
          300 rows over 4 topics: every query concept is a hidden synonym);
        * ``latin_noisy`` (Latin, the same language as ``latin_qa``; unlearnable:
          every positive is random; 1500 rows, so a tiny run hardly sees one twice);
        * ``cyrillic_news`` (Cyrillic, 300 rows; two-concept queries, every hard
          negative a near duplicate; 10% false negatives among training negatives);
        * ``cjk_qa`` (CJK written without spaces, 300 rows; QA with answers that must
          be matched inside unsegmented text; 5% labelled unrelated test documents);
        * ``thai_sts`` (Thai-like script without spaces, 300 rows; symmetric
          similarity of short sentences).

        Each domain has 1 positive and 3 hard negatives per row, 240-400 documents and
        60-80 test queries.
        """
        return cls(_LANGUAGES, (
            DomainSpec("latin_qa", "xla", task="qa", n_train=400, n_docs=400, n_test_queries=80,
                       false_positive_rate=0.05, eval_false_negative_rate=0.1),
            DomainSpec("latin_synonyms", "xlb", role="hard", n_train=300, n_docs=240, n_test_queries=60,
                       n_topics=4, synonym_rate=1.0),
            DomainSpec("latin_noisy", "xla", role="noise", task="qa", n_train=1500, n_docs=300, n_test_queries=60,
                       label_noise=1.0),
            DomainSpec("cyrillic_news", "xcy", n_train=300, n_docs=300, n_test_queries=60, query_terms=2,
                       near_duplicate_rate=1.0, false_negative_rate=0.1,
                       prompt="Given a headline, retrieve the news article it describes"),
            DomainSpec("cjk_qa", "xzh", task="qa", n_train=300, n_docs=300, n_test_queries=60, doc_words=20,
                       eval_false_positive_rate=0.05),
            DomainSpec("thai_sts", "xth", task="sts", symmetric=True, prompt="Retrieve semantically similar text",
                       n_train=300, n_docs=250, n_test_queries=60, doc_terms=5, doc_words=8, query_terms=3),
        ), name="default")

    @classmethod
    def tdro(cls) -> WorldSpec:
        """Domain-level structure for tDRO, emphasised; no per-row label errors.

        Easy domains that differ in query length (four, three or two concepts) and
        negative hardness (topical vs near-duplicate negatives), one small
        hard-but-learnable domain (``latin_synonyms``, 200 rows), and one large
        noise domain (``latin_noisy``, 2000 rows, random positives): its loss is
        the highest and does not decrease with training, so a ``proxy`` loss
        measurement up-weights it while a ``relative`` one (proxy over reference)
        should not.
        """
        return cls(_LANGUAGES, (
            DomainSpec("latin_qa", "xla", task="qa", n_train=300, n_docs=300, n_test_queries=60, query_terms=4,
                       near_duplicate_rate=0.0),
            DomainSpec("latin_synonyms", "xlb", role="hard", n_train=200, n_docs=200, n_test_queries=50,
                       n_topics=4, synonym_rate=1.0),
            DomainSpec("latin_noisy", "xla", role="noise", task="qa", n_train=2000, n_docs=300, n_test_queries=60,
                       label_noise=1.0),
            DomainSpec("cyrillic_news", "xcy", n_train=300, n_docs=300, n_test_queries=60, query_terms=2,
                       near_duplicate_rate=1.0,
                       prompt="Given a headline, retrieve the news article it describes"),
            DomainSpec("cjk_qa", "xzh", task="qa", n_train=300, n_docs=300, n_test_queries=60, doc_words=20),
            DomainSpec("thai_sts", "xth", task="sts", symmetric=True, prompt="Retrieve semantically similar text",
                       n_train=300, n_docs=250, n_test_queries=60, doc_terms=5, doc_words=8),
        ), name="tdro")

    @classmethod
    def peg(cls) -> WorldSpec:
        """Planted false positives and near-duplicate hard negatives, for PEG.

        Four clean-topic domains, no noise or synonym domain.  In every domain 20%
        of training positives are unrelated passages (``is_false_positive`` in the
        ground truth) and every hard negative is a near duplicate of the positive
        that keeps all but one query concept (so it scores close to the positive);
        10% of rows also carry a relevant passage among their negatives.
        """
        common: dict[str, Any] = {"false_positive_rate": 0.2, "false_negative_rate": 0.1, "near_duplicate_rate": 1.0,
                                  "eval_false_negative_rate": 0.1}
        return cls(_LANGUAGES, (
            DomainSpec("latin_qa", "xla", task="qa", n_train=400, n_docs=300, n_test_queries=60, query_terms=3,
                       near_duplicate_keep=2, **common),
            DomainSpec("cyrillic_news", "xcy", n_train=300, n_docs=300, n_test_queries=60, query_terms=3,
                       near_duplicate_keep=2, prompt="Given a headline, retrieve the news article it describes",
                       **common),
            DomainSpec("cjk_qa", "xzh", task="qa", n_train=300, n_docs=300, n_test_queries=60, doc_words=20,
                       near_duplicate_keep=2, **common),
            DomainSpec("thai_sts", "xth", task="sts", symmetric=True, prompt="Retrieve semantically similar text",
                       n_train=300, n_docs=250, n_test_queries=60, doc_terms=5, doc_words=8, near_duplicate_keep=2,
                       **common),
        ), name="peg")


_LANGUAGES = (
    LanguageSpec("xla", "latin", bm25_language="en"),
    LanguageSpec("xlb", "latin-ext", bm25_language="en"),
    LanguageSpec("xcy", "cyrillic", bm25_language="ru"),
    LanguageSpec("xzh", "cjk", bm25_language="zh"),
    LanguageSpec("xth", "thai", bm25_language="th"),
)

_RATES = ("synonym_rate", "near_duplicate_rate", "label_noise", "false_positive_rate", "false_negative_rate",
          "eval_false_positive_rate", "eval_false_negative_rate")


def validate_spec(spec: WorldSpec) -> None:
    """Raise ConfigError naming the first inconsistent field."""
    codes = [x.code for x in spec.languages]
    if len(set(codes)) != len(codes):
        raise ConfigError(f"duplicate language codes in world spec: {codes}")
    for lang in spec.languages:
        if lang.script not in SCRIPTS:
            raise ConfigError(f"language {lang.code!r}: unknown script {lang.script!r} (choose from {SCRIPTS})")
        for key in ("n_topics", "topic_size", "n_function_words", "n_question_words"):
            if getattr(lang, key) < 1:
                raise ConfigError(f"language {lang.code!r}: {key} must be >= 1")
    names = [d.name for d in spec.domains]
    if not names:
        raise ConfigError("a world needs at least one domain")
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate domain names in world spec: {names}")
    for d in spec.domains:
        _validate_domain(d, spec)


def _validate_domain(d: DomainSpec, spec: WorldSpec) -> None:
    where = f"domain {d.name!r}"
    if not d.name or any(c in d.name for c in "/\\ \t\n") or d.name.startswith("."):
        raise ConfigError(f"{where}: the name must be a plain file name")
    codes = [x.code for x in spec.languages]
    if d.language not in codes:
        raise ConfigError(f"{where}: unknown language {d.language!r} (the spec defines {codes})")
    lang = spec.language(d.language)
    if d.role not in ROLES:
        raise ConfigError(f"{where}: unknown role {d.role!r} (choose from {ROLES})")
    for key in _RATES:
        value = getattr(d, key)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{where}: {key}={value} is not in [0, 1]")
    for key in ("n_train", "n_docs", "n_test_queries", "doc_terms", "query_terms"):
        if getattr(d, key) < 1:
            raise ConfigError(f"{where}: {key} must be >= 1")
    for key in ("n_hard_negatives", "near_duplicate_keep", "eval_near_duplicates"):
        if getattr(d, key) < 0:
            raise ConfigError(f"{where}: {key} must be >= 0")
    if d.query_terms > d.doc_terms:
        raise ConfigError(f"{where}: query_terms ({d.query_terms}) exceeds doc_terms ({d.doc_terms})")
    if d.near_duplicate_keep >= d.query_terms:
        raise ConfigError(f"{where}: near_duplicate_keep ({d.near_duplicate_keep}) must be below query_terms "
                          f"({d.query_terms}), or near duplicates would be relevant")
    topics = lang.n_topics if d.n_topics is None else d.n_topics
    if not 2 <= topics <= lang.n_topics:
        raise ConfigError(f"{where}: n_topics={d.n_topics} must be in [2, {lang.n_topics}] (language {lang.code!r})")
    if lang.topic_size < d.doc_terms + d.query_terms:
        raise ConfigError(f"{where}: topic_size of {lang.code!r} ({lang.topic_size}) must be at least "
                          f"doc_terms + query_terms ({d.doc_terms + d.query_terms}) to build near duplicates")
    if d.doc_words < d.doc_terms + 1:
        raise ConfigError(f"{where}: doc_words ({d.doc_words}) must exceed doc_terms ({d.doc_terms})")
    per_query = 1 + d.eval_near_duplicates + (1 if d.eval_false_negative_rate > 0 else 0)
    if d.n_docs < d.n_test_queries * per_query + 2:
        raise ConfigError(f"{where}: n_docs ({d.n_docs}) is too small for {d.n_test_queries} test queries "
                          f"with {per_query} planted documents each")

