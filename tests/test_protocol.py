"""Conformance with T5X's `temperature_sample` protocol, with fake models.

Each test states an exact expected output, derived by hand from T5X's
semantics (teacher-forced prompts, EOS counting, padding, length limits), and
runs through the library's jit, inside a user's jit, and with jit disabled.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import FrozenDict
from jax.experimental import io_callback

from arithmetic_decoding import SamplingLoopState, arithmetic_sample
from helpers import EOS_ID, NEG, constant_model, run

KEY = jax.random.PRNGKey(0)


def sample(tokens_to_logits, **kwargs):
  return functools.partial(arithmetic_sample, tokens_to_logits=tokens_to_logits,
                           eos_id=EOS_ID, **kwargs)


def rows_prefer_2_and_3():
  return constant_model([[NEG, NEG, 0, NEG], [NEG, NEG, NEG, 0]])


def test_no_prompt(run_mode):
  inputs = np.zeros((2, 3), np.int32)
  decodes, log_probs = run(run_mode, sample(rows_prefer_2_and_3(), decode_rng=KEY,
                                            topk=0), inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[2, 2, 2], [3, 3, 3]])
  np.testing.assert_array_equal(log_probs, [[0.0], [0.0]])


def test_prompt_is_teacher_forced(run_mode):
  inputs = np.array([[0, 5, 6, 7, 0], [0, 8, 9, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(rows_prefer_2_and_3(), decode_rng=KEY, topk=0),
                   inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 6, 7, 2, 2], [8, 9, 3, 3, 3]])


def test_uneven_prompts_with_initial_index(run_mode):
  inputs = np.array([[0, 5, 7, 1, 0, 0], [0, 6, 1, 0, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(rows_prefer_2_and_3(), decode_rng=KEY, topk=0),
                   inputs, {}, initial_index=np.array([3, 2], np.int32),
                   traced=("initial_index",))
  np.testing.assert_array_equal(decodes[:, 0],
                                [[5, 7, 1, 2, 2, 2], [6, 1, 3, 3, 3, 3]])


def test_prompt_ending_with_eos_does_not_end(run_mode):
  # The prompt's EOS was already there; only a decoded EOS ends a row.
  inputs = np.array([[0, 5, 6, 1, 0], [0, 8, 1, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(rows_prefer_2_and_3(), decode_rng=KEY, topk=1),
                   inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 6, 1, 2, 2], [8, 1, 3, 3, 3]])


def test_zero_temperature_is_argmax_of_raw_logits(run_mode):
  # Close, large logits: argmax regardless of topk.
  model = constant_model([[1700.47, 1700.48, 1700.51, 1700.45],
                          [3.2, 4.8, -5.3, 5.6]])
  inputs = np.zeros((2, 3), np.int32)
  decodes, log_probs = run(run_mode, sample(model, decode_rng=KEY, topk=4,
                                            temperature=0.0), inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[2, 2, 2], [3, 3, 3]])
  np.testing.assert_array_equal(log_probs, [[0.0], [0.0]])


def scheduled_model(schedule, vocab=4, soft=False):
  """Row r's preferred token at loop index i is schedule[i][r].

  With soft=True the preferred token has logit 2 and the others 0 (so greedy
  still picks it, but log-probs are informative).
  """
  schedule = np.asarray(schedule, np.int32)  # [steps, rows]

  def tokens_to_logits(state):
    i = jnp.minimum(state.cur_index, schedule.shape[0] - 1)  # [rows]
    rows = jnp.arange(schedule.shape[1])
    preferred = jnp.asarray(schedule)[i, rows]
    hot = jnp.arange(vocab)[None, :] == preferred[:, None]
    if soft:
      return jnp.where(hot, 2.0, 0.0), {}
    return jnp.where(hot, 0.0, NEG), {}

  return tokens_to_logits


EARLY_STOP_SCHEDULE = [[2, 3]] * 3 + [[2, 1], [1, 3]] + [[2, 3]] * 2


def test_eos_ends_and_pads(run_mode):
  # Row 1 decodes EOS at loop index 3, row 0 at 4; later tokens are padding.
  inputs = np.array([[0, 5, 1, 0, 0, 0, 0], [0, 8, 0, 0, 0, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(scheduled_model(EARLY_STOP_SCHEDULE),
                                    decode_rng=KEY, topk=0), inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 1, 2, 2, 1, 0, 0],
                                                [8, 3, 3, 1, 0, 0, 0]])


def test_log_prob_counts_decoded_tokens_and_eos_only(run_mode):
  inputs = np.array([[0, 5, 1, 0, 0, 0, 0], [0, 8, 0, 0, 0, 0, 0]], np.int32)
  decodes, log_probs = run(
      run_mode, sample(scheduled_model(EARLY_STOP_SCHEDULE, soft=True),
                       decode_rng=KEY, topk=1, rescale_log_probs=False),
      inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 1, 2, 2, 1, 0, 0],
                                                [8, 3, 3, 1, 0, 0, 0]])
  # Preferred token: logit 2 against three logits 0.
  log_p = 2.0 - np.log(np.exp(2.0) + 3.0)
  # Row 0 decodes 2, 2, EOS (prompt 5, 1 excluded); row 1 decodes 3, 3, EOS.
  np.testing.assert_allclose(log_probs[:, 0], [3 * log_p, 3 * log_p], atol=1e-6)


def test_rescaled_log_probs_under_topk_are_zero(run_mode):
  inputs = np.array([[0, 5, 1, 0, 0, 0, 0], [0, 8, 0, 0, 0, 0, 0]], np.int32)
  _, log_probs = run(
      run_mode, sample(scheduled_model(EARLY_STOP_SCHEDULE, soft=True),
                       decode_rng=KEY, topk=1), inputs, {})
  np.testing.assert_array_equal(log_probs, [[0.0], [0.0]])


def test_state_callback_with_host_callback(run_mode):
  """A host callback appends EOS after the first 3 (T5X's own example)."""

  def add_eos_after_3(cur_index, sequences):
    sequences = np.array(sequences)
    for r in range(len(cur_index)):
      if sequences[r, cur_index[r]] == 3:
        sequences[r, cur_index[r] + 1] = EOS_ID
    return sequences

  def state_callback_fn(state):
    assert isinstance(state, SamplingLoopState)
    sequences = io_callback(
        add_eos_after_3,
        jax.ShapeDtypeStruct(state.sequences.shape, state.sequences.dtype),
        state.cur_index, state.sequences)
    return state.replace(sequences=sequences)

  model = constant_model([[NEG, NEG, NEG, 0], [NEG, NEG, NEG, 0]])
  inputs = np.array([[0, 5, 6, 7, 0], [0, 8, 9, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=0, temperature=0.0,
                                    state_callback_fn=state_callback_fn),
                   inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 6, 7, 3, 1], [8, 9, 3, 1, 0]])


