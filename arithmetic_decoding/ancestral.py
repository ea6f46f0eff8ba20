"""Ancestral draws that pay only for the tokens that can win.

`jax.random.categorical(key, logits)` is the Gumbel-max trick: it draws one
Gumbel number per token, g_i = -log(-log(u_i)), and returns the first
token of largest logits_i + g_i. With a vocabulary of V tokens that is V
threefry hashes and 2V logarithms per row, per step: on a CPU they cost
more than a small model's step. Yet the noise is bounded: from 23 random
mantissa bits, no g_i exceeds `GUMBEL_MAX` (15.94, checked over all 2^23
values in the tests). So a token whose logit is more than `GUMBEL_MAX`
below the value some other token already reached can never win, and its
noise need not be drawn at all.

`categorical_rows(keys, logits)` is `jax.vmap(jax.random.categorical)(keys,
logits)`, bit for bit, computed that way:

1. each row's most likely token j0 gets its noise; its value
   v0 = logits[j0] + g[j0] is a lower bound on the winning value;
2. the vocabulary is cut into blocks of 16; a block is a candidate if its
   largest logit + `GUMBEL_MAX` reaches v0 (no token of any other block
   can reach it: rounding is monotone, so fl(x + g) <= fl(max_x +
   GUMBEL_MAX) < v0);
3. the candidate blocks of all rows are pooled (`jnp.nonzero`, at the
   smallest of a few fixed capacities that holds them: one compiled
   branch each, `lax.switch`), their tokens' noise is drawn from the
   rows' keys at the tokens' own counters (with `jax_threefry_partitionable`,
   token i's bits depend only on the key and i), and each row's first
   token of largest value wins, as argmax picks it.

When the candidates exceed the largest capacity (a flat distribution at
a high temperature: a pooled token costs about three of the full draw's,
so no capacity exceeds a third of the vocabulary), it draws every token's
noise and picks the first token of largest value by two plain reductions
(`jax.random.categorical`'s argmax, one reduction of (value, index)
pairs, is slow on XLA:CPU). When the logits hold NaN or +inf, or when JAX
is set to draw differently (another PRNG, `jax_threefry_partitionable`
off, `jax_high_dynamic_range_gumbel` on, logits not float32), it calls
`jax.random.categorical` itself.

  >>> keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(
  ...     jax.random.PRNGKey(0), jnp.arange(3))
  >>> logits = jnp.log(jnp.array([[.7, .2, .1], [.1, .1, .8], [.5, .5, 0.]]))
  >>> bool((categorical_rows(keys, logits) ==
  ...       jax.vmap(jax.random.categorical)(keys, logits)).all())
  True

On the translator's 8,000-token vocabulary a row has a median of 2
tokens that can win at T = 0.1 and 84 at T = 0.5, where a tenth of rows
have over 300 (`scripts/profile_step.py`): the pooled capacities (2, 8,
32, 128 blocks per row on average) hold most steps. On Gemma 3's 262,144
tokens a row has a mean of 22 candidate blocks at T = 0.4, 1,480 at 0.8
and 5,596 at 1.0 (of 16,384), and a draw for 64 rows costs 23, 28 and
108 ms against 319, 319 and 330 ms for `jax.random.categorical`
(`python scripts/profile_llm_draw.py`, results/llm/profile_draw.jsonl).
Part of that is the hash itself: the tokens' bits come from
`threefry2x32`, the same function as JAX's threefry primitive written as
plain uint32 arithmetic, which XLA:CPU compiles into one vectorized loop.

The pool mixes rows, so under an automatic (GSPMD) partitioning of the
rows it would need collectives; `Ancestral(pruned=True)` uses it where
the rows of a call are on one device (the compacted scheduler), and
plain `Ancestral()` keeps the per-row draw.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# The largest Gumbel number jax.random draws in float32 ("low" mode):
# -log(-log(1 - 2^-23)) = 15.942385, rounded up (the tests check every
# one of the 2^23 mantissas against it).
GUMBEL_MAX = 15.95

BLOCK = 16

# Pooled candidate blocks, per row on average: one compiled branch each,
# where it is at most a third of the vocabulary's blocks: a pooled token
# costs more than one of the full draw's (gathers, scatters, the pooling).
# On 64 rows (`scripts/profile_llm_draw.py --sweep`, results/llm/
# profile_draw.jsonl, at fff34b6): 8,000 tokens, 128 blocks (26 %) 1.5 ms
# against 4.3 ms for every token's noise; 49,152 tokens, 512 blocks (17 %)
# 6.1 ms and 2048 (67 %) 18.0 ms against 17.7 ms; 262,144 tokens, 2048
# blocks (12 %) 36.8 ms against 100.3 ms.
CAPACITIES = (2, 8, 32, 128, 512, 2048)
MAX_POOLED_SHARE = 1 / 3


def gumbel_from_bits(bits: jax.Array) -> jax.Array:
  """uint32 bits -> float32 Gumbel noise, as `jax.random.gumbel` makes it
  from the same bits (float32, "low" mode: a uniform in [tiny, 1) from 23
  mantissa bits, then -log(-log(u)))."""
  one = jnp.float32(1.0)
  tiny = jnp.float32(np.finfo(np.float32).tiny)
  mantissa = lax.shift_right_logical(bits, jnp.uint32(32 - 23))
  floats = lax.bitcast_convert_type(
      lax.bitwise_or(mantissa, jnp.uint32(0x3F800000)), jnp.float32) - one
  uniform = lax.max(tiny, floats * (one - tiny) + tiny)
  return -jnp.log(-jnp.log(uniform))


# Threefry-2x32's rotations, alternating every four rounds (Salmon et al.,
# "Parallel random numbers: as easy as 1, 2, 3", 2011; JAX's PRNG).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(key0: jax.Array, key1: jax.Array, count0: jax.Array,
                 count1: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """Threefry-2x32 (20 rounds) of the counter pair (count0, count1) under
  the key (key0, key1): the function JAX's `threefry2x32_p` computes, as
  plain uint32 arithmetic that broadcasts its arguments.

  XLA:CPU compiles these elementwise operations into one vectorized loop,
  far faster than JAX's own lowering of the primitive under `vmap`: the
  draw of every token's noise for 64 rows of 262,144 tokens, mostly
  hashing, took 225 ms with the primitive and 100 ms with this on 2 cores
  (`python scripts/profile_llm_draw.py --sweep`, the records of
  results/llm/profile_draw.jsonl before and at fff34b6).

  uint32 arrays (broadcast together) -> two uint32 arrays of their shape.

  >>> from jax.extend.random import threefry2x32_p
  >>> k0, k1, c0, c1 = (jnp.uint32(v) for v in (1, 2, 3, 4))
  >>> mine = threefry2x32(k0, k1, c0, c1)
  >>> [int(a) == int(b) for a, b in zip(mine, threefry2x32_p.bind(
  ...     k0, k1, c0, c1))]
  [True, True]
  """
  rotl = lambda x, d: lax.bitwise_or(
      lax.shift_left(x, jnp.uint32(d)),
      lax.shift_right_logical(x, jnp.uint32(32 - d)))
  keys = (key0, key1, key0 ^ key1 ^ jnp.uint32(0x1BD11BDA))
  x0, x1 = count0 + keys[0], count1 + keys[1]
  for i in range(5):
    for rotation in _ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = rotl(x1, rotation) ^ x0
    x0 = x0 + keys[(i + 1) % 3]
    x1 = x1 + keys[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0, x1


def token_bits(key_data: jax.Array, tokens: jax.Array) -> jax.Array:
  """The 32 random bits `jax.random.bits(key, (V,))[token]` would give,
  for each key and token alone (`jax_threefry_partitionable`: element i
  hashes the counter (0, i)).

  key_data uint32 [..., 2] and tokens int [...] (leading shapes that
  broadcast together) -> uint32 [...].
  """
  counters = tokens.astype(jnp.uint32)
  bits1, bits2 = threefry2x32(key_data[..., 0], key_data[..., 1],
                              jnp.zeros_like(counters), counters)
  return lax.bitwise_xor(bits1, bits2)


def pruning_applies(keys: jax.Array, logits: jax.Array) -> bool:
  """Whether JAX's settings let `categorical_rows` reproduce
  `jax.random.categorical` from single tokens' bits (static)."""
  if logits.dtype != jnp.float32 or logits.ndim != 2:
    return False
  if not jax.config.jax_threefry_partitionable:
    return False
  if jax.config.jax_high_dynamic_range_gumbel:
    return False
  if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
    return str(jax.random.key_impl(keys)) == "threefry2x32"
  return (keys.dtype == jnp.uint32 and keys.shape[-1:] == (2,)
          and str(jax.config.jax_default_prng_impl) == "threefry2x32")


