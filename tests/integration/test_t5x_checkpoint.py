"""T5X checkpoints written by T5X load into our model with T5X's numbers;
ours written in T5X's format restore in T5X; the round trip is bitwise."""

import pytest

pytest.importorskip("t5x", reason="T5X is not installed; run `make test-t5x`")


import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util
from t5x import checkpoints

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.models import EncoderDecoderModel
from arithmetic_decoding.models.t5x_checkpoint import (
    from_t5x_params, load_t5x_checkpoint, read_t5x_params, save_t5x_checkpoint)
from t5x_helpers import TINY, random_tokens, t5x_model, t5x_train_state

BATCH, SOURCE, TARGET = 3, 9, 7
# Rows of different source lengths: padding is masked the same way.
ENCODER_TOKENS = random_tokens(1, BATCH, SOURCE, TINY.vocab_size, (9, 5, 2))
DECODER_INPUTS = random_tokens(2, BATCH, TARGET, TINY.vocab_size).at[:, 0].set(0)
# T5X builds its decoder mask from the targets (> 0: every position is real).
DECODER_TARGETS = random_tokens(3, BATCH, TARGET, TINY.vocab_size)


@pytest.fixture(scope="module")
def t5x_checkpoint(tmp_path_factory):
  """A checkpoint written by T5X's own Checkpointer, and T5X's parameters."""
  model = t5x_model(TINY)
  state, partitioner = t5x_train_state(model, BATCH, SOURCE, TARGET, seed=7)
  directory = tmp_path_factory.mktemp("t5x_ckpt")
  checkpoints.Checkpointer(state, partitioner, str(directory)).save(state)
  return directory / "checkpoint_0", model, state.params


def test_t5x_written_checkpoint_loads_with_t5x_numbers(t5x_checkpoint):
  path, t5x, t5x_params = t5x_checkpoint
  config, params = load_t5x_checkpoint(str(path), expected=TINY)
  assert config == TINY
  ours = EncoderDecoderModel(config)
  # Encoder outputs and teacher-forced decoder logits, float32, to 1e-5.
  encoded_t5x = t5x.module.apply({"params": t5x_params}, ENCODER_TOKENS,
                                 enable_dropout=False, method=t5x.module.encode)
  # At real tokens; padded positions differ (T5X also masks padded queries,
  # we only padded keys) and no decoder reads them (cross-attention masks).
  real = np.asarray(ENCODER_TOKENS > 0)
  np.testing.assert_allclose(
      np.asarray(ours.encode(params, ENCODER_TOKENS))[real],
      np.asarray(encoded_t5x)[real], atol=1e-5, rtol=1e-5)
  logits_t5x = t5x.module.apply(
      {"params": t5x_params}, ENCODER_TOKENS, DECODER_INPUTS, DECODER_TARGETS,
      enable_dropout=False)
  logits = ours.logits(params, ENCODER_TOKENS, DECODER_INPUTS)
  np.testing.assert_allclose(logits, logits_t5x, atol=1e-5, rtol=1e-5)
  assert float(jnp.abs(logits_t5x).max()) > 0.1  # not a trivially small model


def test_arithmetic_sample_same_through_t5x_and_our_model(t5x_checkpoint):
  path, _, t5x_params = t5x_checkpoint
  config, params = load_t5x_checkpoint(str(path))
  num_decodes, key = 8, jax.random.PRNGKey(11)
  decode_fn = functools.partial(arithmetic_sample, topk=0)
  t5x = t5x_model(TINY, decode_fn=decode_fn)
  batch = {"encoder_input_tokens": ENCODER_TOKENS,
           "decoder_input_tokens": jnp.zeros((BATCH, TARGET), jnp.int32)}
  # Op by op (no outer jit) T5X's network and ours compute the same floats,
  # so even the long, improbable samples agree exactly. (Under one outer jit
  # XLA fuses the two graphs differently; late tokens of improbable samples
  # then depend on the last bits of the CDF: see the infer test.)
  t5x_decodes, aux = t5x.predict_batch_with_aux(
      t5x_params, batch, key, num_decodes=num_decodes, return_all_decodes=True)
  # T5X's layout (keys/values projected from per-sample copies), so the
  # two programs do the same float operations.
  ours = EncoderDecoderModel(config, cross_kv="per_sample")
  inputs, cache, tokens_to_logits = ours.decode_inputs(
      params, ENCODER_TOKENS, TARGET, num_decodes)
  decodes, scores = arithmetic_sample(inputs, cache, tokens_to_logits, 1, key,
                                      num_decodes=num_decodes, topk=0)
  np.testing.assert_array_equal(decodes, t5x_decodes)
  np.testing.assert_allclose(scores, aux["scores"], atol=1e-5, rtol=1e-5)
  assert len({tuple(d) for d in np.asarray(decodes[0])}) > 1  # real samples


def test_ours_to_t5x_restores_in_t5x_and_round_trips_bitwise(tmp_path):
  params = EncoderDecoderModel(TINY).init(jax.random.PRNGKey(3))
  path = save_t5x_checkpoint(str(tmp_path / "checkpoint_5"), TINY, params,
                             step=5)
  # T5X's Checkpointer restores it into T5X's network.
  t5x = t5x_model(TINY)
  state, partitioner = t5x_train_state(t5x, BATCH, SOURCE, TARGET)
  restored = checkpoints.Checkpointer(state, partitioner, str(tmp_path)).restore(
      path=path)
  assert int(restored.step) == 5
  logits_t5x = t5x.module.apply(
      {"params": restored.params}, ENCODER_TOKENS, DECODER_INPUTS,
      DECODER_TARGETS, enable_dropout=False)
  logits = EncoderDecoderModel(TINY).logits(params, ENCODER_TOKENS,
                                            DECODER_INPUTS)
  np.testing.assert_allclose(logits, logits_t5x, atol=1e-5, rtol=1e-5)
  # Ours -> T5X's format -> ours is bitwise, and T5X read the same arrays.
  config, back = load_t5x_checkpoint(path)
  assert config == TINY
  same = jax.tree.map(lambda a, b: a.dtype == b.dtype and
                      np.array_equal(a, b), params, back)
  assert all(jax.tree.leaves(same))
  flat_t5x = {"/".join(k): np.asarray(v) for k, v in
              traverse_util.flatten_dict(restored.params).items()}
  np.testing.assert_array_equal(
      flat_t5x["decoder/layers_1/encoder_decoder_attention/out/kernel"],
      read_t5x_params(path)["decoder/layers_1/encoder_decoder_attention/out/kernel"])


def test_wrong_architecture_is_named(t5x_checkpoint):
  path = t5x_checkpoint[0]
  with pytest.raises(ValueError, match="expected mT5-xxl, found d_model 16"):
    load_t5x_checkpoint(str(path), expected="xxl")
  flat = read_t5x_params(str(path))
  del flat["decoder/logits_dense/kernel"]
  with pytest.raises(ValueError, match="logits_via_embedding"):
    from_t5x_params(flat)
