"""Progress bars on a terminal only (never carriage returns in a log), --progress to force them, --quiet for
warnings only: through the real CLI on a 5-document folder."""
from __future__ import annotations

import logging
import os

import pytest

from harness.cli import main
from harness.progress import PROGRESS_ENV, bar_disabled


@pytest.mark.parametrize(("mode", "progress", "expected"), [
    ("auto", True, None), ("on", True, False), ("off", True, True), ("on", False, True), (" ON ", True, False)])
def test_bar_disabled_follows_the_caller_and_the_environment(monkeypatch, mode, progress, expected):
    monkeypatch.setenv(PROGRESS_ENV, mode)
    assert bar_disabled(progress) is expected


def _eval(dataset, tmp_path, name, *flags):
    return main([*flags, "eval", "--model", "minilm", "--dataset-dir", str(dataset), "--out", str(tmp_path / name),
                 "--cache-dir", str(tmp_path / name / ".." / f"cache-{name}"), "--format", "json"])


@pytest.fixture
def harness_log_level():
    """The harness logger's level, restored after a test that changes it through the CLI."""
    logger = logging.getLogger("harness")
    level = logger.level
    yield
    logger.setLevel(level)


def test_no_bars_into_a_log_bars_with_progress_and_nothing_but_warnings_with_quiet(dataset, tmp_path, capsys, caplog,
                                                                                    monkeypatch, harness_log_level):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert _eval(dataset, tmp_path, "plain") == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "encode docs" not in err          # stderr is not a terminal here: no bars
    assert any(r.name.startswith("harness") and r.levelno == logging.INFO for r in caplog.records)
    caplog.clear()
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert _eval(dataset, tmp_path, "forced", "--progress") == 0
    err = capsys.readouterr().err
    assert "\r" in err and "encode docs" in err                   # --progress draws them anyway
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    caplog.clear()
    assert _eval(dataset, tmp_path, "quiet", "--quiet") == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "encode docs" not in captured.err
    assert not [r for r in caplog.records if r.name.startswith("harness") and r.levelno < logging.WARNING]
    assert '"ndcg@10"' in captured.out                           # the result still prints
    assert PROGRESS_ENV not in os.environ                        # main() in-process leaves the setting as it was
