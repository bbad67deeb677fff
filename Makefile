# The two commands of the README: `make demo` and `make test`. Each sets up everything it
# needs (virtualenv, Python dependencies, Kafka jars, the npm MCP server) on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

deps: venv

lint: venv
	$(BIN)/ruff check alivemcp probes tests benchmarks

test: deps lint
	$(BIN)/python -m pytest

demo: deps
	$(BIN)/alivemcp demo

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
