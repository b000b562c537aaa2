"""Layout kinds are plug-ins: a suite file names one with ``kind:`` and configures it with ``options:``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.ablation.layout import LAYOUT_KINDS, LayoutKind, TableLayout, load_layout, render_layout
from harness.ablation.spec import parse_suite
from harness.errors import ConfigError

MINI = Path(__file__).parent / "fixtures" / "mini.yaml"


class CountVariants(LayoutKind):
    """A test kind: one row per column variant, its option ``scale_by`` times the row index."""

    columns = "variant"

    def check(self, layout: TableLayout, suite: Any, scale: str) -> None:
        unknown = set(layout.options) - {"scale_by"}
        if unknown:
            raise ConfigError(f"layout {layout.name!r}: unknown option(s) {', '.join(sorted(unknown))}")

    def render(self, suite: Any, scale: str, results_root: Any, layout: TableLayout) -> Any:
        factor = layout.options.get("scale_by", 1)
        return [(c.benchmark, i * factor) for i, c in enumerate(layout.columns)]


def _suite(layout: dict) -> Any:
    raw = yaml.safe_load(MINI.read_text(encoding="utf-8"))
    raw["table"] = {"layouts": {"counts": layout}}
    return parse_suite(raw, MINI)


def test_a_kind_named_by_reference_reads_its_options_and_per_scale_overrides():
    suite = _suite({"kind": f"{__name__}:CountVariants", "columns": ["uniform", "hn-only"],
                    "options": {"scale_by": 2}, "scales": {"tiny": {"options": {"scale_by": 10}}}})
    layout = load_layout(suite, "tiny")
    assert layout.options == {"scale_by": 10}
    assert render_layout(suite, "tiny", "unused") == [("uniform", 0), ("hn-only", 10)]


def test_a_kind_refuses_options_it_does_not_know():
    suite = _suite({"kind": f"{__name__}:CountVariants", "columns": ["uniform"], "options": {"colour": "red"}})
    with pytest.raises(ConfigError, match="unknown option.*colour"):
        load_layout(suite, "tiny")


def test_builtin_kinds_take_no_options_and_unknown_kinds_name_the_known_ones():
    with pytest.raises(ConfigError, match="takes no options"):
        load_layout(_suite({"kind": "weights", "columns": ["uniform"], "options": {"x": 1}}), "tiny")
    with pytest.raises(ConfigError, match="unknown table layout kind 'weight'; did you mean 'weights'"):
        load_layout(_suite({"kind": "weight", "columns": ["uniform"]}), "tiny")
    assert {"results", "weights"} <= set(LAYOUT_KINDS.names())
