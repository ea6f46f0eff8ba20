"""Pinned outputs: the same samples for the same key, across refactors.

`tests/data/pinned_decodes.json` was written by this file's `compute()` at
commit 287d353, before the decoding core was split into modules (run
`python tests/test_pinned.py --write` only when a change of outputs is
intended, and say so in the commit). Tokens must match exactly; log-probs,
codes and scores to 1e-5 (XLA may fuse a moved function differently).
"""

import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import (ancestral_sample, arithmetic_encode,
                                 arithmetic_sample)
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel

PINNED = pathlib.Path(__file__).parent / "data" / "pinned_decodes.json"
KEY = jax.random.PRNGKey(7)


def compute():
  """Every pinned case: name -> list of output arrays (as lists)."""
  toy = ToyLanguageModel()
  f = toy.tokens_to_logits
  inputs = np.zeros((2, 5), np.int32)
  cache = toy.init_cache(jnp.array([0, 3]))
  out = {}
  decodes, log_probs, codes = arithmetic_sample(
      inputs, cache, f, EOS_ID, KEY, num_decodes=4, topk=0, return_codes=True)
  out["lattice"] = (decodes, log_probs, codes)
  out["vdc_topk"] = arithmetic_sample(
      inputs, cache, f, EOS_ID, KEY, num_decodes=4, topk=3, temperature=0.6,
      code_scheme="van_der_corput")
  out["per_row_topp"] = arithmetic_sample(
      inputs, cache, f, EOS_ID, KEY, num_decodes=4, topk=0, topp=0.8,
      temperature=jnp.array([0.0, 0.8]))
  out["coarse"] = arithmetic_sample(inputs, cache, f, EOS_ID, KEY,
                                    num_decodes=4, topk=0, code_resolution=0.25)
  prompt = np.array([[0, 3, 4, 0, 0], [0, 2, 0, 0, 0]], np.int32)
  index = np.array([2, 1], np.int32)
  out["prompt"] = arithmetic_sample(
      prompt, toy.prefill([1, 2], prompt, index), f, EOS_ID, KEY,
      num_decodes=3, topk=0, initial_index=index)
  out["ancestral"] = ancestral_sample(inputs, cache, f, EOS_ID, KEY,
                                      num_decodes=4, topk=0, temperature=0.9)
  out["encode"] = arithmetic_encode(inputs, cache, f, EOS_ID, decodes, topk=0)
  out["beam"] = beam_search(np.zeros((2, 6), np.int32),
                            toy.init_cache(jnp.array([1, 2])), f, EOS_ID,
                            num_decodes=3, alpha=0.6)
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(1))
  tokens = jnp.array([[5, 9, 12, 1, 0, 0], [7, 3, 1, 0, 0, 0]], jnp.int32)

  @jax.jit
  def t5(params, tokens, key):
    inputs, cache, step = model.decode_inputs(params, tokens, 8, 4)
    return arithmetic_sample(inputs, cache, step, 1, key, num_decodes=4, topk=0)

  out["tiny_t5"] = t5(params, tokens, KEY)
  return {k: [np.asarray(a).tolist() for a in v] for k, v in out.items()}


@pytest.fixture(scope="module")
def computed():
  return compute()


CASES = ("lattice", "vdc_topk", "per_row_topp", "coarse", "prompt", "ancestral",
         "encode", "beam", "tiny_t5")


@pytest.mark.parametrize("name", CASES)
def test_outputs_are_pinned(computed, name):
  expected = json.loads(PINNED.read_text())[name]
  got = computed[name]
  assert len(got) == len(expected)
  for g, e in zip(got, expected):
    g, e = np.asarray(g), np.asarray(e)
    if np.issubdtype(e.dtype, np.integer):
      np.testing.assert_array_equal(g, e)
    else:
      np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  if "--write" in sys.argv:
    PINNED.write_text(json.dumps(compute()) + "\n")
