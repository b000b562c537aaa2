"""The LLM false-negative filter (METHODS.md 5.3, paper 004 App. B.2): prompt, judge interface, votes.

A judge sees one (query, positive, candidate) triple and answers 0 (irrelevant), 1 (partly
relevant) or 2 (as good as the positive: a false negative).  Each triple is asked once per
released (top_p, temperature) pair (:data:`SAMPLINGS`); the answers are combined by
:func:`~methods.mining.votes.fn_vote` (failed calls, -1, dropped) and the candidate stays a
negative by :func:`~methods.mining.votes.keeps` (``keep_zero``: the code; ``drop_two``: the paper).

Backends share :class:`Judge`: :class:`StandInJudge` (deterministic, no model: ground truth or a
word-overlap rule; for tests and the tiny scale), ``judge_hf.TransformersJudge`` (a local causal
LM) and ``judge_openai.OpenAIJudge`` (an OpenAI-compatible endpoint).  :func:`judge_triples` asks
a judge through the vote cache (``judge_cache.VoteCache``), so reruns ask nothing.
"""
from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError
from methods.mining.votes import FAILED, fn_vote

if TYPE_CHECKING:   # annotations only
    from methods.mining.judge_cache import VoteCache

# Bump when PROMPT changes: the version is part of every cached vote's key.
PROMPT_VERSION = "004-fn-v1"
# Paper 004's judging prompt (App. B.2 / the released filter): the positive is the reference answer,
# two rubrics scored 0/1/2, one integer back.  The released prompt leaves the combination implicit;
# the last line says it, since small models otherwise answer with two scores.
PROMPT = """# Task
Evaluate a Candidate Answer against a Question and a Standard Answer, using the two criteria below.

# Evaluation criteria
## Information accuracy
Definition: does the Candidate Answer contain factual errors or misleading information? Judge it
against the Question and the Standard Answer (if the Standard Answer is empty, against the Question only).
Scores:
- 0: clear factual errors, or the meaning is significantly misrepresented.
- 1: minor inaccuracies, but the overall meaning is mostly correct.
- 2: entirely accurate, no factual errors.

## Information completeness
Definition: how well does the Candidate Answer address the key aspects of the Question?
Scores:
- 0: major aspects of the Question are not addressed, or key points are missing.
- 1: most key points are addressed; some minor details are missing.
- 2: all major and minor points are fully addressed.

# Input
Question: {query}
Candidate Answer: {candidate}
Standard Answer: {positive}

# Output
Combine both criteria into one final score and answer with that single integer (0, 1 or 2) only."""


@dataclass(frozen=True)
class Sampling:
    top_p: float
    temperature: float


# The released filter's four (top_p, temperature) pairs, asked in this order (the vote's tie order).
SAMPLINGS: tuple[Sampling, ...] = (Sampling(0.7, 0.4), Sampling(0.8, 0.6), Sampling(0.9, 0.8), Sampling(0.8, 0.4))


@dataclass(frozen=True)
class Triple:
    query: str
    positive: str
    candidate: str


@dataclass(frozen=True)
class Reply:
    """One call's outcome: ``label`` 0/1/2, or -1 with the reply text (no label in it) or the error."""

    label: int
    text: str | None = None
    error: str | None = None


_LABEL = re.compile(r"(?<![\w.])([012])(?![\w.])")


def parse_label(text: str | None) -> int:
    """The first standalone 0, 1 or 2 in a reply ("2", "Score: 2", "**1**"), else -1.  A number
    such as 10, 2.5 or 3 is no label; the released code accepted only a bare integer."""
    if not text:
        return FAILED
    m = _LABEL.search(text)
    return int(m.group(1)) if m else FAILED


def format_prompt(triple: Triple) -> str:
    return PROMPT.format(query=triple.query, candidate=triple.candidate, positive=triple.positive)


def vote_seed(seed: int, sampling_index: int, triple: Triple) -> int:
    """A per-call seed from the run seed, the sampling and the texts: a call's answer does not
    depend on which other triples share its batch (a resumed run asks the same as a fresh one)."""
    text = json.dumps([seed, sampling_index, triple.query, triple.positive, triple.candidate])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") >> 1


