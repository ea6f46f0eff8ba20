"""Integration tests against the real T5X (google-research/t5x).

They run in `make test-t5x` (its own `.venv-t5x`, see the Makefile), which
sets REQUIRE_T5X=1: there a missing T5X is an error, never a silent pass.
Elsewhere (`make test`) they are skipped with the reason printed.
"""

import os

import jax
import pytest

# T5X's own code relies on NumPy rank promotion (one-hot embeddings), which
# the parent conftest makes an error for our library's tests.
jax.config.update("jax_numpy_rank_promotion", "allow")

try:
  import t5x  # noqa: F401  pylint: disable=unused-import
  _MISSING = None
except ImportError as error:  # pragma: no cover - depends on the venv
  _MISSING = f"T5X is not installed ({error}); run `make test-t5x`"


def pytest_collection_modifyitems(config, items):
  del config
  if _MISSING is None:
    return
  if os.environ.get("REQUIRE_T5X") == "1":
    raise pytest.UsageError(f"REQUIRE_T5X=1 but {_MISSING}")
  here = os.path.dirname(__file__)
  for item in items:
    if str(item.fspath).startswith(here):
      item.add_marker(pytest.mark.skip(reason=_MISSING))