def test_logit_callback_rewrites_logits(run_mode):
  seen = []

  def logit_callback_fn(logits, state):
    seen.append(type(state))
    return logits.at[0, 2].set(0.0).at[1, 3].set(0.0)

  model = constant_model(np.full((2, 4), NEG))
  inputs = np.array([[0, 5, 6, 7, 0], [0, 8, 9, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=0, temperature=0.0,
                                    logit_callback_fn=logit_callback_fn),
                   inputs, {})
  np.testing.assert_array_equal(decodes[:, 0], [[5, 6, 7, 2, 2], [8, 9, 3, 3, 3]])
  assert seen and all(t is SamplingLoopState for t in seen)


def test_num_decodes_are_batch_major_and_sorted(run_mode):
  """Row b*N + j is decode j of input b; results sorted by log-prob."""
  vocab = 6

  def model(state):
    # Each input's first prompt token shifts a fixed distribution.
    first = state.sequences[:, 1]  # [rows]
    base = jnp.log(jnp.array([1e-9, 0.05, 0.1, 0.15, 0.3, 0.4]))
    shift = (first % 2).astype(jnp.float32)
    logits = base[None, :] + shift[:, None] * jnp.arange(vocab)[None, :] * 0.1
    return logits, {}

  inputs = np.array([[0, 5, 0, 0], [0, 4, 0, 0]], np.int32)
  n = 5
  decodes, log_probs = run(run_mode, sample(model, decode_rng=KEY, topk=0,
                                            num_decodes=n), inputs, {})
  decodes, log_probs = np.asarray(decodes), np.asarray(log_probs)
  assert decodes.shape == (2, n, 4) and log_probs.shape == (2, n)
  np.testing.assert_array_equal(decodes[0, :, 0], [5] * n)
  np.testing.assert_array_equal(decodes[1, :, 0], [4] * n)
  assert np.all(np.diff(log_probs, axis=1) >= 0)
  # Each log-prob is its sequence's log-prob under the model.
  for b in range(2):
    shift = inputs[b, 1] % 2
    table = np.log([1e-9, 0.05, 0.1, 0.15, 0.3, 0.4]) + shift * np.arange(vocab) * 0.1
    lp = table - np.log(np.exp(table).sum())
    for j in range(n):
      expected = 0.0
      for token in decodes[b, j, 1:]:
        expected += lp[token]
        if token == EOS_ID:
          break
      np.testing.assert_allclose(log_probs[b, j], expected, atol=1e-5)


def recording_model(record, vocab=4, values=None):
  """Returns logits preferring token 2 and records the cache it sees: its
  shapes and type as traced in `record`, and (if given a list) its values
  in `values`, once per run of the model (a callback from the compiled
  loop)."""

  def tokens_to_logits(state):
    record.append(jax.tree_util.tree_map(lambda x: x.shape, state.cache))
    record.append(type(state.cache))
    if values is not None:
      jax.debug.callback(
          lambda c: values.append(jax.tree_util.tree_map(np.asarray, c)),
          dict(state.cache), ordered=True)
    rows = state.cur_token.shape[0]
    logits = jnp.where(jnp.arange(vocab)[None, :] == 2, 0.0, NEG)
    # Return a plain dict, as flax's mutable apply does.
    new_cache = jax.tree_util.tree_map(lambda x: x, dict(state.cache))
    return jnp.broadcast_to(logits, (rows, vocab)), new_cache

  return tokens_to_logits


def t5x_like_cache(batch, scanned=False):
  """A cache shaped like T5X's, with distinct values per row: row b of
  `cached_key` holds b (+ 100 * layer), `cache_index` holds 10 * (b + 1)."""
  layers = (3,) if scanned else ()
  rows = np.arange(batch, dtype=np.float32).reshape(
      (1,) * len(layers) + (batch, 1, 1))
  if scanned:
    rows = rows + 100 * np.arange(3).reshape(3, 1, 1, 1)
  return {
      "decoder": {
          "layers_0": {
              "self_attention": {
                  "cached_key": np.broadcast_to(
                      rows, layers + (batch, 2, 5)).astype(np.float32),
                  "cache_index": np.broadcast_to(
                      10 * np.arange(1, batch + 1, dtype=np.int32),
                      layers + (batch,)).copy(),
              },
          },
          "relpos_bias": {"cached_bias": np.zeros((1, 2, 5, 5), np.float32)},
          "position_embedder_index": np.array(-1, np.int32),
      },
  }


@pytest.mark.parametrize("with_initial_index", [False, True])
@pytest.mark.parametrize("scanned", [False, True])
def test_cache_expansion(with_initial_index, scanned):
  batch, n = 2, 3
  record = []
  cache = t5x_like_cache(batch, scanned)
  if not with_initial_index:
    # Without a prefilled start, T5X's cache_index is a scalar.
    cache["decoder"]["layers_0"]["self_attention"]["cache_index"] = np.zeros(
        (3,) if scanned else (), np.int32)
  kwargs = dict(initial_index=np.array([1, 1], np.int32)) if with_initial_index else {}
  inputs = np.array([[0, 6, 0, 0, 0], [0, 7, 0, 0, 0]], np.int32)
  seen = []  # the cache's values at each run of the model
  arithmetic_sample(inputs, cache, recording_model(record, values=seen),
                    EOS_ID, KEY, num_decodes=n, topk=0,
                    cache_offset=1 if scanned else 0, **kwargs)
  jax.effects_barrier()
  # Batch-major (each row repeated N times, never the batch tiled).
  values = seen[0]["decoder"]["layers_0"]["self_attention"]
  axis = 1 if scanned else 0
  np.testing.assert_array_equal(
      np.take(values["cached_key"], 0, axis=-1)[..., 0],
      np.repeat(np.take(cache["decoder"]["layers_0"]["self_attention"][
          "cached_key"], 0, axis=-1)[..., 0], n, axis=axis))
  if with_initial_index:
    np.testing.assert_array_equal(
        values["cache_index"][0] if scanned else values["cache_index"],
        [10, 10, 10, 20, 20, 20])
  shapes = record[0]["decoder"]
  lead = (3,) if scanned else ()
  assert shapes["layers_0"]["self_attention"]["cached_key"] == lead + (batch * n, 2, 5)
  index_shape = lead + ((batch * n,) if with_initial_index else ())
  assert shapes["layers_0"]["self_attention"]["cache_index"] == index_shape
  assert shapes["relpos_bias"]["cached_bias"] == (1, 2, 5, 5)
  assert shapes["position_embedder_index"] == ()


def test_frozen_dict_cache_stays_frozen():
  record = []
  cache = FrozenDict(t5x_like_cache(2))
  inputs = np.zeros((2, 4), np.int32)
  decodes, _ = arithmetic_sample(inputs, cache, recording_model(record), EOS_ID,
                                 KEY, num_decodes=2, topk=0)
  types = [r for r in record if isinstance(r, type)]
  assert types and all(t is FrozenDict for t in types)
  np.testing.assert_array_equal(decodes[:, :, 0], [[2, 2], [2, 2]])


def count_calls(model):
  """The model, and a list that gets one entry per run of it (a callback
  from the compiled loop: read it after `jax.effects_barrier()`)."""
  calls = []

  def tokens_to_logits(state):
    jax.debug.callback(lambda: calls.append(1), ordered=True)
    return model(state)

  return tokens_to_logits, calls


@pytest.mark.parametrize("initial_index,expected_calls", [
    (None, 6), (np.array([1, 2]), 4), (np.array([1, 1]), 5)])
def test_max_decode_steps_with_initial_index(initial_index, expected_calls):
  model = constant_model([[NEG, NEG, NEG, 0]] * 2)
  tokens_to_logits, calls = count_calls(model)
  inputs = np.array([[0, 2, 0, 0, 0, 0, 0, 0], [0, 2, 2, 0, 0, 0, 0, 0]], np.int32)
  decodes, log_probs = arithmetic_sample(
      inputs, {}, tokens_to_logits, EOS_ID, KEY, topk=4, max_decode_steps=4,
      initial_index=initial_index)
  jax.effects_barrier()
  assert len(calls) == expected_calls
  np.testing.assert_array_equal(decodes[:, 0], [[2, 3, 3, 3, 3, 0, 0, 0],
                                                [2, 2, 3, 3, 3, 3, 0, 0]])
  np.testing.assert_array_equal(log_probs, [[0.0], [0.0]])


def test_max_decode_steps_rows_that_finish_early_keep_padding():
  model = constant_model([[NEG, NEG, NEG, 0]] * 3)
  tokens_to_logits, calls = count_calls(model)
  inputs = np.array([[0, 2, 0, 0, 0, 0, 0, 0], [0, 2, 2, 2, 2, 2, 2, 0],
                     [0, 2, 2, 2, 0, 0, 0, 0]], np.int32)
  decodes, _ = arithmetic_sample(inputs, {}, tokens_to_logits, EOS_ID, KEY,
                                 topk=4, max_decode_steps=4,
                                 initial_index=np.array([1, 6, 0]))
  jax.effects_barrier()
  # Row 2 starts at 0: 3 steps through its prompt, then 4 decoded tokens.
  assert len(calls) == 7
  np.testing.assert_array_equal(decodes[:, 0], [[2, 3, 3, 3, 3, 0, 0, 0],
                                                [2, 2, 2, 2, 2, 2, 3, 3],
                                                [2, 2, 2, 3, 3, 3, 3, 0]])


def test_max_decode_steps_docstring_example_4(run_mode):
  model = constant_model([[NEG, NEG, 0, NEG], [NEG, NEG, NEG, 0]])
  inputs = np.array([[0, 2, 0, 0, 0, 0, 0, 0], [0, 3, 4, 0, 0, 0, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=4), inputs, {},
                   initial_index=np.array([1, 2], np.int32), max_decode_steps=2,
                   traced=("initial_index", "max_decode_steps"))
  np.testing.assert_array_equal(decodes[:, 0], [[2, 2, 2, 0, 0, 0, 0, 0],
                                                [3, 4, 3, 3, 0, 0, 0, 0]])


def test_max_decode_steps_hard_limit(run_mode):
  model = constant_model([[NEG, NEG, NEG, 0]] * 2)
  inputs = np.array([[0, 2, 0, 0, 0, 0, 0, 0], [0, 2, 2, 0, 0, 0, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=4,
                                    max_decode_steps_hard_limit=4),
                   inputs, {}, max_decode_steps=10)
  np.testing.assert_array_equal(decodes[:, 0], [[2, 3, 3, 3, 3, 0, 0, 0],
                                                [2, 2, 3, 3, 3, 3, 0, 0]])


def test_max_decode_steps_per_input_with_num_decodes(run_mode):
  # A [batch] limit is expanded with the decodes (T5X cannot broadcast this).
  model = constant_model(np.tile([[NEG, NEG, NEG, 0]], (4, 1)))
  inputs = np.array([[0, 2, 0, 0, 0, 0], [0, 2, 2, 0, 0, 0]], np.int32)
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=0, num_decodes=2),
                   inputs, {}, max_decode_steps=np.array([1, 3], np.int32),
                   traced=("max_decode_steps",))
  np.testing.assert_array_equal(decodes, [[[2, 3, 0, 0, 0, 0]] * 2,
                                          [[2, 2, 3, 3, 3, 0]] * 2])


def test_topp_makes_decoding_deterministic(run_mode):
  # Probabilities (0.3, 0, 0.1, 0.6): topp below 0.6 keeps token 3 alone.
  model = constant_model([[-1.2, NEG, -2.3, -0.51]])
  inputs = np.zeros((1, 20), np.int32)
  decodes, log_probs = run(run_mode, sample(model, decode_rng=KEY, topk=0,
                                            topp=0.55), inputs, {})
  np.testing.assert_array_equal(decodes, [[[3] * 20]])
  np.testing.assert_array_equal(log_probs, [[0.0]])
  # Temperature first: at 0.8 the top token has mass 0.65 > 0.63.
  decodes, _ = run(run_mode, sample(model, decode_rng=KEY, topk=0, topp=0.63,
                                    temperature=0.8), inputs, {})
  np.testing.assert_array_equal(decodes, [[[3] * 20]])


def test_per_example_temperature_with_topp(run_mode):
  base = np.array([[-1.2, NEG, -2.3, -0.51], [-0.51, -1.2, NEG, -2.3],
                   [-1.2, NEG, -0.51, -2.3], [-1.2, -0.51, NEG, -2.3]], np.float32)
  model = constant_model(np.repeat(base, 2, axis=0))
  inputs = np.zeros((4, 20), np.int32)
  decodes, log_probs = run(
      run_mode, sample(model, decode_rng=KEY, topk=0, topp=0.63, num_decodes=2),
      inputs, {}, temperature=np.array([0.5, 0.0, 0.3, 0.2], np.float32),
      traced=("temperature",))
  expected = np.array([[3] * 20, [0] * 20, [2] * 20, [1] + [0] * 19])
  np.testing.assert_array_equal(decodes, np.repeat(expected[:, None], 2, axis=1))
  np.testing.assert_array_equal(log_probs, np.zeros((4, 2)))


def test_traced_topp_temperature_and_max_steps_under_jit():
  model = constant_model([[-1.2, NEG, -2.3, -0.51]])

  @jax.jit
  def decode(inputs, temperature, topp, max_decode_steps):
    return arithmetic_sample(inputs, {}, model, EOS_ID, KEY, temperature=temperature,
                             topp=topp, topk=0, max_decode_steps=max_decode_steps)

  decodes, log_probs = decode(np.zeros((1, 20), np.int32), 0.8, 0.63, 10)
  np.testing.assert_array_equal(decodes, [[[3] * 10 + [0] * 10]])
  np.testing.assert_array_equal(log_probs, [[0.0]])


@pytest.mark.parametrize("topk,topp", [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0),
                                       (0, 0.5), (0, 0.9), (0, 1.0)])