class Judge(ABC):
    """Labels triples 0/1/2 (-1: failed).  ``identity()`` names everything the answers depend on
    (model fingerprint or endpoint + model, decoding settings); it keys the vote cache."""

    prompt_version: str = PROMPT_VERSION

    @abstractmethod
    def identity(self) -> dict[str, Any]: ...

    @abstractmethod
    def replies(self, triples: Sequence[Triple], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        """One call per triple with this sampling and per-triple seed; never raises for one failed call."""


class PromptJudge(Judge):
    """A judge that answers the prompt in text: subclasses implement :meth:`complete`."""

    @abstractmethod
    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        """Replies with ``text`` set (label still -1) or ``error`` set, one per prompt."""

    def replies(self, triples: Sequence[Triple], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        raw = self.complete([format_prompt(t) for t in triples], sampling, seeds)
        return [r if r.error is not None else Reply(parse_label(r.text), r.text) for r in raw]


def overlap_label(triple: Triple, *, high: float = 0.5, low: float = 0.25) -> int:
    """The stand-in rule: word-set Jaccard of candidate and positive >= ``high`` -> 2, >= ``low`` -> 1, else 0."""
    a, b = set(re.findall(r"\w+", triple.candidate.lower())), set(re.findall(r"\w+", triple.positive.lower()))
    j = len(a & b) / len(a | b) if a | b else 0.0
    return 2 if j >= high else 1 if j >= low else 0


class StandInJudge(Judge):
    """A deterministic judge without a model: ``truth[(query, candidate)]`` where given (the
    synthetic world's planted false negatives), else the word-overlap rule of :func:`overlap_label`.
    Every sampling gets the same answer, so the vote is that answer."""

    prompt_version = "none"

    def __init__(self, truth: Mapping[tuple[str, str], int] | None = None, *, high: float = 0.5, low: float = 0.25,
                 name: str = "overlap"):
        if not 0.0 <= low <= high <= 1.0:
            raise ConfigError(f"stand-in judge needs 0 <= low <= high <= 1, got low={low}, high={high}")
        bad = {v for v in (truth or {}).values() if v not in (0, 1, 2)}
        if bad:
            raise ConfigError(f"stand-in truth labels must be 0, 1 or 2, got {sorted(bad)}")
        self.truth = dict(truth or {})
        self.high, self.low, self.name = high, low, name
        self.calls = 0

    def identity(self) -> dict[str, Any]:
        truth = hashlib.sha256(json.dumps(sorted(self.truth.items())).encode("utf-8")).hexdigest()[:16]
        return {"backend": "stand-in", "name": self.name, "high": self.high, "low": self.low, "truth": truth}

    def replies(self, triples: Sequence[Triple], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        self.calls += len(triples)
        return [Reply(self.truth.get((t.query, t.candidate), overlap_label(t, high=self.high, low=self.low)))
                for t in triples]


class TruthJudge(Judge):
    """An informative stand-in for the tiny scale: it knows a synthetic world's planted false negatives
    (``planted``: the (query, candidate) pairs whose candidate is a twin of the query's positive) and answers
    2 for them and 0 for every other candidate, wrong on a seeded ``error`` share of the triples (a wrong
    answer is 0 for a planted pair and 2 for any other).  Every sampling of a triple gets the same answer,
    so the vote is that answer and the filter's measured precision and recall follow ``error``."""

    prompt_version = "none"

    def __init__(self, planted: Iterable[tuple[str, str]], *, error: float = 0.0, seed: int = 0):
        if not 0.0 <= float(error) <= 1.0:
            raise ConfigError(f"truth judge error must lie in [0, 1], got {error!r}")
        self.planted = frozenset((str(q), str(c)) for q, c in planted)
        self.error, self.seed = float(error), int(seed)
        self.calls = 0

    def identity(self) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps(sorted(self.planted)).encode("utf-8")).hexdigest()[:16]
        return {"backend": "truth", "error": self.error, "seed": self.seed, "planted": digest}

    def answer(self, triple: Triple) -> int:
        planted = (triple.query, triple.candidate) in self.planted
        key = json.dumps([self.seed, triple.query, triple.candidate]).encode("utf-8")
        wrong = int.from_bytes(hashlib.sha256(key).digest()[:8], "little") / 2.0**64 < self.error
        return (0 if planted else 2) if wrong else (2 if planted else 0)

    def replies(self, triples: Sequence[Triple], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        self.calls += len(triples)
        return [Reply(self.answer(t)) for t in triples]


@dataclass
class Verdict:
    votes: list[int]
    label: int                    # fn_vote(votes)


@dataclass
class JudgeStats:
    """What a judging pass cost and what went wrong (for the mining report)."""

    asked: int = 0                # calls made
    cached: int = 0               # votes read from the cache
    failed_calls: int = 0         # transport/API failures (-1, not cached: a rerun asks again)
    unlabelled: int = 0           # replies without a label (-1, cached)
    problems: list[str] = field(default_factory=list)   # the first few messages

    def note(self, message: str, limit: int = 5) -> None:
        if len(self.problems) < limit:
            self.problems.append(message)

    def merge(self, other: JudgeStats) -> None:
        self.asked += other.asked
        self.cached += other.cached
        self.failed_calls += other.failed_calls
        self.unlabelled += other.unlabelled
        for p in other.problems:
            self.note(p)


def _clip(text: str | None, n: int = 120) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= n else text[:n] + "..."


def judge_triples(judge: Judge, triples: Sequence[Triple], *, seed: int = 0,
                  samplings: Sequence[Sampling] = SAMPLINGS, cache: VoteCache | None = None, batch_size: int = 16,
                  on_batch: Callable[[int], None] | None = None) -> tuple[list[Verdict], JudgeStats]:
    """Vote on every triple: one call per sampling, the cache first; returns verdicts in order.

    Identical triples are asked once.  New votes go to ``cache`` as they come (flushed by the
    cache in atomic shards), so a killed pass resumes without asking again.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"judge batch size must be a positive integer, got {batch_size!r}")
    if not samplings:
        raise ConfigError("the judge needs at least one sampling")
    stats = JudgeStats()
    unique = list(dict.fromkeys(triples))
    votes: dict[tuple[Triple, int], int] = {}
    for s_idx, sampling in enumerate(samplings):
        todo = []
        for t in unique:
            hit = cache.get(judge, sampling, seed, t) if cache is not None else None
            if hit is None:
                todo.append(t)
            else:
                votes[(t, s_idx)] = int(hit["label"])
                stats.cached += 1
                if votes[(t, s_idx)] == FAILED:     # a stored reply without a label: reported again
                    stats.unlabelled += 1
                    stats.note(f"judge reply without a label 0/1/2 (recorded as -1): {_clip(hit.get('reply'))!r}")
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            replies = judge.replies(batch, sampling, [vote_seed(seed, s_idx, t) for t in batch])
            if len(replies) != len(batch):
                raise ConfigError(f"judge returned {len(replies)} replies for {len(batch)} triples")
            stats.asked += len(batch)
            for t, r in zip(batch, replies):
                votes[(t, s_idx)] = r.label
                if r.error is not None:
                    stats.failed_calls += 1
                    stats.note(f"judge call failed (vote -1, asked again by a rerun): {_clip(r.error)}")
                    continue
                if r.label == FAILED:
                    stats.unlabelled += 1
                    stats.note(f"judge reply without a label 0/1/2 (recorded as -1): {_clip(r.text)!r}")
                if cache is not None:
                    cache.put(judge, sampling, seed, t, r)
            if on_batch is not None:
                on_batch(len(batch))
    if cache is not None:
        cache.flush()
    verdicts = {}
    for t in unique:
        vs = [votes[(t, i)] for i in range(len(samplings))]
        verdicts[t] = Verdict(vs, fn_vote(vs))
    return [verdicts[t] for t in triples], stats
