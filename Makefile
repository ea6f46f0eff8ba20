# Two entry points, each self-contained on a fresh machine with Python 3.11:
#   make demo   -- install what the demo needs into .venv, then run it
#   make test   -- install what the tests need into .venv, then run pytest
# Nothing is installed into the system Python.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench experiments clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.demo-installed: setup.py | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[demo]'
	touch $@

$(VENV)/.test-installed: setup.py | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test,demo,bench]'
	touch $@

# make demo ARGS='--text "The Lord is my shepherd."' translates your own text.
demo: $(VENV)/.demo-installed
	$(PY) -m arithmetic_decoding.cli.demo $(ARGS)

test: $(VENV)/.test-installed
	$(PY) -m pytest -q --doctest-modules arithmetic_decoding tests

bench: $(VENV)/.test-installed
	$(PY) scripts/bench_sampler.py
	$(PY) scripts/bench_decode.py

experiments: $(VENV)/.test-installed
	$(PY) scripts/evaluate_translation.py
	$(PY) scripts/experiments.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
