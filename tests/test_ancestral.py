"""`ancestral.categorical_rows` against `jax.random.categorical`, bit for bit.

The pruned draw skips the noise of tokens that cannot win; every token it
returns must be the one `jax.vmap(jax.random.categorical)` returns for the
same keys and logits, on every branch (each pooled capacity and the full
draw), with ties, -inf, NaN and +inf, odd vocabularies, typed keys and
JAX settings that rule the pruning out.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import ancestral
from arithmetic_decoding.ancestral import (BLOCK, CAPACITIES, GUMBEL_MAX,
                                           categorical_rows, gumbel_from_bits,
                                           token_bits)

_reference = jax.jit(lambda keys, x: jax.vmap(jax.random.categorical)(keys, x))
_pruned = jax.jit(categorical_rows)


def _keys(seed, rows):
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
      jax.random.PRNGKey(seed), jnp.arange(rows))


def _branch(keys, logits):
  """Which branch categorical_rows takes, recomputed here in numpy from
  jax.random's own noise: the index among the capacities, "full" (every
  token's noise) or "irregular" (NaN or +inf: jax.random.categorical)."""
  x = np.asarray(logits)
  rows, vocab = x.shape
  if np.isnan(x).any() or (x == np.inf).any():
    return "irregular"
  noise = np.asarray(jax.vmap(lambda k: jax.random.gumbel(k, (vocab,)))(keys))
  blocks = -(-vocab // BLOCK)
  padded = np.full((rows, blocks * BLOCK), -np.inf, np.float32)
  padded[:, :vocab] = x
  block_max = padded.reshape(rows, blocks, BLOCK).max(axis=2)
  top = x.argmax(axis=1)
  bound = (x[np.arange(rows), top] + noise[np.arange(rows), top]).astype(
      np.float32)
  count = int((block_max + np.float32(GUMBEL_MAX) >= bound[:, None]).sum())
  caps = [c * rows for c in CAPACITIES if c <= blocks / 3]
  for i, cap in enumerate(caps):
    if count <= cap:
      return i
  return "full"


def test_gumbel_bound_holds_for_every_mantissa():
  # All 2^23 uniforms jax.random can draw in float32: the noise never
  # exceeds GUMBEL_MAX and never decreases with the bits.
  bits = (jnp.arange(2**23, dtype=jnp.uint32) << 9) | jnp.uint32(0x1FF)
  noise = np.asarray(jax.jit(gumbel_from_bits)(bits))
  assert noise.max() <= GUMBEL_MAX
  assert noise.max() == np.float32(15.942385)
  assert (np.diff(noise) >= 0).all()


def test_threefry_equals_jaxs_primitive_on_random_words():
  # Keys and both counter words over the whole uint32 range (carries,
  # the top bit), against JAX's own primitive, element for element.
  from jax.extend.random import threefry2x32_p
  words = np.random.default_rng(0).integers(
      0, 2**32, size=(4, 1 << 16), dtype=np.uint32)
  words[:, :4] = [[0], [2**32 - 1], [1], [2**31]]
  words = jnp.asarray(words)
  mine = jax.jit(ancestral.threefry2x32)(*words)
  theirs = jax.jit(threefry2x32_p.bind)(*words)
  for a, b in zip(mine, theirs):
    np.testing.assert_array_equal(a, b)


def test_token_bits_broadcast_keys_over_tokens():
  # [R, 1, 2] keys against [R, V] tokens: each row its key's bits.
  keys = _keys(3, 5)
  tokens = jnp.tile(jnp.arange(300), (5, 1))
  np.testing.assert_array_equal(
      token_bits(keys[:, None, :], tokens),
      jax.vmap(lambda k: jax.random.bits(k, (300,)))(keys))


@pytest.mark.parametrize("vocab", [1, 2, 17, 8000])
def test_noise_and_bits_are_jax_randoms(vocab):
  key = jax.random.PRNGKey(vocab)
  bits = jax.random.bits(key, (vocab,))
  tokens = jnp.arange(vocab)
  np.testing.assert_array_equal(
      token_bits(jnp.broadcast_to(key, (vocab, 2)), tokens), bits)
  np.testing.assert_array_equal(gumbel_from_bits(bits),
                                jax.random.gumbel(key, (vocab,)))


def _case(rng, rows, vocab, scale, kind):
  x = (rng.standard_normal((rows, vocab)) * scale).astype(np.float32)
  if kind == "neg_inf":
    x[rng.random((rows, vocab)) < 0.7] = -np.inf
    x[:, 0] = np.where(np.isfinite(x).any(axis=1), x[:, 0], 1.0)
  elif kind == "ties":
    x = np.round(x / scale) * scale  # many equal logits
  elif kind == "one_hot":
    x = np.full((rows, vocab), -np.inf, np.float32)
    x[np.arange(rows), rng.integers(0, vocab, rows)] = 0.0
  elif kind == "irregular":
    x[rng.integers(0, rows), rng.integers(0, vocab)] = rng.choice(
        [np.nan, np.inf])
  elif kind == "all_neg_inf_row":
    x[rng.integers(0, rows)] = -np.inf
  return x


KINDS = ("plain", "neg_inf", "ties", "one_hot", "irregular", "all_neg_inf_row")


@pytest.mark.slow
def test_equals_jax_random_categorical_on_every_branch():
  rng = np.random.default_rng(0)
  branches = set()
  # Few shapes (each compiles its programs), many values: the branch a row
  # takes follows its values.
  for trial in range(90):
    rows = int(rng.choice([1, 33]))
    vocab = int(rng.choice([2, 17, 4099]))
    scale = float(rng.choice([0.3, 2.0, 8.0, 30.0, 200.0]))
    kind = KINDS[trial % len(KINDS)]
    x = jnp.asarray(_case(rng, rows, vocab, scale, kind))
    keys = _keys(trial, rows)
    branches.add(_branch(keys, x))
    np.testing.assert_array_equal(
        _pruned(keys, x), _reference(keys, x),
        err_msg=f"rows={rows} vocab={vocab} scale={scale} kind={kind}")
  # A sweep of scales that walks through every branch at V = 4099 (pooled
  # capacities of 2-32 blocks per row: at most a third of its 257 blocks)
  # and V = 100000 (2-2048).
  for vocab, scales in ((4099, (1.0, 12.0, 20.0, 40.0, 100.0)),
                        (100000, (6.0, 7.0, 8.0, 10.0, 12.0, 20.0))):
    for scale in scales:
      x = jnp.asarray(rng.standard_normal((8, vocab)).astype(np.float32)
                      * scale)
      keys = _keys(int(10 * scale), 8)
      branch = _branch(keys, x)
      branches.add(branch if vocab == 4099 else (vocab, branch))
      np.testing.assert_array_equal(_pruned(keys, x), _reference(keys, x))
  # Every pooled capacity, the full draw and the irregular one were
  # exercised.
  assert branches >= {0, 1, 2, "full", "irregular", (100000, 3),
                      (100000, 4), (100000, 5)}, branches


_pruned_shared = jax.jit(lambda keys, x, rows: categorical_rows(
    keys, x, rows=rows))


@pytest.mark.slow
def test_rows_sharing_logits_draw_what_their_own_copies_draw():
  """With `rows`, row r draws from logits[rows[r]] with its own key:
  `jax.random.categorical` on the gathered logits, bit for bit, on every
  branch."""
  rng = np.random.default_rng(3)
  branches = set()
  # 12 shapes (each compiles its programs), many values: the branch a row
  # takes follows its values.
  for trial in range(40):
    shared = int(rng.choice([1, 5]))
    rows = int(rng.choice([33, 64]))
    vocab = int(rng.choice([17, 1000, 4099]))
    scale = float(rng.choice([1.0, 8.0, 30.0, 200.0]))
    kind = KINDS[trial % len(KINDS)]
    x = jnp.asarray(_case(rng, shared, vocab, scale, kind))
    owner = jnp.asarray(rng.integers(0, shared, rows), jnp.int32)
    keys = _keys(100 + trial, rows)
    branches.add(_branch(keys, x[owner]))
    np.testing.assert_array_equal(
        _pruned_shared(keys, x, owner), _reference(keys, x[owner]),
        err_msg=f"shared={shared} rows={rows} vocab={vocab} kind={kind}")
  assert branches >= {0, 1, "full"}, branches


def test_large_rows_at_the_translators_shape():
  # 512 rows of 8,000 tokens, peaked (pooled) and flat (full draw).
  rng = np.random.default_rng(1)
  keys = _keys(7, 512)
  for scale, pooled in ((40.0, True), (1.0, False)):
    x = jnp.asarray(rng.standard_normal((512, 8000)).astype(np.float32)
                    * scale)
    assert (_branch(keys, x) != "full") == pooled
    np.testing.assert_array_equal(_pruned(keys, x), _reference(keys, x))


@pytest.mark.slow
def test_typed_keys_and_settings_that_rule_pruning_out():
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.standard_normal((8, 300)).astype(np.float32) * 20)
  typed = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
      jax.random.key(3), jnp.arange(8))
  assert ancestral.pruning_applies(typed, x)
  rbg = jax.random.split(jax.random.key(3, impl="rbg"), 8)
  assert not ancestral.pruning_applies(rbg, x)
  np.testing.assert_array_equal(categorical_rows(rbg, x), _reference(rbg, x))
  np.testing.assert_array_equal(categorical_rows(typed, x),
                                _reference(typed, x))
  raw = _keys(3, 8)
  assert not ancestral.pruning_applies(raw, x.astype(jnp.bfloat16))
  np.testing.assert_array_equal(
      categorical_rows(raw, x.astype(jnp.bfloat16)),
      _reference(raw, x.astype(jnp.bfloat16)))
  with jax.threefry_partitionable(False):
    assert not ancestral.pruning_applies(raw, x)
    np.testing.assert_array_equal(categorical_rows(raw, x),
                                  jax.vmap(jax.random.categorical)(raw, x))
  jax.config.update("jax_high_dynamic_range_gumbel", True)
  try:
    assert not ancestral.pruning_applies(raw, x)
    np.testing.assert_array_equal(categorical_rows(raw, x),
                                  jax.vmap(jax.random.categorical)(raw, x))
  finally:
    jax.config.update("jax_high_dynamic_range_gumbel", False)
