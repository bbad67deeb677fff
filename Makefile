# The two commands of the README: `make demo` and `make test`. Each sets up everything it
# needs on a fresh machine: the virtualenv and Python dependencies, the Kafka broker jars
# (Maven Central, via mvn), the npm MCP reference server, and (tests only) Chromium for the
# status-page test. Every step is idempotent and cached under .venv/ and .cache/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv deps test-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

deps: venv
	$(BIN)/python -m alivemcp.localstack.kafka fetch
	$(BIN)/python -m alivemcp.localstack.mcp_servers fetch-npm

# Tests also need the MCP SDK 1.x in its own virtualenv (it cannot share one with 2.x) and
# Debian's headless Chromium (status page) and Prometheus (the dashboard's queries and the
# alert rules are evaluated by a real one); needs root or sudo.
test-deps: deps
	$(BIN)/python -m alivemcp.localstack.mcp_servers fetch-sdk1
	@{ command -v chromium && command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium prometheus >/dev/null; }

lint: venv
	$(BIN)/ruff check alivemcp probes tests benchmarks scripts

test: test-deps lint
	$(BIN)/python -m pytest

demo: deps
	$(BIN)/alivemcp demo

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
