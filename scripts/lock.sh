#!/usr/bin/env bash
# Refresh requirements.lock: the exact version of every package the tests pass under.
#   bash scripts/lock.sh                 re-resolve everything to the newest versions pyproject.toml allows
#   bash scripts/lock.sh PACKAGE...      move only these packages (and what they need)
# Then run `make test` and commit requirements.lock with the result.  The lock is universal (one
# file for Linux, macOS and Windows, Python >= 3.11, environment markers where versions differ) and
# is used as a constraint file: packages a machine does not need (the CUDA libraries on a CPU
# machine) are simply not installed.  torch keeps the neutral pin of constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${VENV:-.venv}
"$VENV/bin/python" -m pip install -q -c constraints.txt uv
upgrade=(--upgrade)
if [ "$#" -gt 0 ]; then
  upgrade=()
  for pkg in "$@"; do upgrade+=(--upgrade-package "$pkg"); done
fi
"$VENV/bin/uv" pip compile pyproject.toml --extra dev --extra seismic --extra topics --extra cluster --extra cmteb \
  --universal --python-version 3.11 -c constraints.txt "${upgrade[@]}" \
  --custom-compile-command "make lock" -o requirements.lock
echo "requirements.lock refreshed; run 'make test' before committing it" >&2
