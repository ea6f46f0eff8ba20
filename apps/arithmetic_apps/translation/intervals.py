"""Beyond the paper: confidence intervals and extensible code sets.

Arithmetic sampling's estimate of an expectation, mean f(sample) over N
lattice codes, is unbiased and has low variance, but one lattice gives no
error bar: its N samples are not independent. Two ways around that, both
measured on the embedded model by `scripts/intervals.py`:

* **K shifted lattices.** Split the N codes into K independent lattices of
  m = N / K points each (independent shifts u_k). The K lattice means are
  i.i.d. and unbiased, so their mean has a Student-t interval with K - 1
  degrees of freedom: `k_lattice_interval`. Compare its coverage (against
  the exact expectation) and width with the i.i.d. interval at the same N.
* **Extensible codes.** The van der Corput sequence (radical inverse in
  base 2, plus one random shift) has every power-of-two prefix a shifted
  lattice, so a sample set can grow 4 -> 8 -> 16 without discarding what was
  decoded, and stays stratified in between: `van_der_corput_codes`.

All functions here are pure NumPy on arrays of codes or of f-values; the
decoding is `decode_codes`.

  >>> lattice_codes(np.array([[0.1, 0.7]]), 2).round(2).tolist()
  [[0.1, 0.6, 0.7, 0.2]]
  >>> van_der_corput_codes(np.array([0.1]), 4).round(2).tolist()
  [[0.1, 0.6, 0.35, 0.85]]
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from arithmetic_decoding.codes import ONE_BELOW, radical_inverse_base2
from arithmetic_apps.metrics import sentence_bleu
from arithmetic_apps.translation.translate import Translator


def lattice_codes(shifts: np.ndarray, points: int) -> np.ndarray:
  """K shifted lattices per repeat: shifts [R, K] -> codes [R, K * points],
  lattice k occupying columns k*points ... (k+1)*points - 1."""
  grid = np.arange(points, dtype=np.float64) / points  # [m]
  codes = (shifts[:, :, None] + grid[None, None, :]) % 1.0  # [R, K, m]
  return np.minimum(codes, ONE_BELOW).reshape(shifts.shape[0], -1)


def van_der_corput_codes(shifts: np.ndarray, n: int) -> np.ndarray:
  """(radical_inverse_2(i) + u) mod 1 for i < n: shifts [R] -> codes [R, n].

  Every prefix of 2**j codes is a shifted lattice of 2**j points.
  """
  radical = np.asarray(radical_inverse_base2(jnp.arange(n)), np.float64)
  return np.minimum((shifts[:, None] + radical[None, :]) % 1.0, ONE_BELOW)


def t_interval(groups: np.ndarray, level: float = 0.95
               ) -> Tuple[np.ndarray, np.ndarray]:
  """Mean and Student-t half-width over the last axis of i.i.d. values.

  groups [R, G] -> (estimate [R], half-width [R]), G - 1 degrees of freedom.

  >>> est, half = t_interval(np.array([[1.0, 3.0]]))
  >>> est.tolist(), round(float(half[0]), 3)   # t(0.975, 1) = 12.706
  ([2.0], 12.706)
  """
  g = groups.shape[-1]
  if g < 2:
    raise ValueError(f"need at least 2 independent groups; got {g}.")
  estimate = groups.mean(axis=-1)
  stderr = groups.std(axis=-1, ddof=1) / np.sqrt(g)
  return estimate, stats.t.ppf(0.5 + level / 2, g - 1) * stderr


def k_lattice_interval(values: np.ndarray, k: int, level: float = 0.95
                       ) -> Tuple[np.ndarray, np.ndarray]:
  """values [R, K * m] in `lattice_codes` order -> t-interval over the K
  lattice means (each lattice's mean is one i.i.d. unbiased estimate).

  >>> est, half = k_lattice_interval(np.array([[1., 1., 3., 3.]]), 2)
  >>> est.tolist(), round(float(half[0]), 3)
  ([2.0], 12.706)
  """
  repeats, n = values.shape
  if n % k:
    raise ValueError(f"N = {n} samples do not split into k = {k} lattices.")
  return t_interval(values.reshape(repeats, k, n // k).mean(axis=-1), level)


def coverage(estimate: np.ndarray, half_width: np.ndarray,
             truth: float) -> float:
  """Fraction of intervals [estimate +- half_width] that contain `truth`."""
  return float(np.mean(np.abs(estimate - truth) <= half_width))


def decode_codes(translator: Translator, source: str, codes: np.ndarray,
                 temperature: float, key: jax.Array,
                 max_rows: int = 512) -> List[List[str]]:
  """Decodes codes [R, N] of one source; texts [R][N] in code order.

  Each code is its own row (num_decodes = 1, the code passed explicitly),
  so the order of the codes is kept (the decode functions sort by log-prob).
  """
  repeats, n = codes.shape
  flat = codes.reshape(-1, 1).astype(np.float32)
  texts: List[str] = []
  for i, start in enumerate(range(0, len(flat), max_rows)):
    chunk = jnp.asarray(flat[start:start + max_rows])
    rows = translator.sample([source] * len(chunk), 1, temperature,
                             jax.random.fold_in(key, i), codes=chunk)
    texts += [row[0].text for row in rows]
  return [texts[r * n:(r + 1) * n] for r in range(repeats)]


def bleu_values(texts: Sequence[Sequence[str]],
                references: Sequence[str]) -> np.ndarray:
  """Sentence BLEU of each text: [R][N] -> float [R, N]."""
  cache = {}
  def score(text):
    if text not in cache:
      cache[text] = sentence_bleu(text, references)
    return cache[text]
  return np.array([[score(t) for t in row] for row in texts])
