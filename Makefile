# The two entry points of the README.  Both do the whole set-up first (idempotent).
VENV ?= .venv

# What `make lint` checks (settings in pyproject.toml); `make test` runs it before pytest.
LINT_PATHS = harness methods suites reports tests scripts

.PHONY: quickstart test test-slow lint setup setup-dev

setup:
	bash scripts/setup.sh

setup-dev:
	bash scripts/setup.sh --dev

quickstart: setup
	$(VENV)/bin/harness run quickstart

lint: setup-dev
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/python -m pytest -q

test-slow: setup-dev
	$(VENV)/bin/python -m pytest -q -m slow
