"""Start-up stays light: the CLI's parser (every command builds it) imports no torch.  A method module
the CLI loads (``harness mine`` loads the mining method) imports torch-heavy trainer names lazily
(harness.train.api loads them on first use)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE = """
import contextlib, io, sys
from harness.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["--help"])
    except SystemExit:
        pass
import methods.mining, methods.tdro, harness.train.api
print(sorted(m for m in ("torch", "transformers", "accelerate") if m in sys.modules))
"""


def test_help_and_stage_declarations_import_no_torch():
    out = subprocess.run([sys.executable, "-c", CODE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
