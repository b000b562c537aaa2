"""Generating one domain: documents, queries, training rows, and the planted effects.

Relevance is defined exactly: a query asks for a set of *concepts* (content words of
its target document, possibly written as hidden synonyms), and a document is
relevant if and only if its content words include every concept.  The generator
keeps that definition true for the whole corpus: it picks concept sets that no other
document happens to cover, builds near duplicates that drop some concepts, and
builds unlabelled relevant "twins" (false negatives) that keep all of them.  The
ground truth therefore records the complete set of relevant documents.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from harness.errors import ConfigError
from harness.synthetic.rng import StableRng as Rng
from harness.synthetic.rng import make_rng
from harness.synthetic.spec import DomainSpec
from harness.synthetic.vocab import Language

_WORD_RE = re.compile(r"\w+")


@dataclass
class Doc:
    """A document before rendering: its words in order and what it is about."""

    topic: int
    tokens: list[str]
    sentence_lengths: list[int]
    content: frozenset[str]
    entity: str
    title: str


@dataclass
class DomainData:
    """Everything generated for one domain (see :class:`harness.synthetic.World`)."""

    spec: DomainSpec
    language: Language
    train_rows: list[dict] = field(default_factory=list)
    train_truth: list[dict] = field(default_factory=list)
    corpus: list[tuple[str, str, str]] = field(default_factory=list)   # (id, title, text)
    queries: list[tuple[str, str]] = field(default_factory=list)       # (id, text)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)
    test_truth: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name


class _Factory:
    """Builds documents, near duplicates, twins and queries for one domain."""

    def __init__(self, spec: DomainSpec, lang: Language, rng: Rng):
        self.spec, self.lang, self.rng = spec, lang, rng
        self.n_topics = spec.n_topics or lang.spec.n_topics
        self.entities: set[str] = set()

    def topic_other_than(self, topic: int) -> int:
        other = self.rng.randrange(self.n_topics - 1)
        return other if other < topic else other + 1

    def doc(self, topic: int | None = None, include: tuple[str, ...] = (), entity: str | None = None) -> Doc:
        spec, rng = self.spec, self.rng
        if topic is None:
            topic = rng.randrange(self.n_topics)
        pool = [w for w in self.lang.topics[topic] if w not in include]
        picked = rng.sample(pool, spec.doc_terms - len(include))
        content = list(include) + picked
        entity = entity or self.lang.new_entity(rng, self.entities)
        tokens = content + [entity] + self.lang.sample_function_words(rng, spec.doc_words - spec.doc_terms - 1)
        rng.shuffle(tokens)
        title = "" if spec.symmetric else self.lang.topic_labels[topic]
        return Doc(topic, tokens, self._sentence_lengths(len(tokens)), frozenset(content), entity, title)

    def _sentence_lengths(self, n: int) -> list[int]:
        if self.spec.symmetric:
            return [n]
        lengths = []
        while n > 0:
            size = self.rng.randint(6, 10)
            size = n if n - size < 4 else size
            lengths.append(size)
            n -= size
        return lengths

    def near_duplicate(self, doc: Doc, concepts: list[str]) -> Doc:
        """Same words in the same order, but only ``near_duplicate_keep`` concepts survive."""
        rng = self.rng
        keep = set(rng.sample(concepts, self.spec.near_duplicate_keep))
        drop = [c for c in concepts if c not in keep]
        pool = [w for w in self.lang.topics[doc.topic] if w not in doc.content]
        repl = dict(zip(drop, rng.sample(pool, len(drop))))
        entity = self.lang.new_entity(rng, self.entities)
        tokens = [entity if t == doc.entity else repl.get(t, t) for t in doc.tokens]
        content = (doc.content - set(drop)) | set(repl.values())
        return Doc(doc.topic, tokens, list(doc.sentence_lengths), frozenset(content), entity, doc.title)

    def twin(self, doc: Doc, concepts: list[str]) -> Doc:
        """Another relevant document: all concepts and the same entity (answer), new other words."""
        return self.doc(doc.topic, include=tuple(concepts), entity=doc.entity)

    def render(self, doc: Doc) -> tuple[str, str]:
        sentences, start = [], 0
        for n in doc.sentence_lengths:
            sentences.append(self.lang.sentence(doc.tokens[start:start + n]))
            start += n
        return doc.title, self.lang.script.sentence_sep.join(sentences)

    def passage(self, doc: Doc) -> str:
        """Title and text joined as ``Corpus.passages()`` joins them."""
        title, text = self.render(doc)
        return f"{title} {text}".strip() if title else text

    def query(self, doc: Doc, concepts: list[str]) -> tuple[str, list[str]]:
        """Render a query asking for ``concepts``; returns (text, surface words used)."""
        rng, lang = self.rng, self.lang
        surface = [lang.synonyms[c] if rng.random() < self.spec.synonym_rate else c for c in concepts]
        if self.spec.symmetric:
            # A paraphrase, a little shorter than a document: some of the concepts, one more
            # topic word, function words.
            extra = [w for w in lang.topics[doc.topic] if w not in doc.content]
            words = surface + [rng.choice(extra)]
            words += lang.sample_function_words(rng, max(1, self.spec.doc_words - 2 - len(words)))
            rng.shuffle(words)
            return lang.sentence(words), surface
        words = surface + lang.sample_function_words(rng, rng.randint(1, 2))
        rng.shuffle(words)
        qword = rng.choice(lang.question_words)
        return lang.sentence([qword] + words, question=True), surface

    def random_concepts(self, doc: Doc) -> list[str]:
        content = sorted(doc.content)
        return [content[i] for i in sorted(self.rng.sample(range(len(content)), self.spec.query_terms))]


class _Index:
    """Word -> documents postings, to find every document covering a concept set."""

    def __init__(self) -> None:
        self.docs: list[Doc] = []
        self.postings: dict[str, set[int]] = {}

    def add(self, doc: Doc) -> int:
        i = len(self.docs)
        self.docs.append(doc)
        for w in doc.content:
            self.postings.setdefault(w, set()).add(i)
        return i

    def covering(self, concepts) -> set[int]:
        sets = [self.postings.get(c, set()) for c in concepts]
        return set.intersection(*sets) if sets else set()


def _chosen(rng: Rng, n: int, rate: float) -> set[int]:
    """Exactly ``round(rate * n)`` indices out of ``n`` (planted shares are exact, not Bernoulli)."""
    k = round(rate * n)
    return set(rng.sample(range(n), k))


def _unique_concepts(f: _Factory, index: _Index, doc: Doc) -> list[str] | None:
    """Concepts of ``doc`` (not yet indexed) that no indexed document covers, or None."""
    for _ in range(30):
        concepts = f.random_concepts(doc)
        if not index.covering(concepts):
            return concepts
    for combo in itertools.combinations(sorted(doc.content), f.spec.query_terms):
        if not index.covering(combo):
            return list(combo)
    return None


def _safe_extra(f: _Factory, make, asked: list[list[str]]) -> Doc:
    """Draw a document that does not become relevant to an earlier query by accident."""
    for _ in range(100):
        doc = make()
        if not any(doc.content.issuperset(c) for c in asked):
            return doc
    raise RuntimeError(f"domain {f.spec.name!r}: could not place a planted document; enlarge the topics")


def _new_target(f: _Factory, index: _Index, asked: list[list[str]]) -> tuple[Doc, list[str]]:
    """A fresh document and concepts that identify it among all indexed documents."""
    for _ in range(100):
        doc = _safe_extra(f, f.doc, asked)
        concepts = _unique_concepts(f, index, doc)
        if concepts is not None:
            return doc, concepts
    raise RuntimeError(f"domain {f.spec.name!r}: no concept set identifies a target; "
                       "raise query_terms, doc_terms or topic_size")


def generate_domain(spec: DomainSpec, lang: Language, seed: int) -> DomainData:
    """Generate one domain deterministically from its spec, language and the world seed."""
    rng = make_rng("domain", seed, spec.name)
    data = DomainData(spec, lang)
    _make_test_set(data, _Factory(spec, lang, rng))
    _make_train_rows(data, _Factory(spec, lang, make_rng("train", seed, spec.name)))
    return data


def _make_test_set(data: DomainData, f: _Factory) -> None:
    spec, rng = data.spec, f.rng
    n_q = spec.n_test_queries
    noisy = _chosen(rng, n_q, spec.label_noise)
    clean = [i for i in range(n_q) if i not in noisy]
    with_fn = {clean[i] for i in _chosen(rng, len(clean), spec.eval_false_negative_rate)}
    with_fp = {clean[i] for i in _chosen(rng, len(clean), spec.eval_false_positive_rate)}
    n_planted = len(clean) * (1 + spec.eval_near_duplicates) + len(with_fn)
    if spec.n_docs - n_planted < 1:
        raise ConfigError(f"domain {spec.name!r}: n_docs={spec.n_docs} leaves no room for distractors")

    # Invariant: a query's concepts are covered by no document indexed before it, and no
    # document indexed after it covers them unless planted as relevant (a twin).
    index = _Index()
    for _ in range(spec.n_docs - n_planted):
        index.add(f.doc())
    asked: list[list[str]] = []
    records = []
    for i in range(n_q):
        rec: dict = {"near_duplicates": [], "false_negatives": [], "false_positives": [], "label_noise": i in noisy}
        target, concepts = _new_target(f, index, asked)
        rec["concepts"] = concepts
        rec["text"], rec["surface"] = f.query(target, concepts)
        rec["relevant"] = set()
        if i not in noisy:   # a noisy query's target is a phantom, never indexed
            rec["target"] = index.add(target)
            rec["relevant"].add(rec["target"])
            for _ in range(spec.eval_near_duplicates):
                dup = _safe_extra(f, lambda t=target, c=concepts: f.near_duplicate(t, c), asked)
                rec["near_duplicates"].append(index.add(dup))
            if i in with_fn:
                twin = _safe_extra(f, lambda t=target, c=concepts: f.twin(t, c), asked)
                rec["false_negatives"].append(index.add(twin))
                rec["relevant"].add(rec["false_negatives"][-1])
        asked.append(concepts)
        records.append(rec)

    # Labels: the target, plus an unrelated labelled document for planted false positives;
    # a noisy query's only label is a uniformly random document.
    n_docs = len(index.docs)
    for i, rec in enumerate(records):
        if rec["label_noise"]:   # any document: none covers a phantom's concepts
            rec["labelled"] = [f.rng.randrange(n_docs)]
        else:
            rec["labelled"] = [rec["target"]]
            if i in with_fp:
                fp = _unrelated_doc(f, index, rec["concepts"], index.docs[rec["target"]].topic, n_docs)
                rec["false_positives"].append(fp)
                rec["labelled"].append(fp)
    _fix_entity_collisions(f, index, records)
    _verify_text_relevance(f, index, records)
    _emit_test_set(data, f, index, records)


def _unrelated_doc(f: _Factory, index: _Index, concepts, topic: int, n_docs: int) -> int:
    """A document of another topic sharing no concept with the query."""
    for _ in range(1000):
        j = f.rng.randrange(n_docs)
        doc = index.docs[j]
        if doc.topic != topic and not (doc.content & set(concepts)):
            return j
    raise RuntimeError(f"domain {f.spec.name!r}: no unrelated document found")


def _fix_entity_collisions(f: _Factory, index: _Index, records: list[dict]) -> None:
    """Make each answer string occur only in documents that carry it as their entity.

    In unspaced scripts an entity could also appear across word boundaries of an
    unrelated text; such a (rare) collision is removed by drawing a new entity.
    """
    texts = [f.passage(d).casefold() for d in index.docs]
    owners_of: dict[str, set[int]] = {}
    for j, d in enumerate(index.docs):
        owners_of.setdefault(d.entity, set()).add(j)
    for rec in records:
        holder = rec["labelled"][0] if rec["label_noise"] else rec["target"]
        for _ in range(100):
            entity = index.docs[holder].entity
            needle = entity.casefold()
            if {j for j, t in enumerate(texts) if needle in t} == owners_of[entity]:
                break
            fresh = f.lang.new_entity(f.rng, f.entities)
            owners_of[fresh] = owners_of.pop(entity)
            for j in owners_of[fresh]:
                d = index.docs[j]
                d.tokens = [fresh if t == entity else t for t in d.tokens]
                d.entity = fresh
                texts[j] = f.passage(d).casefold()
        else:
            raise RuntimeError(f"domain {f.spec.name!r}: could not make answer {entity!r} unique")
    for rec in records:   # after all fixes: a document may hold the answer of two queries
        holder = rec["labelled"][0] if rec["label_noise"] else rec["target"]
        rec["answers"] = [index.docs[holder].entity]


def _verify_text_relevance(f: _Factory, index: _Index, records: list[dict]) -> None:
    """Check the relevance definition on the rendered text, not only on word sets.

    In unspaced scripts a concept could also appear across a word boundary; words are
    long enough to make that practically impossible, and this check makes it certain.
    """
    texts = [f.passage(d).casefold() for d in index.docs]
    haystacks = [set(_WORD_RE.findall(t)) for t in texts] if f.lang.script.spaced else texts
    for rec in records:
        concepts = [c.casefold() for c in rec["concepts"]]
        covering = {j for j, h in enumerate(haystacks) if all(c in h for c in concepts)}
        if covering != rec["relevant"]:
            raise RuntimeError(f"domain {f.spec.name!r}: concepts {rec['concepts']} occur in the text of "
                               f"{len(covering - rec['relevant'])} unplanned document(s); use another seed")


def _emit_test_set(data: DomainData, f: _Factory, index: _Index, records: list[dict]) -> None:
    lang = data.language
    order = list(range(len(index.docs)))
    f.rng.shuffle(order)   # so that ids say nothing about roles
    width = max(4, len(str(len(index.docs))))
    doc_id = {j: f"d{k + 1:0{width}d}" for k, j in enumerate(order)}
    for j in order:
        title, text = f.render(index.docs[j])
        data.corpus.append((doc_id[j], title, text))
    data.corpus.sort(key=lambda row: row[0])
    qwidth = max(4, len(str(len(records))))
    for i, rec in enumerate(records):
        qid = f"q{i + 1:0{qwidth}d}"
        data.queries.append((qid, rec["text"]))
        data.qrels[qid] = {doc_id[j]: 1 for j in sorted(rec["labelled"], key=lambda j: doc_id[j])}
        data.answers[qid] = rec["answers"]
        data.test_truth.append({
            "query_id": qid, "domain": data.name, "language": lang.code,
            "label_noise": rec["label_noise"],
            "concepts": rec["concepts"], "query_terms": rec["surface"],
            "target": doc_id[rec["target"]] if "target" in rec else None,
            "relevant": sorted(doc_id[j] for j in rec["relevant"]),
            "labelled": sorted(doc_id[j] for j in rec["labelled"]),
            "false_positives": sorted(doc_id[j] for j in rec["false_positives"]),
            "false_negatives": sorted(doc_id[j] for j in rec["false_negatives"]),
            "near_duplicates": sorted(doc_id[j] for j in rec["near_duplicates"]),
        })


def _make_train_rows(data: DomainData, f: _Factory) -> None:
    spec, rng = data.spec, f.rng
    n = spec.n_train
    noisy = _chosen(rng, n, spec.label_noise)
    clean = [i for i in range(n) if i not in noisy]
    with_fp = {clean[i] for i in _chosen(rng, len(clean), spec.false_positive_rate)}
    with_fn = {clean[i] for i in _chosen(rng, len(clean), spec.false_negative_rate)} if spec.n_hard_negatives else set()
    width = max(5, len(str(n)))
    for i in range(n):
        target = f.doc()
        concepts = f.random_concepts(target)
        text, surface = f.query(target, concepts)
        near_dups: list[int] = []
        false_negs: list[int] = []
        if i in noisy:
            # Positive and negatives are exchangeable random documents: no signal to learn.
            pos, *negs = (_safe_extra(f, f.doc, [concepts]) for _ in range(1 + spec.n_hard_negatives))
        else:
            pos = f.doc(f.topic_other_than(target.topic)) if i in with_fp else target
            negs = []
            for j in range(spec.n_hard_negatives):
                if rng.random() < spec.near_duplicate_rate:
                    negs.append(f.near_duplicate(target, concepts))
                    near_dups.append(j)
                else:
                    negs.append(_safe_extra(f, lambda t=target.topic: f.doc(t), [concepts]))
            if i in with_fn:
                j = rng.randrange(spec.n_hard_negatives)
                negs[j] = f.twin(target, concepts)
                false_negs.append(j)
                near_dups = [k for k in near_dups if k != j]
        row_id = f"{spec.name}-{i + 1:0{width}d}"
        data.train_rows.append({"query": text, "pos": [f.passage(pos)], "neg": [f.passage(d) for d in negs],
                                "id": row_id})
        data.train_truth.append({
            "id": row_id, "row": i, "domain": spec.name, "language": data.language.code,
            "is_false_positive": i in noisy or i in with_fp, "label_noise": i in noisy,
            "false_negative_negs": false_negs, "near_duplicate_negs": near_dups,
            "concepts": concepts, "query_terms": surface,
        })
