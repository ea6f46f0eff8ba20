"""Codes: the points in [0, 1) that arithmetic sampling decodes.

Every sample is named by one *code* `c` in [0, 1). The model's conditional
distributions define an implicit arithmetic codebook in which each sequence
owns an interval as wide as its probability; decoding `c` walks that codebook
and returns the sequence whose interval contains `c`. How the `N` codes of one
input are spread decides what kind of sample set we get:

  scheme            codes for one input (N = 4, shift u = 0.1)   unbiased?
  ----------------  -------------------------------------------  ---------
  SHIFTED_LATTICE   (i / N + u) mod 1   -> .1  .35  .6  .85       yes
  LATTICE           (i + 1/2) / N       -> .125 .375 .625 .875    no
  IID               N independent uniforms                       yes
  VAN_DER_CORPUT    (radical_inverse_2(i) + u) mod 1
                                        -> .1  .6  .35  .85       yes

`SHIFTED_LATTICE` is the default: each code is marginally uniform (so every
sample is an exact model sample and averages are unbiased), and the N codes sit
exactly 1/N apart, so a sequence with probability below 1/N is drawn at most
once. `IID` is ordinary ancestral sampling, the baseline. `LATTICE` is the
deterministic quantile rule: diverse but biased (the same N samples every
time). `VAN_DER_CORPUT` is extensible: its first `2**k` codes are a shifted
lattice of `2**k` points (the same shift as `SHIFTED_LATTICE` with the same
key), so samples can be added later in powers of two and stay stratified.

Worked example (batch of one input, N = 4, shift u = 0.1): `SHIFTED_LATTICE`
gives [[0.1, 0.35, 0.6, 0.85]]; `VAN_DER_CORPUT` visits the same points in the
order 0, 1/2, 1/4, 3/4 (plus u): [[0.1, 0.6, 0.35, 0.85]], so its first 2 codes
[0.1, 0.6] are the 2-point shifted lattice with the same u.
"""

from __future__ import annotations

import enum
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np

# The largest float32 strictly below 1.0: codes and residual codes are clipped
# to [0, ONE_BELOW] so rounding can never push them out of [0, 1).
ONE_BELOW = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


class CodeScheme(enum.Enum):
  """How the N codes of one input are placed in [0, 1). See module docstring."""

  SHIFTED_LATTICE = "shifted_lattice"
  LATTICE = "lattice"
  IID = "iid"
  VAN_DER_CORPUT = "van_der_corput"


SchemeLike = Union[CodeScheme, str]


def as_code_scheme(scheme: SchemeLike) -> CodeScheme:
  """Returns `scheme` as a `CodeScheme`; accepts members or their exact values.

  >>> as_code_scheme("iid") is CodeScheme.IID
  True

  Raises:
    ValueError: `scheme` names no scheme (the message lists the allowed ones).
  """
  if isinstance(scheme, CodeScheme):
    return scheme
  allowed = ", ".join(repr(s.value) for s in CodeScheme)
  if isinstance(scheme, str):
    for member in CodeScheme:
      if scheme == member.value:
        return member
  raise ValueError(
      f"code_scheme must be a CodeScheme or one of {allowed}; got {scheme!r}.")


def radical_inverse_base2(indices: jax.Array) -> jax.Array:
  """Van der Corput radical inverse in base 2, as float32 in [0, 1).

  Mirrors the binary digits of `i` around the point: i = 6 = 0b110 becomes
  0b0.011 = 0.375. Exact for i < 2**24 (float32 holds 24 significant bits).

  >>> radical_inverse_base2(jnp.arange(8)).tolist()
  [0.0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
  """
  x = indices.astype(jnp.uint32)
  # Reverse the 32 bits of x by swapping ever larger blocks.
  x = ((x >> 1) & jnp.uint32(0x55555555)) | ((x & jnp.uint32(0x55555555)) << 1)
  x = ((x >> 2) & jnp.uint32(0x33333333)) | ((x & jnp.uint32(0x33333333)) << 2)
  x = ((x >> 4) & jnp.uint32(0x0F0F0F0F)) | ((x & jnp.uint32(0x0F0F0F0F)) << 4)
  x = ((x >> 8) & jnp.uint32(0x00FF00FF)) | ((x & jnp.uint32(0x00FF00FF)) << 8)
  x = (x >> 16) | (x << 16)
  # Keep the top 24 bits so the float32 conversion is exact.
  return (x >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def wrap_unit(x: jax.Array) -> jax.Array:
  """(x mod 1) for x in [0, 2), clipped into [0, ONE_BELOW].

  >>> wrap_unit(jnp.array([0.25, 1.5, 1.0])).tolist()
  [0.25, 0.5, 0.0]
  """
  x = jnp.where(x >= 1.0, x - 1.0, x)
  return jnp.clip(x, 0.0, ONE_BELOW)


def make_codes(rng: jax.Array,
               batch_size: int,
               num_decodes: int,
               scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE) -> jax.Array:
  """Codes for `num_decodes` samples of each of `batch_size` inputs.

  Args:
    rng: a JAX PRNG key. The random shift of row b is the b-th entry of
      `uniform(rng, [batch_size])`, whatever `num_decodes` and `scheme` are, so
      SHIFTED_LATTICE and VAN_DER_CORPUT codes made from one key share shifts.
    batch_size: number of inputs (static: changes the output shape).
    num_decodes: codes per input, N >= 1 (static: changes the output shape).
    scheme: a `CodeScheme` (or its string value).

  Returns:
    float32 [batch_size, num_decodes] in [0, 1).
  """
  scheme = as_code_scheme(scheme)
  if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}.")
  if not isinstance(num_decodes, (int, np.integer)) or num_decodes < 1:
    raise ValueError(f"num_decodes must be an int >= 1; got {num_decodes!r}.")
  n = int(num_decodes)
  # [N]
  index = jnp.arange(n, dtype=jnp.int32)
  if scheme is CodeScheme.IID:
    # [B, N]
    return jnp.clip(
        jax.random.uniform(rng, (batch_size, n), jnp.float32), 0.0, ONE_BELOW)
  if scheme is CodeScheme.LATTICE:
    # [N] -> [B, N]
    grid = (index.astype(jnp.float32) + 0.5) / n
    return jnp.broadcast_to(grid[None, :], (batch_size, n))
  # [B] -> [B, 1]
  shift = jax.random.uniform(rng, (batch_size,), jnp.float32)[:, None]
  if scheme is CodeScheme.SHIFTED_LATTICE:
    grid = index.astype(jnp.float32) / n
  else:  # VAN_DER_CORPUT
    grid = radical_inverse_base2(index)
  # [1, N] + [B, 1] -> [B, N]
  return wrap_unit(grid[None, :] + shift)
