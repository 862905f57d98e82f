# make demo: the one-minute tour on embedded SQLite.   make test: the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test services lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.demo: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/deferq demo

services:
	@scripts/services.sh

test: $(STAMP) services
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(VENV)/.demo
	$(BIN)/deferq bench

clean:
	rm -rf $(VENV) build *.egg-info
