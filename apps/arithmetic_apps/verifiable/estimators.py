"""pass@k, majority vote and GRPO-group statistics that stay right for
lattice (non-iid) samples.

The usual pass@k estimator, 1 - C(n - c, k) / C(n, k) from n samples with c
correct, assumes the n samples are exchangeable and iid; the points of one
lattice are not (they are stratified), so here pass@k is measured from sets
of exactly k samples, each of which is what a user would draw:

  A group of G = m * k lattice codes (j / G + u) mod 1 splits into m
  disjoint k-point sets {r, r + m, r + 2m, ...}: set r holds the codes
  (i / k + (r / G + u)) mod 1, i.e. a k-point shifted lattice whose shift
  r / G + u is uniform in [0, 1) for every r. Each set is exactly a k-sample
  arithmetic draw, so averages over sets are unbiased. For iid groups the
  same split gives iid k-sets.

  >>> k_sets(8, 2).tolist()
  [[0, 4], [1, 5], [2, 6], [3, 7]]
  >>> round(pass_at_k_unbiased(10, 3, 2), 4)
  0.5333

Intervals are bootstrap percentiles over problems (problems are the unit
that varies between evaluations).
"""

from __future__ import annotations

import collections
import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np


def k_sets(group_size: int, k: int) -> np.ndarray:
  """int [G / k, k]: the disjoint k-point sub-lattices of a G-lattice
  ordered by code index (G must be a multiple of k)."""
  if not isinstance(k, int) or k < 1 or group_size % k:
    raise ValueError(f"k must be an int >= 1 dividing group_size "
                     f"{group_size}; got {k!r}.")
  m = group_size // k
  return np.arange(group_size).reshape(k, m).T


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
  """Chen et al.'s estimator from n iid samples with c correct."""
  if not 0 <= c <= n or not 1 <= k <= n:
    raise ValueError(f"need 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, "
                     f"k={k}.")
  if n - c < k:
    return 1.0
  return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_sets(correct: np.ndarray, k: int) -> np.ndarray:
  """correct bool [P, R, G] (problems, repeats, group in code order) ->
  float [P]: the fraction of k-sets with at least one correct sample."""
  correct = np.asarray(correct, bool)
  sets = k_sets(correct.shape[-1], k)  # [m, k]
  hit = correct[..., sets].any(axis=-1)  # [P, R, m]
  return hit.reshape(hit.shape[0], -1).mean(axis=1)


def majority_vote(answers: Sequence, truth) -> bool:
  """True if the most frequent non-None answer equals `truth` (a tie goes
  to the answer seen first; all None: False).

  >>> majority_vote([3, 4, 4, None], 4), majority_vote([3, 4], 4)
  (True, False)
  """
  counts = collections.Counter(a for a in answers if a is not None)
  if not counts:
    return False
  best = max(counts.values())
  winner = next(a for a in answers if a is not None and counts[a] == best)
  return winner == truth


def majority_at_k_sets(answers: np.ndarray, truths: Sequence, k: int
                       ) -> np.ndarray:
  """answers object [P, R, G], truths [P] -> float [P]: the fraction of
  k-sets whose majority answer is right (self-consistency)."""
  sets = k_sets(answers.shape[-1], k)
  out = []
  for p, truth in enumerate(truths):
    votes = [majority_vote(list(answers[p, r, s]), truth)
             for r in range(answers.shape[1]) for s in sets]
    out.append(np.mean(votes))
  return np.asarray(out)


def zero_advantage_fraction(rewards: np.ndarray, g: int) -> np.ndarray:
  """rewards [P, R, G] -> float [P]: the fraction of g-groups in which every
  sample has the same reward (GRPO advantage 0: no learning signal)."""
  rewards = np.asarray(rewards, float)
  groups = rewards[..., k_sets(rewards.shape[-1], g)]  # [P, R, m, g]
  same = (groups == groups[..., :1]).all(axis=-1)
  return same.reshape(same.shape[0], -1).mean(axis=1)


def group_mean_variance(rewards: np.ndarray, g: int) -> np.ndarray:
  """rewards [P, R, G] with R >= 2 independent repeats -> float [P]: an
  unbiased estimate of Var(mean reward of one g-group) per problem.

  The g-groups of one repeat are not independent of each other (their
  shifts are evenly spaced), so their spread is not the variance. Instead
  Var = E[X^2] - E[X]^2 with E[X^2] the mean of the squared group means
  (each group is marginally a true g-draw) and E[X]^2 the mean product of
  the repeats' averages over distinct, independent repeats.
  """
  rewards = np.asarray(rewards, float)
  if rewards.shape[1] < 2:
    raise ValueError("group_mean_variance needs R >= 2 independent repeats.")
  means = rewards[..., k_sets(rewards.shape[-1], g)].mean(axis=-1)  # [P,R,m]
  second = (means ** 2).mean(axis=(1, 2))
  per_repeat = means.mean(axis=2)  # [P, R]
  r = per_repeat.shape[1]
  total = per_repeat.sum(axis=1)
  cross = (total ** 2 - (per_repeat ** 2).sum(axis=1)) / (r * (r - 1))
  return second - cross


def bootstrap(values: np.ndarray, num: int = 2000, seed: int = 0,
              level: float = 0.95, statistic=np.mean
              ) -> Tuple[float, float, float]:
  """(statistic, low, high): percentile bootstrap over the first axis."""
  values = np.asarray(values, float)
  rng = np.random.default_rng(seed)
  index = rng.integers(0, len(values), size=(num, len(values)))
  stats = np.array([statistic(values[i]) for i in index])
  tail = (1 - level) / 2 * 100
  return (float(statistic(values)), float(np.percentile(stats, tail)),
          float(np.percentile(stats, 100 - tail)))


def paired_ratio(a: np.ndarray, b: np.ndarray, num: int = 2000,
                 seed: int = 0) -> Tuple[float, float, float]:
  """mean(a) / mean(b) with a bootstrap interval over the paired first
  axis (problems)."""
  pairs = np.stack([np.asarray(a, float), np.asarray(b, float)], axis=1)
  ratio = lambda v: v[:, 0].mean() / v[:, 1].mean() if v[:, 1].mean() else \
      float("nan")
  return bootstrap(pairs, num, seed, statistic=ratio)


def samples_to_reach(curve: Dict[int, float], target: float
                     ) -> Optional[float]:
  """The k at which a pass@k curve {k: value} reaches `target`, by linear
  interpolation in log2 k between measured points; None if it never does."""
  ks = sorted(curve)
  for lo, hi in zip(ks, ks[1:]):
    if curve[lo] >= target:
      return float(lo)
    if curve[hi] >= target:
      t = (target - curve[lo]) / (curve[hi] - curve[lo])
      return float(2 ** (math.log2(lo) + t * (math.log2(hi) - math.log2(lo))))
  return float(ks[0]) if ks and curve[ks[0]] >= target else None
