# make demo: the one-minute tour on embedded SQLite.   make test: the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test services browser lint docs bench bench-peers clean

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
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

# the documentation site: mkdocs.yml and docs/ into site/; --strict makes a broken link,
# anchor, or a page missing from the nav an error. NO_MKDOCS_2_WARNING quiets the theme's
# banner about its end of life (May 2027; the docs extra keeps mkdocs < 2 and material < 10).
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "make docs: the site is in site/ (open site/index.html)"

$(VENV)/.docs: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[docs]'
	touch $@

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
	rm -rf $(VENV) build site *.egg-info
