# The two commands of the README: `make demo` and `make test`. Both set up .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# torch is pinned: a CPU wheel of this release is on the machine's disk; an unpinned torch
# would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: venv demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[torch,onnx,test,lint]" "$(TORCH_PIN)"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/opdiff demo --force

test: lint
	$(PY) -m pytest -n 2 -q

# Layers (import-linter), style (ruff) and types (mypy, strict on the core): any violation fails `make test`.
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/capture_bench.py
	$(PY) bench/compare_bench.py
	$(PY) bench/diagnose_bench.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
