# Two entry points: `make run` (set up, check the environment, run the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gpulab-installed

.PHONY: run test lint setup clean

$(STAMP): pyproject.toml scripts/setup_env.sh
	scripts/setup_env.sh $(VENV) dev
	@touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gpulab doctor
	$(VENV)/bin/gpulab devices --check

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
