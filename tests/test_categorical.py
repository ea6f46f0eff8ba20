"""The one-step arithmetic categorical: worked examples and properties.

The property tests draw random logits with -inf entries and near-ties, in
float32 and bfloat16, over vocabularies from 2 to 262,144, and codes that
include 0.0 and the largest float32 below 1.0.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arithmetic_decoding import arithmetic_categorical, token_interval
from arithmetic_decoding.codes import ONE_BELOW


def test_worked_example():
  logits = jnp.log(jnp.array([[0.2, 0.3, 0.5]] * 3))
  tokens, residual = arithmetic_categorical(logits, jnp.array([0.1, 0.2, 0.95]))
  np.testing.assert_array_equal(tokens, [0, 1, 2])
  np.testing.assert_allclose(residual, [0.5, 0.0, 0.9], atol=1e-6)


def test_tokens_follow_vocabulary_order():
  """Token v owns [cdf(v-1), cdf(v)): sweeping the code walks the vocabulary."""
  probs = np.array([0.1, 0.0, 0.25, 0.05, 0.6], np.float32)
  codes = np.linspace(0, ONE_BELOW, 1001, dtype=np.float32)
  logits = jnp.log(jnp.broadcast_to(probs, (codes.size, 5)))
  tokens, _ = arithmetic_categorical(logits, jnp.asarray(codes))
  tokens = np.asarray(tokens)
  assert np.all(np.diff(tokens) >= 0) and 1 not in tokens
  cdf = np.cumsum(probs)
  expected = np.searchsorted(cdf, codes, side="right")
  far = np.min(np.abs(codes[:, None] - cdf[None, :]), axis=1) > 1e-6
  np.testing.assert_array_equal(tokens[far], expected[far])


def test_zero_probability_tokens_are_never_chosen_at_the_edges():
  logits = jnp.array([[-jnp.inf, 0.0, -jnp.inf, 1.0, -jnp.inf]] * 2)
  tokens, residual = arithmetic_categorical(logits, jnp.array([0.0, ONE_BELOW]))
  np.testing.assert_array_equal(tokens, [1, 3])
  assert np.all(np.asarray(residual) >= 0) and np.all(np.asarray(residual) < 1)


def test_rows_without_a_distribution_give_no_token():
  logits = jnp.array([[0.0, jnp.nan, 1.0], [-jnp.inf] * 3, [0.0, jnp.inf, 1.0],
                      [0.0, 1.0, 2.0]])
  tokens, residual = arithmetic_categorical(logits, jnp.array([0.5, 0.5, 0.5, 0.5]))
  np.testing.assert_array_equal(tokens, [-1, -1, -1, 2])
  assert np.all(np.isnan(np.asarray(residual[:3]))) and 0 <= residual[3] < 1


def test_shape_errors():
  with pytest.raises(ValueError, match="logits"):
    arithmetic_categorical(jnp.zeros((3,)), jnp.zeros((3,)))
  with pytest.raises(ValueError, match="codes"):
    arithmetic_categorical(jnp.zeros((3, 4)), jnp.zeros((2,)))


VOCABS = (2, 3, 5, 17, 256, 4099, 32128, 262144)
BATCH = 4


@jax.jit
def _step_and_intervals(logits, codes):
  tokens, residual = arithmetic_categorical(logits, codes)
  iv = token_interval(logits.astype(jnp.float32), jnp.maximum(tokens, 0))
  return tokens, residual, iv.low, iv.width


def random_logits(seed, vocab, dtype, neg_inf_fraction, tie_fraction, scale):
  rng = np.random.default_rng(seed)
  logits = rng.normal(0.0, scale, (BATCH, vocab)).astype(np.float32)
  # Near-ties: copy some entries from others, nudged by at most one ulp.
  ties = rng.random((BATCH, vocab)) < tie_fraction
  source = rng.integers(0, vocab, (BATCH, vocab))
  copied = np.take_along_axis(logits, source, axis=1)
  logits = np.where(ties, np.nextafter(copied, rng.choice([-np.inf, np.inf])), logits)
  masked = rng.random((BATCH, vocab)) < neg_inf_fraction
  masked[:, rng.integers(0, vocab)] = False  # keep at least one finite entry
  logits = np.where(masked, -np.inf, logits).astype(np.float32)
  return jnp.asarray(logits, dtype)


# Random logits (with -inf entries and near-ties) and codes (with the ends).
CASES = dict(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.sampled_from(VOCABS),
    dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
    neg_inf_fraction=st.sampled_from([0.0, 0.3, 0.9, 0.999]),
    tie_fraction=st.sampled_from([0.0, 0.5]),
    scale=st.sampled_from([0.01, 1.0, 10.0, 60.0]),
    codes=st.lists(st.one_of(st.just(0.0), st.just(ONE_BELOW),
                             st.floats(0.0, ONE_BELOW, width=32)),
                   min_size=BATCH, max_size=BATCH),
)


@given(**CASES)
def test_chosen_token_is_possible_and_holds_the_code(seed, vocab, dtype,
                                                    neg_inf_fraction, tie_fraction,
                                                    scale, codes):
  logits = random_logits(seed, vocab, dtype, neg_inf_fraction, tie_fraction, scale)
  codes = jnp.asarray(codes, jnp.float32)
  tokens, residual, low, width = map(np.asarray, _step_and_intervals(logits, codes))
  x = np.asarray(logits.astype(jnp.float32), np.float64)
  probs = np.exp(x - x.max(axis=1, keepdims=True))
  probs /= probs.sum(axis=1, keepdims=True)
  rows = np.arange(BATCH)
  # A real token of non-zero probability.
  assert np.all((tokens >= 0) & (tokens < vocab))
  assert np.all(probs[rows, tokens] > 0)
  # The residual code is in [0, 1).
  assert np.all((residual >= 0) & (residual < 1))
  # The code lies in the chosen token's interval (as the library lays it
  # out, up to float32 rounding of code * total) ...
  c = np.asarray(codes, np.float64)
  slack = 4e-7 + 2e-7 * c
  assert np.all(low - slack <= c) and np.all(c < low + width + slack)
  # ... which is the token's exact float64 CDF interval, up to float32 sums.
  cdf_lo = np.array([probs[r, :tokens[r]].sum() for r in rows])
  tol = 1e-5
  assert np.all(cdf_lo - tol <= c) and np.all(c <= cdf_lo + probs[rows, tokens] + tol)
  # The residual is where the code sits inside that interval, to float32
  # precision: ~1e-7 in code space, magnified by 1 / width.
  # (Skipped for widths that underflow float32: code 0.0 can pick a first
  # token of weight 1e-38.)
  shown = width > 1e-30
  expected = (c - low) / np.where(shown, width, 1.0)
  error = np.abs(residual - expected)
  assert np.all(error[shown] <= 1e-5 + 3e-7 / width[shown])


@jax.jit
def _full_codebook_step(x, codes):
  """The rule on the full codebook (`code_space`: [B, V] lower ends), as
  the step was computed before its two-level form: the reference."""
  from arithmetic_decoding.categorical import code_space
  x = x.astype(jnp.float32)
  space = code_space(x)
  u = (codes * space.total)[:, None]
  live = space.weight > 0.0
  owned = live & (space.lower <= u)
  index = jnp.arange(x.shape[-1], dtype=jnp.int32)[None, :]
  token = jnp.max(jnp.where(owned, index, -1), axis=-1)
  low = jnp.max(jnp.where(owned, space.lower, 0.0), axis=-1)
  high = jnp.min(jnp.where(live & (space.lower > u), space.lower,
                           space.total[:, None]), axis=-1)
  residual = jnp.clip((u[:, 0] - low) / jnp.maximum(
      high - low, jnp.finfo(jnp.float32).tiny), 0.0, ONE_BELOW)
  x_token = jnp.sum(jnp.where(index == token[:, None], x, 0.0), axis=-1)
  return token, residual, x_token - space.log_norm


@pytest.mark.slow
@given(**CASES)
def test_two_level_step_equals_the_full_codebook_bitwise(
    seed, vocab, dtype, neg_inf_fraction, tie_fraction, scale, codes):
  from arithmetic_decoding.categorical import arithmetic_step
  logits = random_logits(seed, vocab, dtype, neg_inf_fraction, tie_fraction,
                         scale)
  codes = jnp.asarray(codes, jnp.float32)
  fast = jax.jit(arithmetic_step)(logits, codes)
  token, residual, log_prob = _full_codebook_step(logits, codes)
  np.testing.assert_array_equal(fast.token, token)
  np.testing.assert_array_equal(fast.residual, residual)
  np.testing.assert_array_equal(fast.log_prob, log_prob)


@pytest.mark.parametrize("vocab", [1, 17, 8000])
def test_step_on_shared_rows_equals_the_gathered_step_bitwise(vocab):
  """Codes that share rows of logits (`rows`) decode exactly what they
  decode from their own copies of the rows: tokens, residuals,
  log-probabilities and validity, rows with NaN, +inf and no finite entry
  and codes outside [0, 1) included."""
  from arithmetic_decoding.categorical import arithmetic_step
  rng = np.random.default_rng(vocab)
  x = rng.normal(0.0, 3.0, (7, vocab)).astype(np.float32)
  x[1, rng.random(vocab) < 0.9] = -np.inf
  x[1, 0] = 0.5  # sparse, one finite entry kept
  x[2, :] = -np.inf
  x[3, vocab // 2] = np.nan
  x[4, vocab - 1] = np.inf
  x[5] = np.log(rng.dirichlet(np.full(vocab, 0.05)) + 1e-30)  # peaked
  rows = rng.integers(0, 7, 200).astype(np.int32)
  codes = rng.random(200).astype(np.float32)
  codes[:6] = [0.0, ONE_BELOW, 1.0, -0.25, np.nan, 0.5]
  x, rows, codes = jnp.asarray(x), jnp.asarray(rows), jnp.asarray(codes)
  shared = jax.jit(arithmetic_step)(x, codes, rows)
  own = jax.jit(arithmetic_step)(x[rows], codes)
  for field in ("token", "residual", "log_prob", "valid"):
    np.testing.assert_array_equal(getattr(shared, field), getattr(own, field))
  assert np.asarray(own.valid).sum() > 100  # most rows decode


def test_two_level_step_sparse_row_at_the_top_code():
  # Found by the CI-size property run: almost all -inf, code just below 1.
  # The interval must end at the total, not at the chosen block's end.
  test_two_level_step_equals_the_full_codebook_bitwise.hypothesis.inner_test(
      seed=151405, vocab=262144, dtype=jnp.bfloat16, neg_inf_fraction=0.999,
      tie_fraction=0.0, scale=1.0, codes=[ONE_BELOW, 0.0, 0.0, 0.0])


def test_refresh_spreads_only_the_unresolved_part():
  from arithmetic_decoding.categorical import CODE_RESOLUTION, refresh_residual
  residual = jnp.full((1000,), 0.25)
  noise = jax.random.uniform(jax.random.PRNGKey(0), (1000,))
  # A likely token: the residual moves by at most CODE_RESOLUTION / p.
  moved = np.asarray(refresh_residual(residual, jnp.full((1000,), np.log(1e-3)),
                                      noise))
  assert np.all(moved >= 0.25) and np.all(moved <= 0.25 + CODE_RESOLUTION / 1e-3)
  assert moved.max() > 0.25 + 0.5 * CODE_RESOLUTION / 1e-3
  # A token below the resolution used up the code: the residual is fresh.
  fresh = np.asarray(refresh_residual(residual, jnp.full((1000,), -40.0), noise))
  assert np.all((fresh >= 0) & (fresh < 1)) and fresh.std() > 0.25


def test_long_sequences_stay_exactly_distributed():
  """A uniform 4-token model uses 2 bits of the code per token: after 12
  tokens a float32 code is spent. Later tokens must still be uniform, not
  stuck on one token."""
  from scipy import stats
  from arithmetic_decoding import arithmetic_sample

  def uniform_model(state):
    return jnp.zeros((state.cur_token.shape[0], 4)), {}

  decodes, log_probs = arithmetic_sample(
      jnp.zeros((16, 48), jnp.int32), {}, uniform_model, 9, jax.random.PRNGKey(0),
      num_decodes=16, topk=0)
  tokens = np.asarray(decodes)
  np.testing.assert_allclose(log_probs, 48 * np.log(0.25), rtol=1e-6)
  for position in (0, 11, 12, 20, 47):
    counts = np.bincount(tokens[:, :, position].ravel(), minlength=4)
    assert stats.chisquare(counts).pvalue > 1e-4, (position, counts)
  # Pairs of consecutive late tokens are uniform over the 16 pairs too.
  pairs = (tokens[:, :, 30:47] * 4 + tokens[:, :, 31:48]).ravel()
  assert stats.chisquare(np.bincount(pairs, minlength=16)).pvalue > 1e-4


def test_monotone_lower_ends_worked_example():
  from arithmetic_decoding import categorical
  weight = jnp.array([[1.0, 2.0, 0.0, 3.0, 4.0]])
  original = categorical._BLOCK
  try:
    categorical._BLOCK = 2
    lower, total = categorical.monotone_lower_ends(weight)
  finally:
    categorical._BLOCK = original
  np.testing.assert_array_equal(lower, [[0, 1, 3, 3, 6]])
  np.testing.assert_array_equal(total, [10])


@pytest.mark.parametrize("vocab", [1, 2, 15, 16, 17, 1000, 32128, 250112])
def test_monotone_lower_ends_never_decrease(vocab):
  from arithmetic_decoding.categorical import monotone_lower_ends
  rng = np.random.default_rng(vocab)
  weight = np.exp(rng.normal(0, 8, (3, vocab))).astype(np.float32)
  weight[:, rng.random(vocab) < 0.5] = 0.0
  lower, total = map(np.asarray, jax.jit(monotone_lower_ends)(jnp.asarray(weight)))
  assert np.all(np.diff(lower, axis=1) >= 0) and np.all(lower[:, 0] == 0)
  assert np.all(total >= lower[:, -1])
  exact = np.cumsum(weight.astype(np.float64), axis=1)
  scale = exact[:, -1:] + 1e-30
  assert np.all(np.abs(lower[:, 1:] - exact[:, :-1]) <= 1e-6 * scale)
  assert np.all(np.abs(total - exact[:, -1]) <= 1e-6 * scale[:, 0])


def test_shared_logits_need_a_temperature_per_shared_row():
  from arithmetic_decoding.choosers import Arithmetic, Distribution
  with pytest.raises(ValueError, match=r"temperature of shape \[\] or \[P\]"):
    Arithmetic().choose_rows(jnp.zeros((2, 5)), jnp.zeros(3, jnp.int32),
                             None, None, Distribution(jnp.ones(3), 0, 0.0))
