# make demo   set up .venv (once) and run the demo on synthetic ticks
# make test   set up .venv (once) and run the test suite; FULL=1 for long runs
# make clean  remove build outputs and caches; make distclean also the venv
#
# Setup is keyed on the content of pyproject.toml and setup.py: it reruns only
# when they change (or the venv is missing), so repeated runs start at once.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
KEY    := $(shell cat pyproject.toml setup.py 2>/dev/null | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.gpu_mr-setup-$(KEY)
PYTEST_ARGS ?=

ifeq ($(FULL),1)
export GPU_MR_FULL_TESTS := 1
endif

.PHONY: all demo test setup clean distclean

all: test

demo: $(STAMP)
	$(BIN)/gpu-mr demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests $(PYTEST_ARGS)

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	rm -f $(VENV)/.gpu_mr-setup-*
	touch $@

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
