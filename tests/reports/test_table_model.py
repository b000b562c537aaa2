"""The table model: rounding, deltas, best/second marking, layout decisions, validation."""
from __future__ import annotations

import pytest

from reports.table import (
    BodyRow,
    Cell,
    Column,
    GroupHeader,
    Row,
    Rule,
    Table,
    emphasis,
    format_delta,
    format_number,
    layout,
)


@pytest.mark.parametrize(
    ("value", "scale", "decimals", "expected"),
    [
        (0.487, 100, 1, "48.7"),
        (0.0285, 100, 1, "2.9"),      # binary 2.8499999... would round down
        (2.675, 1, 2, "2.68"),        # binary 2.67499999...; half-even on floats gives 2.67
        (0.125, 1, 2, "0.13"),        # exact tie: half away from zero (half-even would give 0.12)
        (-0.125, 1, 2, "-0.13"),
        (0.135, 1, 2, "0.14"),
        (48.65, 1, 1, "48.7"),
        (48.75, 1, 1, "48.8"),
        (-0.0004, 100, 1, "-0.0"),    # the sign follows the unrounded value
        (0.0, 100, 1, "0.0"),
        (-0.0, 1, 1, "0.0"),
        (3.92574, 1, 4, "3.9257"),
        (52, 1, 0, "52"),
        (0.5, 1, 0, "1"),
        (float("nan"), 100, 1, "NaN"),
    ],
)
def test_format_number_rounds_half_away_from_zero(value, scale, decimals, expected):
    assert format_number(value, scale, decimals) == expected


@pytest.mark.parametrize(
    ("delta", "expected"),
    [(0.029, "+2.9"), (-0.023, "-2.3"), (0.0, "+0.0"), (-0.0004, "-0.0"), (0.00049, "+0.0"), (0.0005, "+0.1"),
     (-0.0005, "-0.1"), (-0.012, "-1.2")],
)
def test_format_delta_signs(delta, expected):
    assert format_delta(delta, 100, 1) == expected


def _table(**kwargs) -> Table:
    cols = [Column("a", "A"), Column("lat", "Latency", higher_is_better=False)]
    rows = [
        Row("base", {"a": Cell(0.450), "lat": Cell(0.30)}, kind="baseline"),
        Row("x", {"a": Cell(0.4871), "lat": Cell(0.20)}),
        Row("y", {"a": Cell(0.4869), "lat": Cell(0.20)}),       # ties x at one decimal: both bold
        Row("z", {"a": Cell(0.47), "lat": Cell(0.25)}),
        Row("s", {"a": Cell("n/a"), "lat": Cell(None)}),
        Row("avg", {"a": Cell(0.99), "lat": Cell(0.01)}, kind="average"),   # never ranked
    ]
    return Table(columns=cols, rows=rows, **kwargs)


def test_bold_best_ties_and_direction():
    flags = emphasis(_table())
    bold = sorted((i, k) for (i, k), (b, _) in flags.items() if b)
    # column a: 48.7 shown for rows 1 and 2; latency (lower is better): 20.0 for rows 1 and 2
    assert bold == [(1, "a"), (1, "lat"), (2, "a"), (2, "lat")]
    assert not any(u for _, u in flags.values())


def test_underline_second_respects_direction_and_ties():
    flags = emphasis(_table(underline_second=True))
    underlined = sorted((i, k) for (i, k), (_, u) in flags.items() if u)
    # a: second distinct shown value is 47.0 (row z); latency: 25.0 (row z)
    assert underlined == [(3, "a"), (3, "lat")]


def test_average_and_gain_rows_are_never_marked_best():
    flags = emphasis(_table())
    assert (5, "a") not in flags and (5, "lat") not in flags


def test_explicit_bold_kept_and_marking_can_be_off():
    table = _table(bold_best=False)
    table.rows[3].cells["a"].bold = True
    flags = emphasis(table)
    assert flags == {(3, "a"): (True, False)}


