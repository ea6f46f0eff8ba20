"""Argument checks at the Python boundary.

Every check raises a `ValueError` (wrong value or shape) or `TypeError` (wrong
kind of object) whose message names the argument and what is allowed. Checks
on values run only when the value is concrete: under `jax.jit` a traced
`temperature`, `topk`, `topp`, `max_decode_steps`, `initial_index` or `codes`
is taken as given (its shape is still checked).
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding.categorical import CODE_RESOLUTION


def is_traced(x: Any) -> bool:
  """True for a JAX tracer (a value known only when the program runs)."""
  return isinstance(x, jax.core.Tracer)


def _is_int(x: Any) -> bool:
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _concrete(x: Any) -> Optional[np.ndarray]:
  """The value of `x` as numpy, or None if it is traced."""
  if is_traced(x):
    return None
  return np.asarray(x)


def check_inputs(inputs: Any) -> jax.Array:
  """`inputs` must be a 2-D integer array [batch, length]."""
  shape = getattr(inputs, "shape", None)
  dtype = getattr(inputs, "dtype", None)
  if shape is None or dtype is None:
    raise TypeError(
        "inputs must be a 2-D integer array [batch, length]; got "
        f"{type(inputs).__name__}.")
  if not jnp.issubdtype(dtype, jnp.integer):
    raise TypeError(
        f"inputs must be a 2-D integer array [batch, length]; got dtype {dtype}.")
  if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
    raise ValueError(
        f"inputs must be a 2-D integer array [batch, length] with batch >= 1 "
        f"and length >= 1; got shape {tuple(shape)}.")
  return jnp.asarray(inputs, jnp.int32)


def check_member(name: str, enum_cls, value: Any):
  """A member of `enum_cls`, given as itself or its value; ValueError
  naming `name` and the allowed values otherwise."""
  if isinstance(value, enum_cls):
    return value
  try:
    return enum_cls(value)
  except ValueError:
    raise ValueError(f"{name} must be one of {[m.value for m in enum_cls]}; "
                     f"got {value!r}.") from None


def check_int(name: str, value: Any, minimum: int) -> int:
  """`value` must be a Python (or numpy) int >= minimum."""
  if not _is_int(value):
    raise TypeError(f"{name} must be an int >= {minimum}; got {value!r}.")
  if value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}; got {value}.")
  return int(value)


def check_eos_id(eos_id: Any):
  """An int >= 0, or a non-empty sequence of them (any of which ends a
  row; LLMs stop at EOS and at their end-of-turn tokens). Returns an int
  or a tuple of ints.

  >>> check_eos_id(1), check_eos_id([2, 0])
  (1, (2, 0))
  >>> check_eos_id([])
  Traceback (most recent call last):
  ...
  ValueError: eos_id must be an int >= 0 or a non-empty sequence of them; got [].
  """
  if isinstance(eos_id, (list, tuple)):
    if not eos_id:
      raise ValueError("eos_id must be an int >= 0 or a non-empty sequence "
                       f"of them; got {eos_id!r}.")
    ids = tuple(check_int("eos_id", e, minimum=0) for e in eos_id)
    return ids[0] if len(ids) == 1 else ids
  return check_int("eos_id", eos_id, minimum=0)


def check_callable(name: str, fn: Any, optional: bool = False) -> None:
  if fn is None and optional:
    return
  if not callable(fn):
    raise TypeError(f"{name} must be callable{' or None' if optional else ''}; "
                    f"got {type(fn).__name__}.")


def check_temperature(temperature: Any, batch_size: int) -> jax.Array:
  """A float >= 0, or an array of shape [] or [batch] of floats >= 0."""
  shape = np.shape(temperature) if not is_traced(temperature) else temperature.shape
  if shape not in ((), (batch_size,)):
    raise ValueError(
        f"temperature must be a scalar or have shape [batch] = ({batch_size},); "
        f"got shape {tuple(shape)}.")
  value = _concrete(temperature)
  if value is not None:
    if not np.issubdtype(value.dtype, np.number) or np.iscomplexobj(value):
      raise TypeError(f"temperature must be a real number; got {temperature!r}.")
    if np.any(np.isnan(value)) or np.any(value < 0):
      raise ValueError(
          f"temperature must be >= 0 (0 means greedy); got {temperature!r}.")
  return jnp.asarray(temperature, jnp.float32)


def check_topk(topk: Any) -> Any:
  """Python/numpy int >= 0 (returned as int), or a traced integer scalar."""
  if is_traced(topk):
    if topk.shape != () or not jnp.issubdtype(topk.dtype, jnp.integer):
      raise ValueError(f"topk must be an integer scalar; got {topk.dtype}{topk.shape}.")
    return topk
  value = np.asarray(topk)
  if value.shape != () or not np.issubdtype(value.dtype, np.integer):
    raise TypeError(f"topk must be an int >= 0 (0 disables top-k); got {topk!r}.")
  if value < 0:
    raise ValueError(f"topk must be an int >= 0 (0 disables top-k); got {int(value)}.")
  return int(value)


def check_topp(topp: Any) -> Any:
  """Python/numpy float in [0, 1] (returned as float), or a traced scalar."""
  if is_traced(topp):
    if topp.shape != ():
      raise ValueError(f"topp must be a scalar; got shape {topp.shape}.")
    return topp
  value = np.asarray(topp)
  if value.shape != () or not np.issubdtype(value.dtype, np.number):
    raise TypeError(f"topp must be a float in [0, 1] (0 disables top-p); got {topp!r}.")
  if not 0.0 <= float(value) <= 1.0:
    raise ValueError(f"topp must be a float in [0, 1] (0 disables top-p); got {float(value)}.")
  return float(value)


def check_topk_topp(topk: Any, topp: Any) -> None:
  """At most one of topk / topp may be non-zero (when both are known)."""
  if not is_traced(topk) and not is_traced(topp) and topk and topp:
    raise ValueError(
        f"At most one of topk and topp may be non-zero; got topk={topk}, "
        f"topp={topp}.")


def check_initial_index(initial_index: Any, batch_size: int, length: int):
  if initial_index is None:
    return None
  shape = getattr(initial_index, "shape", np.shape(initial_index))
  if tuple(shape) != (batch_size,):
    raise ValueError(
        f"initial_index must have shape [batch] = ({batch_size},); got "
        f"{tuple(shape)}.")
  value = _concrete(initial_index)
  if value is not None:
    if not np.issubdtype(value.dtype, np.integer):
      raise TypeError(f"initial_index must hold integers; got dtype {value.dtype}.")
    if np.any(value < 0) or np.any(value >= length):
      raise ValueError(
          f"initial_index must lie in [0, length) = [0, {length}); got "
          f"{value.tolist()}.")
  return jnp.asarray(initial_index, jnp.int32)


def check_max_decode_steps(max_decode_steps: Any, hard_limit: Any,
                           batch_size: int, length: int):
  """int >= 0 or [batch] ints, clipped to the hard limit, at most `length`."""
  if hard_limit is not None:
    check_int("max_decode_steps_hard_limit", hard_limit, minimum=0)
  if max_decode_steps is None:
    return None
  shape = getattr(max_decode_steps, "shape", np.shape(max_decode_steps))
  if tuple(shape) not in ((), (batch_size,)):
    raise ValueError(
        f"max_decode_steps must be an int or have shape [batch] = ({batch_size},)"
        f"; got shape {tuple(shape)}.")
  if hard_limit is not None and hard_limit > 0:
    max_decode_steps = jnp.minimum(max_decode_steps, hard_limit)
  value = _concrete(max_decode_steps)
  if value is not None:
    if not np.issubdtype(value.dtype, np.integer):
      raise TypeError(f"max_decode_steps must be an int; got {max_decode_steps!r}.")
    if np.any(value < 0):
      raise ValueError(f"max_decode_steps must be >= 0; got {value.tolist()}.")
    if np.any(value > length):
      raise ValueError(
          "Cannot decode more steps than the sequence length: max_decode_steps "
          f"must be <= inputs.shape[1] = {length}; got {value.tolist()}.")
  return jnp.asarray(max_decode_steps, jnp.int32)


def _check_per_sample_shape(name: str, value: Any, batch_size: int,
                            num_decodes: int) -> None:
  shape = getattr(value, "shape", np.shape(value))
  if tuple(shape) != (batch_size, num_decodes):
    raise ValueError(
        f"{name} must have shape [batch, num_decodes] = ({batch_size}, "
        f"{num_decodes}); got {tuple(shape)}.")


def check_codes(codes: Any, batch_size: int, num_decodes: int):
  """None, or floats of shape [batch, num_decodes] in [0, 1)."""
  if codes is None:
    return None
  _check_per_sample_shape("codes", codes, batch_size, num_decodes)
  value = _concrete(codes)
  if value is not None:
    if not np.issubdtype(value.dtype, np.floating):
      raise TypeError(f"codes must be floats in [0, 1); got dtype {value.dtype}.")
    value32 = value.astype(np.float32)
    if np.any(np.isnan(value32)) or np.any(value32 < 0) or np.any(value32 >= 1):
      bad = value[~((value32 >= 0) & (value32 < 1))]
      raise ValueError(
          f"codes must lie in [0, 1) (as float32); got values such as "
          f"{bad.ravel()[:3].tolist()}.")
  return jnp.asarray(codes, jnp.float32)


def check_row_ids(row_ids: Any, batch_size: int, num_decodes: int):
  """None, or integers of shape [batch, num_decodes] (any int32 value)."""
  if row_ids is None:
    return None
  _check_per_sample_shape("row_ids", row_ids, batch_size, num_decodes)
  dtype = getattr(row_ids, "dtype", None)
  if dtype is None:
    dtype = np.asarray(row_ids).dtype
  if not jnp.issubdtype(dtype, jnp.integer):
    raise TypeError(f"row_ids must be integers; got dtype {dtype}.")
  return jnp.asarray(row_ids).astype(jnp.int32)


def check_sequences(sequences: Any, batch_size: int, length: int) -> jax.Array:
  """Integer sequences [batch, num, length] (what `arithmetic_encode` takes)."""
  shape = getattr(sequences, "shape", None)
  dtype = getattr(sequences, "dtype", None)
  if shape is None or dtype is None or not jnp.issubdtype(dtype, jnp.integer):
    raise TypeError("sequences must be an integer array [batch, num, length].")
  if len(shape) != 3 or shape[0] != batch_size or shape[2] != length:
    raise ValueError(
        "sequences must have shape [batch, num, length] with batch, length = "
        f"inputs.shape = ({batch_size}, {length}); got {tuple(shape)}.")
  return jnp.asarray(sequences, jnp.int32)


def check_seed(seed: Any):
  """None, or a Python int in [0, 2**32) to fold into the decode key."""
  if seed is None:
    return None
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise TypeError(f"seed must be an int in [0, 2**32) or None; got "
                    f"{type(seed).__name__}.")
  if not 0 <= int(seed) < 2**32:
    raise ValueError(f"seed must be in [0, 2**32); got {seed}.")
  return int(seed)


def check_rng(decode_rng: Any):
  """A PRNG key: a typed key scalar or a raw uint32[2] key."""
  if decode_rng is None:
    return None
  dtype = getattr(decode_rng, "dtype", None)
  shape = getattr(decode_rng, "shape", None)
  if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
    if shape != ():
      raise ValueError(f"decode_rng must be a single key; got shape {shape}.")
    return decode_rng
  if dtype is None or dtype != jnp.uint32 or tuple(shape) != (2,):
    raise TypeError(
        "decode_rng must be a PRNG key (jax.random.PRNGKey(seed) or "
        f"jax.random.key(seed)); got {type(decode_rng).__name__} "
        f"{getattr(decode_rng, 'dtype', '')}{tuple(shape) if shape is not None else ''}.")
  return decode_rng


def check_code_resolution(value) -> float:
  """A static float in [`categorical.CODE_RESOLUTION` = 2**-22, 1]."""
  if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
    raise TypeError(
        f"code_resolution must be a float in [2**-22, 1]; got {value!r}.")
  value = float(value)
  if not CODE_RESOLUTION <= value <= 1.0:
    raise ValueError(
        f"code_resolution must be in [2**-22, 1]; got {value!r}.")
  return value


def check_alpha(alpha) -> float:
  """Beam search's brevity penalty exponent: a finite float >= 0."""
  if (isinstance(alpha, bool) or
      not isinstance(alpha, (int, float, np.floating, np.integer)) or
      not 0.0 <= float(alpha) < float("inf")):
    raise ValueError(f"alpha must be a finite float >= 0; got {alpha!r}.")
  return float(alpha)


def check_cache_growth(cache_growth: Any, initial_index: Any):
  """None, or a `loop.CacheGrowth` for a decode that starts from an empty
  cache (no `initial_index`)."""
  if cache_growth is None:
    return None
  from arithmetic_decoding.loop import CacheGrowth  # pylint: disable=g-import-not-at-top
  if not isinstance(cache_growth, CacheGrowth):
    raise TypeError(f"cache_growth must be a loop.CacheGrowth or None; got "
                    f"{type(cache_growth).__name__}.")
  if initial_index is not None:
    raise ValueError("cache_growth decodes from an empty cache; it cannot "
                     "continue a prefilled one (initial_index).")
  return cache_growth
