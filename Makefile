# Two entry points: `make run` (set up, check the environment, run the main job) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
BASE := $(VENV)/.installed-base
DEV := $(VENV)/.installed-dev
# torchvision and timm need the torch they were built for (from the index, multi-GB): a venv of their own.
MODELS_VENV ?= .venv-models
MODELS := $(MODELS_VENV)/.installed-vision
# The TensorFlow engine alone (gpulab[tensorflow], no torch): what a TensorFlow user installs.
TF_VENV ?= .venv-tf
TF_ONLY := $(TF_VENV)/.installed-tf
NO_TORCH = $(TF_VENV)/bin/python -c "import torch" 2>/dev/null && { echo "$(TF_VENV) has torch; it must not: rm -rf $(TF_VENV)" >&2; exit 1; } || true

.PHONY: run test test-durations test-models test-tf-only test-matrix lint setup clean slurm-packages extras

# Stamps make both targets idempotent: the set-up reruns only when pyproject.toml or the script change.
$(BASE): pyproject.toml scripts/setup_env.sh
	scripts/setup_env.sh $(VENV) torch
	@touch $@

$(DEV): pyproject.toml scripts/setup_env.sh
	scripts/setup_env.sh $(VENV) dev
	@touch $@ $(BASE)

setup: $(DEV)

# Extras into .venv, a checkout's `pip install 'gpulab[EXTRA]'`: make extras EXTRAS=tensorflow,export,mlflow
extras:
	@test -n "$(EXTRAS)" || { echo "make extras: name them, e.g. make extras EXTRAS=tensorflow,export (choices: tensorflow export mlflow wandb models vision)" >&2; exit 2; }
	scripts/setup_env.sh $(VENV) torch,$(EXTRAS)
	@touch $(BASE)

# The main job: check the environment (and time a matmul), then train the digits CNN on real data.
run: $(BASE)
	$(VENV)/bin/gpulab doctor --peak
	$(VENV)/bin/gpulab train digits --out runs/digits --overwrite

# Two pytest-xdist workers: most tests wait on subprocesses, so one process leaves a core idle (7 vs 11 min
# on 2 cores); loadfile keeps a file's tests, and its module fixtures, in one worker; the longest files go
# first (tests/file_seconds.json, `make test-durations`; --no-loadscope-reorder keeps that order).
test: $(DEV) slurm-packages
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not tf_only"

# The user-setup matrix alone (tests/matrix/, part of `make test` too), then docs/MATRIX.md from its verdicts.
test-matrix: $(DEV)
	$(PY) -m pytest -q -n 2 --dist loadfile tests/matrix
	$(PY) scripts/matrix_table.py

$(MODELS): pyproject.toml scripts/setup_env.sh
	GPULAB_TORCH=keep scripts/setup_env.sh $(MODELS_VENV) vision-dev
	@touch $@

# The vision examples (torchvision ResNet-18, timm ViT): train, resume and export, in their own venv.
# Re-measure tests/file_seconds.json (seconds per test file) with a full run of the suite.
test-durations: $(DEV)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not tf_only" --junitxml=build/junit.xml
	$(PY) scripts/test_durations.py build/junit.xml tests/file_seconds.json

test-models: $(MODELS)
	$(MODELS_VENV)/bin/python -m pytest -q -m vision tests/examples

$(TF_ONLY): pyproject.toml scripts/setup_env.sh
	GPULAB_TORCH=none scripts/setup_env.sh $(TF_VENV) tf-dev
	@$(NO_TORCH)
	@touch $@

# The TensorFlow engine in a venv without torch: train digits, export it, profile, inspect, doctor.
test-tf-only: $(TF_ONLY)
	@$(NO_TORCH)
	$(TF_VENV)/bin/python -m pytest -q -m tf_only tests/tf_only

# Debian's SLURM and munge for tests/distributed/test_slurm.py's cluster: installed when missing, as root with
# apt (about 50 s once); elsewhere one line, and those tests skip.
slurm-packages:
	@scripts/setup_slurm.sh

lint: $(DEV)
	$(VENV)/bin/ruff check --fix src tests benchmarks examples
	$(VENV)/bin/ruff format src tests benchmarks examples

clean:
	rm -rf $(VENV) $(MODELS_VENV) $(TF_VENV) build src/*.egg-info .pytest_cache
