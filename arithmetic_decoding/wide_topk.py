"""An exact `lax.top_k` for few rows of very many columns (beam search).

Beam search keeps the best 2K of an input's K x V candidates every step:
[B, K*V], a handful of rows of up to millions of columns (V = 250,112 for
mT5). `wide_top_k` gives `lax.top_k`'s values and indices in two stages
that lay out well on TPUs (see its docstring and the AOT numbers in
docs/benchmarks.md).

The idea is T5X's: `t5x.decoding.top_k_two_stage` splits a few wide rows
into 128 lanes of contiguous columns, takes the top k of each lane, then
the top k of those, for batches of at most 8 rows whose width exceeds
8 * 128 * k. `wide_top_k` uses the same width threshold for any batch (the
layout problem grows with the batch padded to lanes, measured in the beam
search's AOT memory) and keeps `lax.top_k`'s order among tied values,
which the tests check against `lax.top_k` itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# Lanes of a TPU vreg: the first stage works on rows this wide.
_LANES = 128


def wide_top_k(x: jax.Array, k: int):
  """lax.top_k over a wide last axis, in two exact stages.

  The beam step picks the best 2K of K * V candidates per input: few rows,
  millions of columns. TPUs lay such an array out with the short batch axis
  padded to 128 lanes, which multiplies the top-k's memory (measured with
  the AOT compiler: GiBs per chip for mT5-small). Splitting each row into
  128 contiguous chunks and keeping the k best of each first (the best k of
  a row are among the chunks' best k), then the k best of those 128 * k,
  gives the same values and indices, ties included (lower index first).

  >>> v, i = wide_top_k(jnp.array([[0., 5., 3., 5., 1.] * 600]), 2)
  >>> v.tolist(), i.tolist()
  ([[5.0, 5.0]], [[1, 3]])
  """
  batch, width = x.shape
  if width <= 8 * _LANES * k:
    return lax.top_k(x, k)
  chunk = -(-width // _LANES)  # ceil
  padded = jnp.pad(x, ((0, 0), (0, chunk * _LANES - width)),
                   constant_values=-jnp.inf)
  # [B, W] -> [B * 128, W / 128]: the k best of each chunk.
  values, local = lax.top_k(padded.reshape(batch * _LANES, chunk), k)
  offsets = (jnp.arange(_LANES, dtype=local.dtype) * chunk)[None, :, None]
  # [B, 128, k] -> [B, 128 * k], in index order of the chunks.
  index = (local.reshape(batch, _LANES, k) + offsets).reshape(batch, _LANES * k)
  values, best = lax.top_k(values.reshape(batch, _LANES * k), k)
  return values, jnp.take_along_axis(index, best, axis=1)
