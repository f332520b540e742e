# The two commands a newcomer needs: `make test` and `make serve`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-sanitized lint docs protos serve bench bench-write bench-flight bench-memory bench-spark bench-vector bench-changes bench-backfill bench-indices bench-vector-index bench-hnsw bench-sql bench-sql-memory bench-namespace bench-fts bench-soak kill-trials fault-campaigns spark-example clean

# setup.py builds the C kernels: an edited kernel is recompiled by the next `make test`.
$(STAMP): pyproject.toml setup.py format/_kernels.c flight_server/_threadstate.c \
		flight_server/_grpcstatus.cc
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) \
	  --reinstall-package quiver-lance -e '.[test]' \
	  || $(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The Node.js client's dependencies, from its committed lock file (tests/node runs its tests).
# Where node or npm is missing, Debian's nodejs and npm are installed (as root).
NODE_STAMP := clients/node/node_modules/.installed
$(NODE_STAMP): clients/node/package.json clients/node/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || apt-get install -y -q nodejs npm \
	  || (apt-get update -q && apt-get install -y -q nodejs npm) \
	  || { echo "Node.js >= 18 and npm are needed for clients/node: install them"; exit 1; }
	cd clients/node && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

# DuckDB's lance extension (a third-party client of the REST namespace) is built for DuckDB
# 1.5.5 only, older than the DuckDB the Flight SQL tests use: it gets a virtual environment
# of its own, which tests/flight/test_namespace_duckdb.py runs.
DUCKDB_LANCE := .venv-duckdb-lance
DUCKDB_STAMP := $(DUCKDB_LANCE)/.installed
DUCKDB_PACKAGES := duckdb==1.5.5 duckdb-extension-lance==1.5.5
$(DUCKDB_STAMP): | $(STAMP)
	test -x $(DUCKDB_LANCE)/bin/python || $(PYTHON) -m venv $(DUCKDB_LANCE)
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(DUCKDB_LANCE)/bin/python \
	  $(DUCKDB_PACKAGES) || $(DUCKDB_LANCE)/bin/pip install --quiet $(DUCKDB_PACKAGES)
	touch $(DUCKDB_STAMP)

# Three workers on two cores (the tests wait on servers, JVMs and sockets), each given whole
# modules (one Spark session, corpus or server per module). Bytecode is cached even where the
# machine says not to: each server, Spark worker and command the tests start imports the
# package, a second more when it is compiled from source every time.
test: $(STAMP) $(NODE_STAMP) $(DUCKDB_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/gen_protos.py --check
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	$(PY) scripts/sanitized_kernels.py
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 3 --dist loadfile -q --durations=20

# The C kernels built with AddressSanitizer and UBSan, run by their own tests (hostile inputs
# included): a read or write past a buffer, which a plain build survives, stops the run.
test-sanitized: $(STAMP)
	$(PY) scripts/sanitized_kernels.py

# The documentation site (docs/, mkdocs.yml) into site/; `make test` builds it strictly too.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

protos: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	$(PY) -m benchmarks.scan

bench-write: $(STAMP)
	$(PY) -m benchmarks.write

bench-flight: $(STAMP)
	$(PY) -m benchmarks.flight

# Peak RSS of Quiver and of a Flight server over pylance while 4 clients stream 20 M rows.
bench-memory: $(STAMP)
	$(PY) -m benchmarks.flight --memory

# Spark count, group-by and full scan through Quiver, the ceiling of any Python data source
# (pyarrow reading the same Parquet inside read()) and spark.read.parquet, in one run.
bench-spark: $(STAMP)
	$(PY) -m benchmarks.spark

# Vector search: queries/s and recall@10 of Quiver over Flight and pylance, single queries and
# batches, on 1 M vectors of 128 (IVF_PQ, nprobes 20); the indexed dataset is cached in benchmarks/.data.
bench-vector: $(STAMP)
	$(PY) -m benchmarks.vector

# Upsert (merge_insert) and update of 1 % of 4 M rows: Quiver's engine, pylance and Quiver over
# Flight, each round on a fresh copy of the dataset cached in benchmarks/.data.
bench-changes: $(STAMP)
	$(PY) -m benchmarks.row_changes

# Backfill of one float64 column over 4 M rows: Quiver's add_columns by _rowaddr against pylance's
# add_columns of an aligned table, in process and as a Spark local[2] job (changes.add_columns
# against toArrow() + pylance on the driver), each round on a fresh copy of the cached dataset.
bench-backfill: $(STAMP)
	$(PY) -m benchmarks.backfill

# BTREE and BITMAP builds by Quiver and by pylance on 4 M rows, each in a fresh process.
bench-indices: $(STAMP)
	$(PY) -m benchmarks.indices

bench-vector-index: $(STAMP)
	$(PY) -m benchmarks.vector_index

# IVF_HNSW_SQ builds and searches, Quiver next to pylance, 200,000 rows x 128.
bench-hnsw: $(STAMP)
	$(PY) -m benchmarks.hnsw

# Five SQL queries over Flight SQL (ADBC) against DuckDB over pylance in one process, 4 M rows;
# bench-sql-memory: the server's peak RSS under a group-by over 20 M rows.
bench-sql: $(STAMP)
	$(PY) -m benchmarks.sql

# QueryTable and CountTableRows through Quiver's REST namespace and pylance's reference
# adapter (lance.namespace.RestAdapter("dir")), each in its own process, on the same files.
bench-namespace: $(STAMP)
	$(PY) -m benchmarks.namespace

# Full-text queries through Quiver and a Flight server over pylance's search, and INVERTED
# builds by both engines, on 1 M short documents.
bench-fts: $(STAMP)
	$(PY) -m benchmarks.fulltext

bench-sql-memory: $(STAMP)
	$(PY) -m benchmarks.sql --memory

# One server on S3 (moto) under 16 readers, 4 appenders, 2 upserters, cleanup and scheduled
# maintenance for 30 minutes (SOAK_MINUTES=5 for a shorter run).
bench-soak: $(STAMP)
	$(PY) -m benchmarks.soak --minutes $(or $(SOAK_MINUTES),30)

# The server killed during every kind of commit, nightly-sized (make test runs 14 trials).
kill-trials: $(STAMP)
	QUIVER_KILL_TRIALS=$(or $(KILL_TRIALS),140) $(PY) -m pytest -q -s tests/test_server_kills.py

# The storage fault campaigns, each kind of commit ten times under each fault (make test: once).
fault-campaigns: $(STAMP)
	QUIVER_FAULT_ROUNDS=$(or $(FAULT_ROUNDS),10) $(PY) -m pytest -q tests/test_storage_faults.py -k every_kind

# The Spark pipeline example: its own server on a temporary demo root, or a running one
# with `make spark-example URI=grpc://127.0.0.1:8815` (after `make serve`).
URI ?=
spark-example: $(STAMP)
	$(PY) clients/spark/examples/pipeline.py $(if $(URI),--uri $(URI))

# The Flight server on ./data at grpc://127.0.0.1:8815, with the demo datasets if ./data has none.
ROOT ?= ./data
HOST ?= 127.0.0.1
PORT ?= 8815
serve: $(STAMP)
	$(PY) -m quiver demo --root $(ROOT)
	$(PY) -m quiver serve --root $(ROOT) --host $(HOST) --port $(PORT)

clean:
	rm -rf $(VENV) $(DUCKDB_LANCE) .pytest_cache .ruff_cache build format/_kernels.*.so
