# The two commands of the README: `make demo` and `make test`. Both set up .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# torch is pinned: a CPU wheel of this release is on the machine's disk; an unpinned torch
# would pull a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: venv venv-msprobe venv-msprobe-prev demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[torch,onnx,tf,dask,test,lint,report,browser,explorer]" "$(TORCH_PIN)"
	$(PY) -m opdiff.warm
	touch $(STAMP)

venv: $(STAMP)

# msprobe (mindstudio-probe) for the msprobe-reader tests only, in its own venv: it wraps torch's
# APIs on import and pulls heavy dependencies; the tests run it as a subprocess.
MSPROBE_VENV := .venv-msprobe
MSPROBE_PINS := mindstudio-probe==26.2.0 transformers==5.23.0
$(MSPROBE_VENV)/.installed:
	test -x $(MSPROBE_VENV)/bin/python || $(PYTHON) -m venv $(MSPROBE_VENV)
	$(MSPROBE_VENV)/bin/pip install -q "$(TORCH_PIN)"
	$(MSPROBE_VENV)/bin/pip install -q $(MSPROBE_PINS) "$(TORCH_PIN)"
	touch $@

venv-msprobe: $(MSPROBE_VENV)/.installed

# The previous mindstudio-probe release, over .venv-msprobe's torch and transformers (a .pth file):
# OPDIFF_MSPROBE_PYTHON=$(MSPROBE_PREV_VENV)/bin/python .venv/bin/python -m pytest tests/test_reader_msprobe.py
MSPROBE_PREV_VENV := .venv-msprobe-prev
$(MSPROBE_PREV_VENV)/.installed: $(MSPROBE_VENV)/.installed
	test -x $(MSPROBE_PREV_VENV)/bin/python || $(PYTHON) -m venv $(MSPROBE_PREV_VENV)
	$(MSPROBE_VENV)/bin/python -c "import site; print(site.getsitepackages()[0])" > \
	  "$$($(MSPROBE_PREV_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/msprobe_base.pth"
	$(MSPROBE_PREV_VENV)/bin/pip install -q --no-deps mindstudio-probe==26.1.0.post1
	touch $@

venv-msprobe-prev: $(MSPROBE_PREV_VENV)/.installed

demo: $(STAMP)
	$(VENV)/bin/opdiff demo --force

test: lint $(MSPROBE_VENV)/.installed
	$(PY) -m pytest -n 2 -q

# The fast tier while working: every test but the slow ones (tests/conftest.py SLOW_MODULES: real
# models, other tools' venvs, Dask, the browser, the wheel build). `make test` runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -q -m "not slow"

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
	rm -rf $(VENV) $(MSPROBE_VENV) build *.egg-info src/*.egg-info
