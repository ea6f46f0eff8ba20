"""The README's usage example runs as printed, and what its comments say
holds: shapes, and every sample's code inside its own code interval."""

import pathlib

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_usage_example_runs_and_its_comments_hold():
  code = README.read_text().split("```python\n")[1].split("```")[0]
  names = {}
  exec(compile(code, "README.md", "exec"), names)  # pylint: disable=exec-used
  decodes, log_probs, codes = (np.asarray(names[k]) for k in
                               ("decodes", "log_probs", "codes"))
  assert decodes.shape == (2, 8, 4) and log_probs.shape == codes.shape == (2, 8)
  low, width = np.asarray(names["low"]), np.exp(np.asarray(names["log_width"]))
  # float32 ends: a code sits within rounding of its interval.
  assert np.all((low <= codes + 1e-6) & (codes < low + width + 1e-6))
