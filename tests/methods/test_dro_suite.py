"""The ``coco_dr`` suite file (paper 001's ablation rows): its cells, the shared COCO dependency, the
paper-scale dry runs with GPU-hour estimates, and bad ``coco`` options."""
from __future__ import annotations

import pytest

from harness.ablation import load_suite
from harness.ablation.cells import expand_train_cells
from harness.cli import main
from harness.errors import ConfigError
from harness.keys import content_key, train_run_config
from harness.method import get_method

ROWS = ["baseline", "coco", "idro", "coco-idro", "coco-groupdro", "coco-greedy", "coco-idro-paper"]
COCO_ROWS = [r for r in ROWS if r.startswith("coco")]


@pytest.mark.parametrize("scale", ["tiny", "small", "paper", "paper-large"])
def test_rows_cells_and_one_shared_coco_run(scale):
    suite = load_suite("coco_dr")
    assert [v.id for v in suite.variants] == ROWS and suite.baseline == "baseline"
    cells = {c.variant.id: c for c in expand_train_cells(suite, scale, load_data=False)}
    assert len({c.key for c in cells.values()}) == len(ROWS)
    methods = {v: cells[v].method for v in ROWS}
    assert methods == {"baseline": "dro-erm", "coco": "dro-erm", "idro": "idro", "coco-idro": "idro",
                       "coco-groupdro": "groupdro", "coco-greedy": "groupdro", "coco-idro-paper": "idro"}
    opts = {v: cells[v].spec.method_options for v in ROWS}
    assert opts["coco-greedy"]["variant"] == "greedy" and opts["coco-groupdro"]["variant"] == "sagawa"
    assert opts["coco-idro-paper"]["mode"] == "paper" and opts["coco-idro"]["mode"] == "code"
    assert all(opts[v]["ance_refresh_steps"] > 0 for v in ROWS)                 # ANCE episodes in every row
    deps = {}
    for v in ROWS:
        planned = get_method(methods[v]).planned_dependencies(cells[v].spec)
        assert (len(planned) == 1) == (v in COCO_ROWS)
        if planned:
            dep = planned[0]
            assert dep.method == "coco" and dep.spec.model == cells[v].spec.model
            deps[v] = content_key(train_run_config(dep.method, dep.spec, cells[v].data_fingerprint))
    assert len(set(deps.values())) == 1                                         # one COCO run for every +COCO row
    # Without COCO the rows differ only in the reweighting: same recipe, same clusters, same negatives.
    base, idro = cells["baseline"].spec, cells["idro"].spec
    assert {k: v for k, v in vars(base).items() if k != "method_options"} == \
        {k: v for k, v in vars(idro).items() if k != "method_options"}
    assert {k: v for k, v in opts["idro"].items() if k != "mode"} == opts["baseline"]
    if scale in ("paper", "paper-large"):
        spec = cells["coco-idro"].spec
        assert (spec.lr, spec.batch_size, spec.similarity, spec.temperature, spec.pooling) == (
            5e-6, 512, "dot", 1.0, "cls")
        assert opts["coco-idro"]["k"] == 50 and get_method("idro").default_options["beta"] == 0.25
        coco = get_method("idro").planned_dependencies(spec)[0].spec
        assert (coco.lr, coco.batch_size, coco.doc_max_length) == (1e-4 if scale == "paper" else 5e-5, 2048, 128)


def gpu_hours(out: str) -> float:
    return float(out.splitlines()[-1].split("estimated training compute: ")[1].split(" GPU-hours")[0])


def test_paper_dry_runs_print_the_plan_with_gpu_hours(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_COCODR_DATA", raising=False)
    monkeypatch.delenv("HARNESS_COCODR_EVAL", raising=False)
    assert main(["run", "coco_dr", "--scale", "paper", "--dry-run", "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "7 training cells x 13 benchmarks" in out and "{cocodr_data}" in out
    lines = out.splitlines()
    coco = [line for line in lines if "<- COCO pretraining (coco): method=coco" in line]
    assert len(coco) == 1 and "steps=129000 batch=2048" in coco[0] and "lr=0.0001" in coco[0] and "GPU-h" in coco[0]
    assert sum("<- COCO pretraining (coco): key=" in line and "shared with" in line for line in lines) == 4
    baseline = next(line for line in lines if line.strip().startswith("baseline "))
    assert "model=Luyu/co-condenser-marco steps=45000 batch=512" in baseline and "GPU-h" in baseline
    base = gpu_hours(out)
    assert 60 < base < 250
    assert main(["run", "coco_dr", "--scale", "paper-large", "--dry-run", "--results-root", str(tmp_path)]) == 0
    large = capsys.readouterr().out
    assert "model=bert-large-uncased" in large and 2.5 * base < gpu_hours(large) < 4.5 * base
    assert not list(tmp_path.iterdir())                                         # a dry run writes nothing


def test_bad_coco_options_are_refused(tmp_path):
    from trainutil import make_data

    idro = get_method("idro")
    spec = idro.spec("tiny", method_options={"coco": {"corpora": ["x"]}})
    with pytest.raises(ConfigError, match="option coco must be a mapping with keys preset, train, options"):
        idro.planned_dependencies(spec)
    spec = idro.spec("tiny", method_options={"coco": {"preset": "huge"}})
    with pytest.raises(ConfigError, match="'coco' has no 'huge' preset"):
        idro.planned_dependencies(spec)
    spec = idro.spec("tiny", method_options={"coco": {"options": {"corpora": []}}})
    with pytest.raises(ConfigError, match="needs at least one pretraining corpus"):
        idro.train(spec, make_data(), tmp_path / "run")
    assert not (tmp_path / "run" / "train_log.jsonl").exists()                 # refused before fine-tuning
