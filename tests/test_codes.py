"""Code schemes: exact lattice structure, ranges, extensibility, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from arithmetic_decoding import CodeScheme, make_codes, radical_inverse_base2
from arithmetic_decoding import codes as codes_module
from arithmetic_decoding.codes import ONE_BELOW, as_code_scheme

KEY = jax.random.PRNGKey(42)


@pytest.mark.parametrize("scheme", list(CodeScheme))
@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_codes_have_shape_and_lie_in_unit_interval(scheme, n):
  codes = np.asarray(make_codes(KEY, 5, n, scheme))
  assert codes.shape == (5, n) and codes.dtype == np.float32
  assert np.all(codes >= 0) and np.all(codes < 1)


@pytest.mark.parametrize("n", [1, 3, 4, 10, 1000])
def test_shifted_lattice_is_an_exact_lattice(n):
  codes = np.asarray(make_codes(KEY, 6, n), np.float64)
  shift = np.asarray(jax.random.uniform(KEY, (6,)), np.float64)
  expected = np.mod(np.arange(n)[None, :] / n + shift[:, None], 1.0)
  np.testing.assert_allclose(codes, expected, atol=2e-7)
  # Sorted, consecutive codes are exactly 1/N apart (cyclically).
  ordered = np.sort(codes, axis=1)
  gaps = np.diff(np.concatenate([ordered, ordered[:, :1] + 1], axis=1), axis=1)
  np.testing.assert_allclose(gaps, 1.0 / n, atol=4e-7)


def test_lattice_is_deterministic_midpoints():
  codes = np.asarray(make_codes(KEY, 2, 4, CodeScheme.LATTICE))
  np.testing.assert_array_equal(codes, [[0.125, 0.375, 0.625, 0.875]] * 2)
  other = np.asarray(make_codes(jax.random.PRNGKey(1), 2, 4, "lattice"))
  np.testing.assert_array_equal(codes, other)


def test_radical_inverse_is_bit_reversal():
  got = np.asarray(radical_inverse_base2(jnp.arange(16)))
  expected = [int(format(i, "04b")[::-1], 2) / 16 for i in range(16)]
  np.testing.assert_array_equal(got, expected)
  big = np.asarray(radical_inverse_base2(jnp.array([2**23 + 1])))
  np.testing.assert_array_equal(big, [0.5 + 2.0**-24])


@pytest.mark.parametrize("k,m", [(1, 3), (2, 5), (3, 3), (4, 8)])
def test_van_der_corput_prefixes_are_shifted_lattices(k, m):
  """The first 2**k codes of a run of 2**m are the 2**k-point shifted lattice
  with the same shift: samples can be added later and stay stratified."""
  long_run = np.asarray(make_codes(KEY, 4, 2**m, CodeScheme.VAN_DER_CORPUT))
  lattice = np.asarray(make_codes(KEY, 4, 2**k, CodeScheme.SHIFTED_LATTICE))
  np.testing.assert_allclose(np.sort(long_run[:, :2**k], axis=1),
                             np.sort(lattice, axis=1), atol=2e-7)


def test_iid_codes_are_uniform():
  codes = np.asarray(make_codes(KEY, 50, 400, "iid")).ravel()
  assert stats.kstest(codes, "uniform").pvalue > 1e-3
  assert len(np.unique(codes)) > 0.99 * codes.size


def test_shifts_are_uniform_across_rows():
  first = np.asarray(make_codes(KEY, 20000, 3))[:, 0]
  assert stats.kstest(first, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("scheme", ["shifted_lattice", "van_der_corput"])
def test_codes_never_reach_one(scheme, monkeypatch):
  # Force the largest shift float32 can give: ONE_BELOW. Every lattice point
  # i/N + ONE_BELOW must wrap back into [0, 1), the first one staying at
  # ONE_BELOW itself (0 + ONE_BELOW is below 1: no wrap).
  def uniform(key, shape, dtype=jnp.float32, *args, **kwargs):
    del key, args, kwargs
    return jnp.full(shape, ONE_BELOW, dtype)

  monkeypatch.setattr(codes_module.jax.random, "uniform", uniform)
  codes = np.asarray(make_codes(KEY, 2, 8, scheme))
  assert codes.max() <= ONE_BELOW and codes.min() >= 0.0
  assert codes[0, 0] == np.float32(ONE_BELOW)
  # The others are i/8 - 2**-24 rounded: just below each lattice point.
  expected = (radical_inverse_base2(jnp.arange(8)) if scheme == "van_der_corput"
              else np.arange(8) / 8)
  np.testing.assert_allclose(codes[0, 1:], np.asarray(expected)[1:], atol=1e-7)


def test_unknown_scheme_is_rejected_with_the_allowed_values():
  with pytest.raises(ValueError, match="code_scheme.*'shifted_lattice'.*'iid'"):
    make_codes(KEY, 1, 4, "sobol")
  with pytest.raises(ValueError, match="code_scheme"):
    as_code_scheme(3)
  assert as_code_scheme("van_der_corput") is CodeScheme.VAN_DER_CORPUT


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_sizes_are_rejected(bad):
  with pytest.raises(ValueError, match="num_decodes"):
    make_codes(KEY, 1, bad)
  with pytest.raises(ValueError, match="batch_size"):
    make_codes(KEY, bad, 1)
