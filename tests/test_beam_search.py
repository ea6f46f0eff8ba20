"""Beam search against brute-force enumeration of the toy model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.beam_search import NEG_INF, beam_search
from arithmetic_decoding.testing import enumerate_sequences
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel

MODEL = ToyLanguageModel()


def _finished(source, length, alpha=0.0, prompt=()):
  """Every EOS-terminated sequence with its penalised score, best first."""
  out = []
  for seq, p in enumerate_sequences(MODEL, source, length, prompt=prompt):
    if EOS_ID not in seq[len(prompt):]:
      continue
    size = seq.index(EOS_ID, len(prompt)) + 1  # positions up to EOS
    out.append((np.log(p) / ((5.0 + size) / 6.0) ** alpha, seq))
  return sorted(out, reverse=True)


def _beams(out, scores):
  """Returned beams, best first, without empty slots."""
  return [(float(s), tuple(int(t) for t in o))
          for s, o in zip(np.asarray(scores), np.asarray(out)) if s > NEG_INF / 2
          ][::-1]


@pytest.mark.parametrize("length,alpha", [(3, 0.0), (4, 0.0), (4, 0.6), (3, 2.0)])
def test_a_wide_beam_returns_the_exact_top_k(length, alpha):
  # A beam as wide as the number of sequences (finished or not) never prunes
  # a prefix: the results must be the exact top K, here all finished ones.
  beams = len(enumerate_sequences(MODEL, 0, length))
  sources = [0, 1, 2]
  inputs = jnp.zeros((len(sources), length), jnp.int32)
  out, scores = beam_search(inputs, MODEL.init_cache(sources),
                            MODEL.tokens_to_logits, EOS_ID, num_decodes=beams,
                            alpha=alpha)
  assert out.shape == (3, beams, length) and scores.shape == (3, beams)
  for b, source in enumerate(sources):
    exact = _finished(source, length, alpha)
    got = _beams(out[b], scores[b])
    assert len(exact) == 1 + 4 + 16 + (64 if length == 4 else 0)
    assert [s for _, s in got] == [s for _, s in exact]
    np.testing.assert_allclose([x for x, _ in got], [x for x, _ in exact],
                               rtol=1e-5)
    # Ascending order, as T5X returns it.
    assert np.all(np.diff(np.asarray(scores[b])) >= 0)


def test_prompt_is_forced_and_costs_nothing():
  inputs = jnp.array([[0, 3, 0, 0, 0]], jnp.int32)  # prompt "3"
  out, scores = beam_search(inputs, MODEL.init_cache([1]),
                            MODEL.tokens_to_logits, EOS_ID, num_decodes=341,
                            alpha=0.0)
  exact = _finished(1, 5, prompt=(3,))
  assert len(exact) == 1 + 4 + 16 + 64
  # Scores are log p(continuation | prompt) (enumeration starts after the
  # prompt too): the forced prompt adds 0.
  got = _beams(out[0], scores[0])
  assert [s for _, s in got] == [s for _, s in exact]
  np.testing.assert_allclose([x for x, _ in got],
                             [x for x, _ in exact], rtol=1e-5)


def test_prefilled_cache_matches_forced_prompt():
  inputs = jnp.array([[0, 3, 2, 0, 0, 0], [0, 4, 0, 0, 0, 0]], jnp.int32)
  sources = [0, 2]
  forced = beam_search(inputs, MODEL.init_cache(sources), MODEL.tokens_to_logits,
                       EOS_ID, num_decodes=5)
  start = jnp.array([2, 1], jnp.int32)
  prefilled = beam_search(inputs, MODEL.prefill(sources, inputs, start),
                          MODEL.tokens_to_logits, EOS_ID, num_decodes=5,
                          initial_index=start)
  np.testing.assert_array_equal(forced[0], prefilled[0])
  np.testing.assert_allclose(forced[1], prefilled[1], rtol=1e-6)


def test_one_beam_never_scores_below_greedy():
  # With K = 1 the live beam follows the argmax until the argmax is EOS, when
  # that sequence (the greedy one) is finished: the best finished beam is the
  # greedy sequence or better (it may have picked up an earlier EOS).
  inputs = jnp.zeros((4, 6), jnp.int32)
  cache = MODEL.init_cache([0, 1, 2, 3])
  out, scores = beam_search(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                            num_decodes=1, alpha=0.0)
  greedy, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                jax.random.PRNGKey(0), temperature=0.0)
  better = 0
  for b in range(4):
    greedy_logp = np.log(dict(enumerate_sequences(MODEL, b, 6))[
        tuple(int(t) for t in greedy[b, 0])])
    assert float(scores[b, 0]) >= greedy_logp - 1e-5
    better += float(scores[b, 0]) > greedy_logp + 1e-5
    np.testing.assert_allclose(
        float(scores[b, 0]),
        np.log(dict(enumerate_sequences(MODEL, b, 6))[
            tuple(int(t) for t in out[b, 0])]), rtol=1e-5)
  # Source 2 is such a case: (4, 5, EOS) beats greedy (4, 5, 2, EOS).
  assert better >= 1


@pytest.mark.parametrize("max_len", [2, 3])
def test_max_decode_len_against_enumeration(max_len):
  # Inputs are 6 wide; beams stop at max_decode_len positions: exactly the
  # top-K finished sequences of that length.
  beams = len(enumerate_sequences(MODEL, 0, max_len))
  inputs = jnp.zeros((2, 6), jnp.int32)
  out, scores = beam_search(inputs, MODEL.init_cache([1, 3]),
                            MODEL.tokens_to_logits, EOS_ID, num_decodes=beams,
                            alpha=0.6, max_decode_len=max_len)
  assert out.shape == (2, beams, max_len)
  for b, source in enumerate([1, 3]):
    exact = _finished(source, max_len, 0.6)
    got = _beams(out[b], scores[b])
    assert [s for _, s in got] == [s for _, s in exact]
    np.testing.assert_allclose([x for x, _ in got], [x for x, _ in exact],
                               rtol=1e-5)


def positional_model(table):
  """Logits from row `cur_index` of `table` [T, V], read with a dynamic
  slice: works only with a scalar cur_index, as T5X's beam search passes."""

  def tokens_to_logits(state):
    rows = state.cur_token.shape[0]
    logits = jax.lax.dynamic_slice(table, (state.cur_index, 0),
                                   (1, table.shape[1]))
    return jnp.broadcast_to(logits, (rows, table.shape[1])), state.cache

  return tokens_to_logits


