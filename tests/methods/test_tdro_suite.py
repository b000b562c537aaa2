"""The ``tdro`` suite file: its cells at every scale, the paper-scale dry run without the user's data,
and the ``{tdro_data}`` placeholder."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.ablation.resolve import require_resolved, resolve_data_entry, substitute, unresolved
from harness.cli import main
from harness.errors import ConfigError

ROWS = ["baseline", "bottom50", "top60", "top70", "top80", "ratio", "loss", "relative", "excess", "proxy"]


def test_table5_rows_and_shared_cells():
    suite = load_suite("tdro")
    assert [v.id for v in suite.variants if v.method != "none"] == ROWS and suite.baseline == "baseline"
    cells = {c.variant.id: c for c in expand_train_cells(suite, "paper", load_data=False) if c.trains}
    assert cells["ratio"].key == cells["relative"].key                 # the paper prints the same row twice
    assert len({c.key for c in cells.values()}) == 9
    opts = {v: cells[v].spec.method_options for v in ROWS[1:]}
    stage1 = {"proxy_model": "Qwen/Qwen1.5-0.5B", "lr_alpha": 0.02, "max_norm": 1.0, "mode": "code", "source": "final",
              "stage1": {"n_hard_negatives": 7, "grad_accum": 4}}
    assert opts["top70"] == {"transfer": "top", "percent": 70, **stage1}
    assert opts["proxy"] == {"transfer": "ratio", "measure": "proxy", **stage1}
    spec = cells["top70"].spec
    assert (spec.model, spec.batch_size, spec.steps, spec.temperature) == ("Qwen/Qwen1.5-0.5B", 2048, 1000, 0.002)
    # the released scripts' full fine-tuning (no --lora) is the default; LoRA is the paper-as-written scale's
    assert (spec.query_max_length, spec.doc_max_length, spec.lora) == (128, 512, None)
    small = {c.variant.id: c for c in expand_train_cells(suite, "small", load_data=False)}
    assert small["top70"].spec.method_options["stage1"]["steps"] == 40
    assert small["baseline"].spec.model == "minilm"


def test_paper_dry_run_prints_the_plan_without_the_data(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_TDRO_DATA", raising=False)
    monkeypatch.delenv("HARNESS_TDRO_EVAL", raising=False)
    assert main(["run", "tdro", "--scale", "paper", "--dry-run", "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "17 training cells x 69 benchmarks" in out and "{tdro_data}" in out     # 10 rows + 7 released
    lines = out.splitlines()
    baseline = next(line for line in lines if line.strip().startswith("baseline "))
    assert "model=Qwen/Qwen1.5-0.5B steps=1000 batch=2048" in baseline and "GPU-h" in baseline
    stage1 = [line for line in lines if "<- stage 1 (tdro-weights" in line and "method=tdro-weights" in line]
    assert len(stage1) == 3                                            # relative, excess, proxy: one run each
    assert all("hard_negatives=7" in line and "grad_accum=4" in line and "sampling=mixed" in line for line in stage1)
    assert sum("<- reference (uniform)" in line and "shared with baseline" in line for line in lines) == 8
    total = float(lines[-1].split("estimated training compute: ")[1].split(" GPU-hours")[0])
    assert 40 < total < 150
    assert not list(tmp_path.iterdir())                                 # a dry run writes nothing


def test_placeholders(monkeypatch, tmp_path):
    monkeypatch.delenv("HARNESS_TDRO_DATA", raising=False)
    entry = resolve_data_entry({"path": "{tdro_data}", "domains": ["miracl"]})
    assert unresolved(entry) == ["tdro_data"]
    with pytest.raises(ConfigError, match="set HARNESS_TDRO_DATA"):
        require_resolved([entry], "training data")
    with pytest.raises(ConfigError, match="HARNESS_TDRO_DATA"):
        expand_train_cells(load_suite("tdro"), "paper")                # a real run needs the data
    monkeypatch.setenv("HARNESS_TDRO_DATA", str(tmp_path))
    assert substitute("{tdro_data}/x and {other_root}") == f"{tmp_path}/x and {{other_root}}"
    assert resolve_data_entry({"path": "{tdro_data}"})["path"] == str(tmp_path)
