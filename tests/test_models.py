"""The T5.1.1 / mT5 encoder-decoder: cached decoding equals the full pass;
both models' random parameters are those of flax's op-by-op init."""

import dataclasses
import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.models import initializers
from arithmetic_decoding.models import (PRESETS, TINY, DecoderOnlyModel,
                                        EncoderDecoderModel, T5Config,
                                        init_cache, preset,
                                        relative_position_bucket)
from arithmetic_decoding.protocol import DecodingState
from arithmetic_decoding.sharding import LOGICAL_AXIS_RULES
from helpers import teacher_forced_log_probs

EOS = 1


def _batch(seed, batch=3, enc_len=7, dec_len=6, vocab=64):
  k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
  enc = jax.random.randint(k1, (batch, enc_len), 2, vocab)
  # Padding at the end of two rows.
  enc = enc.at[1, 5:].set(0).at[2, 3:].set(0)
  targets = jax.random.randint(k2, (batch, dec_len - 1), 2, vocab)
  dec = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), targets], axis=1)
  return enc, dec


def _step_fn(model, params, enc):
  """tokens_to_logits over the rows of `enc` (no N-fold expansion)."""
  _, _, context = model.decode_start(params, enc, 1)
  return model.step_fn(params, context)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tol", [("float32", 2e-5), ("bfloat16", 6e-2)])
def test_cached_steps_equal_the_teacher_forced_pass(dtype, tol):
  model = EncoderDecoderModel(preset("tiny", dtype=dtype))
  params = model.init(jax.random.PRNGKey(0))
  enc, dec = _batch(1)
  full = model.logits(params, enc, dec)  # [B, T, V]
  assert full.dtype == jnp.dtype(dtype)
  step = jax.jit(_step_fn(model, params, enc))
  cache = init_cache(model.config, 3, dec.shape[1])
  for i in range(dec.shape[1]):
    state = DecodingState(jnp.full((3,), i, jnp.int32), dec, dec[:, i:i + 1],
                          cache)
    logits, cache = step(state)
    np.testing.assert_allclose(np.asarray(logits, np.float32),
                               np.asarray(full[:, i], np.float32),
                               atol=tol * float(jnp.abs(full).max()))


@pytest.mark.slow
def test_rows_at_different_positions_decode_independently():
  # T5X's initial_index leaves rows at different positions: a row's logits
  # must not depend on where the other rows are.
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  enc, dec = _batch(2)
  full = model.logits(params, enc, dec)
  step = _step_fn(model, params, enc)
  cache = init_cache(model.config, 3, dec.shape[1])
  # Fill row r up to position r + 2, all rows in one call per step.
  ends = np.array([2, 3, 4])
  for i in range(5):
    index = jnp.asarray(np.minimum(i, ends), jnp.int32)
    token = jnp.take_along_axis(dec, index[:, None], axis=1)
    logits, new_cache = step(DecodingState(index, dec, token, cache))
    # Rows past their end rewrite their last position with the same values.
    cache = new_cache
  for r in range(3):
    np.testing.assert_allclose(logits[r], full[r, ends[r]], atol=1e-5)


@pytest.mark.slow
def test_encoder_padding_is_invisible():
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  enc, dec = _batch(3)
  other = enc.at[2, 3:].set(0)  # row 2 is already padded from 3 on
  assert bool(jnp.all(other == enc))
  longer = jnp.pad(enc, ((0, 0), (0, 4)))  # more padding, same tokens
  np.testing.assert_allclose(model.logits(params, enc, dec),
                             model.logits(params, longer, dec), atol=1e-5)


@pytest.mark.slow
def test_sampled_log_probs_equal_the_full_pass():
  """arithmetic_sample's reported log-probs are the model's: recompute them
  from one teacher-forced pass over the sampled sequences."""
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  enc, _ = _batch(4)
  n, length = 4, 8

  @jax.jit
  def sample(params, enc, key):
    inputs, cache, fn = model.decode_inputs(params, enc, length, n)
    return arithmetic_sample(inputs, cache, fn, EOS, key, num_decodes=n,
                             topk=0)

  decodes, log_probs = sample(params, enc, jax.random.PRNGKey(5))
  expected = teacher_forced_log_probs(model, params, enc, decodes, EOS)
  np.testing.assert_allclose(log_probs, expected, atol=1e-4)
  assert np.all(np.isfinite(log_probs))


