"""``harness eval --sparse-backend``: checked by the engine's own rule (harness.retrieval.sparse.check_backend),
so seismic with inline index options is accepted and bad options are refused before any compute;
``--quantization`` offers the engine's rules and is ignored, with a warning, by backends that do not quantise."""
from __future__ import annotations

import argparse
import json
import logging

import pytest
from optional_extras import require_extra

from harness.cli import build_parser, main
from harness.cli.eval import warn_ignored_options
from harness.retrieval.impact import QUANTIZATIONS
from harness.retrieval.sparse import BACKENDS


def _parse(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["eval", "--model", "splade-tiny", "--dataset-dir", "d", *extra])


def test_seismic_with_inline_options_is_accepted_and_choices_come_from_the_engine():
    require_extra("seismic")        # the engine refuses seismic up front when its package is missing
    assert _parse("--sparse-backend", "seismic:query_cut=20").sparse_backend == "seismic:query_cut=20"
    assert _parse("--sparse-backend", "lucene-impact", "--quantization", "splade").quantization == "splade"
    action = next(a for a in build_parser()._subparsers._group_actions[0].choices["eval"]._actions  # type: ignore[union-attr]
                  if a.dest == "quantization")
    assert tuple(action.choices) == tuple(QUANTIZATIONS)
    assert BACKENDS == ("exact", "lucene-impact", "seismic")


@pytest.mark.parametrize("value, message", [
    ("seismik", "unknown sparse retrieval backend 'seismik'; choose one of exact, lucene-impact, seismic"),
    ("seismic:bogus=1", "bogus"),
    ("exact:query_cut=3", "sparse backend 'exact' takes no options"),
])
def test_bad_backends_are_refused_by_the_parser(capsys, value, message):
    with pytest.raises(SystemExit) as exc:
        _parse("--sparse-backend", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --sparse-backend: invalid choice: {value!r}" in err and message in err


def test_quantization_is_ignored_with_a_warning_unless_lucene_impact(caplog):
    require_extra("seismic")
    caplog.set_level(logging.WARNING)
    for backend, ignored in (("seismic:query_cut=5", ["quantization"]), (None, ["quantization"]),
                             ("lucene-impact", [])):
        args = _parse("--quantization", "splade", *(["--sparse-backend", backend] if backend else []))
        assert warn_ignored_options(args, lexical=False, sparse=True) == ignored
    assert caplog.text.count("--quantization does not apply to a sparse model") == 2


def test_eval_with_seismic_end_to_end(dataset, tmp_path, monkeypatch, capsys):  # noqa: F811
    require_extra("seismic")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "seismic"
    assert main(["eval", "--model", "splade-tiny", "--dataset-dir", str(dataset), "--out", str(out),
                 "--sparse-backend", "seismic:query_cut=20", "--format", "json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["encoder"]["index"] == "seismic:query_cut=20"
    assert "quantization" not in manifest["encoder"]
    assert metrics["ndcg@10"] == pytest.approx(1.0)     # five documents on separate topics: all found first