def test_traced_topk_topp_match_static(topk, topp):
  """Traced cut-offs decode exactly what the static ones decode."""
  logits = np.log(np.array([[0.05, 0.3, 0.1, 0.25, 0.3]] * 8, np.float32))
  model = constant_model(logits)
  inputs = np.zeros((1, 6), np.int32)
  codes = jax.random.uniform(jax.random.PRNGKey(3), (1, 8))
  static = arithmetic_sample(inputs, {}, model, 9, KEY, num_decodes=8, topk=topk,
                             topp=topp, codes=codes)

  @jax.jit
  def traced(k, p):
    return arithmetic_sample(inputs, {}, model, 9, KEY, num_decodes=8, topk=k,
                             topp=p, codes=codes)

  dynamic = traced(jnp.int32(topk), jnp.float32(topp))
  np.testing.assert_array_equal(static[0], dynamic[0])
  np.testing.assert_allclose(static[1], dynamic[1], atol=1e-6)


def test_topp_keeps_exactly_the_expected_tokens():
  """T5X's example: temperature 1.4, topp 0.7 keeps tokens 0 and 3."""
  from arithmetic_decoding.transforms import scale, truncate
  logits = jnp.array([[-1.2, NEG, -2.3, -0.51]])
  x = truncate(scale(logits, jnp.array([1.4])), None, 0.7)
  np.testing.assert_allclose(x[0, [0, 3]], [-1.2 / 1.4, -0.51 / 1.4], rtol=1e-6)
  assert np.all(np.isneginf(np.asarray(x[0, [1, 2]])))


