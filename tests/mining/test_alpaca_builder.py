"""The 'mift-alpaca' data builder (paper 004 §3.4: Alpaca's summarisation instructions in 15 languages, the
translations the user's file in translate.py's format): what it keeps, and bad input failing at file:line with the
problem; the MIFT reader (methods.mining.mift) reads its output and names bad lines the same way."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.data.builders import build, get_recipe
from harness.errors import ConfigError, InputError
from methods.mining.mift import read_instruction_rows, summarisation_examples
from suites.training_data.alpaca import TRANSLATED_LANGUAGES, json_array_entries

ENGLISH = [
    {"instruction": "Summarize the following article.", "input": "A long text.", "output": "A summary."},
    {"instruction": "Name three colours.", "input": "", "output": "Red, green, blue."},
    {"instruction": "Give the main points of this speech.", "input": "Speech.", "output": "Points."},
]


def translated(lang: str, row: dict, n: int) -> dict:
    """One row as translate.py writes it (the 'translation' marks the language and the row)."""
    return {"lang": lang, "instruction": f"[{lang}] {row['instruction']}", "input": f"[{lang}] {row['input']}",
            "output": f"[{lang}] {row['output']}", "original_instruction": row["instruction"],
            "original_input": row["input"], "original_output": row["output"], "id": n}


def write_sources(root: Path, languages=TRANSLATED_LANGUAGES, *, bad_line: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(translated(lang, row, n), ensure_ascii=False) for lang in languages
             for n, row in enumerate(ENGLISH)]
    if bad_line is not None:
        lines.insert(4, bad_line)          # line 5 of the file
    (root / "alpaca_all.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "alpaca_data.json").write_text(json.dumps(ENGLISH, indent=4), encoding="utf-8")
    return root


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_builder_keeps_the_summarisation_rows_of_every_language(tmp_path: Path) -> None:
    src = write_sources(tmp_path / "src")
    report = build(get_recipe("mift-alpaca"), tmp_path / "out", src, offline=True)
    rows = read_jsonl(tmp_path / "out" / "alpaca_multilingual.jsonl")
    # 15 languages x the two summarisation rows (summarize, main points); the colours row is dropped
    assert len(rows) == 30 and {r["lang"] for r in rows} == set(TRANSLATED_LANGUAGES)
    assert "en" not in TRANSLATED_LANGUAGES
    assert {r["original_instruction"] for r in rows} == {ENGLISH[0]["instruction"], ENGLISH[2]["instruction"]}
    sw = [r for r in rows if r["lang"] == "sw"]
    assert sw[0] == {"instruction": "[sw] Summarize the following article.", "input": "[sw] A long text.",
                     "output": "[sw] A summary.", "lang": "sw", "original_instruction": ENGLISH[0]["instruction"],
                     "language": "sw"}
    stats = report.manifest["subsets"]["alpaca_multilingual"]["stats"]
    assert stats["rows_read"] == 45 and stats["summarisation_rows"] == {lang: 2 for lang in TRANSLATED_LANGUAGES}
    # the MIFT stage reads the output as it is (every row is a summarisation example)
    examples = summarisation_examples(read_instruction_rows(tmp_path / "out" / "alpaca_multilingual.jsonl"))
    assert len(examples) == 30 and examples[0]["instruction"] == rows[0]["instruction"]


def test_builder_english_option_adds_the_originals(tmp_path: Path) -> None:
    src = write_sources(tmp_path / "src", languages=("sw", "te"))
    build(get_recipe("mift-alpaca"), tmp_path / "out", src, {"languages": "sw,te", "english": "true"}, offline=True)
    rows = read_jsonl(tmp_path / "out" / "alpaca_multilingual.jsonl")
    assert [r["lang"] for r in rows] == ["sw", "sw", "te", "te", "en", "en"]
    assert rows[-1]["instruction"] == rows[-1]["original_instruction"] == ENGLISH[2]["instruction"]


@pytest.mark.parametrize(("bad", "problem"), [
    ('{"lang": "sw", "instruction": "x", "output": "y"', "malformed JSON"),
    ('{"lang": "sw", "instruction": "x", "output": "y"}', "missing field(s) original_instruction"),
    ('{"lang": "de", "instruction": "x", "output": "y", "original_instruction": "Summarize"}', "lang 'de'"),
    ('{"lang": "sw", "instruction": "", "output": "y", "original_instruction": "Summarize"}',
     "field 'instruction' is empty"),
    ('{"lang": "sw", "instruction": "x", "output": 3, "original_instruction": "Summarize"}',
     "field 'output' must be a string"),
    ('["sw", "x"]', "expected a JSON object"),
])
def test_bad_translation_line_fails_naming_file_line_and_problem(tmp_path: Path, bad: str, problem: str) -> None:
    src = write_sources(tmp_path / "src", bad_line=bad)
    with pytest.raises(InputError) as err:
        build(get_recipe("mift-alpaca"), tmp_path / "out", src, offline=True)
    assert err.value.path == str(src / "alpaca_all.jsonl") and err.value.line == 5
    assert problem in err.value.problem and not (tmp_path / "out").exists()
    if problem.startswith("lang"):
        return          # the language list is the builder's option; the MIFT reader takes any language
    # the MIFT reader names the same line
    with pytest.raises(InputError) as again:
        read_instruction_rows(src / "alpaca_all.jsonl")
    assert again.value.line == 5 and problem in again.value.problem


def test_a_language_missing_from_the_translations_is_named(tmp_path: Path) -> None:
    src = write_sources(tmp_path / "src", languages=("sw",))
    with pytest.raises(InputError, match="no rows for language.s. te"):
        build(get_recipe("mift-alpaca"), tmp_path / "out", src, {"languages": "sw,te"}, offline=True)


def test_missing_translations_offline_say_they_are_not_public(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(Exception, match="not public") as err:
        build(get_recipe("mift-alpaca"), tmp_path / "out", tmp_path / "src", offline=True)
    assert "alpaca_all.jsonl" in str(err.value)


def test_unknown_language_option_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a MIRACL language with a training split: de"):
        get_recipe("mift-alpaca").parse_options({"languages": "sw,de"})


def test_english_json_array_entries_carry_their_lines(tmp_path: Path) -> None:
    text = json.dumps(ENGLISH, indent=4)
    lines = [line for line, _ in json_array_entries("a.json", text)]
    assert lines == [2, 7, 12]      # each element's opening brace (indent=4: 5 lines per row)
    broken = text.replace('"Name three colours."', '"Name three colours.",,', 1)
    with pytest.raises(ConfigError, match="does not exist"):
        read_instruction_rows(tmp_path / "none.json")
    (tmp_path / "a.json").write_text(broken, encoding="utf-8")
    with pytest.raises(InputError) as bad:
        read_instruction_rows(tmp_path / "a.json")
    assert bad.value.line == 8 and "malformed JSON" in bad.value.problem


@pytest.mark.parametrize("recipe", ["mift-alpaca", "mining"])
@pytest.mark.parametrize("value,named", [("de", "de"), ("sw, yo ,te", "yo"), (" , ", "(none given)")])
def test_both_miracl_recipes_check_their_languages_alike(recipe, value, named):
    """One rule for the two recipes' ``languages`` option: MIRACL's 16 languages with a training split."""
    from suites.training_data._release import miracl_training_languages

    with pytest.raises(ConfigError, match=rf"^{recipe}: not a MIRACL language with a training split: "
                                          rf"{named.replace('(', '[(]').replace(')', '[)]')};"):
        get_recipe(recipe).parse_options({"languages": value})
    assert miracl_training_languages(" sw,te ", recipe) == ("sw", "te")
