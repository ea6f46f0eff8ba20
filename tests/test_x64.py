"""The library gives the same samples with JAX_ENABLE_X64=1 (some T5X users
enable 64-bit types): every internal array has an explicit 32-bit dtype."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = """
import json, jax, numpy as np
from arithmetic_decoding import arithmetic_encode, arithmetic_sample
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel
model = ToyLanguageModel()
inputs = np.zeros((2, 5), np.int64)
cache = model.init_cache(np.array([0, 3]))
out = {}
for name, kw in {"sample": dict(topk=0), "greedy": dict(temperature=0.0),
                 "per_row": dict(temperature=np.array([0.5, 0.0]), topk=3),
                 "topp": dict(topp=0.8, topk=0)}.items():
  d, lp = arithmetic_sample(inputs, cache, model.tokens_to_logits, EOS_ID,
                            jax.random.PRNGKey(4), num_decodes=4, **kw)
  low, lw = arithmetic_encode(inputs, cache, model.tokens_to_logits, EOS_ID, d, **kw)
  out[name] = [np.asarray(d).tolist(), np.asarray(lp).tolist(),
               np.asarray(low).tolist(), np.asarray(lw).tolist(), str(lp.dtype)]
print(json.dumps(out))
"""


# Every decode again, in two subprocesses: slow.
pytestmark = pytest.mark.slow

def test_same_results_with_x64_enabled():
  env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
  result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                          capture_output=True, text=True)
  x64 = json.loads(result.stdout)
  env32 = dict(os.environ, JAX_ENABLE_X64="0", JAX_PLATFORMS="cpu")
  result32 = subprocess.run([sys.executable, "-c", SCRIPT], env=env32, check=True,
                            capture_output=True, text=True)
  x32 = json.loads(result32.stdout)
  for name in x32:
    decodes, log_probs, low, log_width, dtype = x64[name]
    assert dtype == "float32"
    np.testing.assert_array_equal(decodes, x32[name][0])
    np.testing.assert_allclose(log_probs, x32[name][1], rtol=1e-6)
    np.testing.assert_allclose(low, x32[name][2], atol=1e-7)
    np.testing.assert_allclose(log_width, x32[name][3], rtol=1e-6)