def test_cur_index_is_t5x_scalar_loop_counter():
  # A model that slices by cur_index: beam search must hand it T5X's scalar.
  length, vocab = 4, 4
  table = np.array(jax.random.normal(jax.random.PRNGKey(3), (length, vocab)),
                   np.float32)
  table[:, 0] = -np.inf  # padding is never produced
  log_p = np.asarray(jax.nn.log_softmax(jnp.asarray(table)), np.float64)
  # Brute force: every sequence ending in EOS within `length` positions.
  exact = []
  for size in range(1, length + 1):
    for body in np.ndindex(*(2,) * (size - 1)):
      seq = tuple(t + 2 for t in body) + (EOS_ID,)
      exact.append(sum(log_p[i, t] for i, t in enumerate(seq)))
  exact = sorted(exact, reverse=True)
  out, scores = jax.jit(lambda i: beam_search(
      i, {}, positional_model(jnp.asarray(table)), EOS_ID,
      num_decodes=len(exact), alpha=0.0))(jnp.zeros((2, length), jnp.int32))
  for b in range(2):
    got = [x for x, _ in _beams(out[b], scores[b])]
    np.testing.assert_allclose(got, exact, rtol=1e-5)


def test_cur_index_is_per_row_with_initial_index():
  seen = []

  def record(state):
    seen.append(state.cur_index.shape)
    return MODEL.tokens_to_logits(state)

  inputs = jnp.array([[0, 3, 2, 0, 0, 0], [0, 4, 0, 0, 0, 0]], jnp.int32)
  start = jnp.array([2, 1], jnp.int32)
  beam_search(inputs, MODEL.prefill([0, 2], inputs, start), record, EOS_ID,
              num_decodes=3, initial_index=start)
  beam_search(inputs, MODEL.init_cache([0, 2]), record, EOS_ID, num_decodes=3)
  assert seen == [(6,), ()]


def test_inside_user_jit_and_max_decode_len():
  inputs = jnp.zeros((2, 6), jnp.int32)
  cache = MODEL.init_cache([0, 3])
  direct = beam_search(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                       num_decodes=3, max_decode_len=4)
  jitted = jax.jit(lambda i, c: beam_search(i, c, MODEL.tokens_to_logits, EOS_ID,
                                            num_decodes=3, max_decode_len=4))
  outer = jitted(inputs, cache)
  assert direct[0].shape == (2, 3, 4)
  np.testing.assert_array_equal(direct[0], outer[0])
  np.testing.assert_allclose(direct[1], outer[1])


@pytest.mark.parametrize("kwargs,match", [
    (dict(alpha=-0.5), "alpha"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(num_decodes=0), "num_decodes"),
    (dict(max_decode_len=9), "max_decode_len"),
    (dict(eos_id=-1), "eos_id"),
])
def test_bad_arguments_name_themselves(kwargs, match):
  args = dict(eos_id=EOS_ID)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    beam_search(jnp.zeros((1, 4), jnp.int32), MODEL.init_cache([0]),
                MODEL.tokens_to_logits, **args)


@pytest.mark.parametrize("width,k", [(1000, 3), (8 * 128 * 4 + 1, 4),
                                     (250_112 * 4, 8), (100_003, 5)])
def test_two_stage_top_k_equals_lax_top_k(width, k):
  from jax import lax
  from arithmetic_decoding.wide_topk import wide_top_k
  x = jax.random.normal(jax.random.PRNGKey(width), (3, width))
  x = jnp.round(x * 4) / 4  # plenty of ties
  x = x.at[0, :50].set(-jnp.inf).at[1, 7].set(jnp.inf)
  values, indices = wide_top_k(x, k)
  expected_values, expected_indices = lax.top_k(x, k)
  np.testing.assert_array_equal(values, expected_values)
  np.testing.assert_array_equal(indices, expected_indices)
