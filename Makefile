# The two commands a newcomer needs: `make test` and `make serve`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test lint protos serve bench bench-write clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/gen_protos.py --check
	$(PY) -m pytest -n 2 -q

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

protos: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	$(PY) -m benchmarks.scan

bench-write: $(STAMP)
	$(PY) -m benchmarks.write

serve: $(STAMP)
	@echo "The Flight server arrives with issue 4 (flight_server/). Until then:"
	@echo "  $(VENV)/bin/quiver inspect PATH_TO_DATASET   # versions, schema and fragments of a Lance dataset"
	@exit 1

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
