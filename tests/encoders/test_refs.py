"""Model references (harness.encoders.refs): defaults read from sentence-transformers files, run workdirs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.encoders import backbone, refs
from harness.encoders.refs import ModelDefaults, resolve_model
from harness.errors import InputError


def _st_folder(root: Path, pooling: dict, max_seq_length: int | None = None, normalize: bool = False) -> Path:
    (root / "1_Pooling").mkdir(parents=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    modules = [{"type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    if max_seq_length is not None:
        (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}),
                                                        encoding="utf-8")
    return root


def test_sentence_transformers_defaults_are_read(tmp_path):
    folder = _st_folder(tmp_path / "st", {"pooling_mode_lasttoken": True}, max_seq_length=128, normalize=True)
    assert resolve_model(str(folder)) == (str(folder), ModelDefaults(pooling="last", normalize=True, max_length=128))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert resolve_model(str(plain)) == (str(plain), ModelDefaults())


def test_a_run_workdir_resolves_to_its_final_model(tmp_path):
    _st_folder(tmp_path / "run" / "final", {"pooling_mode_cls_token": True}, max_seq_length=64)
    (tmp_path / "run" / "done.json").write_text("{}", encoding="utf-8")
    path, defaults = resolve_model(str(tmp_path / "run"))
    assert Path(path) == tmp_path / "run" / "final"
    assert defaults == ModelDefaults(pooling="cls", normalize=False, max_length=64)


@pytest.mark.parametrize("name, text, line", [
    ("1_Pooling/config.json", '{\n  "pooling_mode_mean_tokens": true,\n}', 3),   # trailing comma
    ("sentence_bert_config.json", '{"max_seq_length": 128', 1),
])
def test_a_broken_sentence_transformers_file_names_file_and_line(tmp_path, name, text, line):
    folder = _st_folder(tmp_path / "st", {"pooling_mode_mean_tokens": True}, max_seq_length=128)
    (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        resolve_model(str(folder))
    assert info.value.path == str(folder / name) and info.value.line == line
    assert "malformed JSON" in info.value.problem and "re-save" in info.value.problem


def test_backbone_re_exports_the_references():
    # The trainer imports these names from harness.encoders.backbone.
    assert backbone.resolve_model is refs.resolve_model and backbone.ModelDefaults is refs.ModelDefaults
    assert backbone.ALIASES is refs.ALIASES
