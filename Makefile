# Two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml setup.py tidings/protocol/_speedups.c

.PHONY: run test lint bench bench-js bench-hardening bench-spark pipeline-demo clean
.PHONY: bench-kv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The server alone (make run) needs less than the tests, the benchmarks and Spark.
$(RUN_STAMP): $(PY) $(SOURCES)
	$(PY) -m pip install -q -e '.[sql]'
	touch $(RUN_STAMP)

$(STAMP): $(PY) $(SOURCES)
	$(PY) -m pip install -q -e '.[test,sql,spark]'
	touch $(STAMP) $(RUN_STAMP)

# The server with NATS Streaming on a file store under ./data and JetStream on, its store
# under ./data/jetstream (tests/integration/spark/test_pipeline.py starts this command line).
run: $(RUN_STAMP)
	$(VENV)/bin/tidings server --addr 0.0.0.0 --port 4222 --store file --dir ./data --jetstream --store_dir ./data

# Two workers (pytest-xdist, a file's tests on one worker), then the tests marked serial
# alone (the markers in pyproject.toml; tests/harness/__init__.py says which and why).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

# ruff, and the layers of docs/architecture.md (import-linter; the contract in pyproject.toml)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# The core workloads, then JetStream's (benchmarks/jetstream.py; alone: make bench-js).
bench: $(STAMP)
	$(PY) benchmarks/compare.py
	$(PY) benchmarks/jetstream.py
	$(PY) benchmarks/kv_objects.py

bench-js: $(STAMP)
	$(PY) benchmarks/jetstream.py

# Key-Value and Object store beside the reference (benchmarks/kv_objects.py).
bench-kv: $(STAMP)
	$(PY) benchmarks/kv_objects.py

bench-hardening: $(STAMP)
	$(PY) benchmarks/hardening.py

bench-spark: $(STAMP)
	$(PY) benchmarks/spark_read.py
	$(PY) benchmarks/spark_jetstream.py
	$(PY) benchmarks/spark_write.py

# The pipeline on JetStream (a server it starts, streams EVENTS and RESULTS); add
# --channels events for the NATS Streaming one.
pipeline-demo: $(STAMP)
	$(VENV)/bin/tidings pipeline --demo --duration 60

clean:
	rm -rf $(VENV) build *.egg-info pipeline-out
