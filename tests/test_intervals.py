"""Confidence intervals from K shifted lattices and extensible code sets
(translation.intervals, scripts/intervals.py)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from arithmetic_apps.translation import intervals as iv
from arithmetic_apps.translation.tokenizer import ASSETS

ROOT = pathlib.Path(__file__).resolve().parents[1]
HAS_MODEL = (ASSETS / "params.msgpack").exists()


def test_lattice_codes_are_k_independent_shifted_lattices():
  shifts = np.array([[0.05, 0.9], [0.5, 0.0]])
  codes = iv.lattice_codes(shifts, 4)  # [R=2, K*m=8]
  assert codes.shape == (2, 8)
  np.testing.assert_allclose(codes[0, :4], [0.05, 0.3, 0.55, 0.8])
  np.testing.assert_allclose(codes[0, 4:], [0.9, 0.15, 0.4, 0.65])
  np.testing.assert_allclose(codes[1, 4:], [0.0, 0.25, 0.5, 0.75])


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_van_der_corput_prefixes_are_shifted_lattices(n):
  shifts = np.array([0.0, 0.37, 0.999])
  prefix = iv.van_der_corput_codes(shifts, 16)[:, :n]
  lattice = iv.lattice_codes(shifts[:, None], n)
  np.testing.assert_allclose(np.sort(prefix, 1), np.sort(lattice, 1),
                             atol=1e-7)


def test_intervals_hand_computed():
  # Lattice means 2 and 4 (K = 2): mean 3, s = sqrt(2), se = 1, t(.975,1).
  est, half = iv.k_lattice_interval(np.array([[1., 3., 3., 5.]]), 2)
  assert est.tolist() == [3.0]
  np.testing.assert_allclose(half, [stats.t.ppf(0.975, 1)])
  # i.i.d. values 1..4: mean 2.5, se = sd / 2 = 0.6455, t(.975, 3).
  est, half = iv.t_interval(np.array([[1., 2., 3., 4.]]))
  np.testing.assert_allclose(half, stats.t.ppf(0.975, 3) *
                             np.std([1, 2, 3, 4], ddof=1) / 2)
  assert iv.coverage(np.array([0., 1., 2.]), np.array([1., 1., 0.5]), 1.0) == (
      pytest.approx(2 / 3))
  with pytest.raises(ValueError, match="do not split into k = 3"):
    iv.k_lattice_interval(np.zeros((1, 8)), 3)
  with pytest.raises(ValueError, match="at least 2 independent groups"):
    iv.t_interval(np.zeros((1, 1)))


def test_k_lattice_interval_covers_a_known_expectation():
  # f = a step function of the code (what a sample's score is under
  # arithmetic sampling: constant on each sequence's interval); its exact
  # expectation is known. K = 4 lattices of 4 points, 4000 repeats.
  edges = np.array([0.0, 0.07, 0.4, 0.45, 0.9, 1.0])
  heights = np.array([3.0, -1.0, 7.0, 0.5, 2.0])
  truth = float(np.sum(np.diff(edges) * heights))
  f = lambda u: heights[np.searchsorted(edges, u, side="right") - 1]
  rng = np.random.default_rng(0)
  codes = iv.lattice_codes(rng.random((4000, 4)), 4)
  est, half = iv.k_lattice_interval(f(codes), 4)
  assert abs(est.mean() - truth) < 0.02  # unbiased
  assert 0.90 <= iv.coverage(est, half, truth) <= 0.99
  iid_est, iid_half = iv.t_interval(f(rng.random((4000, 16))))
  assert 0.90 <= iv.coverage(iid_est, iid_half, truth) <= 0.99
  # Spreads against the exact ones: a 4-point lattice mean's variance
  # integrated over its shift (f is piecewise constant: a fine grid of u is
  # exact to ~1e-5), divided by K; Var f / 16 for i.i.d.
  u = (np.arange(200_000) + 0.5) / 200_000
  lattice_var = np.mean((f((u[:, None] + np.arange(4) / 4) % 1).mean(1) -
                         truth) ** 2)
  iid_var = float(np.sum(np.diff(edges) * (heights - truth) ** 2)) / 16
  np.testing.assert_allclose(est.std(), np.sqrt(lattice_var / 4), rtol=0.05)
  np.testing.assert_allclose(iid_est.std(), np.sqrt(iid_var), rtol=0.05)
  # Here the lattices cut the spread only by 10 %, and their interval pays
  # t(.975, 3) = 3.18 against t(.975, 15) = 2.13 and a noisier standard
  # error: it is wider than the i.i.d. one (1.23 vs 0.95 on average).
  assert half.mean() > iid_half.mean()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MODEL, reason="no packaged model in assets/en_fr")
def test_intervals_quick_run(tmp_path):
  """End to end on the packaged model (resuming is `test_jsonl`'s)."""
  cmd = [sys.executable, str(ROOT / "scripts" / "intervals.py"), "--quick",
         "--out", str(tmp_path)]
  first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert first.returncode == 0, first.stderr[-3000:]
  runs = (tmp_path / "runs.jsonl").read_text().splitlines()
  assert len(runs) == 3 + 1 + 2  # truth, iid, vdc; K = 2; lattices n = 2, 4
  summary = json.loads((tmp_path / "summary.json").read_text())
  rows = summary["intervals"]["0.5"]
  assert set(rows) == {"iid", "K=2 x 2"}
  assert all(0 <= r["coverage"] <= 1 for r in rows.values())
  assert set(summary["extensible"]["0.5"]) == {"2", "4"}
