"""The largest N = 2**e that fits, in few compiles.

Memory grows with N, so `fits(2**e)` is monotone: True up to some exponent,
False after. `largest_fitting` gallops from a starting exponent (a guess,
e.g. what a smaller topology reached) and then bisects, so a good guess
costs two compiles (it fits, one more does not) and a bad one O(log range).

  >>> calls = []
  >>> def fits(n):
  ...   calls.append(n)
  ...   return n <= 48
  >>> largest_fitting(fits, min_exp=0, max_exp=10, start_exp=5)
  32
  >>> calls
  [32, 64]
  >>> largest_fitting(lambda n: n <= 48, min_exp=0, max_exp=10) # from 2**0
  32
  >>> largest_fitting(lambda n: False, min_exp=2, max_exp=10) is None
  True
"""

from __future__ import annotations

from typing import Callable, Optional


def largest_fitting(fits: Callable[[int], bool], *, min_exp: int, max_exp: int,
                    start_exp: Optional[int] = None) -> Optional[int]:
  """Largest 2**e, min_exp <= e <= max_exp, with fits(2**e); None if none.

  Args:
    fits: monotone (if 2**e fits, every smaller power does); may be costly.
    min_exp, max_exp: the exponent range searched.
    start_exp: the first exponent tried (clipped into the range); default
      min_exp.
  """
  if min_exp > max_exp:
    raise ValueError(f"min_exp {min_exp} > max_exp {max_exp}.")
  start = min_exp if start_exp is None else min(max(start_exp, min_exp),
                                                max_exp)
  if fits(2**start):
    good, bad, step = start, max_exp + 1, 1
    while good + step <= max_exp:  # gallop up: +1, +2, +4, ...
      if fits(2**(good + step)):
        good += step
        step *= 2
      else:
        bad = good + step
        break
  else:
    good, bad = min_exp - 1, start
  while bad - good > 1:  # fits(2**good) (or good < min_exp), not fits(2**bad)
    middle = (good + bad) // 2
    if fits(2**middle):
      good = middle
    else:
      bad = middle
  return 2**good if good >= min_exp else None
