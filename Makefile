# The two commands of the README: `make demo` and `make test`. Each sets up everything it
# needs on a fresh machine: the virtualenv and Python dependencies, the Kafka broker jars
# (Maven Central, via mvn), the npm MCP reference server, and (tests only) Chromium for the
# status-page test. Every step is idempotent and cached under .venv/ and .cache/.
PYTHON ?= python3
# Where the demo's daemon listens: `make demo LISTEN=127.0.0.1:9465` when 9464 is taken.
LISTEN ?= 127.0.0.1:9464
# Test workers: most tests wait on real servers (Kafka, moto, daemons), so 3 fit 2 cores.
# loadscope keeps each test module on one worker, so its module fixtures start once.
TEST_WORKERS ?= 3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint venv deps test-deps helm-check clean

HAVE_KAFKA_TOOLS := $(shell command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && echo yes)

# The Helm chart (deploy/helm/alivemcp) is checked with the helm on the PATH, or one built from
# the Go module proxy into .cache/bin (about 7 minutes on 2 busy cores, most of it compiling).
# The -X flags give it what a release build has: its version, and Kubernetes 1.37 (its
# client-go's) as the default for `helm template` and lint's deprecation checks.
HELM_VERSION := v3.22.1
HELM := $(or $(shell command -v helm 2>/dev/null),.cache/bin/helm)
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
  $(foreach pkg,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(pkg).k8sVersionMajor=1 -X helm.sh/helm/v3/$(pkg).k8sVersionMinor=37)
HELM_BUILD = test -x $(HELM) || GOBIN=$(CURDIR)/.cache/bin go install -ldflags '$(HELM_LDFLAGS)' \
  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and kubernetes-validate's
# newest: every rendered object is validated against both.
HELM_KUBE_VERSIONS = 1.27.0 $(shell $(BIN)/python -c 'from kubernetes_validate.utils import all_versions; print(all_versions()[-1])' 2>/dev/null)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "alivemcp needs Python 3.11 or newer as '$(PYTHON)' (set PYTHON=/path/to/python3.11)"; exit 1; }
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "Python's venv module is missing: install it (Debian/Ubuntu: apt-get install python3-venv)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The demo needs only the virtualenv; with Java and Maven it also runs a Kafka broker.
deps: venv
ifeq ($(HAVE_KAFKA_TOOLS),yes)
	$(BIN)/python -m alivemcp.testbed.kafka fetch
else
	@echo "Java or Maven not found: the demo runs without Kafka (its 3 checks report down)."
endif

# Tests also need the MCP SDK 1.x in its own virtualenv (it cannot share one with 2.x) and
# Debian's headless Chromium (status page) and Prometheus (the dashboard's queries and the
# alert rules are evaluated by a real one); needs root or sudo.
test-deps: deps
	@test "$(HAVE_KAFKA_TOOLS)" = yes || { \
	  echo "make test needs Java 17+ and Maven for the real Kafka brokers (Debian: apt-get install default-jdk-headless maven)"; exit 1; }
	@command -v npm >/dev/null 2>&1 || { \
	  echo "make test needs npm for the reference MCP server (Debian: apt-get install npm)"; exit 1; }
	$(BIN)/python -m alivemcp.testbed.mcp_servers fetch-npm
	$(BIN)/python -m alivemcp.testbed.mcp_servers fetch-sdk1
	@# The Kubernetes tests render deploy/kubernetes as `kubectl apply -k` does; without kubectl,
	@# kustomize is built from the Go module proxy (about a minute).
	@command -v kubectl >/dev/null 2>&1 || test -x .cache/bin/kustomize || \
	  GOBIN=$(CURDIR)/.cache/bin go install sigs.k8s.io/kustomize/kustomize/v5@v5.7.1
	@# The Helm chart's tests render deploy/helm/alivemcp; without helm it is built too (above).
	@$(HELM_BUILD)
	@{ command -v chromium && command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium prometheus >/dev/null; }

lint: venv
	$(BIN)/ruff check alivemcp probes tests benchmarks scripts
	$(BIN)/ruff format --check alivemcp probes tests benchmarks scripts
	$(BIN)/mypy

# The inner loop: lint, types and the unit tests (no server, process or network: marked by
# tests/conftest.py), without Java, npm or Chromium. `make test` is still the whole suite.
check: lint
	$(BIN)/python -m pytest -m unit -n 2 -q -p no:cacheprovider

test: test-deps lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

# The Helm chart without a cluster: helm lint --strict and helm template for each
# deploy/helm/alivemcp/ci/*-values.yaml, every rendered object validated against the Kubernetes
# schemas (strict), then the chart's tests (Prometheus Operator kinds, unit tests).
helm-check: venv
	@$(HELM_BUILD)
	@mkdir -p .cache; set -e; for values in deploy/helm/alivemcp/ci/*-values.yaml; do \
	  for version in $(HELM_KUBE_VERSIONS); do \
	    echo "$$values, Kubernetes $$version"; \
	    $(HELM) lint --strict --quiet --kube-version $$version -f $$values deploy/helm/alivemcp; \
	    $(HELM) template alivemcp deploy/helm/alivemcp --kube-version $$version -f $$values \
	      >.cache/helm-rendered.yaml; \
	    $(BIN)/kubernetes-validate --strict --quiet --no-warn -k $$version .cache/helm-rendered.yaml; \
	  done; \
	done
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/ship/test_helm.py

demo: deps
	$(BIN)/alivemcp demo --listen $(LISTEN) $(if $(HAVE_KAFKA_TOOLS),,--no-kafka)

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
