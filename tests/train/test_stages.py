"""Stages as data (harness.method.stages): declared by methods, flattened once for every reader, run by the engine."""
from __future__ import annotations

import json

import pytest
from trainutil import make_data

from harness.method import Method, get_method
from harness.method.stages import build_data_stage, flatten_stages, is_built, stage_key
from harness.train.stages import DataStage, Stage


def test_no_method_overrides_train():
    with pytest.raises(TypeError, match="overrides Method.train; declare stages"):
        class Orchestrating(Method):          # noqa: F841 - the class statement itself is refused
            def train(self, spec, data, workdir):
                return None
    from harness.method import METHODS

    assert all("train" not in vars(cls) for cls in (METHODS.get(n) for n in METHODS.names()))


def test_tdro_plan_is_reference_then_stage1():
    tdro = get_method("tdro")
    spec = tdro.spec("tiny")
    plan = flatten_stages(tdro, spec, "data-fp")
    assert [(p.owner, p.stage.name, p.stage.method) for p in plan] == [
        ("tdro-weights", "reference", "uniform"), ("tdro", "stage1", "tdro-weights")]
    reference, stage1 = plan
    assert stage1.needs == (reference.key,) and reference.needs == ()
    # a training stage is keyed like a suite cell of the same run, so an identical baseline cell is shared
    assert reference.key == Method.run_key("uniform", reference.stage.spec, type("D", (), {
        "fingerprint": staticmethod(lambda: "data-fp")})())
    given = tdro.spec("tiny", method_options={"weights": {"a": 1.0}})
    assert flatten_stages(tdro, given, "data-fp") == []                 # given weights: no stage 1


class Building(Method):
    """Declares one data stage and counts its builds."""

    name = "building"
    builds = 0

    def stages(self, spec):
        return [DataStage("pool", "a pool", {"depth": 3})]

    def build_stage(self, stage, spec, data, root):
        type(self).builds += 1
        (root / "pool.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / "pool.txt").write_text(str(stage.config["depth"]))


def test_data_stage_is_built_once_and_recorded(tmp_path):
    owner, data = Building(), make_data(n_sources=2, rows=4)
    stage = owner.stages(None)[0]
    cells = tmp_path / "cells" / "train"
    assert not is_built(owner, stage, data.fingerprint(), cells)
    for _ in range(2):
        result = build_data_stage(owner, stage, None, data, cells)
    assert Building.builds == 1 and result.path == tmp_path / "cells" / "pool"
    record = json.loads((result.path / f"{stage_key(owner, stage, data.fingerprint())}.stage.json").read_text())
    assert record["config"] == {"depth": 3} and is_built(owner, stage, data.fingerprint(), cells)
    other = DataStage("pool", "a pool", {"depth": 4})
    assert stage_key(owner, other, data.fingerprint()) != stage_key(owner, stage, data.fingerprint())
    with pytest.raises(TypeError, match="data stage"):
        _ = result.model


def test_stage_is_a_value():
    spec = get_method("uniform").spec("tiny")
    a, b = Stage("ref", "reference", "uniform", spec), Stage("ref", "reference", "uniform", spec)
    assert a == b and a.kind == "train" and DataStage("x", "y").kind == "data"
