# `make demo` and `make test` set everything up on a fresh machine (a virtual environment in .venv).
# Without an NVIDIA GPU the CPU build of PyTorch is requested explicitly (TORCH_CPU); with one,
# pip's default (CUDA) build comes in through the package's own requirement.
VENV ?= .venv
PYTHON ?= python3
TORCH_CPU ?= torch==2.13.0+cpu
PY := $(VENV)/bin/python

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q "$(TORCH_CPU)"; fi
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

.PHONY: demo test
demo: $(VENV)/.installed
	$(VENV)/bin/cosmos3-gym demo

test: $(VENV)/.installed
	$(PY) -m pytest -q tests