def test_raw_log_probs_with_greedy_topk():
  # Probabilities 0.6 / 0.4 for tokens 2 / 3; topk=1 is greedy.
  model = constant_model([[NEG, NEG, np.log(0.6), np.log(0.4)]])
  inputs = np.array([[0, 2, 2, 3, 0]], np.int32)
  decodes, log_probs = arithmetic_sample(inputs, {}, model, EOS_ID, KEY, topk=1,
                                         rescale_log_probs=False)
  np.testing.assert_array_equal(decodes, [[[2, 2, 3, 2, 2]]])
  # Two decoded tokens (positions 4, 5), each of probability 0.6.
  np.testing.assert_allclose(log_probs, [[2 * np.log(0.6)]], atol=1e-6)


def test_decode_rng_none_is_prng_key_zero():
  model = constant_model(np.log(np.full((4, 5), 0.2, np.float32)))
  inputs = np.zeros((1, 5), np.int32)
  a = arithmetic_sample(inputs, {}, model, 9, None, num_decodes=4, topk=0)
  b = arithmetic_sample(inputs, {}, model, 9, jax.random.PRNGKey(0), num_decodes=4,
                        topk=0)
  c = arithmetic_sample(inputs, {}, model, 9, jax.random.PRNGKey(1), num_decodes=4,
                        topk=0)
  np.testing.assert_array_equal(a[0], b[0])
  assert not np.array_equal(a[0], c[0])


def test_typed_keys_work_like_raw_keys():
  model = constant_model(np.log(np.full((4, 5), 0.2, np.float32)))
  inputs = np.zeros((1, 5), np.int32)
  a = arithmetic_sample(inputs, {}, model, 9, jax.random.key(7), num_decodes=4, topk=0)
  b = arithmetic_sample(inputs, {}, model, 9, jax.random.PRNGKey(7), num_decodes=4,
                        topk=0)
  np.testing.assert_array_equal(a[0], b[0])
