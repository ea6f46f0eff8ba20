"""Pinned outputs: the same samples for the same key, across refactors.

`tests/data/pinned_decodes.json` was written by this file's `compute()` at
commit 287d353, before the decoding core was split into modules, and the
`tiny_t5_coarse` case added later (run `python tests/test_pinned.py --write`
only when a change of outputs is intended, and say so in the commit).
Log-probs, codes and scores must match to 1e-5 (XLA may fuse a moved
function differently).

What is pinned is what does not depend on the machine:

* The toy-model cases are peaked (a handful of tokens with well separated
  probabilities): their tokens must match exactly.
* `tiny_t5_coarse` decodes the random-weight tiny T5 with
  `code_resolution = 1/N`: each token is decided by a code only to the depth
  of the lattice spacing, far from float32's last bits, so its tokens must
  match exactly too.
* `tiny_t5` decodes that nearly flat model (~1/64 per token) at the default,
  full float32 resolution. After three or four tokens a code's interval is
  a few float32 ulps wide, and another CPU's last bits of the logits pick a
  neighbour. Its tokens must match exactly where the code decides them with
  a margin: from the first token on, as long as the code's residual sits
  farther from its token's interval edges than a bound on the float error
  (`FLOAT_ERROR`, amplified by 1/p at each step as the residual is
  rescaled). `test_tiny_t5_margin` finds that prefix with the library's own
  `token_interval` on teacher-forced logits, and checks that it is not empty.
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
from arithmetic_decoding.categorical import token_interval
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

  @jax.jit
  def t5_coarse(params, tokens, key):
    inputs, cache, step = model.decode_inputs(params, tokens, 8, 4)
    return arithmetic_sample(inputs, cache, step, 1, key, num_decodes=4,
                             topk=0, code_resolution=0.25)

  out["tiny_t5_coarse"] = t5_coarse(params, tokens, KEY)
  return {k: [np.asarray(a).tolist() for a in v] for k, v in out.items()}


@pytest.fixture(scope="module")
def computed():
  return compute()


# Exact on every machine: peaked models, or codes decided to depth 1/N.
CASES = ("lattice", "vdc_topk", "per_row_topp", "coarse", "prompt", "ancestral",
         "encode", "beam", "tiny_t5_coarse")

# A bound on how far another machine's interval edges (a cumulative sum of
# float32 probabilities) may sit from ours, as a fraction of the interval.
FLOAT_ERROR = 1e-5


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


def decided_prefix(code, lows, widths):
  """How many leading tokens `code` decides with a margin beyond the float
  error: lows / widths [T] are the pinned tokens' intervals, step by step.

  >>> decided_prefix(0.5, np.array([0.4, 0.0]), np.array([0.2, 0.25]))
  1
  """
  residual, error = float(code), FLOAT_ERROR
  for t, (low, width) in enumerate(zip(lows, widths)):
    margin = min(residual - low, low + width - residual)
    if margin <= error:
      return t
    residual = (residual - low) / width
    error = (error + FLOAT_ERROR) / width
  return len(lows)


@pytest.mark.slow
def test_tiny_t5_margin():
  """`tiny_t5`: tokens as pinned wherever the code decides them with a
  margin beyond the float error."""
  decodes = np.asarray(json.loads(PINNED.read_text())["tiny_t5"][0])
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(1))
  tokens = jnp.array([[5, 9, 12, 1, 0, 0], [7, 3, 1, 0, 0, 0]], jnp.int32)
  batch, n, length = decodes.shape

  @jax.jit
  def t5(params, tokens, key):
    inputs, cache, step = model.decode_inputs(params, tokens, length, n)
    return arithmetic_sample(inputs, cache, step, 1, key, num_decodes=n,
                             topk=0, return_codes=True)

  got, _, got_codes = (np.asarray(a) for a in t5(params, tokens, KEY))
  # Teacher-forced logits of the pinned samples: [B*N, L, V].
  targets = decodes.reshape(batch * n, length)
  decoder_inputs = np.pad(targets[:, :-1], ((0, 0), (1, 0)))
  logits = model.logits(params, jnp.repeat(tokens, n, axis=0), decoder_inputs)
  checked = 0
  for b in range(batch):
    for s in range(n):
      row = b * n + s
      interval = token_interval(logits[row], jnp.asarray(targets[row]))
      lows, widths = np.asarray(interval.low), np.asarray(interval.width)
      # This sample's code: the one of the input's codes its first token owns
      # (the lattice's codes are 1/N apart, the first tokens ~1/64 wide).
      owners = [j for j in range(n)
                if lows[0] <= got_codes[b, j] < lows[0] + widths[0]]
      assert len(owners) == 1, (b, s, owners)
      # Decisions up to EOS (id 1), and before a code's prefix falls below
      # 2**-22 (where a fresh per-row uniform takes over).
      eos = list(targets[row]).index(1) + 1 if 1 in targets[row] else length
      deep = int(np.sum(np.cumsum(-np.log(widths)) < 22 * np.log(2)))
      end = min(eos, deep)
      k = decided_prefix(got_codes[b, owners[0]], lows[:end], widths[:end])
      np.testing.assert_array_equal(got[b, owners[0], :k], decodes[b, s, :k])
      checked += k
  # Not vacuous: at least every sample's first token (16 of the 64 tokens
  # are decided with a margin on the machine that wrote this check).
  assert checked >= batch * n, checked


if __name__ == "__main__":
  if "--write" in sys.argv:
    PINNED.write_text(json.dumps(compute()) + "\n")
