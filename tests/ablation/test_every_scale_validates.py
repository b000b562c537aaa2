"""Every shipped suite runs at its default scale, and every layout check passes at every declared scale.

A layout whose columns exist only at paper scale (a paper's table over its real benchmarks) must not stop the
suite from running at the tiny default: coco_dr's paper-only layouts once refused `harness run coco_dr`.
(The full plan check at every paper scale takes minutes; the strict-provenance dry runs cover those.)
"""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.ablation.layout import load_layout
from harness.ablation.spec import load_suite
from harness.ablation.validate import Problems, _layouts, validate_plan
from harness.errors import ConfigError

SUITES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "suites" / "ablations").glob("*.yaml"))


@pytest.mark.parametrize("name", SUITES)
def test_default_scale_passes_the_plan_check(name: str) -> None:
    suite = load_suite(name)
    scale = "tiny" if "tiny" in suite.scales else next(iter(suite.scales))
    validate_plan(suite, scale, check_resources=False, build_specs=False)


@pytest.mark.parametrize("name", SUITES)
def test_layouts_pass_at_every_scale(name: str) -> None:
    suite = load_suite(name)
    for scale in suite.scales:
        problems = Problems(suite.path, suite.lines, suite.columns)
        _layouts(suite, scale, problems)
        problems.raise_if_any()


def test_paper_only_layout_is_refused_by_name_at_tiny() -> None:
    """Left out of the plan check, but asking for it at a scale without columns still says why."""
    with pytest.raises(ConfigError, match="has no columns at scale 'tiny'"):
        load_layout(load_suite("coco_dr"), "tiny", "table1")


SMOKE_SUITES = [name for name in SUITES if "smoke" in load_suite(name).scales]


@pytest.mark.parametrize("name", SMOKE_SUITES)
def test_smoke_scale_passes_the_plan_check_offline(name: str) -> None:
    """A smoke scale runs the paper recipe on stand-ins with no hub: every paper model a smoke cell or stage would
    load has a stand-in (coco_dr's ance-bert row once named bert-base-uncased without one)."""
    validate_plan(load_suite(name), "smoke", check_resources=True, build_specs=True)
