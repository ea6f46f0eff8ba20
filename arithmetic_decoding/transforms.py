"""Temperature, top-k and top-p: the distribution each decoding step draws from.

The transforms follow T5X's `temperature_sample` exactly:

  1. divide the logits by `max(temperature, MIN_TEMPERATURE)`;
  2. top-k: keep every logit >= the k-th largest (ties are all kept);
  3. top-p: keep the smallest set of the most probable tokens whose mass is
     >= p (ties at the cut are all kept);

and a temperature <= MIN_TEMPERATURE means greedy (argmax of the raw logits,
whatever topk/topp say). Masked tokens get -inf, so their probability is
exactly zero: no code can ever select them.

Both cut-offs work for traced `k`/`p` (a per-row threshold found by bisection
on the float32 bit patterns, 32 passes over the vocabulary) and use a faster
route when they are Python numbers (`lax.top_k` for k). Traced k <= 0 or
p <= 0 disables the cut, as the Python values 0 / 0.0 do.

Worked example (logits -> probabilities 0.3, 0.0, 0.1, 0.6):

  topk=2      keeps tokens {3, 0}: probabilities 1/3, 0, 0, 2/3
  topp=0.55   keeps {3}       (0.6 >= 0.55 already)
  topp=0.85   keeps {3, 0}    (0.6 + 0.3 = 0.9 >= 0.85)
"""

from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp
from jax import lax

# Temperatures at or below this are greedy (the value T5X uses).
MIN_TEMPERATURE = 1e-4

ArrayOrInt = Union[int, jax.Array]
ArrayOrFloat = Union[float, jax.Array]


def ordered_keys(x: jax.Array) -> jax.Array:
  """Maps float32 to uint32 so that integer order equals float order.

  Non-negative floats get their bit pattern with the top bit set; negative
  floats get their bits flipped. -0.0 is first turned into +0.0 so the two
  zeros (equal as floats) get one key.

  >>> import numpy as np
  >>> x = jnp.array([-jnp.inf, -2.0, -0.0, 0.0, 1.5, jnp.inf])
  >>> np.diff(np.asarray(ordered_keys(x), np.int64)).tolist()
  [1065353216, 1073741825, 0, 1069547520, 1069547520]
  """
  bits = lax.bitcast_convert_type(x.astype(jnp.float32) + 0.0, jnp.uint32)
  negative = (bits >> 31) == 1
  return jnp.where(negative, ~bits, bits | jnp.uint32(0x80000000))


def _bisect_largest(predicate, batch_shape, top_bit: int) -> jax.Array:
  """Largest uint32 t (per row) with predicate(t) True, built bit by bit.

  `predicate` must be monotone: True for all t <= some threshold and False
  above it; it must hold at t = 0. Starting from 0, each bit from `top_bit`
  down is set if the predicate still holds with it set.
  """

  def body(j, t):
    candidate = t | (jnp.uint32(1) << jnp.asarray(top_bit - j, jnp.uint32))
    return jnp.where(predicate(candidate), candidate, t)

  t0 = jnp.zeros(batch_shape, jnp.uint32)
  return lax.fori_loop(0, top_bit + 1, body, t0)


def topk_keep(x: jax.Array, k: ArrayOrInt) -> jax.Array:
  """Mask of the top-k entries per row (ties at the k-th value all kept).

  Args:
    x: float32 [batch, vocab] (may hold -inf).
    k: Python int (static) or int array of shape [] (traced). k <= 0 keeps all;
      k >= vocab keeps all.

  Returns:
    bool [batch, vocab].
  """
  vocab = x.shape[-1]
  if isinstance(k, int):
    if k <= 0 or k >= vocab:
      return jnp.ones(x.shape, bool)
    # [batch, k] -> [batch, 1]: the k-th largest value of each row.
    kth = lax.top_k(x, k)[0][:, k - 1:k]
    return x >= kth
  k = jnp.asarray(k, jnp.int32)
  # [batch, vocab]
  keys = ordered_keys(x)

  def at_least_k_above(t):  # [batch] -> [batch]
    return jnp.sum(keys >= t[:, None], axis=-1, dtype=jnp.int32) >= k

  # The key of the k-th largest value: the largest t with >= k keys >= t.
  threshold = _bisect_largest(at_least_k_above, x.shape[:-1], top_bit=31)
  keep = keys >= threshold[:, None]
  return keep | (k <= 0)


def topp_keep(x: jax.Array, p: ArrayOrFloat) -> jax.Array:
  """Mask of the smallest most-probable set with mass >= p (ties kept).

  Args:
    x: float32 [batch, vocab] logits (may hold -inf).
    p: Python float or float array of shape [] (traced). p <= 0 keeps all.

  Returns:
    bool [batch, vocab].
  """
  if isinstance(p, (int, float)) and p <= 0:
    return jnp.ones(x.shape, bool)
  p = jnp.asarray(p, jnp.float32)
  # [batch, vocab]; probabilities are >= +0, so their raw bits are ordered.
  probs = jax.nn.softmax(x, axis=-1)
  keys = lax.bitcast_convert_type(probs, jnp.uint32)

  def mass_at_least_p(t):  # [batch] -> [batch]
    kept = jnp.where(keys >= t[:, None], probs, 0.0)
    return jnp.sum(kept, axis=-1) >= p

  # The largest probability cut whose kept mass still reaches p. If rounding
  # leaves the total mass below p (p = 1.0), the cut stays at 0: keep all.
  threshold = _bisect_largest(mass_at_least_p, x.shape[:-1], top_bit=30)
  keep = keys >= threshold[:, None]
  return keep | (p <= 0)


def truncate(scaled: jax.Array,
             topk: Optional[ArrayOrInt],
             topp: Optional[ArrayOrFloat]) -> jax.Array:
  """Applies top-k then top-p to temperature-scaled float32 logits.

  `None` (or Python 0 / 0.0) skips a cut. Masked entries become -inf.

  >>> x = jnp.log(jnp.array([[0.3, 0.0, 0.1, 0.6]]))
  >>> jnp.isfinite(truncate(x, 2, None)).tolist()
  [[True, False, False, True]]
  """
  if topk is not None and not (isinstance(topk, int) and topk == 0):
    scaled = jnp.where(topk_keep(scaled, topk), scaled, -jnp.inf)
  if topp is not None and not (isinstance(topp, (int, float)) and topp <= 0):
    scaled = jnp.where(topp_keep(scaled, topp), scaled, -jnp.inf)
  return scaled


def scale(logits: jax.Array, temperature: jax.Array) -> jax.Array:
  """float32 logits / max(temperature, MIN_TEMPERATURE), per row.

  Args:
    logits: [batch, vocab] in any float dtype.
    temperature: float32 [batch].
  """
  t = jnp.maximum(temperature, MIN_TEMPERATURE)
  # [batch, vocab] / [batch, 1] -> [batch, vocab]
  return logits.astype(jnp.float32) / t[:, None]
