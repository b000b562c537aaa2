# The two entry points of the README.  Both do the whole set-up first (idempotent).
VENV ?= .venv

.PHONY: quickstart test test-slow setup setup-dev

setup:
	bash scripts/setup.sh

setup-dev:
	bash scripts/setup.sh --dev

quickstart: setup
	$(VENV)/bin/harness run quickstart

test: setup-dev
	$(VENV)/bin/python -m pytest -q

test-slow: setup-dev
	$(VENV)/bin/python -m pytest -q -m slow