def test_single_candidate_column_is_not_marked():
    table = Table(columns=[Column("a", "A")], rows=[Row("x", {"a": Cell(0.5)}), Row("y", {"a": Cell("text")})])
    assert emphasis(table) == {}


def test_ties_compare_displayed_values_with_cell_decimals():
    # 65.6 printed with one decimal and 65.60 with two are the same displayed number.
    table = Table(columns=[Column("a", "A")], scale=1.0, decimals=2,
                  rows=[Row("x", {"a": Cell(65.6, decimals=1)}), Row("y", {"a": Cell(65.60)}),
                        Row("z", {"a": Cell(1.0)})])
    flags = emphasis(table)
    assert flags == {(0, "a"): (True, False), (1, "a"): (True, False)}


def test_layout_rules_group_headers_and_gain_rows():
    cols = [Column("m", "nDCG@10", group="MIRACL"), Column("r", "R@100", group="MIRACL"),
            Column("b", "nDCG@10", group="BeIR")]
    rows = [
        Row("Qwen", {"m": Cell(0.458), "r": Cell(0.805), "b": Cell(0.475)}, group="Baselines", kind="baseline"),
        Row("Qwen", {"m": Cell(0.487, delta=0.029)}, group="Top-70%"),
        Row("Avg Gains", {"m": Cell(0.029)}, group="Top-70%", kind="gain"),
        Row("Plain", {"m": Cell(0.1)}),
    ]
    lay = layout(Table(columns=cols, rows=rows))
    shape = [type(item).__name__ if not isinstance(item, (GroupHeader, BodyRow)) else
             (f"G:{item.name}" if isinstance(item, GroupHeader) else f"R:{item.label}") for item in lay.body]
    assert shape == ["G:Baselines", "R:Qwen", "Rule", "G:Top-70%", "R:Qwen", "Rule", "R:Avg Gains", "Rule", "R:Plain"]
    assert [(s.group, s.start, s.span) for s in lay.spans] == [("MIRACL", 0, 2), ("BeIR", 2, 1)]
    rows_out = [item for item in lay.body if isinstance(item, BodyRow)]
    assert rows_out[1].cells[0].text == "48.7" and rows_out[1].cells[0].delta == "+2.9"
    assert rows_out[2].cells[0].text == "+2.9"             # gain rows carry a sign
    assert rows_out[1].cells[1].text == "–"                # missing cell
    assert isinstance(lay.body[2], Rule)


def test_cell_notes_are_numbered_in_reading_order():
    cols = [Column("a", "A", group="G"), Column("b", "B")]
    rows = [Row("r1", {"a": Cell(0.1, note="printed 10.2"), "b": Cell(0.2)}),
            Row("r2", {"b": Cell(0.3, note="printed 30.1")}, group="grp")]
    lay = layout(Table(columns=cols, rows=rows))
    assert lay.cell_notes == (("1", "r1, G A: printed 10.2"), ("2", "grp / r2, B: printed 30.1"))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.columns.append(Column("a", "dup")), "duplicate column keys: a"),
        (lambda t: t.rows[0].cells.update(zz=Cell(1.0)), "unknown columns zz"),
        (lambda t: setattr(t.rows[0], "kind", "best"), "kind must be one of"),
        (lambda t: t.rows[0].cells.update(a=Cell(0.1, marks=("†",))), "marker '†' is not explained"),
        (lambda t: t.rows[0].cells.update(a=Cell([1, 2])), "value must be a number"),
    ],
)
def test_validation_errors(mutate, message):
    table = Table(columns=[Column("a", "A")], rows=[Row("r", {"a": Cell(0.1)})])
    mutate(table)
    with pytest.raises(ValueError, match=message):
        layout(table)


def test_empty_group_name_is_no_group():
    rows = [Row("a", {"m": Cell(0.1)}, group=""), Row("b", {"m": Cell(0.2)}, group=None)]
    lay = layout(Table(columns=[Column("m", "M")], rows=rows))
    assert [type(item).__name__ for item in lay.body] == ["BodyRow", "BodyRow"]
