# make demo: the one-minute tour on embedded SQLite.   make test: the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test services browser lint bench bench-peers clean

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

browser:
	@scripts/install-browser.sh

test: $(STAMP) services browser
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# ruff (style, complexity) and mypy --strict over src/deferq (settings in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(VENV)/.demo
	$(BIN)/deferq bench

# deferq against celery, rq, dramatiq, huey, arq (Redis) and procrastinate (PostgreSQL):
# docs/bench-peers.md. arq goes in with --no-deps: it caps redis-py below 6 and runs on ours.
bench-peers: $(STAMP) services
	$(BIN)/pip install -q -e '.[peers]'
	$(BIN)/pip install -q --no-deps 'arq>=0.28'
	$(BIN)/python -m bench.peers.run $(BENCH_ARGS)
	$(BIN)/python -m bench.peers.run --postgres $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
