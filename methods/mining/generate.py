"""LLM hard-negative generation (METHODS.md 5.4, paper 004): fill under-full pools.

For a query whose pool holds fewer than ``k`` negatives after selection (and the false-negative
filter), an instruction model summarises the query's reference positive in one or two
sentences, then writes a concise search query from that summary; the ensemble retrieves for the
generated query and its top candidates are appended -- not a positive (by id or text), not already
in the pool, not a candidate the judge already voted out -- until the pool holds ``k``.  The same
false-negative filter judges the additions (the paper is silent; METHODS.md's choice).  Every
added negative keeps ``"origin": "generated"`` and the generated query in the provenance.

Generators share the judges' text interface (``complete(prompts, sampling, seeds)``): the
deterministic :class:`StandInGenerator` (tests, tiny scale), a transformers causal LM or an
OpenAI-compatible endpoint (:func:`make_generator`).  Every generated text is cached by the
generator's identity, the prompt version, the step, the sampling, the seed and the input text
(:class:`TextCache`), so a rerun or a resumed run asks nothing and gets identical texts.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.errors import ConfigError
from harness.io import atomic_write, atomic_write_json
from harness.keys import content_key
from methods.mining.judge import Reply, Sampling, Triple, vote_seed
from methods.mining.judge_hf import TransformersJudge
from methods.mining.judge_spec import make_judge

GENERATION_VERSION = "004-gen-v1"
# Paper 004's released generation scripts sample with temperature 0.7, top_p 0.9.
GENERATION_SAMPLING = Sampling(top_p=0.9, temperature=0.7)
SUMMARY_PROMPT = ("Summarise the following passage in one or two sentences, in the language of the passage. "
                  "Answer with the summary only.\n\nPassage: {text}")
QUERY_PROMPT = ("Write one concise search query that the following summary answers, in the language of the "
                "summary. Answer with the query only.\n\nSummary: {text}")
STEPS = {"summary": SUMMARY_PROMPT, "query": QUERY_PROMPT}


class TextGenerator(Protocol):
    """What generation needs of a backend (the judges' :class:`~methods.mining.judge.PromptJudge` has it)."""

    def identity(self) -> dict[str, Any]: ...

    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]: ...


_WORD = re.compile(r"\w+")


class StandInGenerator:
    """A deterministic generator without a model: the summary is the passage's first ``summary_words``
    words, the query the summary's first ``query_words`` words.  For tests and the tiny scale."""

    def __init__(self, summary_words: int = 12, query_words: int = 6):
        if summary_words < 1 or query_words < 1:
            raise ConfigError("stand-in generator: summary_words and query_words must be >= 1")
        self.summary_words, self.query_words = summary_words, query_words
        self.calls = 0

    def identity(self) -> dict[str, Any]:
        return {"backend": "stand-in", "summary_words": self.summary_words, "query_words": self.query_words}

    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        self.calls += len(prompts)
        out = []
        for p in prompts:
            step = next((s for s, template in STEPS.items() if p.startswith(template.split("{text}")[0])), None)
            if step is None:
                raise ConfigError("stand-in generator: not a generation prompt")
            text = p[len(STEPS[step].split("{text}")[0]):]
            n = self.query_words if step == "query" else self.summary_words
            out.append(Reply(-1, " ".join(_WORD.findall(text)[:n])))
        return out


def make_generator(spec: str, *, max_new_tokens: int = 256, batch_size: int = 8, **options: Any) -> TextGenerator:
    """The generator a spec names: ``stand-in``, ``transformers:<model>`` (a folder, a ``.gguf`` file,
    a hub id or ``smollm2``), ``openai:<base url>#<model>`` or ``vllm:<model>``."""
    spec = (spec or "").strip()
    if spec == "stand-in":
        return StandInGenerator()
    kind, _, rest = spec.partition(":")
    if kind == "transformers" and rest:
        return TransformersJudge(rest, max_new_tokens=max_new_tokens, batch_size=batch_size, stop_on_label=False)
    if kind in ("openai", "vllm") and rest:
        judge = make_judge(spec, max_tokens=max_new_tokens, max_new_tokens=max_new_tokens, **options)
        assert judge is not None
        return judge     # type: ignore[return-value]  # a PromptJudge: complete() and identity()
    raise ConfigError(f"unknown generator {spec!r}; expected stand-in | transformers:<model> | "
                      "openai:<base url>#<model> | vllm:<model>")