@pytest.mark.slow
def test_beam_search_drives_the_model():
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  enc, _ = _batch(6)
  inputs, cache, fn = model.decode_inputs(params, enc, 5, 4)
  out, scores = jax.jit(lambda i, c: beam_search(i, c, fn, EOS, num_decodes=4,
                                                 alpha=0.0))(inputs, cache)
  assert out.shape == (3, 4, 5)
  # Every returned score is its sequence's log-prob (alpha = 0); no prompt.
  expected = teacher_forced_log_probs(model, params, enc, out, EOS).reshape(-1)
  # Empty slots (fewer than K beams finished) score NEG_INF.
  filled = np.asarray(scores.reshape(-1)) > -1e6
  assert filled.sum() >= 3
  np.testing.assert_allclose(np.asarray(scores.reshape(-1))[filled],
                             np.asarray(expected)[filled], atol=1e-4)


def test_presets_have_the_published_mt5_sizes():
  published = {  # d_model, d_ff, layers, heads (Xue et al., 2021)
      "small": (512, 1024, 8, 6), "base": (768, 2048, 12, 12),
      "large": (1024, 2816, 24, 16), "xl": (2048, 5120, 24, 32),
      "xxl": (4096, 10240, 24, 64)}
  for name, (d, f, layers, heads) in published.items():
    c = PRESETS[name]
    assert (c.d_model, c.d_ff, c.num_encoder_layers, c.num_decoder_layers,
            c.num_heads, c.d_kv, c.vocab_size) == (d, f, layers, layers, heads,
                                                   64, 250_112)
  # Parameter counts: ~300M (small) ... ~13B (xxl), as published.
  assert round(PRESETS["small"].num_params() / 1e6) == 300
  assert round(PRESETS["xxl"].num_params() / 1e9) == 13


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_parameters_carry_logical_axes_matching_their_shapes(name):
  model = EncoderDecoderModel(preset(name))
  shapes = model.abstract_params()
  axes = model.param_logical_axes()
  cfg = model.config
  size_of = {"vocab": cfg.vocab_size, "embed": cfg.d_model, "mlp": cfg.d_ff,
             "heads": cfg.num_heads, "kv": cfg.d_kv,
             "relpos_buckets": cfg.relative_attention_num_buckets}
  flat_shapes = jax.tree_util.tree_leaves_with_path(shapes)
  flat_axes = jax.tree_util.tree_leaves(
      axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  assert len(flat_shapes) == len(flat_axes)
  assert sum(int(np.prod(s.shape)) for _, s in flat_shapes) == cfg.num_params()
  rule_names = {name for name, _ in LOGICAL_AXIS_RULES}
  for (path, shape), spec in zip(flat_shapes, flat_axes):
    assert len(spec) == len(shape.shape), path
    for axis_name, size in zip(spec, shape.shape):
      assert axis_name in rule_names, (path, axis_name)
      assert size_of[axis_name] == size, (path, axis_name)


_EN_FR = pathlib.Path(__file__).parent.parent / (
    "apps/arithmetic_apps/assets/en_fr/config.json")


def _models():
  """Name -> model: the embedded translator's T5 configuration (its
  training started from these parameters), and each decoder family in one
  of the two dtypes."""
  return {"t5-en-fr": EncoderDecoderModel(
              T5Config(**json.loads(_EN_FR.read_text()))),
          "llama-float32": DecoderOnlyModel(TINY["llama"]),
          "gemma3-bfloat16": DecoderOnlyModel(
              dataclasses.replace(TINY["gemma3"], dtype="bfloat16"))}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_models()))
def test_compiled_init_equals_flax_init_op_by_op(name, monkeypatch):
  """`model.init` (one compiled program) gives the bits of flax's
  `module.init` run eagerly with flax's own normal initializer, leaf by
  leaf, dtypes included."""
  model = _models()[name]
  rng = jax.random.PRNGKey(3)
  compiled = model.init(rng)
  if isinstance(model, DecoderOnlyModel):
    args = model._init_args()  # pylint: disable=protected-access
  else:
    args = (jnp.ones((1, 4), jnp.int32),) * 2
  monkeypatch.setattr(initializers, "normal",
                      lambda stddev: nn.initializers.normal(stddev=stddev))
  eager = nn.unbox(model.module.init(rng, *args)["params"])
  assert (jax.tree_util.tree_structure(compiled)
          == jax.tree_util.tree_structure(eager))
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(compiled),
                          jax.tree_util.tree_leaves(eager)):
    assert a.dtype == b.dtype, path
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path


def test_relative_buckets_are_monotone_and_in_range():
  for bidirectional in (True, False):
    rp = jnp.arange(-300, 301)
    b = np.asarray(relative_position_bucket(rp, bidirectional, 32, 128))
    assert b.min() >= 0 and b.max() <= 31
    before = b[:300][::-1]  # keys 1, 2, ... positions before the query
    assert np.all(np.diff(before) >= 0)
    # Exact buckets for small distances, shared beyond max_distance.
    assert len(set(b[300 - 300:300 - 128 + 1])) == 1
    if bidirectional:
      after = b[301:]
      assert np.all(np.diff(after) >= 0) and after.min() >= 16
    else:
      assert np.all(b[300:] == 0)
