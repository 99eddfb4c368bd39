# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# Pathway (a peer of the streams benchmark) pins pyarrow<26, so it lives in its own venv;
# benchmarks/systems/stream_jobs.py finds it there (or at $BENCH_PATHWAY_PYTHON).
PATHWAY_VENV ?= .venv-pathway
PATHWAY_STAMP := $(PATHWAY_VENV)/.installed
APT_PACKAGES := zookeeper haproxy redis-server chromium chromium-driver

.PHONY: demo test lint bench bench-quick bench-streams system-deps clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip wheel setuptools

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[all]'
	touch $(STAMP)

$(PATHWAY_STAMP):
	python3 -m venv $(PATHWAY_VENV)
	$(PATHWAY_VENV)/bin/pip install --quiet 'pathway==0.33.*'
	touch $(PATHWAY_STAMP)

# Debian packages the tests and benchmarks start for real (ZooKeeper, HAProxy, Redis; Chromium
# and its WebDriver for the cluster status page's browser test).
system-deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

demo: $(STAMP)
	$(PY) -m tstreams_embedded.demo

test: $(STAMP) $(PATHWAY_STAMP) system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -ra --durations=25 tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP) system-deps
	$(PY) -m benchmarks

bench-quick: $(STAMP) system-deps
	$(PY) -m benchmarks --quick

bench-streams: $(STAMP) $(PATHWAY_STAMP)
	$(PY) -m benchmarks --suite streams

clean:
	rm -rf $(VENV) $(PATHWAY_VENV) build *.egg-info .pytest_cache
