"""The paper-table schema and engine on small hand-made tables: parsing, derived values,
the verify rule with hand-computed tolerances, and clear errors (file:line: problem)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.errors import InputError
from reports.papers import load_table_spec, parse_printed, to_table, verify
from reports.papers.schema import PaperSpec

PAPER = PaperSpec("900", "toy", "A toy paper", "toy.txt", Path("."))


def _load(tmp_path: Path, body: str, number: int = 1):
    """Write HEAD + the (dedented) body as table<number>.yaml and load it."""
    path = tmp_path / f"table{number}.yaml"
    path.write_text(HEAD + textwrap.dedent(body), encoding="utf-8")
    return load_table_spec(path, PAPER)


HEAD = """\
schema: 1
table: 1
caption: Toy.
"""


@pytest.mark.parametrize(
    ("text", "kind", "value", "decimals", "marks", "delta"),
    [
        ("48.7* (+2.9)", "number", 48.7, 1, ("*",), 2.9),
        ("45.2-2.3", "number", 45.2, 1, (), -2.3),
        ("47.5-0.0", "number", 47.5, 1, (), -0.0),
        ("+2.6", "number", 2.6, 1, (), None),
        ("0.559†‡", "number", 0.559, 3, ("†", "‡"), None),
        ("34.60", "number", 34.6, 2, (), None),
        ("52", "number", 52.0, 0, (), None),
        ("?", "gap", None, None, (), None),
        ("一", "dash", None, None, (), None),
        ("-", "dash", None, None, (), None),
        ("110M", "text", None, None, (), None),
        ("66M*18", "text", None, None, (), None),
        ("Sparse", "text", None, None, (), None),
    ],
)
def test_parse_printed(text, kind, value, decimals, marks, delta):
    cell = parse_printed(text, ("*", "†", "‡"))
    assert (cell.kind, cell.value, cell.decimals, cell.marks, cell.delta) == (kind, value, decimals, marks, delta)


def test_derived_values_and_the_verify_rule(tmp_path):
    spec = _load(tmp_path, """\
        columns:
          - {key: a, label: A}
          - {key: b, label: B}
          - {key: total, label: Sum, derive: {op: sum, of: [a, b]}}
        rows:
          - {id: base, label: Base, kind: baseline, cells: ["1.0", "1.25", "2.3"]}
          - {id: x, label: X, delta_vs: base, cells: ["2.0 (+1.0)", "2.50 (+1.3)", "4.5"]}
          - {id: y, label: Y, delta_vs: base, cells: ["3.0 (+2.2)", "-", "?"]}
          - {id: avg, label: Mean, kind: average, derive: {op: mean, of: [base, x, y]}, cells: ["2.2", "?", "-"]}
          - {id: avg2, label: Mean2, kind: average, derive: {op: mean, of: [base, x, y], skip_missing: true},
             cells: ["2.0", "1.875", "3.4"]}
          - {id: gain, label: Gain, kind: gain, derive: {op: mean, use: delta, of: [x, y]}, cells: ["+1.5", "?", "?"]}
          - {id: d, label: Diff, derive: {op: diff, of: [x, base]}, cells: ["1.0", "1.25", "2.2"]}
        """)
    found = {(f.row, f.column, f.part): f for f in verify(spec)}
    assert sorted((key, f.kind) for key, f in found.items()) == [
        (("avg", "a", "value"), "mismatch"),     # (1 + 2 + 3) / 3 = 2.0, printed 2.2
        (("avg", "b", "value"), "gap"),          # printed "?" and y/b is a dash (no skip_missing)
        (("d", "total", "value"), "rounding"),   # 4.5 - 2.25 = 2.25 exactly, renders 2.3 (half up), printed 2.2
        (("gain", "b", "value"), "gap"),
        (("gain", "total", "value"), "gap"),
        (("y", "a", "delta"), "mismatch"),       # 3.0 - 1.0 = 2.0, printed +2.2
        (("y", "total", "value"), "gap"),        # printed "?"; not recomputable: y/b is a dash
    ]
    # Base/total 1.0 + 1.25 = 2.25 printed 2.3 and X/b delta 2.50 - 1.25 = 1.25 printed +1.3 are
    # within half a unit of the printed digit: no finding.
    # Check the numbers one by one (hand-computed).
    f = found[("y", "a", "delta")]
    assert (f.kind, f.recomputed, f.printed) == ("mismatch", pytest.approx(2.0), "+2.2")
    assert f.difference == pytest.approx(-0.2) and f.tolerance == pytest.approx(0.05 + 0.1 + 1e-9)
    f = found[("avg", "a", "value")]
    assert (f.kind, f.recomputed, f.difference) == ("mismatch", pytest.approx(2.0), pytest.approx(-0.2))
    assert f.tolerance == pytest.approx(0.05 + 0.05 + 1e-9)    # printed 1 decimal + mean of 1-decimal inputs
    assert found[("avg", "b", "value")].kind == "gap"
    assert found[("y", "total", "value")].kind == "gap"
    assert "not recomputable" in found[("y", "total", "value")].message
    # skip_missing: b over (1.25, 2.50) = 1.875 printed 1.875: exact; total over (2.25, 4.5) = 3.375
    # printed 3.4: |diff| 0.025 <= 0.05 strict: fine.  a over (1, 2, 3) = 2.0 printed 2.0.
    assert ("avg2", "b", "value") not in found and ("avg2", "total", "value") not in found
    assert ("avg2", "a", "value") not in found
    # gain = mean of recomputed deltas (1.0, 2.0) = 1.5 printed +1.5: no finding; its b/total are "?" gaps
    assert ("gain", "a", "value") not in found
    assert found[("gain", "b", "value")].kind == "gap" and found[("gain", "total", "value")].kind == "gap"
    # diff row: x - base: a 1.0, b 1.25, total (row rule wins) 4.5 - 2.25 = 2.25 printed 2.2: within half a
    # unit, but it renders 2.3 (half up on the exact decimal), so it is reported (and footnoted) as rounding
    assert ("d", "a", "value") not in found
    assert found[("d", "total", "value")].kind == "rounding" and "renders 2.3" in found[("d", "total", "value")].message
    # the base-value gap of y/total is reported once (as a derived gap), the dash is not a finding
    assert not any(f.column == "b" and f.row == "y" for f in found.values())


def test_rounding_kind_is_within_input_rounding_only(tmp_path):
    spec = _load(tmp_path, """\
        columns:
          - {key: a, label: A}
          - {key: b, label: B}
          - {key: m, label: Mean, derive: {op: mean, of: [a, b]}}
        rows:
          - {label: R1, cells: ["1.2", "1.3", "1.30"]}
          - {label: R2, cells: ["1.2", "1.3", "1.29"]}
          - {label: R3, cells: ["1.2", "1.3", "1.36"]}
        """)
    # recomputed 1.25 for every row; printed with 2 decimals: strict bound 0.005; the 1-decimal
    # inputs add their mean half-unit 0.05, so anything up to 0.055 is "rounding"
    kinds = [(f.row, f.kind, round(f.difference, 4)) for f in verify(spec)]
    assert kinds == [("R1", "rounding", -0.05), ("R2", "rounding", -0.04), ("R3", "mismatch", -0.11)]


def test_verify_decimals_raises_the_printed_precision(tmp_path):
    body = """\
        {extra}
        columns:
          - {{key: a, label: A}}
          - {{key: b, label: B}}
          - {{key: m, label: Mean, derive: {{op: mean, of: [a, b]}}}}
        rows:
          - {{label: R, cells: ["10.2", "10.4", "10"]}}
        """
    loose = _load(tmp_path, body.format(extra=""))
    assert verify(loose) == []                                   # 10.3 vs "10": within 0.5 + 0.05
    strict = _load(tmp_path, body.format(extra="verify_decimals: 2"))
    (finding,) = verify(strict)
    assert finding.kind == "mismatch" and finding.tolerance == pytest.approx(0.005 + 0.005 + 1e-9)


def test_regenerated_table_from_toy_spec(tmp_path):
    spec = _load(tmp_path, """\
        legend: {"*": significant}
        columns:
          - {key: a, label: A, group: G}
        rows:
          - {id: base, label: Base, kind: baseline, cells: ["40.0"]}
          - {id: x, label: X, delta_vs: base, group: Ours, cells: ["41.5* (+1.7)"]}
        """)
    table = to_table(spec)
    x = table.rows[1].cells["a"]
    assert (x.value, x.delta, x.marks, x.decimals, x.note) == (41.5, pytest.approx(1.5), ("*",), 1,
                                                               "printed delta +1.7")
    assert table.scale == 1.0 and table.label == "tab:toy-table1" and table.legend == {"*": "significant"}


@pytest.mark.parametrize(
    ("body", "line", "problem"),
    [
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1', '2']}\n", 7, "row 'R' has 2 cells for 1 columns"),
        ("columns:\n  - {key: a, colour: red}\nrows: []\n", 5, "unknown field 'colour' in a column"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1.0*']}\n", 7, "marker '*' in '1.0*' is not declared"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1.0 (+0.5)']}\n", 7, "prints a delta but the row"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, delta_vs: Q, cells: ['1.0']}\n", 7, "delta_vs 'Q' is not"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1']}\n  - {label: R, cells: ['2']}\n", 8,
         "duplicate row id 'R'"),
        ("columns:\n  - {key: a}\n  - {key: a}\nrows: []\n", 6, "duplicate column key 'a'"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, kind: best, cells: ['1']}\n", 7, "row kind must be one of"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: [null]}\n", 7, "write every cell as printed text"),
        ("columns:\n  - {key: a, derive: {op: median, of: [b]}}\nrows: []\n", 5, "derive.op must be one of"),
        ("columns:\n  - {key: a}\n  - {key: b, derive: {op: diff, of: [a]}}\nrows: []\n", 6, "exactly 2 operands"),
        ("columns:\n  - {key: a, derive: {op: mean, of: [zz]}}\nrows:\n  - {label: R, cells: ['1']}\n", 5,
         "derive.of names 'zz'"),
        ("columns:\n  - {key: a}\n  - {key: t, derive: {op: mean, of: [a]}}\n"
         "rows:\n  - {label: R, cells: ['1', 'x']}\n",
         8, "derived cell 'x' must be a number"),
        ("columns:\n  - {key: a\nrows: []\n", 6, "YAML syntax error"),
        ("decimals: two\ncolumns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1']}\n", 4,
         "'decimals' must be an integer"),
        ("columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1']}\nrows: []\n", 8, "duplicate key 'rows'"),
    ],
)
def test_schema_errors_name_file_line_and_problem(tmp_path, body, line, problem):
    with pytest.raises(InputError) as info:
        _load(tmp_path, body)
    assert info.value.line == line, str(info.value)
    assert problem in info.value.problem
    assert str(info.value).startswith(f"{tmp_path / 'table1.yaml'}:{line}: ")


def test_table_number_must_match_the_file_name(tmp_path):
    with pytest.raises(InputError, match="table 1 must live in table1.yaml"):
        _load(tmp_path, "columns:\n  - {key: a}\nrows:\n  - {label: R, cells: ['1']}\n", number=2)


def test_cycles_are_reported(tmp_path):
    spec = _load(tmp_path, """\
        columns:
          - {key: a, label: A, derive: {op: mean, of: [b]}}
          - {key: b, label: B, derive: {op: mean, of: [a]}}
        rows:
          - {label: R, cells: ["1", "1"]}
        """)
    with pytest.raises(InputError, match="derived cells form a cycle"):
        verify(spec)
