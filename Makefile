# Two commands do everything on a fresh machine:
#   make demo   stage sample objects and read them back through staged:: (embedded S3 unless AWS_ENDPOINT_URL is set)
#   make test   install, start MinIO and toxiproxy, run the whole suite, stop the services
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: demo test venv services-up services-down lint bench soak clean

$(VENV)/.installed: pyproject.toml requirements.lock
	@command -v uv >/dev/null || $(PYTHON) -m pip install --quiet uv
	uv venv --allow-existing -q -p $(PYTHON) $(VENV)
	uv pip install -q --python $(PY) -r requirements.lock
	uv pip install -q --python $(PY) --no-deps -e .
	@touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m airflow_exa_provider.demo --dags dags

test: venv
	@scripts/services.sh up
	@set -a; eval "$$(scripts/services.sh env)"; set +a; \
	  trap 'scripts/services.sh down' EXIT; \
	  $(PY) -m pytest $(PYTEST_ARGS)

services-up:
	scripts/services.sh up

services-down:
	scripts/services.sh down

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Benchmarks: every script writes benchmarks/results/*.json, then report.py regenerates
# docs/benchmarks.md and its plots.  Services stay up afterwards.
bench: venv
	@scripts/services.sh up
	@set -a; eval "$$(scripts/services.sh env)"; set +a; \
	  $(PY) benchmarks/bench_transfers.py && $(PY) benchmarks/bench_hierarchy.py && \
	  $(PY) benchmarks/bench_postgres.py && $(PY) benchmarks/bench_dask.py && \
	  $(PY) benchmarks/bench_index.py && $(PY) benchmarks/bench_slurm_polling.py && \
	  $(PY) benchmarks/report.py

# Reliability soak (docs/reliability.md): kill -9, load, resets, throttling at scale.
soak: venv
	@scripts/services.sh up
	@set -a; eval "$$(scripts/services.sh env)"; set +a; \
	  $(PY) benchmarks/soak.py && $(PY) benchmarks/report.py

clean:
	scripts/services.sh down || true
	rm -rf $(VENV) .services .pytest_cache
