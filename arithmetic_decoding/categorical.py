"""The one-step arithmetic categorical: the heart of arithmetic sampling.

A categorical distribution over a vocabulary is an arithmetic codebook: lay the
tokens out in vocabulary order and give token `v` the interval
`[cdf(v - 1), cdf(v))` of [0, 1). A code `c` selects the token whose interval
holds it, and what is left of the code, `(c - lo) / (hi - lo)`, is again
uniform in [0, 1) and selects the next token. Chaining these steps decodes a
whole sequence from one number; the sequence's interval is as wide as its
probability.

Worked example, probabilities [0.2, 0.3, 0.5] (intervals [0, .2), [.2, .5),
[.5, 1)):

  code 0.10 -> token 0, residual (0.10 - 0.0) / 0.2 = 0.5
  code 0.20 -> token 1, residual 0.0
  code 0.95 -> token 2, residual (0.95 - 0.5) / 0.5 = 0.9

Numerics. Everything is float32, whatever the logits' dtype. The CDF is a
cumulative sum of `exp(x - max x)` computed in parallel over blocks and made
monotone by construction (`monotone_lower_ends`; a plain parallel scan may
round a later prefix below an earlier one). A token
with zero weight (a -inf logit, e.g. masked by top-k/top-p) is never chosen:
the chosen token is the *last positive-weight* token whose lower end is <= the
scaled code, and its interval runs to the lower end of the next
positive-weight token (or to the total). Those intervals tile [0, total)
exactly in float32, so every code in [0, 1) selects exactly one token.

A row with a NaN or +inf logit, with no finite logit at all, or with a code
outside [0, 1) has no sample: its token is -1 and its residual NaN.

Precision. A float32 residual holds about 24 bits. Decoding a token of
probability p multiplies the residual's error by 1/p, so after the step its
last ~2**-22 / p are not known: with infinite precision they would be the
code's next, random bits; in float32 they are rounding (for a uniform 4-token
model the residual is exactly 0 after 12 tokens, and every later token would
be token 0). `refresh_residual` fills that unknown part with fresh uniform
noise, modulo 1. A uniform residual plus independent noise modulo 1 is still
uniform, so every token stays an exact draw from its conditional, and the
noise bits it adds are themselves random, so the next step only needs to
refresh what that step loses. In code space the step moves the code by at
most 2**-22 times the prefix's probability: these shifts add up to about
2**-22, so the code alone decides every sequence whose interval is much wider
than that.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from arithmetic_decoding.codes import ONE_BELOW, wrap_unit


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CodeSpace:
  """A batch of categorical codebooks in unnormalised form.

  Attributes:
    weight: float32 [batch, vocab]; exp(x - max x), 0 for -inf logits.
    lower: float32 [batch, vocab]; monotone exclusive cumulative weight, the
      lower end of each token's interval (in units of `total`).
    total: float32 [batch]; the last inclusive cumulative weight.
    log_norm: float32 [batch]; max x + log(total), so log p(v) = x_v - log_norm.
    valid: bool [batch]; False where the logits have NaN/+inf or no finite
      entry (no distribution to draw from).
  """

  weight: jax.Array
  lower: jax.Array
  total: jax.Array
  log_norm: jax.Array
  valid: jax.Array


# Entries per block of the two-level prefix sum in `monotone_lower_ends`.
_BLOCK = 16


def monotone_lower_ends(weight: jax.Array):
  """Exclusive prefix sums of non-negative weights, monotone by construction.

  A parallel scan may round a later prefix below an earlier one; we need
  lower ends that never decrease. Two levels do it in about two passes:
  inside blocks of `_BLOCK` entries the prefix is accumulated sequentially
  (adding a non-negative float never decreases a float sum); the block
  totals get a (short) cumulative sum, made monotone with a cumulative max;
  and each lower end is clamped to the start of the next block, which the
  block's own entries can then never pass.

  Worked example, weights [1, 2, 0, 3, 4] with blocks of 2:
    in-block exclusive prefixes [0, 1 | 0, 0 | 0]; block totals [3, 3, 4];
    block starts [0, 3, 6]; lower ends [0, 1, 3, 3, 6]; total 10.

  Args:
    weight: float32 [batch, vocab], >= 0.

  Returns:
    lower: float32 [batch, vocab], non-decreasing along vocab, lower[:, 0] = 0.
    total: float32 [batch], >= every lower end.
  """
  batch, vocab = weight.shape
  block = min(_BLOCK, vocab)
  padded = -(-vocab // block) * block
  # [B, V] -> [B, K, block]
  w = jnp.pad(weight, ((0, 0), (0, padded - vocab))).reshape(batch, -1, block)
  inner, totals = _sequential_sums(w)  # [B, K, block] exclusive, [B, K]
  block_start, block_end = _block_bounds(totals)
  lower = jnp.minimum(block_start[:, :, None] + inner, block_end[:, :, None])
  # [B, K, block] -> [B, V]
  return lower.reshape(batch, padded)[:, :vocab], block_end[:, -1]


def _sequential_sums(w: jax.Array):
  """Exclusive prefix sums along the last (short) axis, added in order.

  Returns (prefixes, like `w`; totals, `w.shape[:-1]`). Adding non-negative
  floats one at a time never decreases the sum: monotone by construction.
  """
  running = jnp.zeros(w.shape[:-1], w.dtype)
  prefixes = []
  for j in range(w.shape[-1]):
    prefixes.append(running)
    running = running + w[..., j]
  return jnp.stack(prefixes, axis=-1), running


def _block_bounds(totals: jax.Array):
  """Block totals [B, K] -> each block's (start, end): inclusive cumulative
  sums made monotone with a cumulative max; start is the previous end."""
  block_end = jax.lax.cummax(jnp.cumsum(totals, axis=1), axis=1)
  block_start = jnp.concatenate([jnp.zeros_like(block_end[:, :1]),
                                 block_end[:, :-1]], axis=1)
  return block_start, block_end


def code_space(x: jax.Array) -> CodeSpace:
  """Builds the codebooks of float32 logits `x` [batch, vocab]."""
  x = x.astype(jnp.float32)
  # [batch, vocab] -> [batch, 1]; NaN anywhere makes the max NaN.
  top = jnp.max(x, axis=-1, keepdims=True)
  valid = jnp.isfinite(top[:, 0])
  safe_top = jnp.where(jnp.isfinite(top), top, 0.0)
  # [batch, vocab]
  weight = jnp.where(valid[:, None], jnp.exp(x - safe_top), 0.0)
  lower, total = monotone_lower_ends(weight)
  log_norm = safe_top[:, 0] + jnp.log(jnp.where(valid, total, 1.0))
  return CodeSpace(weight, lower, total, log_norm, valid)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ArithmeticStep:
  """One decoded token per row.

  Attributes:
    token: int32 [batch]; the selected token, -1 where `valid` is False.
    residual: float32 [batch]; the code left for the next step, in [0, 1)
      (NaN where `valid` is False).
    log_prob: float32 [batch]; log-probability of `token` under the logits.
    valid: bool [batch]; the logits and the code admitted a sample.
  """

  token: jax.Array
  residual: jax.Array
  log_prob: jax.Array
  valid: jax.Array


def arithmetic_step(x: jax.Array, codes: jax.Array,
                    rows: Optional[jax.Array] = None) -> ArithmeticStep:
  """Selects one token per row of logits `x` [batch, vocab] with `codes` [batch].

  See the module docstring for the rule; the result is exactly what the
  full codebook (`code_space`) gives, bit for bit, at a fraction of the
  cost. Only two passes go over the whole vocabulary: the max logit, and
  exp with the block totals (16 tokens a block). The chosen token always
  lies in the last block with positive weight whose start is <= the scaled
  code u (the first live token of every block starts exactly at the
  block's start), and its interval ends inside that block or where the next
  live block starts. So the in-block prefix sums, the token, its interval and its logit
  are computed on that one block per row, with the same float operations
  as `monotone_lower_ends`: [batch, 16] instead of [batch, vocab].

  `rows` int [batch] (optional) lets many codes share one row of logits:
  `x` is then [P, vocab] and code r decodes row rows[r]. The two passes
  over the vocabulary run once per row of `x`, not once per code, and the
  result is bit for bit that of `arithmetic_step(x[rows], codes)` (the
  same operations on the same numbers, gathered after the passes instead
  of before). Samples that share a prefix share its logits
  (`compaction`): at a low temperature most codes of an input do.

  >>> x = jnp.log(jnp.array([[0.2, 0.3, 0.5], [0.5, 0.5, 0.0]]))
  >>> rows, codes = jnp.array([0, 0, 1]), jnp.array([0.1, 0.95, 0.6])
  >>> arithmetic_step(x, codes, rows).token.tolist()
  [0, 2, 1]
  """
  x = x.astype(jnp.float32)
  shared = rows is not None
  gather = ((lambda a: jnp.take(a, rows, axis=0)) if shared  # [P] -> [B]
            else (lambda a: a))
  batch, vocab = (rows if shared else x).shape[0], x.shape[1]
  logit_rows = x.shape[0]
  # [B, V] -> [B, 1]; NaN anywhere makes the max NaN.
  top = jnp.max(x, axis=-1, keepdims=True)
  valid = jnp.isfinite(top[:, 0])
  safe_top = jnp.where(jnp.isfinite(top), top, 0.0)
  block = min(_BLOCK, vocab)
  padded = -(-vocab // block) * block
  # [P, V] -> [P, K, block]; padding is -inf, so its weight is 0.
  x3 = jnp.pad(x, ((0, 0), (0, padded - vocab)),
               constant_values=-jnp.inf).reshape(logit_rows, -1, block)

  def weight(logits, valid, safe_top):  # exp(x - max x); 0 for -inf, invalid
    shape = (logits.shape[0],) + (1,) * (logits.ndim - 1)
    return jnp.where(valid.reshape(shape),
                     jnp.exp(logits - safe_top.reshape(shape)), 0.0)

  _, totals = _sequential_sums(weight(x3, valid, safe_top))  # [P, K]
  block_start, block_end = _block_bounds(totals)
  # [P, ...] -> [B, ...]: each code's row.
  valid, safe_top, totals, block_start, block_end = map(
      gather, (valid, safe_top, totals, block_start, block_end))
  total = block_end[:, -1]
  codes = codes.astype(jnp.float32)
  code_ok = (codes >= 0.0) & (codes < 1.0)
  u = codes * total  # [B]: the code in units of the unnormalised weights
  # [B, K] -> [B]: the last live block starting at or below u.
  blocks = jnp.arange(totals.shape[1], dtype=jnp.int32)[None, :]
  k_star = jnp.max(jnp.where((totals > 0.0) & (block_start <= u[:, None]),
                             blocks, -1), axis=-1)
  k = jnp.maximum(k_star, 0)
  # [B, K, block] at [B] -> [B, block]: the chosen block, weights recomputed
  # from its logits (so no [B, V] array of weights or lower ends is kept).
  if shared:
    x_block = x3[rows, k]
  else:  # a gather along the vocabulary only: rows stay where they are
    x_block = jnp.take_along_axis(x3, k[:, None, None], axis=1)[:, 0]
  w_block = weight(x_block, valid, safe_top)
  inner, _ = _sequential_sums(w_block)
  start = jnp.take_along_axis(block_start, k[:, None], axis=1)  # [B, 1]
  end = jnp.take_along_axis(block_end, k[:, None], axis=1)  # [B, 1]
  lower = jnp.minimum(start + inner, end)  # [B, block]
  live = w_block > 0.0
  owned = live & (lower <= u[:, None])
  slots = jnp.arange(block, dtype=jnp.int32)[None, :]
  j = jnp.max(jnp.where(owned, slots, -1), axis=-1)  # [B]
  low = jnp.max(jnp.where(owned, lower, 0.0), axis=-1)
  # Past the block, the interval ends where the next live block starts (or
  # at the total): not at this block's end, which XLA's parallel cumsum may
  # round differently even across blocks of zero weight.
  next_start = jnp.min(jnp.where((totals > 0.0) & (blocks > k_star[:, None]),
                                 block_start, total[:, None]), axis=-1)
  high = jnp.min(jnp.where(live & (lower > u[:, None]), lower,
                           next_start[:, None]), axis=-1)
  residual = (u - low) / jnp.maximum(high - low, jnp.finfo(jnp.float32).tiny)
  residual = jnp.clip(residual, 0.0, ONE_BELOW)
  x_token = jnp.take_along_axis(x_block, jnp.maximum(j, 0)[:, None],
                                axis=1)[:, 0]
  log_norm = safe_top[:, 0] + jnp.log(jnp.where(valid, total, 1.0))
  valid = valid & code_ok & (k_star >= 0) & (j >= 0)
  return ArithmeticStep(
      token=jnp.where(valid, k * block + j, -1),
      residual=jnp.where(valid, residual, jnp.nan),
      log_prob=jnp.where(valid, x_token - log_norm, jnp.nan),
      valid=valid)


def arithmetic_categorical(logits: jax.Array, codes: jax.Array):
  """Decodes one token per row from `codes` under categorical(`logits`).

  The drop-in counterpart of `jax.random.categorical(key, logits)`: the code
  replaces the key. Tokens are laid out in vocabulary order, token v owning
  [cdf(v - 1), cdf(v)), so a code names the same token on every machine.

  >>> logits = jnp.log(jnp.array([[0.2, 0.3, 0.5]] * 3))
  >>> tokens, residual = arithmetic_categorical(logits, jnp.array([.1, .2, .95]))
  >>> tokens.tolist(), [round(r, 4) for r in residual.tolist()]
  ([0, 1, 2], [0.5, 0.0, 0.9])

  Args:
    logits: [batch, vocab], any float dtype (bf16 is computed in float32).
      -inf entries have probability zero and are never chosen.
    codes: [batch] in [0, 1).

  Returns:
    tokens: int32 [batch]; -1 for rows without a sample (NaN/+inf logits, no
      finite logit, code outside [0, 1)).
    residual codes: float32 [batch] in [0, 1); NaN for rows without a sample.
  """
  if logits.ndim != 2:
    raise ValueError(f"logits must be [batch, vocab]; got shape {logits.shape}.")
  if codes.shape != logits.shape[:1]:
    raise ValueError(
        f"codes must have shape [batch] = {logits.shape[:1]}; got {codes.shape}.")
  step = arithmetic_step(logits, codes)
  return step.token, step.residual


# Code-space resolution assumed for float32 codes and residual arithmetic: a
# few ulps of 1.0 (2**-24), to cover rounding accumulated along a prefix.
CODE_RESOLUTION = 2.0**-22


def refresh_residual(residual: jax.Array, token_log_prob: jax.Array,
                     noise: jax.Array) -> jax.Array:
  """Fills the part of the residual float32 could not resolve with noise.

  Args:
    residual: float32 [batch] in [0, 1), after a step.
    token_log_prob: float32 [batch]; log-probability of the token that step
      decoded (under the distribution it was decoded from).
    noise: float32 [batch], uniform in [0, 1), independent of the residual
      (the decode loop draws it per row from the step key and the row's
      global index, so it does not depend on how rows are sharded).

  Returns:
    (residual + spread * noise) mod 1, with spread = min(1, CODE_RESOLUTION
    / p): the residual's error after a step of probability p. After a token
    of probability 1e-3 the spread is ~2.4e-4 (a shift of 2.4e-7 in the
    code); after one of probability below 2**-22 it is 1: nothing of the code
    is left and the residual is fresh.
  """
  spread = jnp.minimum(1.0, CODE_RESOLUTION * jnp.exp(-token_log_prob))
  return wrap_unit(residual + spread * noise.astype(jnp.float32))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TokenInterval:
  """Where given tokens sit in their codebooks (the inverse of a step).

  Attributes:
    low: float32 [batch]; lower end of the token's interval, as a fraction of
      [0, 1).
    width: float32 [batch]; its width (0 for zero-probability tokens).
    log_prob: float32 [batch]; log-probability of the token.
    valid: bool [batch]; False where the logits admit no distribution.
  """

  low: jax.Array
  width: jax.Array
  log_prob: jax.Array
  valid: jax.Array


def token_interval(x: jax.Array, tokens: jax.Array) -> TokenInterval:
  """The interval that `arithmetic_step` decodes to `tokens` [batch].

  A code c (in [0, 1)) selects token t exactly when
  low <= c < low + width (up to float32 rounding of c * total).

  >>> x = jnp.log(jnp.array([[0.2, 0.3, 0.5]]))
  >>> iv = token_interval(x, jnp.array([1]))
  >>> round(float(iv.low[0]), 6), round(float(iv.width[0]), 6)
  (0.2, 0.3)
  """
  space = code_space(x)
  tokens = tokens.astype(jnp.int32)
  vocab_index = jnp.arange(x.shape[-1], dtype=jnp.int32)[None, :]
  is_token = vocab_index == tokens[:, None]
  live = space.weight > 0.0
  # [batch, vocab] -> [batch]
  low = jnp.sum(jnp.where(is_token, space.lower, 0.0), axis=-1)
  token_live = jnp.any(is_token & live, axis=-1)
  high = jnp.min(
      jnp.where(live & (vocab_index > tokens[:, None]), space.lower,
                space.total[:, None]),
      axis=-1)
  total = jnp.where(space.valid, space.total, 1.0)
  x_token = jnp.sum(jnp.where(is_token, x.astype(jnp.float32), 0.0), axis=-1)
  log_prob = jnp.where(token_live, x_token - space.log_norm, -jnp.inf)
  return TokenInterval(
      low=jnp.where(space.valid, low / total, jnp.nan),
      width=jnp.where(space.valid, jnp.where(token_live, high - low, 0.0) / total,
                      jnp.nan),
      log_prob=jnp.where(space.valid, log_prob, jnp.nan),
      valid=space.valid)
