"""The suite file's typed schema (harness.ablation.schema): one reader driven by the type hints, every
problem at its file:line with the closest known key, ``table:`` layouts included, and provenance."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import yaml

from harness.ablation.problems import Problems, SuitePlanError
from harness.ablation.schema import SchemaReader, Section, setting
from harness.ablation.spec import load_suite

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"
TABLE = {"default": "main",
         "layouts": {"main": {"caption": "Main", "rows": ["uniform", {"group": "G", "rows": ["hn-only"]}],
                              "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"}]}}}


def _write(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load(MINI.read_text())
    edit(raw)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _line(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def _problems(path: Path) -> list:
    with pytest.raises(SuitePlanError) as info:
        load_suite(path)
    return info.value.problems


def test_table_layouts_are_read_into_typed_objects(tmp_path):
    suite = load_suite(_write(tmp_path, lambda r: r.update(table=TABLE)))
    main = suite.table.layouts["main"]
    assert suite.table.default == "main" and main.kind == "results" and main.caption == "Main"
    assert main.rows[0] == "uniform" and main.rows[1].group == "G" and main.rows[1].rows == ["hn-only"]
    assert (main.columns[0].benchmark, main.columns[0].metric) == ("latin_qa", "ndcg@10")


@pytest.mark.parametrize("layout, where, needle, message", [
    ({"colums": []}, "table.layouts.main", "colums:", "unknown key 'colums' (did you mean 'columns'?)"),
    ({"columns": [{"benchmark": "latin_qa"}]}, "table.layouts.main.columns[0]", "benchmark: latin_qa",
     "a column needs 'benchmark' and 'metric' (missing 'metric')"),
    ({"columns": [{"benchmark": "latin_qa", "metric": "ndcg@10", "lable": "x"}]}, "table.layouts.main.columns[0]",
     "lable:", "unknown key 'lable' (did you mean 'label'?)"),
    ({"rows": [7]}, "table.layouts.main.rows[0]", "- 7", "expected a variant id or {group: ..., rows: [...]}, got 7"),
    ({"decimals": "two"}, "table.layouts.main.decimals", "decimals:", "expected an integer >= 0, got 'two'"),
    ({"scales": {"tiny": {"caption": 3}}}, "table.layouts.main.scales.tiny.caption", "caption: 3",
     "expected a string, got 3"),
])
def test_layout_problems_name_their_line(tmp_path, layout, where, needle, message):
    path = _write(tmp_path, lambda r: r.update(table={"layouts": {"main": layout}}))
    problem = next(p for p in _problems(path) if message in p.message)
    assert ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in problem.keypath).replace(".[", "[") \
        == where
    assert problem.line == _line(path, needle)


def test_default_layout_must_be_declared(tmp_path):
    path = _write(tmp_path, lambda r: r.update(table={**TABLE, "default": "mian"}))
    (problem,) = _problems(path)
    assert "default layout 'mian' is not declared (did you mean 'main'?)" in problem.message
    assert problem.line == _line(path, "default: mian")


def test_stats_choices_suggest_the_closest(tmp_path):
    path = _write(tmp_path, lambda r: r["stats"].update(correction="holms"))
    (problem,) = _problems(path)
    assert problem.message.startswith("correction 'holms' is not supported (did you mean 'holm'?); supported:")


def test_every_value_keeps_its_source(tmp_path):
    path = _write(tmp_path, lambda r: None)
    suite = load_suite(path)
    line = _line(path, "in_batch_negatives")
    assert suite.source(("variants", 1, "train", "in_batch_negatives")) == f"suite.yaml:{line}"
    assert suite.source(("scales", "tiny", "model")) == f"suite.yaml:{_line(path, 'tiny-bert')}"
    assert suite.source(("variants", 0, "options", "nothing")) is None


# ------------------------------------------------------------------------------------------ the generic reader
@dataclass
class Inner(Section):
    MISSING: ClassVar[str] = "inner needs {key!r}"

    size: int = setting(required=True, minimum=1)


@dataclass
class Outer(Section):
    name: str = setting(required=True, names=True, component="thing name")
    mode: Literal["fast", "slow"] = setting("fast")
    ratio: float | None = setting(open_range=(0, 1), what="a ratio in (0, 1)")
    flag: bool = setting(False)
    tags: list[str] = setting(factory=list)
    parts: dict[str, Inner] = setting(factory=dict, key_component="part name")
    one: Inner | None = setting()
    either: list[str | Inner] = setting(factory=list, non_empty=False)
    free: Any = setting()


def _read(value: Any) -> tuple[Any, list[str]]:
    problems = Problems()
    out = SchemaReader(problems).section(Outer, value, ())
    return out, [str(p) for p in problems.items]


def test_reader_builds_nested_sections_by_type_hints():
    out, problems = _read({"name": 12, "mode": "slow", "ratio": 0.5, "flag": True, "tags": ["a"],
                           "parts": {"p": {"size": 2}}, "one": {"size": 3}, "either": ["x", {"size": 4}],
                           "free": [1, {"a": None}]})
    assert problems == []
    assert (out.name, out.mode, out.ratio, out.flag, out.tags) == ("12", "slow", 0.5, True, ["a"])
    assert out.parts["p"].size == 2 and out.one.size == 3 and out.either[0] == "x" and out.either[1].size == 4
    assert out.free == [1, {"a": None}]
    assert {"name", "mode", "ratio", "flag", "tags", "parts", "one", "either", "free"} == set(out._given)


def test_reader_reports_every_problem_with_its_path():
    _out, problems = _read({"mode": "fsat", "ratio": 1.5, "flag": "yes", "tags": [], "parts": {"a/b": {}},
                            "one": {"sise": 2}, "either": [3], "extra": 1})
    assert "missing 'name'" in problems
    assert "mode: mode 'fsat' is not supported (did you mean 'fast'?); supported: fast, slow" in problems
    assert "ratio: expected a ratio in (0, 1), got 1.5 (float)" in problems
    assert "flag: expected true or false, got 'yes' (str)" in problems
    assert "tags: expected a non-empty list, got [] (list)" in problems
    assert any(p.startswith("parts.a/b: ") and "part name" in p for p in problems)
    assert "parts.a/b: inner needs 'size'" in problems
    assert "one: unknown key 'sise' (did you mean 'size'?)" in problems and "one: inner needs 'size'" in problems
    assert "either[0]: expected a string or a mapping, got 3 (int)" in problems
    assert "unknown top-level key 'extra'; known keys here: name, mode, ratio, flag, tags, parts, one, either, free" \
        in problems


def test_null_is_absent_and_a_non_mapping_is_refused():
    out, problems = _read({"name": "n", "mode": None, "one": None})
    assert problems == [] and out.mode == "fast" and out.one is None
    out, problems = _read(["not", "a", "mapping"])
    assert out is None and problems == ["expected a mapping, got ['not', 'a', 'mapping'] (list)"]
