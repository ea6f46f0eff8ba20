"""Integration tests against the real T5X (google-research/t5x).

They run in `make test-t5x` (its own `.venv-t5x`, see the Makefile), which
sets REQUIRE_T5X=1: there a missing T5X is an error, never a silent pass.
Elsewhere (`make test`) each module skips itself with the reason printed
(`pytest.importorskip`).
"""

import importlib.util
import os

import jax
import pytest

if os.environ.get("REQUIRE_T5X") == "1" and importlib.util.find_spec("t5x") is None:
  raise pytest.UsageError("REQUIRE_T5X=1 but T5X is not installed in this "
                          "Python; run `make test-t5x`.")

# T5X's own code relies on NumPy rank promotion (one-hot embeddings), which
# the parent conftest makes an error for our library's tests.
jax.config.update("jax_numpy_rank_promotion", "allow")

# Helper modules, imported by the tests: not collected themselves (with
# --doctest-modules they would be imported without T5X).
collect_ignore = ["decoder_only_lm.py", "infer_runs.py", "t5x_helpers.py",
                  "t5x_tasks.py"]
