"""Exact properties on an enumerable toy model (vocab 6, length <= 5).

Every sequence the model can produce is listed with its exact probability by
`ToyLanguageModel.enumerate_sequences` (numpy, float64, independent of the
library), and the library's sampler and encoder are checked against it.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from arithmetic_decoding import CodeScheme, arithmetic_encode, arithmetic_sample
from arithmetic_decoding.codes import ONE_BELOW, radical_inverse_base2
from arithmetic_decoding.testing import enumerate_sequences, next_probs
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel

MODEL = ToyLanguageModel()
LENGTH = 4

# (temperature, topk, topp) settings checked throughout.
TRANSFORMS = [(1.0, 0, 0.0), (0.6, 3, 0.0), (1.3, 0, 0.8)]


def setting(source=0, prompt=(), length=LENGTH):
  """Model inputs for one input row: (inputs [1, L], cache, initial_index)."""
  if not prompt:
    return np.zeros((1, length), np.int32), MODEL.init_cache([source]), None
  inputs = np.zeros((1, length), np.int32)
  inputs[0, 1:len(prompt) + 1] = prompt
  initial_index = np.array([len(prompt)], np.int32)
  return inputs, MODEL.prefill([source], inputs, initial_index), initial_index


def repeat_rows(inputs, cache, initial_index, rows):
  """The same input row repeated `rows` times (each row gets its own codes)."""
  tile = lambda x: np.repeat(np.asarray(x), rows, axis=0)  # host: no compile
  return (tile(inputs), jax.tree_util.tree_map(tile, cache),
          None if initial_index is None else tile(initial_index))


def decode_codes(codes, source=0, prompt=(), length=LENGTH, key=None, **transform):
  """Decodes codes [M, N] for one input; returns sequences [M, N, L] by code."""
  # float64 codes just below 1 round up to 1.0 in float32: clip as make_codes does.
  codes = np.minimum(np.asarray(codes, np.float32), ONE_BELOW)
  inputs, cache, initial_index = repeat_rows(*setting(source, prompt, length),
                                             codes.shape[0])
  decodes, _, out_codes = arithmetic_sample(
      inputs, cache, MODEL.tokens_to_logits, EOS_ID, key, num_decodes=codes.shape[1],
      initial_index=initial_index, codes=codes, return_codes=True, **transform)
  decodes, out_codes = np.asarray(decodes), np.asarray(out_codes)
  # Undo the sort by log-prob: put each sample back at its code's slot.
  back = np.argsort(np.argsort(codes, axis=1), axis=1)
  order = np.argsort(out_codes, axis=1)
  restored = np.take_along_axis(decodes, order[:, :, None], axis=1)
  return np.take_along_axis(restored, back[:, :, None], axis=1)


def transform_kwargs(temperature, topk, topp):
  return dict(temperature=temperature, topk=topk, topp=topp)


@pytest.mark.parametrize("prompt", [(), (3, 5)])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_code_intervals_tile_unit_interval(transform, prompt):
  length = LENGTH + len(prompt)
  dist = enumerate_sequences(MODEL, 1, length, prompt=prompt,
                                   **transform_kwargs(*transform))
  sequences = np.array([s for s, _ in dist], np.int32)[None]  # [1, K, L]
  probs = np.array([p for _, p in dist])
  inputs, cache, initial_index = setting(1, prompt, length)
  low, log_width = arithmetic_encode(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                     sequences, initial_index=initial_index,
                                     **transform_kwargs(*transform))
  low = np.asarray(low[0], np.float64)
  width = np.exp(np.asarray(log_width[0], np.float64))
  assert abs(probs.sum() - 1) < 1e-12
  # Widths are the probabilities, each to a relative 1e-5 (an absolute
  # tolerance would wave through the many sequences with p < 1e-5), i.e.
  # log-widths to 1e-5; intervals follow dictionary order and tile.
  if transform == TRANSFORMS[0]:
    assert probs.min() < 1e-6  # untruncated, the small ones are checked too
  np.testing.assert_allclose(np.asarray(log_width[0], np.float64),
                             np.log(probs), rtol=0, atol=1e-5)
  # Dictionary order, up to float32's resolution near 1 (~6e-8).
  assert np.all(np.diff(low) >= -1.2e-7)
  np.testing.assert_allclose(low, np.concatenate([[0.0], np.cumsum(probs)[:-1]]),
                             atol=1e-6)
  np.testing.assert_allclose(low[1:], low[:-1] + width[:-1], atol=1e-6)
  assert abs(low[-1] + width[-1] - 1.0) < 1e-6


@pytest.mark.parametrize(
    "prompt", [(), pytest.param((3, 5), marks=pytest.mark.slow)])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_interval_midpoints_decode_back(transform, prompt):
  length = LENGTH + len(prompt)
  dist = enumerate_sequences(MODEL, 2, length, prompt=prompt,
                                   **transform_kwargs(*transform))
  kept = [(s, p) for s, p in dist if p >= 1e-5]
  sequences = np.array([s for s, _ in kept], np.int32)[None]
  inputs, cache, initial_index = setting(2, prompt, length)
  low, log_width = arithmetic_encode(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                     sequences, initial_index=initial_index,
                                     **transform_kwargs(*transform))
  midpoints = np.asarray(low) + np.exp(np.asarray(log_width)) / 2  # [1, K]
  # The code alone decides the sequence: the key (whose noise refreshes
  # unresolved residual bits) does not matter.
  for key in (jax.random.PRNGKey(0), jax.random.PRNGKey(1), jax.random.key(2)):
    decoded = decode_codes(midpoints.T, source=2, prompt=prompt, length=length,
                           key=key, **transform_kwargs(*transform))  # [K, 1, L]
    np.testing.assert_array_equal(decoded[:, 0], sequences[0])


def length_and_first_token(sequence):
  """A test function: decoded length plus 2 if the first token is 3."""
  tokens = [t for t in sequence if t != 0]
  return len(tokens) + 2.0 * (sequence[0] == 3)


def exact_lattice_mean(grid, source, transform):
  """E_u[(1/N) sum_i f(decode((grid_i + u) mod 1))], integrated exactly.

  The estimator is piecewise constant in u: it changes only where some
  grid_i + u crosses a sequence's interval boundary. Summing segment length
  times the value at each segment's midpoint is the exact integral.
  """
  dist = enumerate_sequences(MODEL, source, LENGTH, **transform_kwargs(*transform))
  bounds = np.concatenate([[0.0], np.cumsum([p for _, p in dist])])
  breaks = np.unique(np.concatenate(
      [np.mod(bounds[:, None] - grid[None, :], 1.0).ravel(), [0.0, 1.0]]))
  breaks = breaks[(breaks >= 0) & (breaks <= 1)]
  mids = (breaks[:-1] + breaks[1:]) / 2
  lengths = np.diff(breaks)
  codes = np.mod(grid[None, :] + mids[:, None], 1.0)
  decoded = decode_codes(codes, source=source, **transform_kwargs(*transform))
  values = np.array([[length_and_first_token(s) for s in row] for row in decoded])
  truth = sum(p * length_and_first_token(s) for s, p in dist)
  return float(np.sum(lengths * values.mean(axis=1))), truth


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("scheme,n", [("shifted_lattice", 4),
                                      ("van_der_corput", 3)])
def test_randomly_shifted_codes_are_unbiased_exactly(scheme, n, transform):
  if scheme == "shifted_lattice":
    grid = np.arange(n) / n
  else:
    grid = np.asarray(radical_inverse_base2(jnp.arange(n)), np.float64)
  mean, truth = exact_lattice_mean(grid, 0, transform)
  assert abs(mean - truth) < 1e-6, (mean, truth)


def test_deterministic_lattice_is_biased():
  """The documented bias of CodeScheme.LATTICE is real on this model."""
  transform = TRANSFORMS[0]
  dist = enumerate_sequences(MODEL, 0, LENGTH, **transform_kwargs(*transform))
  truth = sum(p * length_and_first_token(s) for s, p in dist)
  n = 4
  codes = (np.arange(n)[None, :] + 0.5) / n
  decoded = decode_codes(codes, source=0, **transform_kwargs(*transform))
  estimate = np.mean([length_and_first_token(s) for s in decoded[0]])
  assert abs(estimate - truth) > 1e-3


@pytest.mark.parametrize("scheme", ["shifted_lattice", "van_der_corput"])
def test_lattice_samples_are_distinct_when_all_probabilities_are_small(scheme):
  transform = dict(temperature=2.0, topk=0, topp=0.0)
  dist = enumerate_sequences(MODEL, 3, LENGTH, **transform)
  max_p = max(p for _, p in dist)
  n = int(np.floor(1.0 / max_p))
  if scheme == "van_der_corput":
    n = 2 ** int(np.floor(np.log2(n)))  # a full power-of-two prefix
  assert n >= 4 and max_p < 1.0 / n
  rows = 25
  inputs, cache, _ = repeat_rows(*setting(3), rows)
  decodes, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                 jax.random.PRNGKey(11), num_decodes=n,
                                 code_scheme=scheme, **transform)
  for row in np.asarray(decodes):
    assert len({tuple(s) for s in row}) == n


@pytest.mark.parametrize("scheme", ["shifted_lattice", "van_der_corput"])
def test_coarse_code_resolution_keeps_lattice_distinctness(scheme):
  """With code_resolution = 1/N the code decides each sample only down to
  prefix probability 1/N; below that no two of the N lattice codes share an
  interval, so the samples stay distinct (fresh uniforms continue)."""
  transform = dict(temperature=2.0, topk=0, topp=0.0)
  dist = enumerate_sequences(MODEL, 3, LENGTH, **transform)
  n = int(np.floor(1.0 / max(p for _, p in dist)))
  if scheme == "van_der_corput":
    n = 2 ** int(np.floor(np.log2(n)))
  rows = 25
  inputs, cache, _ = repeat_rows(*setting(3), rows)
  decodes, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                 jax.random.PRNGKey(11), num_decodes=n,
                                 code_scheme=scheme, code_resolution=1.0 / n,
                                 **transform)
  for row in np.asarray(decodes):
    assert len({tuple(s) for s in row}) == n


def chi_square_p_value(samples, dist):
  """Pearson chi-square p-value of samples against an enumerated distribution."""
  counts = collections.Counter(tuple(int(t) for t in s) for s in samples)
  total = len(samples)
  expected = np.array([p * total for _, p in dist])
  observed = np.array([counts.pop(s, 0) for s, _ in dist], np.float64)
  assert not counts, f"impossible sequences sampled: {list(counts)[:3]}"
  big = expected >= 5
  observed = np.append(observed[big], observed[~big].sum())
  expected = np.append(expected[big], expected[~big].sum())
  return stats.chisquare(observed, expected).pvalue


def test_iid_codes_reproduce_the_model_distribution():
  transform = dict(temperature=1.0, topk=0, topp=0.0)
  dist = enumerate_sequences(MODEL, 1, LENGTH, **transform)
  rows, n = 8, 2500
  inputs, cache, _ = repeat_rows(*setting(1), rows)
  decodes, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                 jax.random.PRNGKey(5), num_decodes=n,
                                 code_scheme=CodeScheme.IID, **transform)
  samples = np.asarray(decodes).reshape(rows * n, LENGTH)
  assert chi_square_p_value(samples, dist) > 1e-3


@pytest.mark.parametrize("scheme,resolution", [("iid", 0.25), ("iid", 1.0),
                                               ("shifted_lattice", 1 / 16)])
def test_coarse_code_resolution_is_exact_in_distribution(scheme, resolution):
  """Replacing a spent code by a fresh uniform leaves every sample exactly
  distributed (resolution 1: every token is drawn from a fresh uniform)."""
  transform = dict(temperature=1.0, topk=0, topp=0.0)
  dist = enumerate_sequences(MODEL, 1, LENGTH, **transform)
  rows, n = 8, 2496
  inputs, cache, _ = repeat_rows(*setting(1), rows)
  decodes, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                 jax.random.PRNGKey(6), num_decodes=n,
                                 code_scheme=scheme, code_resolution=resolution,
                                 **transform)
  samples = np.asarray(decodes).reshape(rows * n, LENGTH)
  assert chi_square_p_value(samples, dist) > 1e-3


def test_code_resolution_changes_only_the_deep_tokens():
  """The code alone decides a sample's tokens while the prefix before them
  has probability >= the resolution: coarse and full resolution agree there,
  code by code."""
  transform = dict(temperature=1.0, topk=0, topp=0.0)
  rows, n, resolution = 4, 16, 0.05
  inputs, cache, _ = repeat_rows(*setting(1), rows)
  codes = jax.random.uniform(jax.random.PRNGKey(3), (rows, n))

  def by_code(**kw):
    decodes, _, sorted_codes = arithmetic_sample(
        inputs, cache, MODEL.tokens_to_logits, EOS_ID, jax.random.PRNGKey(1),
        num_decodes=n, codes=codes, return_codes=True, **transform, **kw)
    return {float(c): tuple(int(t) for t in seq)
            for c, seq in zip(np.asarray(sorted_codes).ravel(),
                              np.asarray(decodes).reshape(rows * n, LENGTH))}

  full, coarse = by_code(), by_code(code_resolution=resolution)
  assert full.keys() == coarse.keys()
  deep_differ = 0
  for code, seq in coarse.items():
    tokens = [t for t in seq if t != 0]
    prefix_probs = np.cumprod([next_probs(MODEL, 1, seq[:i])[seq[i]]
                               for i in range(len(tokens))])
    # Token i is decided by the code if the prefix before it has p >= 0.05.
    decided = 1 + int(np.sum(prefix_probs[:-1] >= resolution))
    assert full[code][:decided] == seq[:decided], (code, full[code], seq)
    deep_differ += full[code] != seq
  assert deep_differ > 0  # the fresh uniforms do take over below 0.05


@pytest.mark.parametrize("scheme", ["iid", "shifted_lattice"])
def test_per_example_temperature_gives_distinct_correct_samples(scheme):
  """Unlike T5X, per-input temperatures do not collapse the N decodes."""
  temperatures = np.array([0.6, 1.5], np.float32)
  n = 3000
  inputs, cache, _ = repeat_rows(*setting(0), 2)
  decodes, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                 jax.random.PRNGKey(9), num_decodes=n, topk=0,
                                 temperature=temperatures, code_scheme=scheme)
  for row, temperature in zip(np.asarray(decodes), temperatures):
    dist = enumerate_sequences(MODEL, 0, LENGTH, temperature=float(temperature))
    assert len({tuple(s) for s in row}) > 20
    assert chi_square_p_value(row, dist) > 1e-3


def test_sampled_log_probs_are_exact():
  transform = dict(temperature=0.8, topk=4, topp=0.0)
  dist = dict(enumerate_sequences(MODEL, 2, LENGTH, **transform))
  inputs, cache, _ = repeat_rows(*setting(2), 4)
  decodes, log_probs = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits,
                                         EOS_ID, jax.random.PRNGKey(2),
                                         num_decodes=16, **transform)
  for seq, lp in zip(np.asarray(decodes).reshape(-1, LENGTH),
                     np.asarray(log_probs).ravel()):
    assert abs(np.log(dist[tuple(int(t) for t in seq)]) - lp) < 1e-5


def test_encode_gives_zero_width_to_impossible_sequences():
  inputs, cache, _ = setting(0)
  impossible = np.array([[[0, 2, 1, 0], [2, 2, 2, 2]]], np.int32)  # token 0 is -inf
  low, log_width = arithmetic_encode(inputs, cache, MODEL.tokens_to_logits, EOS_ID,
                                     impossible, topk=0)
  assert np.isneginf(log_width[0, 0]) and np.isfinite(log_width[0, 1])
  # With T5X's default topk=1 only the greedy sequence has positive width.
  greedy, _ = arithmetic_sample(inputs, cache, MODEL.tokens_to_logits, EOS_ID)
  both = np.concatenate([np.asarray(greedy), impossible[:, 1:]], axis=1)
  _, log_width = arithmetic_encode(inputs, cache, MODEL.tokens_to_logits, EOS_ID, both)
  assert log_width[0, 0] == 0.0
  assert not np.array_equal(both[0, 0], both[0, 1]) and np.isneginf(log_width[0, 1])
