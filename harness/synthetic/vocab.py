"""Scripts and pseudo-languages: vocabularies of made-up words in topic clusters.

Each script knows how to build a syllable and how words are joined: Latin and
Cyrillic put spaces between words; CJK and the Thai-like script do not (a Thai
text separates sentences by a space, as Thai does, but never words), so any
tokeniser or answer matcher that splits on spaces fails on them exactly as it
fails on real Chinese or Thai.

A :class:`Language` holds, per topic, a cluster of content words, a label word
per topic (used as document titles), frequent function words (Zipf-weighted),
question words, and a hidden one-to-one synonym for every content word (a word
that only queries use; see ``DomainSpec.synonym_rate``).  Entity names (the
answers) come from :meth:`Language.new_entity`; in CJK they use characters that
no other word uses, so an answer is found only where its entity occurs.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.synthetic.rng import StableRng, make_rng
from harness.synthetic.spec import LanguageSpec

Rng = StableRng


def _pick(rng: Rng, items: str | tuple | list) -> str:
    return items[rng.randrange(len(items))]


# ----- syllable makers ------------------------------------------------------------------
def _alphabetic(onsets: tuple, vowels: tuple, codas: tuple) -> Callable[[Rng], str]:
    def syllable(rng: Rng) -> str:
        return _pick(rng, onsets) + _pick(rng, vowels) + _pick(rng, codas)
    return syllable


_LATIN = _alphabetic(
    ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "kl", "sh"),
    ("a", "e", "i", "o", "u", "ai", "ou"),
    ("", "", "", "n", "r", "s", "l", "m"))
_LATIN_EXT = _alphabetic(
    ("b", "c", "d", "g", "j", "l", "m", "n", "ñ", "p", "r", "s", "t", "v", "ç", "lh", "qu"),
    ("a", "e", "i", "o", "u", "á", "é", "í", "ó", "ú", "ã", "õ", "ü"),
    ("", "", "", "s", "r", "l", "z"))
_CYRILLIC = _alphabetic(
    ("б", "в", "г", "д", "ж", "з", "к", "л", "м", "н", "п", "р", "с", "т", "ф", "х", "ц", "ч", "ш", "ст", "пр"),
    ("а", "е", "и", "о", "у", "ы", "э", "ю", "я"),
    ("", "", "", "н", "р", "с", "й", "л", "к"))

# Thai: consonants (without the obsolete ฃ and ฅ), leading vowels, vowel signs, tone marks.
_THAI_CONSONANTS = tuple(chr(c) for c in range(0x0E01, 0x0E2F) if c not in (0x0E03, 0x0E05))
_THAI_LEADING = ("เ", "แ", "โ", "ไ")
_THAI_MARKS = ("ิ", "ี", "ึ", "ื", "ุ", "ู")
_THAI_FOLLOWING = ("ะ", "า", "ำ")
_THAI_TONES = ("่", "้", "๊", "๋")
_THAI_FINALS = ("น", "ม", "ง", "ก", "ด", "บ", "ย", "ว")


def _thai(rng: Rng) -> str:
    # Orthography roughly as in Thai: a tone mark follows its consonant (or an above/below
    # vowel sign), a following vowel comes after the tone mark, a leading vowel precedes.
    onset = _pick(rng, _THAI_CONSONANTS)
    tone = _pick(rng, _THAI_TONES) if rng.random() < 0.3 else ""
    roll = rng.random()
    if roll < 0.3:
        core = _pick(rng, _THAI_LEADING) + onset + tone
    elif roll < 0.65:
        core = onset + _pick(rng, _THAI_MARKS) + tone
    else:
        core = onset + tone + _pick(rng, _THAI_FOLLOWING)
    if rng.random() < 0.4:
        core += _pick(rng, _THAI_FINALS)
    return core


# CJK: ordinary words draw from one block of unified ideographs; entity names from a
# disjoint block, so an entity never appears inside other text by accident.
_CJK_WORD_CHARS = tuple(chr(c) for c in range(0x4E00, 0x5A00))
_CJK_ENTITY_CHARS = tuple(chr(c) for c in range(0x7000, 0x7400))


@dataclass(frozen=True)
class Script:
    """How a script builds and joins words."""

    name: str
    iso15924: str
    spaced: bool
    syllable: Callable[[Rng], str]
    word_syllables: tuple[int, int]       # inclusive range for content words
    function_syllables: tuple[int, int]
    entity_syllables: tuple[int, int]
    full_stop: str
    question_mark: str
    sentence_sep: str
    capitalize: bool

    def join(self, words: list[str]) -> str:
        return (" " if self.spaced else "").join(words)


def _cjk_syllable(rng: Rng) -> str:
    return _pick(rng, _CJK_WORD_CHARS)


SCRIPT_TABLE: dict[str, Script] = {
    "latin": Script("latin", "Latn", True, _LATIN, (2, 3), (1, 1), (3, 3), ".", "?", " ", True),
    "latin-ext": Script("latin-ext", "Latn", True, _LATIN_EXT, (2, 3), (1, 1), (3, 3), ".", "?", " ", True),
    "cyrillic": Script("cyrillic", "Cyrl", True, _CYRILLIC, (2, 3), (1, 1), (3, 3), ".", "?", " ", True),
    "cjk": Script("cjk", "Hani", False, _cjk_syllable, (2, 3), (1, 1), (3, 3), "。", "？", "", False),
    "thai": Script("thai", "Thai", False, _thai, (2, 3), (1, 1), (3, 3), "", "", " ", False),
}


@dataclass
class Language:
    """A generated pseudo-language (see the module docstring)."""

    spec: LanguageSpec
    script: Script
    topics: list[list[str]]
    topic_labels: list[str]
    function_words: list[str]
    function_cum_weights: list[float]
    question_words: list[str]
    synonyms: dict[str, str]
    taken: frozenset[str] = field(repr=False, default=frozenset())

    @property
    def code(self) -> str:
        return self.spec.code

    def words(self) -> list[str]:
        """Every vocabulary word (content, labels, function, question, synonyms), in a fixed order."""
        out = [w for topic in self.topics for w in topic]
        out += self.topic_labels + self.function_words + self.question_words
        out += [self.synonyms[w] for topic in self.topics for w in topic]
        return out

    def sample_function_words(self, rng: Rng, n: int) -> list[str]:
        return rng.choices(self.function_words, cum_weights=self.function_cum_weights, k=n)

    def new_entity(self, rng: Rng, used: set[str]) -> str:
        """A fresh entity name, distinct from every vocabulary word and from ``used`` (updated)."""
        for _ in range(10_000):
            if self.script.name == "cjk":
                n = rng.randint(*self.script.entity_syllables)
                word = "".join(_pick(rng, _CJK_ENTITY_CHARS) for _ in range(n))
            else:
                word = _make_word(rng, self.script, self.script.entity_syllables)
                if self.script.capitalize:
                    word = word[:1].upper() + word[1:]
            if word not in used and word.lower() not in self.taken:
                used.add(word)
                return word
        raise RuntimeError(f"could not draw a fresh entity name in language {self.code!r}")

    def sentence(self, words: list[str], question: bool = False) -> str:
        """Join words into one sentence with the script's spacing, capitals and end mark."""
        if self.script.capitalize and words:
            words = [words[0][:1].upper() + words[0][1:]] + list(words[1:])
        end = self.script.question_mark if question else self.script.full_stop
        return self.script.join(words) + end