def _every_token(keys, logits):
  # [R] keys, [R, V] -> [R]
  return jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)


def _first_of_largest(x):
  """float [R, V] without NaN -> ([R] largest values, [R] int32 first
  index of each): `jnp.argmax`'s answer by two plain reductions, which
  XLA:CPU vectorizes (its argmax, one reduction of (value, index) pairs,
  costs about as much as drawing the noise on a 262k vocabulary)."""
  best = jnp.max(x, axis=-1)  # [R]
  index = lax.broadcasted_iota(jnp.int32, x.shape, 1)
  first = jnp.min(jnp.where(x == best[:, None], index, x.shape[1]), axis=-1)
  return best, first


def _every_token_regular(key_data, logits):
  """`_every_token` where no logit is NaN or +inf: the same noise (each
  token's bits by `token_bits`), and argmax's first token of largest value
  (`_first_of_largest`)."""
  # [R, 1, 2] keys, [R, V] token ids -> [R, V]
  tokens = lax.broadcasted_iota(jnp.int32, logits.shape, 1)
  noise = gumbel_from_bits(token_bits(key_data[:, None, :], tokens))
  return _first_of_largest(noise + logits)[1]


def _pooled(key_data, padded, candidates, owner, *, capacity: int,
            vocab: int):
  """The winners among the candidate blocks of all rows, pooled into
  `capacity` blocks (the caller checked that they fit); row r's logits are
  padded[owner[r]]."""
  rows, num_blocks = candidates.shape
  # [R, NB] -> [C] flat block indices, candidates first (in row order)
  flat = jnp.nonzero(candidates.reshape(-1), size=capacity, fill_value=0)[0]
  used = jnp.arange(capacity) < jnp.sum(candidates)
  row = flat // num_blocks  # [C]
  # [C] -> [C, BLOCK] token ids
  token = (flat % num_blocks)[:, None] * BLOCK + jnp.arange(BLOCK)[None, :]
  logit = padded[owner[row][:, None], token]  # [C, BLOCK]
  noise = gumbel_from_bits(token_bits(key_data[row][:, None, :], token))
  value = jnp.where(used[:, None] & (token < vocab), noise + logit, -jnp.inf)
  # Each row's largest value, then its first token (argmax's tie rule).
  best = jax.ops.segment_max(value.max(axis=-1), row, num_segments=rows)
  first = jnp.where(value == best[row][:, None], token, vocab)
  return jax.ops.segment_min(first.min(axis=-1), row,
                             num_segments=rows).astype(jnp.int32)


