"""Bad input fails early, with a message naming the argument and the range.

Also: what happens with NaN logits (documented in `arithmetic_sample`): the row
ends with padding and log-prob NaN; nothing is sampled from NaN.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_encode, arithmetic_sample
from helpers import EOS_ID, NEG, constant_model

KEY = jax.random.PRNGKey(0)
MODEL = constant_model([[NEG, NEG, 0.0, -1.0]] * 4)
INPUTS = np.zeros((2, 5), np.int32)


def call(**overrides):
  kwargs = dict(inputs=INPUTS, cache={}, tokens_to_logits=MODEL, eos_id=EOS_ID,
                decode_rng=KEY, num_decodes=2, topk=0)
  kwargs.update(overrides)
  return arithmetic_sample(**kwargs)


@pytest.mark.parametrize("overrides,error,pattern", [
    (dict(num_decodes=0), ValueError, r"num_decodes must be an int >= 1"),
    (dict(num_decodes=2.0), TypeError, r"num_decodes must be an int"),
    (dict(temperature=-0.5), ValueError, r"temperature must be >= 0"),
    (dict(temperature=np.array([1.0, -1.0])), ValueError, r"temperature must be >= 0"),
    (dict(temperature=float("nan")), ValueError, r"temperature must be >= 0"),
    (dict(temperature=np.ones(3)), ValueError, r"temperature must be a scalar or have shape \[batch\]"),
    (dict(topk=2, topp=0.5), ValueError, r"At most one of topk and topp"),
    (dict(topk=-1), ValueError, r"topk must be an int >= 0"),
    (dict(topk=1.5), TypeError, r"topk must be an int >= 0"),
    (dict(topk=5), ValueError, r"topk must be <= the vocabulary size 4"),
    (dict(topp=1.5), ValueError, r"topp must be a float in \[0, 1\]"),
    (dict(topp=-0.1), ValueError, r"topp must be a float in \[0, 1\]"),
    (dict(codes=np.zeros((2, 3), np.float32)), ValueError, r"codes must have shape \[batch, num_decodes\] = \(2, 2\)"),
    (dict(codes=np.full((2, 2), 1.0, np.float32)), ValueError, r"codes must lie in \[0, 1\)"),
    (dict(codes=np.full((2, 2), -0.1, np.float32)), ValueError, r"codes must lie in \[0, 1\)"),
    (dict(codes=np.full((2, 2), np.nan, np.float32)), ValueError, r"codes must lie in \[0, 1\)"),
    (dict(codes=np.zeros((2, 2), np.int32)), TypeError, r"codes must be floats"),
    (dict(max_decode_steps=6), ValueError, r"Cannot decode more steps than the sequence length"),
    (dict(max_decode_steps=np.array([2, 9])), ValueError, r"max_decode_steps must be <= inputs.shape\[1\] = 5"),
    (dict(max_decode_steps=-1), ValueError, r"max_decode_steps must be >= 0"),
    (dict(max_decode_steps=np.ones(3, np.int32)), ValueError, r"max_decode_steps must be an int or have shape \[batch\]"),
    (dict(code_scheme="sobol"), ValueError, r"code_scheme must be a CodeScheme or one of"),
    (dict(inputs=np.zeros((5,), np.int32)), ValueError, r"inputs must be a 2-D integer array"),
    (dict(inputs=np.zeros((2, 5), np.float32)), TypeError, r"inputs must be a 2-D integer array"),
    (dict(inputs=[[0, 0]]), TypeError, r"inputs must be a 2-D integer array"),
    (dict(initial_index=np.array([0, 5])), ValueError, r"initial_index must lie in \[0, length\) = \[0, 5\)"),
    (dict(initial_index=np.array([1])), ValueError, r"initial_index must have shape \[batch\]"),
    (dict(eos_id=-1), ValueError, r"eos_id must be an int >= 0"),
    (dict(cache_offset=-1), ValueError, r"cache_offset must be an int >= 0"),
    (dict(tokens_to_logits=None), TypeError, r"tokens_to_logits must be callable"),
    (dict(state_callback_fn=3), TypeError, r"state_callback_fn must be callable or None"),
    (dict(decode_rng=np.zeros(3, np.uint32)), TypeError, r"decode_rng must be a PRNG key"),
    (dict(seed=-1), ValueError, r"seed must be in \[0, 2\*\*32\)"),
    (dict(seed=1.5), TypeError, r"seed must be an int in \[0, 2\*\*32\) or None"),
    (dict(max_decode_steps_hard_limit=-2, max_decode_steps=2), ValueError, r"max_decode_steps_hard_limit must be an int >= 0"),
])
def test_bad_arguments_are_rejected(overrides, error, pattern):
  with pytest.raises(error, match=pattern):
    call(**overrides)


def test_hard_limit_is_applied_before_the_length_check():
  decodes, _ = call(max_decode_steps=10, max_decode_steps_hard_limit=3, topk=1)
  np.testing.assert_array_equal(decodes[0, 0], [2, 2, 2, 0, 0])


def test_model_returning_wrong_shapes_is_named():
  bad = constant_model(np.zeros((3, 4)))
  with pytest.raises(ValueError, match=r"tokens_to_logits must return logits of shape"):
    call(tokens_to_logits=bad)

  def changes_cache(state):
    return jnp.zeros((state.cur_token.shape[0], 4)), {"new": jnp.zeros(())}

  with pytest.raises(ValueError, match=r"tokens_to_logits must return a cache"):
    call(tokens_to_logits=changes_cache)


def test_encode_rejects_bad_sequences():
  with pytest.raises(ValueError, match=r"sequences must have shape \[batch, num, length\]"):
    arithmetic_encode(INPUTS, {}, MODEL, EOS_ID, np.zeros((2, 5), np.int32), topk=0)
  with pytest.raises(TypeError, match=r"sequences must be an integer array"):
    arithmetic_encode(INPUTS, {}, MODEL, EOS_ID, np.zeros((2, 1, 5)), topk=0)


def nan_model(bad_row, bad_index):
  """Finite logits, except NaN for row `bad_row` when cur_index == bad_index."""

  def tokens_to_logits(state):
    rows = state.cur_token.shape[0]
    logits = jnp.broadcast_to(jnp.array([NEG, -0.5, 0.0, -1.0]), (rows, 4))
    poison = (jnp.arange(rows) == bad_row) & (state.cur_index == bad_index)
    return jnp.where(poison[:, None], jnp.nan, logits), {}

  return tokens_to_logits


@pytest.mark.parametrize("temperature", [1.0, 0.0, np.array([1.0, 0.0])])
def test_nan_logits_end_the_row_with_nan_log_prob(temperature):
  inputs = np.zeros((2, 6), np.int32)
  codes = np.full((2, 1), 0.99, np.float32)  # always the last token (3)
  decodes, log_probs = arithmetic_sample(inputs, {}, nan_model(1, 2), 9, KEY,
                                         topk=0, temperature=temperature, codes=codes)
  decodes, log_probs = np.asarray(decodes), np.asarray(log_probs)
  # Row 1 drew tokens at positions 0 and 1, met NaN at 2: padding from there.
  assert np.isnan(log_probs[1, 0])
  np.testing.assert_array_equal(decodes[1, 0, 2:], [0, 0, 0, 0])
  assert np.all(decodes[1, 0, :2] != 0)
  # Row 0 is untouched.
  assert np.isfinite(log_probs[0, 0]) and np.all(decodes[0, 0] != 0)


def test_nan_logits_inside_the_prompt_are_ignored():
  # Positions fed while teacher-forcing draw nothing, so NaN there is harmless.
  inputs = np.array([[0, 3, 3, 0, 0, 0], [0, 3, 3, 0, 0, 0]], np.int32)
  decodes, log_probs = arithmetic_sample(inputs, {}, nan_model(1, 0), 9, KEY, topk=0)
  assert np.all(np.isfinite(np.asarray(log_probs)))
  np.testing.assert_array_equal(np.asarray(decodes)[:, 0, :2], [[3, 3], [3, 3]])


def test_nan_logits_give_nan_log_width_when_encoding():
  sequences = np.array([[[2, 2, 2, 2, 2, 2]], [[2, 2, 2, 2, 2, 2]]], np.int32)
  low, log_width = arithmetic_encode(np.zeros((2, 6), np.int32), {}, nan_model(0, 3),
                                     9, sequences, topk=0)
  assert np.isnan(log_width[0, 0]) and np.isfinite(log_width[1, 0])


def test_seed_is_folded_into_the_key():
  # What `t5x infer` users bind in gin: same key, other seed, other samples.
  from arithmetic_decoding import ancestral_sample
  model = constant_model([[NEG, NEG, 0.0, 0.0]] * 8)  # 2 inputs x 4 samples
  for fn in (arithmetic_sample, ancestral_sample):
    kwargs = dict(inputs=INPUTS, cache={}, tokens_to_logits=model,
                  eos_id=EOS_ID, num_decodes=4, topk=0)
    seeded = fn(decode_rng=KEY, seed=5, **kwargs)
    folded = fn(decode_rng=jax.random.fold_in(KEY, 5), **kwargs)
    plain = fn(decode_rng=KEY, **kwargs)
    np.testing.assert_array_equal(seeded[0], folded[0])
    assert not np.array_equal(seeded[0], plain[0])
