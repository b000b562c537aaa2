# The two entry points of the README.  Both do the whole set-up first (idempotent).
VENV ?= .venv

# What `make lint` checks (settings in pyproject.toml); `make test` runs it before pytest.
LINT_PATHS = harness methods suites reports tests scripts

.PHONY: quickstart test test-slow test-smoke test-latest lock lint setup setup-dev

setup:
	bash scripts/setup.sh

setup-dev:
	bash scripts/setup.sh --dev

quickstart: setup
	$(VENV)/bin/harness run quickstart

lint: setup-dev
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	HARNESS_REQUIRE_EXTRAS=1 $(VENV)/bin/python -m pytest -q

test-slow: setup-dev
	HARNESS_REQUIRE_EXTRAS=1 $(VENV)/bin/python -m pytest -q -m slow

# Each paper suite's smoke scale: the paper recipe (pooling, loss, negatives, LoRA, schedule shape) on tiny
# stand-ins with capped runs, on CPU.
test-smoke: setup-dev
	HARNESS_REQUIRE_EXTRAS=1 $(VENV)/bin/python -m pytest -q -m smoke

# Refresh requirements.lock to the newest versions pyproject.toml allows (see scripts/lock.sh); then `make test`.
lock:
	bash scripts/lock.sh

# Drift seen on purpose: the default test run in its own .venv-latest, resolved without the lock.
test-latest:
	VENV=.venv-latest HARNESS_LOCK=none bash scripts/setup.sh --dev
	HARNESS_REQUIRE_EXTRAS=1 .venv-latest/bin/python -m pytest -q