def pooled_capacities(capacities: Sequence[int], num_blocks: int,
                      num_rows: int) -> list:
  """The pooled branches' sizes in blocks, ascending: each capacity (per
  row on average) of at most `MAX_POOLED_SHARE` of the blocks, times the
  rows.

  >>> pooled_capacities(CAPACITIES, 500, 4)  # 8000 tokens
  [8, 32, 128, 512]
  """
  return sorted({int(c) * num_rows for c in capacities
                 if int(c) <= MAX_POOLED_SHARE * num_blocks})


def categorical_rows(keys: jax.Array, logits: jax.Array,
                     capacities: Sequence[int] = CAPACITIES,
                     rows: Optional[jax.Array] = None) -> jax.Array:
  """One token per row, `jax.vmap(jax.random.categorical)(keys, logits)`
  bit for bit, drawing noise only for tokens that can win (module doc).

  Args:
    keys: [R] PRNG keys (raw uint32 [R, 2] or typed), one per row.
    logits: float [R, V] unnormalised log-probabilities; or, with `rows`,
      [P, V] logits that the R rows share.
    capacities: pooled candidate blocks per row on average, ascending: one
      compiled branch each, the smallest that holds the candidates runs.
    rows: int [R] or None; row r draws from logits[rows[r]] with its own
      key: `categorical_rows(keys, logits[rows])` bit for bit, with the
      passes over the vocabulary (block maxima, argmax) once per row of
      `logits`.

  Returns:
    int32 [R] tokens.
  """
  if rows is None:
    gather = lambda a: a
  else:
    gather = lambda a: jnp.take(a, rows, axis=0)  # [P, ...] -> [R, ...]
  if not pruning_applies(keys, logits):
    return _every_token(keys, gather(logits))
  vocab = logits.shape[1]
  num_rows = keys.shape[0]
  key_data = (jax.random.key_data(keys)
              if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys)
  num_blocks = -(-vocab // BLOCK)
  # [P, V] -> [P, NB * BLOCK], padded with -inf (never a candidate)
  padded = jnp.pad(logits, ((0, 0), (0, num_blocks * BLOCK - vocab)),
                   constant_values=-jnp.inf)
  blocks = padded.reshape(-1, num_blocks, BLOCK)  # [P, NB, BLOCK]
  own_max = blocks.max(axis=-1)  # [P, NB]
  # The most likely token: the first one of the largest value in the
  # first block that holds it (no second pass over the vocabulary).
  top_logit, top_block = _first_of_largest(own_max)  # [P]
  in_block = jnp.take_along_axis(blocks, top_block[:, None, None],
                                 axis=1)[:, 0]  # [P, BLOCK]
  top = top_block * BLOCK + _first_of_largest(in_block)[1]  # [P]
  block_max = gather(own_max)  # [P, NB] -> [R, NB]
  top, top_logit = gather(top), gather(top_logit)  # [R]
  top_value = top_logit + gumbel_from_bits(token_bits(key_data, top))  # [R]
  candidates = block_max + jnp.float32(GUMBEL_MAX) >= top_value[:, None]
  caps = pooled_capacities(capacities, num_blocks, num_rows)
  # NaN or +inf anywhere (a max reduction may not propagate NaN; argmax
  # picks them first): jax.random.categorical's own rules, by itself.
  irregular = jnp.any(jnp.isnan(logits) | (logits == jnp.inf))
  count = jnp.sum(candidates)
  # A capacity that holds them, else every token (len(caps)); irregular
  # logits by jax.random.categorical itself (len(caps) + 1).
  branch = jnp.where(irregular, len(caps) + 1,
                     jnp.searchsorted(jnp.array(caps, jnp.int32), count))
  owner = (jnp.arange(num_rows, dtype=jnp.int32) if rows is None
           else rows.astype(jnp.int32))
  branches = [
      lambda kd, p, c, k, x, cap=cap: _pooled(kd, p, c, owner, capacity=cap,
                                              vocab=vocab)
      for cap in caps]
  branches.append(lambda kd, p, c, k, x: _every_token_regular(kd, gather(x)))
  branches.append(lambda kd, p, c, k, x: _every_token(k, gather(x)))
  return lax.switch(branch, branches, key_data, padded, candidates, keys,
                    logits)