def _make_word(rng: Rng, script: Script, syllables: tuple[int, int]) -> str:
    n = rng.randint(*syllables)
    return "".join(script.syllable(rng) for _ in range(n))


def make_language(spec: LanguageSpec, seed: int) -> Language:
    """Generate a language deterministically from its spec and the world seed."""
    script = SCRIPT_TABLE[spec.script]
    rng = make_rng("language", seed, spec.code, spec.script)
    taken: set[str] = set()

    def fresh(syllables: tuple[int, int]) -> str:
        for _ in range(10_000):
            word = _make_word(rng, script, syllables)
            if word not in taken:
                taken.add(word)
                return word
        raise RuntimeError(f"language {spec.code!r}: vocabulary too large for its syllable inventory")

    function_words = [fresh(script.function_syllables) for _ in range(spec.n_function_words)]
    question_words = [fresh(script.function_syllables) for _ in range(spec.n_question_words)]
    topic_labels = [fresh(script.word_syllables) for _ in range(spec.n_topics)]
    topics = [[fresh(script.word_syllables) for _ in range(spec.topic_size)] for _ in range(spec.n_topics)]
    synonyms = {w: fresh(script.word_syllables) for topic in topics for w in topic}
    # Zipf-like frequencies: a few function words are everywhere, as in real text.
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1.5) for rank in range(len(function_words))))
    return Language(spec, script, topics, topic_labels, function_words, cum_weights, question_words,
                    synonyms, frozenset(w.lower() for w in taken))
