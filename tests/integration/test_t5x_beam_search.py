"""Our beam_search against T5X's decoding.beam_search on the same model."""

import pytest

pytest.importorskip("t5x", reason="T5X is not installed; run `make test-t5x`")


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from t5x import decoding

from arithmetic_decoding.beam_search import beam_search

VOCAB, PERIOD, EOS = 12, 3, 1


def _bigram_model(seed: int):
  """Random logits by (position mod PERIOD, previous token); the position
  lives in the cache, so cache expansion and beam reordering matter."""
  table = 2.0 * jax.random.normal(jax.random.PRNGKey(seed),
                                  (PERIOD, VOCAB, VOCAB))

  def tokens_to_logits(state):
    position = state.cache["position"]  # [rows]
    logits = table[position % PERIOD, state.cur_token[:, 0]]  # [rows, V]
    return logits, {"position": position + 1}

  return tokens_to_logits


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_same_beams_and_scores_as_t5x(alpha, seed):
  # Row 0 without a prompt, rows 1 and 2 with forced prompts (non-zero inputs).
  inputs = jnp.array([[0, 0, 0, 0, 0, 0, 0],
                      [0, 5, 0, 0, 0, 0, 0],
                      [0, 7, 3, 0, 0, 0, 0]], jnp.int32)
  cache = {"position": jnp.zeros((3,), jnp.int32)}
  tokens_to_logits = _bigram_model(seed)
  ours, our_scores = beam_search(inputs, cache, tokens_to_logits, EOS,
                                 num_decodes=4, alpha=alpha)
  theirs, their_scores = decoding.beam_search(
      inputs, cache, tokens_to_logits, EOS, num_decodes=4, alpha=alpha)
  np.testing.assert_array_equal(ours, theirs)
  np.testing.assert_allclose(our_scores, their_scores, rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(ours)[1, :, 0] == 5)  # the prompt is kept
  assert len({tuple(b) for b in np.asarray(ours)[0]}) == 4


@pytest.mark.parametrize("max_decode_len", [3, 7])
def test_max_decode_len_as_t5x(max_decode_len):
  inputs = jnp.zeros((2, 7), jnp.int32)
  cache = {"position": jnp.zeros((2,), jnp.int32)}
  tokens_to_logits = _bigram_model(3)
  ours = beam_search(inputs, cache, tokens_to_logits, EOS, num_decodes=3,
                     alpha=0.6, max_decode_len=max_decode_len)
  theirs = decoding.beam_search(inputs, cache, tokens_to_logits, EOS,
                                num_decodes=3, alpha=0.6,
                                max_decode_len=max_decode_len)
  np.testing.assert_array_equal(ours[0], theirs[0])
  np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)
