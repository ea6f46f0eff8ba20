"""Rows: the N decodes of B inputs as B*N independent rows.

`make_rows` expands validated [B, ...] arguments into one `Rows` record of
R = B*N rows (batch-major, as T5X's `num_decodes` expansion), with each
row's code and global index. Rows are independent: any subset of them (the
rows of one device, under `sharding`) decodes to the same result as it
would among all of them, because every per-row random number comes from the
row's global index. `decode_rows` runs the loop; `sort_samples` puts the
results back as [B, N, ...], each input's samples by increasing log-prob.

  inputs [[0, 5], [0, 8]], N = 2  ->  rows [[0, 5], [0, 5], [0, 8], [0, 8]]
                                      row_ids [0, 1, 2, 3]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp

from arithmetic_decoding.loop import (DecodeOptions, LoopInputs, ModelFns,
                                      initial_state, run_loop)
from arithmetic_decoding.protocol import (SPARE_SLOTS, SamplingLoopState,
                                          expand_cache, expand_rows)

PyTree = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Rows:
  """Everything one decode needs per row, flattened to R = B*N rows.

  Attributes:
    inputs: int32 [R, L]; each row's prompt (BOS 0 first).
    cache: the expanded model cache (batch at axis `cache_offset`).
    initial_index: int32 [R] or None.
    temperature: float32 [] or [R].
    max_decode_len: int32 [] or [R]; each row's length limit.
    codes: float32 [R]; each row's code (zeros for choosers without codes).
    row_ids: int32 [R]; selects per-row noise: the global row index b*N + j
      unless the caller names its rows.
    rng: the loop's PRNG key (the same for all rows).
    targets: int32 [R, L]; sequences to force when encoding, else None.
  """

  inputs: jax.Array
  cache: PyTree
  initial_index: Optional[jax.Array]
  temperature: jax.Array
  max_decode_len: jax.Array
  codes: jax.Array
  row_ids: jax.Array
  rng: jax.Array
  targets: Optional[jax.Array] = None


def max_decode_lengths(inputs: jax.Array, max_decode_steps: Optional[jax.Array],
                       num_decodes: int) -> jax.Array:
  """Each row's length limit: prompt tokens + allowed steps, at most L.

  >>> max_decode_lengths(jnp.array([[0, 5, 0, 0], [0, 0, 0, 0]]),
  ...                    jnp.array(2), 1).tolist()
  [3, 2]

  Returns int32 [] (L) without `max_decode_steps`, else [B*N].
  """
  length = inputs.shape[1]
  if max_decode_steps is None:
    return jnp.asarray(length, jnp.int32)
  steps = jnp.broadcast_to(max_decode_steps, inputs.shape[:1])  # [B]
  prompt = jnp.sum(inputs != 0, axis=1)  # [B]
  # [B] -> [B*N]
  return expand_rows(jnp.minimum(length, prompt + steps), num_decodes)


def make_rows(options: DecodeOptions, inputs: jax.Array, cache: PyTree,
              rng: jax.Array, temperature: jax.Array, *,
              initial_index: Optional[jax.Array] = None,
              max_decode_steps: Optional[jax.Array] = None,
              codes: Optional[jax.Array] = None,
              targets: Optional[jax.Array] = None,
              row_ids: Optional[jax.Array] = None) -> Rows:
  """Validated [B, ...] arguments -> `Rows` for B*N rows.

  Args:
    options: the decode's static configuration (N, the chooser, ...).
    inputs: int32 [B, L]; cache: the model's cache for B rows.
    rng: the decode's key; it splits into (codes key, loop key), and the
      chooser makes its codes from the first when `codes` is None
      (`Chooser.initial_codes`).
    temperature: float32 [] or [B].
    initial_index: int32 [B] or None.
    max_decode_steps: int32 [] or [B] or None.
    codes: float32 [B, N] or None.
    targets: int32 [B, N, L] (encoding) or None.
    row_ids: int32 [B, N] or None; the ids that select each row's noise
      (default: the global row index b*N + j). Ids that name a sample
      itself (`rollouts.noise_ids`) make it independent of the batch.
  """
  batch = inputs.shape[0]
  n = options.num_decodes
  codes_rng, loop_rng = jax.random.split(rng)
  if codes is None:
    codes = options.chooser.initial_codes(codes_rng, batch, n)
  if options.per_row_temperature:
    temperature = expand_rows(temperature, n)  # [B] -> [B*N]
  if targets is not None:
    targets = targets.reshape(batch * n, -1)  # [B, N, L] -> [B*N, L]
  return Rows(
      inputs=expand_rows(inputs, n),  # [B, L] -> [B*N, L]
      cache=expand_cache(cache, n, options.cache_offset,
                         options.expand_cache_index),
      initial_index=(None if initial_index is None else
                     expand_rows(initial_index, n)),
      temperature=temperature,
      max_decode_len=max_decode_lengths(inputs, max_decode_steps, n),
      codes=codes.reshape(batch * n).astype(jnp.float32),  # [B, N] -> [B*N]
      row_ids=(jnp.arange(batch * n, dtype=jnp.int32) if row_ids is None
               else row_ids.reshape(batch * n)),  # [B, N] -> [B*N]
      rng=loop_rng,
      targets=targets)


def run_rows(rows: Rows, topk, topp, fns: ModelFns, options: DecodeOptions,
             stop_together: Optional[str] = None) -> SamplingLoopState:
  """Runs every row to its end; returns the loop's final state.

  `topk` / `topp` are the traced cuts (None where `options` has them
  static); `stop_together`: see `loop.loop_fns`.
  """
  state = initial_state(rows.inputs, rows.cache, rows.initial_index, rows.rng,
                        options.chooser.init_state(rows.codes))
  return run_loop(state, loop_inputs(rows, topk, topp, options), fns,
                  options, stop_together)


def loop_inputs(rows: Rows, topk, topp, options: DecodeOptions) -> LoopInputs:
  """What the loop's steps read of `rows` besides the state."""
  return LoopInputs(options.distribution(rows.temperature, topk, topp),
                    row_ids=rows.row_ids, max_decode_len=rows.max_decode_len,
                    decode_key=rows.rng, targets=rows.targets)


def decode_rows(rows: Rows, topk, topp, fns: ModelFns, options: DecodeOptions,
                stop_together: Optional[str] = None) -> Tuple[jax.Array, ...]:
  """Decodes every row. Unsorted, one result per row.

  Returns:
    decodes int32 [R, L] (BOS dropped), log_probs float32 [R], codes
    float32 [R] (the codes the rows started from).
  """
  final = run_rows(rows, topk, topp, fns, options, stop_together)
  # [R, L + SPARE_SLOTS] -> [R, L]: drop BOS and the spare slots.
  return (final.sequences[:, 1:1 - SPARE_SLOTS], final.log_prob, rows.codes)


def sort_samples(decodes, log_probs, codes, batch: int, num_decodes: int):
  """[B*N, ...] rows -> [B, N, ...], each input's samples by increasing
  log-probability (as T5X returns them)."""
  n = num_decodes
  decodes = decodes.reshape(batch, n, decodes.shape[-1])  # [B*N, L] -> [B, N, L]
  log_probs = log_probs.reshape(batch, n)
  codes = codes.reshape(batch, n)
  order = jnp.argsort(log_probs, axis=-1)  # [B, N]
  return (jnp.take_along_axis(decodes, order[:, :, None], axis=1),
          jnp.take_along_axis(log_probs, order, axis=1),
          jnp.take_along_axis(codes, order, axis=1))
