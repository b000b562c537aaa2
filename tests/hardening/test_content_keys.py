"""Run keys depend on content, not on where a model lies: also for models named inside method options
(tDRO's reference spec, proxy and reference models), while the loadable spec keeps its paths."""
from __future__ import annotations

import shutil

from trainutil import make_tiny_bert

from harness.train.spec import TrainSpec


def test_nested_model_paths_become_content_digests(tmp_path):
    first = make_tiny_bert(tmp_path / "a", hidden=32)
    moved = tmp_path / "elsewhere" / "b"
    shutil.copytree(first, moved)

    def spec(model):
        reference = TrainSpec(model=str(model), steps=4, warmup_steps=0).config_dict()
        return TrainSpec(model=str(model), steps=4, warmup_steps=0,
                         method_options={"reference": reference, "proxy_model": str(model), "mode": "code"})

    a, b = spec(first), spec(moved)
    assert a.fingerprint() == b.fingerprint()                       # same bytes, different folders
    keyed = a.result_dict()
    assert keyed["model"].startswith("local:")
    assert keyed["method_options"]["reference"]["model"] == keyed["model"]
    assert keyed["method_options"]["proxy_model"] == keyed["model"] and keyed["method_options"]["mode"] == "code"
    # what a method hands on stays loadable: the real path, not the digest
    assert a.method_options["reference"]["model"] == str(first)
    assert TrainSpec.from_dict(a.method_options["reference"]).model == str(first)
    # names are not resolved (keys must not depend on the installation)
    assert TrainSpec(model="minilm", steps=4, warmup_steps=0).result_dict()["model"] == "minilm"
