"""Shared test configuration.

* Implicit rank promotion is an error (as in nanodo's tests): shape bugs that
  broadcasting would hide fail loudly.
* Hypothesis profiles: `ci` (CI=true) runs the property tests at 1,000
  examples; `dev` (the default) at 400; `fast` (`make test-fast`) at 25.
  (Derandomized: each profile runs the same examples every time.)
* JAX runs on the CPU (JAX_PLATFORMS=cpu unless set): with libtpu installed
  for the AOT tests, jax would otherwise probe for TPU chips first.
* One run shares JAX's persistent compilation cache: a program is compiled
  once per run, whichever pytest worker or subprocess needs it first (the
  directory is made by the process that starts the run, inherited by its
  workers through the environment, and removed at its end). Every program
  is kept, however quick its compile: the tiers compile thousands of small
  ones (eager operations on new shapes), and of those in `make test-fast`
  about a fifth are taken from the cache instead (`scripts/test_budget.py`
  prints the count).
* ARITHMETIC_TEST_COMPILE_LOG=FOLDER: each process appends one JSON line
  per test to FOLDER/PID.jsonl: its seconds spent tracing, lowering and
  compiling (persistent-cache hits and their seconds apart), and whether
  the compiled programs were cleared after it. `scripts/test_budget.py`
  sets it and sums it (a tier's time is mostly compiles).
"""

import atexit
import collections
import json
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "ARITHMETIC_TEST_JAX_CACHE" not in os.environ:
  os.environ["ARITHMETIC_TEST_JAX_CACHE"] = tempfile.mkdtemp(
      prefix="arithmetic-jax-cache-")
  atexit.register(shutil.rmtree, os.environ["ARITHMETIC_TEST_JAX_CACHE"],
                  ignore_errors=True)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.environ["ARITHMETIC_TEST_JAX_CACHE"])
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax  # noqa: E402
import pytest
from hypothesis import HealthCheck, settings

from arithmetic_apps import programs

jax.config.update("jax_numpy_rank_promotion", "raise")

# jax.monitoring's events -> the compile log's fields.
_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_hit_seconds",
}
_spent = collections.Counter()
_COMPILE_LOG = os.environ.get("ARITHMETIC_TEST_COMPILE_LOG")
if _COMPILE_LOG:
  def _on_duration(event, duration_secs, **_):
    if event in _COMPILE_EVENTS:
      _spent[_COMPILE_EVENTS[event]] += duration_secs
      _spent[_COMPILE_EVENTS[event] + "_count"] += 1

  jax.monitoring.register_event_duration_secs_listener(_on_duration)

settings.register_profile(
    "ci", max_examples=1_000, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "dev", max_examples=400, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "fast", max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get(
    "HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


# How a decode function is run in the protocol tests: through the library's
# own jit, inside a user's jax.jit (every array argument traced), or with jit
# disabled (the loop runs as Python, op by op).
RUN_MODES = ("library_jit", "outer_jit", "no_jit")


# `make test-fast` runs the library's own jit; the other two modes (each a
# compile of its own, and jit disabled runs the loop op by op) are slow.
@pytest.fixture(params=[pytest.param(mode, marks=pytest.mark.slow)
                        if mode != "library_jit" else mode
                        for mode in RUN_MODES])
def run_mode(request):
  return request.param


# A script the multi-device tests run in subprocesses, not a test module.
collect_ignore = ["multidevice_worker.py"]


def pytest_configure(config):
  config.addinivalue_line(
      "markers",
      "slow: subprocess multi-device runs, TPU-compiler and mT5-small "
      "compiles, end-to-end runs of the applications (`make test-fast` "
      "leaves them out; `make test` runs them)")


# XLA:CPU keeps each compiled program of a process mapped in memory, and
# one pytest worker runs many modules: after any test that leaves the
# process above `programs.MAX_MAPPINGS` mappings the compiled programs are
# cleared; below it they are kept, so tests that run the same programs (the
# translator's, at the same shapes) compile them once.
@pytest.fixture(autouse=True)
def _compiled_programs_kept_in_bounds(request):
  before = collections.Counter(_spent)
  yield
  cleared = programs.release_if_many()
  if _COMPILE_LOG:
    spent = {k: round(v, 3) for k, v in (_spent - before).items()}
    with open(os.path.join(_COMPILE_LOG, f"{os.getpid()}.jsonl"), "a") as f:
      f.write(json.dumps(dict(test=request.node.nodeid, cleared=cleared,
                              **spent)) + "\n")
