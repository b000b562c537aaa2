"""``mift-alpaca``: Alpaca's summarisation instructions in MIRACL's languages, for MIFT (paper 004 §3.4).

Paper 004 §3.4 fine-tunes the generator LLM on "the summarization-related instructions from the Alpaca dataset
[taori2023stanford]", translated "into each language by Google Translate".  The released code translates with
``Src/LLM_generation/translate.py`` (Google Cloud Translation, model ``nmt``, 15 languages: MIRACL's 16 less
English) into ``alpaca_all.jsonl``, the file LLaMA-Factory trains on (``dataset_info.json``: ``sft``).

**What is public and what is not.**  The English Alpaca data is public (``tatsu-lab/stanford_alpaca``,
``alpaca_data.json``, 52,002 rows, CC BY-NC 4.0; also the hub dataset ``tatsu-lab/alpaca``).  The paper's
translations are *not* released (no ``alpaca_all.jsonl`` in the repository or on the hub), nor is the list of
instructions it counted as summarisation-related.  Producing them needs Google Cloud credentials (run the released
``translate.py``) or another translation.  The nearest public set is MBZUAI/Bactrian-X (Alpaca + Dolly
instructions Google-translated into 51 languages, all 15 of these among them, CC BY-NC 4.0), but its *outputs* are
gpt-3.5-turbo's answers in the target language, not translations of Alpaca's, and its rows do not carry the English
instruction; it is a different training set and this recipe does not substitute it.

So the user places the translations as ``<sources>/alpaca_all.jsonl`` (option ``translations`` names another
file), one JSON object per line, the shape ``translate.py`` writes::

    {"lang": "sw", "instruction": "...", "input": "...", "output": "...",
     "original_instruction": "Summarize ...", "original_input": "...", "original_output": "..."}

``lang``, ``instruction``, ``output`` and ``original_instruction`` are required (``input`` may be empty or
absent); a bad line fails with ``file:line`` and the problem.  The recipe keeps the summarisation instructions
(:func:`is_summarisation` on the English original; the paper gives no list, the stems are ours) and writes
``alpaca_multilingual.jsonl`` (``instruction``, ``input``, ``output``, ``lang``, ``original_instruction``), the
file the mining suite's MIFT rows read (``{mining_data}/alpaca/alpaca_multilingual.jsonl``).  Option ``english``
adds the English originals (from ``alpaca_data.json``, downloaded) as ``lang: en``: the paper's "each language"
may include MIRACL's 16th language, the released file does not.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
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
from suites.groupings import MIRACL_WITH_TRAINING
from suites.training_data._release import miracl_training_languages

_CODE = "xir_BDUMDR Src/LLM_generation/translate.py"
ALPACA_URL = "https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/main/alpaca_data.json"
ALPACA_FILE = "alpaca_data.json"
ALPACA_LICENCE = "Stanford Alpaca data: CC BY-NC 4.0"
TRANSLATED_LANGUAGES = tuple(lang for lang in MIRACL_WITH_TRAINING if lang != "en")   # translate.py's LANGS
OUTPUT_SUBSET = "alpaca_multilingual"
# What makes an Alpaca instruction "summarization-related" (paper 004 §3.4): its English instruction asks for a
# summary.  The paper gives no list; these stems are ours.
SUMMARY_STEMS = ("summar", "summary", "sum up", "tl;dr", "main point", "key point", "in brief", "briefly")
TRANSLATION_NOTE = (
    "paper 004's Google-translated Alpaca is not public: run the released Src/LLM_generation/translate.py "
    "(Google Cloud credentials) on Alpaca's summarisation instructions, or translate them otherwise, and place the "
    "result here as JSON lines {lang, instruction, input, output, original_instruction}")


def is_summarisation(english_instruction: str) -> bool:
    """Whether an (English) Alpaca instruction asks for a summary (:data:`SUMMARY_STEMS`)."""
    text = english_instruction.lower()
    return any(stem in text for stem in SUMMARY_STEMS)


def check_instruction_row(row: Any, path: str | Path, line: int | None, *, translated: bool,
                          languages: tuple[str, ...] | None = None) -> dict[str, Any]:
    """One Alpaca-style row, checked: ``instruction`` and ``output`` strings (the instruction non-empty),
    ``input`` a string where present; a translated row also ``lang`` (one of ``languages`` when given) and a
    non-empty ``original_instruction``.  A bad row raises :class:`InputError` at ``path:line``."""
    if not isinstance(row, Mapping):
        raise InputError(path, f"expected a JSON object, got {type(row).__name__}", line)
    required = ("lang", "instruction", "output", "original_instruction") if translated else ("instruction", "output")
    missing = [f for f in required if f not in row]
    if missing:
        raise InputError(path, f"missing field(s) {', '.join(missing)} (fields found: "
                               f"{', '.join(map(str, row)) or 'none'})", line)
    for name in (*required, "input", "original_input", "original_output"):
        if name in row and row[name] is not None and not isinstance(row[name], str):
            raise InputError(path, f"field {name!r} must be a string, got {type(row[name]).__name__}", line)
    for name in ("instruction", "original_instruction") if translated else ("instruction",):
        if not str(row[name]).strip():
            raise InputError(path, f"field {name!r} is empty", line)
    if translated and languages is not None and row["lang"] not in languages:
        raise InputError(path, f"lang {row['lang']!r} is not one of the languages asked for "
                               f"({', '.join(languages)})", line)
    return dict(row)


def json_array_entries(path: str | Path, text: str) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` of each element of a JSON array (the original ``alpaca_data.json``), the line where the
    element starts; malformed JSON raises :class:`InputError` at its line."""
    decoder = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if not text.startswith("[", pos):
        raise InputError(path, "expected a JSON array of objects", text.count("\n", 0, pos) + 1)
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if text.startswith("]", pos):
            return
        line = text.count("\n", 0, pos) + 1
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON ({exc.msg})", exc.lineno, exc.colno) from None
        yield line, value
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            raise InputError(path, "expected ',' or ']' after an array element", text.count("\n", 0, pos) + 1)