class TextCache:
    """Generated texts under ``<root>/generated/<generator key>/``, in append-only atomic JSONL shards
    (as :class:`~methods.mining.judge_cache.VoteCache`).  Failed calls are not stored."""

    def __init__(self, root: str | Path):
        self.root = Path(root) / "generated"
        self._texts: dict[str, dict[str, str]] = {}
        self._pending: dict[str, list[dict[str, str]]] = {}

    @staticmethod
    def generator_key(gen: TextGenerator) -> str:
        return content_key({"format": 1, "generator": gen.identity(), "prompt": GENERATION_VERSION})

    @staticmethod
    def text_key(step: str, sampling: Sampling, seed: int, text: str) -> str:
        raw = json.dumps([step, sampling.top_p, sampling.temperature, seed, text], ensure_ascii=False)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def _folder(self, gen: TextGenerator) -> str:
        gk = self.generator_key(gen)
        if gk not in self._texts:
            texts: dict[str, str] = {}
            folder = self.root / gk
            for shard in sorted(folder.glob("texts-*.jsonl")) if folder.is_dir() else []:
                for line in shard.read_text(encoding="utf-8").splitlines():
                    rec = json.loads(line)
                    texts.setdefault(rec["key"], rec["text"])
            self._texts[gk] = texts
            if not (folder / "generator.json").is_file():
                atomic_write_json(folder / "generator.json", {"generator": gen.identity(),
                                                              "prompt_version": GENERATION_VERSION})
        return gk

    def get(self, gen: TextGenerator, key: str) -> str | None:
        return self._texts[self._folder(gen)].get(key)

    def put(self, gen: TextGenerator, key: str, text: str) -> None:
        gk = self._folder(gen)
        if key not in self._texts[gk]:
            self._texts[gk][key] = text
            self._pending.setdefault(gk, []).append({"key": key, "text": text})

    def flush(self) -> None:
        for gk, pending in self._pending.items():
            if pending:
                with atomic_write(self.root / gk / f"texts-{os.getpid()}-{uuid.uuid4().hex[:12]}.jsonl") as fh:
                    for rec in pending:
                        fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                pending.clear()


@dataclass
class GenerationStats:
    asked: int = 0
    cached: int = 0
    failed: int = 0
    problems: list[str] = field(default_factory=list)


def generate_texts(gen: TextGenerator, step: str, inputs: Sequence[str], *, seed: int = 0,
                   cache: TextCache | None = None, batch_size: int = 8,
                   sampling: Sampling = GENERATION_SAMPLING, stats: GenerationStats | None = None) -> list[str | None]:
    """One generated text per input for ``step`` (``summary`` or ``query``); None where the call failed
    or the model answered nothing.  Cached texts are read first; identical inputs are asked once."""
    if step not in STEPS:
        raise ConfigError(f"unknown generation step {step!r}")
    stats = stats if stats is not None else GenerationStats()
    # The per-call seed uses the judge's derivation, keyed by step and input text.
    seeds = {t: vote_seed(seed, 0, _as_triple(step, t)) for t in inputs}
    out: dict[str, str | None] = {}
    todo = []
    for t in dict.fromkeys(inputs):
        key = TextCache.text_key(step, sampling, seed, t)
        hit = cache.get(gen, key) if cache is not None else None
        if hit is None:
            todo.append(t)
        else:
            out[t] = hit or None
            stats.cached += 1
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        replies = gen.complete([STEPS[step].format(text=t) for t in batch], sampling, [seeds[t] for t in batch])
        if len(replies) != len(batch):
            raise ConfigError(f"generator returned {len(replies)} texts for {len(batch)} prompts")
        stats.asked += len(batch)
        for t, r in zip(batch, replies):
            if r.error is not None:
                stats.failed += 1
                if len(stats.problems) < 5:
                    stats.problems.append(f"generation call failed: {r.error[:120]}")
                out[t] = None
                continue
            text = _clean(r.text)
            out[t] = text or None
            if cache is not None:
                cache.put(gen, TextCache.text_key(step, sampling, seed, t), text)
    if cache is not None:
        cache.flush()
    return [out[t] for t in inputs]


def _as_triple(step: str, text: str):
    return Triple(step, text, "")


def _clean(text: str | None) -> str:
    """The model's answer on one line, without a leading label such as ``Query:`` or quotes."""
    text = " ".join((text or "").split())
    text = re.sub(r"^(summary|query|search query)\s*:\s*", "", text, flags=re.IGNORECASE)
    return text.strip().strip('"').strip()


__all__ = ["GENERATION_SAMPLING", "GENERATION_VERSION", "GenerationStats", "StandInGenerator", "TextCache",
           "TextGenerator", "generate_texts", "make_generator"]
