"""Suite-file evaluation settings (``encoding``, ``sparse_backend``, ``quantization`` at scale or variant
level): validated by the engine's own checks with file and line, recorded in the card (scale level) or the
cell's key and manifest (variant level), applied to the evaluated model; absent, keys stay as they were."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from optional_extras import require_extra

from harness.ablation.runner import SuiteRun
from harness.ablation.validate import load_validated
from harness.errors import ConfigError

HERE = Path(__file__).resolve().parent
MINI = yaml.safe_load((HERE / "fixtures" / "mini.yaml").read_text())


def _write(tmp_path: Path, raw: dict, name: str = "evalkeys.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _mini(**scale_keys) -> dict:
    raw = json.loads(json.dumps(MINI))
    raw["scales"]["tiny"].update(scale_keys)
    return raw


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def test_bad_values_are_refused_with_file_and_line(tmp_path):
    require_extra("seismic")        # 'seismic:bogus=1' is refused for its option only when seismic is installed
    raw = _mini(encoding={"dtype": "fp8", "shard_size": 100}, quantization="bmp")
    raw["variants"][1]["sparse_backend"] = "seismic:bogus=1"
    raw["variants"][0]["encoding"] = {"batch_size": 0}
    raw["variants"][0]["scales"] = {"tiny": {"sparse_backend": "seismik"}}
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as exc:
        load_validated(path, "tiny")
    text = str(exc.value)
    assert text.startswith(f"{path}: 5 problems in the suite (nothing was run)")
    for needle, message in [("dtype: fp8", "dtype must be one of fp32, bf16, fp16, got 'fp8'"),
                            ("quantization: bmp", "unknown impact quantisation 'bmp'"),
                            ("seismic:bogus=1", "bogus"),
                            ("batch_size: 0", "batch_size must be a positive integer, got 0"),
                            ("sparse_backend: seismik", "unknown sparse retrieval backend 'seismik'")]:
        line = _line(path, needle)
        assert any(f"line {line}, column " in row and message in row for row in text.splitlines()), (needle, text)
    raw = _mini(encoding={"dtype": "bf16", "precision": "x"})
    with pytest.raises(ConfigError, match=r"unknown encoding option\(s\) precision; allowed: batch_size, dtype"):
        load_validated(_write(tmp_path, raw, "b.yaml"), "tiny")


def _keys(path: Path, tmp_path: Path) -> tuple[SuiteRun, dict[str, str]]:
    runner = SuiteRun(load_validated(path, "tiny"), "tiny", tmp_path / "r", progress=False)
    return runner, {f"{c.id} x {c.benchmark.id}": c.key for c in runner.eval_cells}


def test_defaults_keep_keys_and_settings_change_only_what_they_should(tmp_path):
    plain, plain_keys = _keys(_write(tmp_path, _mini(), "plain.yaml"), tmp_path)
    # a shard or batch size changes no number: same cards, same keys
    same, same_keys = _keys(_write(tmp_path, _mini(encoding={"shard_size": 1000, "batch_size": 8}), "s.yaml"),
                            tmp_path)
    assert same_keys == plain_keys and [c.key for c in same.train_cells] == [c.key for c in plain.train_cells]
    assert same.train_cells[0].evaluation == {"encoding": {"shard_size": 1000, "batch_size": 8}}
    # bf16 for every variant: in the protocol card (so every eval key), not in the training keys
    bf16, bf16_keys = _keys(_write(tmp_path, _mini(encoding={"dtype": "bf16"}), "bf16.yaml"), tmp_path)
    assert [c.key for c in bf16.train_cells] == [c.key for c in plain.train_cells]
    assert set(bf16_keys.values()).isdisjoint(plain_keys.values())
    assert dict(bf16.benchmark("latin_qa").card.extra)["encoder_dtype"] == "bfloat16"
    assert "encoder_dtype" not in dict(plain.benchmark("latin_qa").card.extra)
    # int8 for one variant: its eval keys change, the other's and the cards do not
    raw = _mini()
    raw["variants"][1]["encoding"] = {"backend": "int8"}
    raw["variants"][1]["scales"] = {"tiny": {"encoding": {"shard_size": 500}}}
    one, one_keys = _keys(_write(tmp_path, raw, "one.yaml"), tmp_path)
    for name, key in one_keys.items():
        assert (key == plain_keys[name]) == name.startswith("uniform ")
    assert one.train_cells[1].variant_evaluation == {"encoding": {"backend": "int8", "shard_size": 500}}
    assert one.benchmark("latin_qa").card.fingerprint() == plain.benchmark("latin_qa").card.fingerprint()
    # a sparse backend at scale level: in the card, with lucene-impact's quantisation
    lucene, _ = _keys(_write(tmp_path, _mini(sparse_backend="lucene-impact", quantization="splade"), "l.yaml"),
                      tmp_path)
    extra = dict(lucene.benchmark("latin_qa").card.extra)
    assert extra["sparse_backend"] == "lucene-impact" and extra["impact_quantization"] == "splade"


def test_quickstart_keys_are_unchanged_by_the_new_keys(capsys):
    """The shipped quickstart sets none of the keys: its plan lists the keys it always had.

    The trained variants' keys moved once, when the model fingerprint stopped counting the transformers
    version written into config.json (INCIDENTAL_JSON_FIELDS); they are the same under transformers
    5.23.0 and 5.24.0 (measured), and must stay so under the lock and the newest release."""
    from harness.cli import main

    assert main(["run", "quickstart", "--dry-run", "--format", "json", "--results-root", "unused"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {c["variant"]: c["key"] for c in plan["cells"]} == {
        "uniform": "8a48b5cd3f1b7b76", "hn-only": "e28663ee6eed9fa8", "bm25": "5d2846e538bf91f6"}


@pytest.mark.slow
def test_a_variant_encoded_in_bf16_is_evaluated_in_bf16(tmp_path):
    """GPU path on CPU: bf16 encoding of an untrained dense variant, recorded in its manifest."""
    raw = _mini()
    raw["variants"] = [{"id": "fp32", "method": "none"},
                       {"id": "bf16", "method": "none", "encoding": {"dtype": "bf16", "batch_size": 16}}]
    raw["baseline"] = "fp32"
    raw["scales"]["tiny"]["benchmarks"] = raw["scales"]["tiny"]["benchmarks"][1:]     # cjk_qa, 100 docs
    runner = SuiteRun(load_validated(_write(tmp_path, raw), "tiny"), "tiny", tmp_path / "r",
                      cache_dir=tmp_path / "cache", progress=False)
    manifests = {}
    for cell in runner.eval_cells:
        out = runner.evaluate(cell)
        manifests[cell.id] = json.loads((out / "manifest.json").read_text())
    assert manifests["bf16"]["cell"]["evaluation"] == {"encoding": {"dtype": "bf16", "batch_size": 16}}
    assert manifests["bf16"]["cell"]["variant_evaluation"] == manifests["bf16"]["cell"]["evaluation"]
    assert "evaluation" not in manifests["fp32"]["cell"]
    text = json.dumps(manifests["bf16"]["encoder"])
    assert "bfloat16" in text and "bfloat16" not in json.dumps(manifests["fp32"]["encoder"])
    outcome = runner.report()
    assert outcome.complete        # the two are comparable: the dtype is the variant's, not the protocol's
    from harness.ablation.html_report import _run_file

    linked = outcome.report_dir / "results" / "bf16" / "cjk_qa"
    run, source = _run_file(tmp_path / "r", linked, "synthetic")     # the report finds the cell's run file
    assert run is not None and source == str(runner.eval_dir(next(c for c in runner.eval_cells if c.id == "bf16")))