def read_rows(path: str | Path, *, translated: bool | None = None,
              languages: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every row of an Alpaca-style file, checked (:func:`check_instruction_row`): a JSON array (the original
    ``alpaca_data.json``) or JSON lines (``translate.py``'s output).  ``translated=None``: a JSON-lines file's
    rows are translated rows when the first carries ``lang``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"instruction file {p} does not exist (Alpaca's {ALPACA_FILE}, or the translations as the "
                          f"data builder 'mift-alpaca' writes them)")
    text = p.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        entries: list[tuple[int, Any]] = list(json_array_entries(p, text))
    else:
        entries = list(iter_release_jsonl(p, "instruction file"))
    if translated is None:
        translated = bool(entries) and isinstance(entries[0][1], Mapping) and "lang" in entries[0][1]
    return [check_instruction_row(row, p, line, translated=translated, languages=languages)
            for line, row in entries]


@register_recipe("mift-alpaca")
class MiftAlpacaRecipe(DataRecipe):
    """Alpaca's summarisation instructions in MIRACL's languages (the user's translations; see the module)."""

    paper = "004 BDUMDR §3.4 (MIFT: Alpaca's summarisation instructions, Google-translated into each language)"
    description = "Alpaca summarisation instructions per language for the generator's LoRA SFT (translations: user's)"
    options = {
        "languages": RecipeOption(",".join(TRANSLATED_LANGUAGES), "comma-separated languages the translations "
                                  "must cover", _CODE + " LANGS: MIRACL's 16 training languages less en"),
        "translations": RecipeOption("alpaca_all.jsonl", "the translations' file under the sources folder",
                                     _CODE + " OUTPUT_FILE; LLM_generation/dataset_info.json (sft)"),
        "english": RecipeOption(False, "add Alpaca's English summarisation instructions as lang 'en'",
                                _CODE + " translates into 15 languages and LLaMA-Factory trains on that file "
                                "alone; paper 004 §3.4's 'each language' may include en", bool),
    }

    def languages(self, options: dict[str, Any]) -> tuple[str, ...]:
        return miracl_training_languages(options["languages"], "mift-alpaca")

    def check_options(self, options: dict[str, Any]) -> None:
        self.languages(options)
        Source(options["translations"])     # a relative path inside the sources folder

    def sources(self, options: dict[str, Any]) -> list[Source]:
        out = [Source(options["translations"], licence=ALPACA_LICENCE + " (translations: the translator's terms)",
                      note=TRANSLATION_NOTE)]
        if options["english"]:
            out.append(Source(ALPACA_FILE, url=ALPACA_URL, licence=ALPACA_LICENCE))
        return out

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return [OUTPUT_SUBSET]

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        langs = self.languages(ctx.options)
        path = ctx.path(ctx.options["translations"])
        rows = read_rows(path, translated=True, languages=langs)
        absent = [lang for lang in langs if not any(r["lang"] == lang for r in rows)]
        if absent:
            raise InputError(path, f"no rows for language(s) {', '.join(absent)} (option languages asks for "
                                   f"{', '.join(langs)})")
        kept = [r for r in rows if is_summarisation(r["original_instruction"]) and r["output"].strip()]
        if ctx.options["english"]:
            english = read_rows(ctx.path(ALPACA_FILE), translated=False)
            kept += [{**r, "lang": "en", "original_instruction": r["instruction"]} for r in english
                     if is_summarisation(r["instruction"]) and r["output"].strip()]
        per_lang = {lang: 0 for lang in (*langs, *(("en",) if ctx.options["english"] else ()))}
        for r in kept:
            per_lang[r["lang"]] += 1
        stats = {"rows_read": len(rows), "summarisation_rows": per_lang, "stems": list(SUMMARY_STEMS)}

        def out() -> Iterator[dict[str, Any]]:
            for r in kept:
                yield {"instruction": r["instruction"], "input": r.get("input") or "", "output": r["output"],
                       "lang": r["lang"], "original_instruction": r["original_instruction"], "language": r["lang"]}

        return SubsetResult(out(), {"task": "instruction-sft"}, stats)


__all__ = ["ALPACA_FILE", "ALPACA_URL", "OUTPUT_SUBSET", "SUMMARY_STEMS", "TRANSLATED_LANGUAGES", "MiftAlpacaRecipe",
           "check_instruction_row", "is_summarisation", "json_array_entries", "read_rows"]
