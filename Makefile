# `make demo` and `make test` set everything up on a fresh machine (a virtual environment in .venv).
# Without a working NVIDIA GPU the CPU build of PyTorch is asked for first: TORCH_CPU (PyTorch's
# own "+cpu" wheel, found when pip sees PyTorch's CPU index), then TORCH_PLAIN (which some
# indexes and wheel caches serve as a CPU build). If neither resolves, the package's own
# requirement brings pip's default build: the pins are a preference, never a reason to fail.
# With a GPU, pip's default (CUDA) build comes in through the package's requirement.
VENV ?= .venv
PYTHON ?= python3
TORCH_CPU ?= torch==2.13.0+cpu
TORCH_PLAIN ?= torch==2.13.0
PY := $(VENV)/bin/python

# The demo and the examples need the package and its [examples] extra; the test suite needs [dev]
# (Ray, peft, jupyter pieces, gym-pusht: several hundred MB more), installed by `make test` only.
$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip || echo "pip upgrade failed; continuing with the venv's pip"
	@if nvidia-smi -L >/dev/null 2>&1; then echo "NVIDIA GPU found: pip's default torch"; \
	else $(PY) -m pip install -q "$(TORCH_CPU)" || $(PY) -m pip install -q "$(TORCH_PLAIN)" || \
	  echo "neither $(TORCH_CPU) nor $(TORCH_PLAIN) resolved; torch comes from pip's default"; fi
	touch $@

$(VENV)/.installed-examples: $(VENV)/.created setup.cfg pyproject.toml
	@echo "installing the package and its [examples] extra into $(VENV) (first run only: 1-3 minutes; pip is quiet meanwhile)"
	$(PY) -m pip install -q -e ".[examples]"
	touch $@

$(VENV)/.installed: $(VENV)/.created setup.cfg pyproject.toml
	@echo "installing the package and its [dev] extra into $(VENV) (first run only: 2-4 minutes; pip is quiet meanwhile)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# The suite runs in TEST_WORKERS processes (pytest-xdist) of one torch thread each, a test file's
# tests in one of them (setup.cfg's --dist loadfile). `make test TEST_WORKERS=0` runs it in this process.
TEST_WORKERS ?= 2

.PHONY: demo dev test test-quick
# --overwrite: a second `make demo` replaces out/demo.mp4 (the CLI refuses to by default).
demo: $(VENV)/.installed-examples
	$(VENV)/bin/cosmos3-gym demo --overwrite

# The [dev] extra alone (pytest and what the suite imports), for running tests by hand.
dev: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests

# Without the tests marked slow (examples, notebook, README snippets, Ray workers, full world-eval runs).
test-quick: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" tests
