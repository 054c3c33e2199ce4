# Two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml setup.py tidings/protocol/_speedups.c
	$(PY) -m pip install -q -e '.[test,sql]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/tidings server --addr 0.0.0.0 --port 4222 --store file --dir ./data

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/compare.py

clean:
	rm -rf $(VENV) build *.egg-info
