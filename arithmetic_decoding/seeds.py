"""The seed policy of the LLM entry points: how (seed, step, prompt id, j)
become a sample's code, its noise id and its keys.

`llm.generate`, `rollouts.group_rollouts` and the sampling server share
this policy, so the same (seed, prompt, N, method, settings) gives the same
samples through each of them, alone or among any other prompts, in any
batch, at any load:

  what                        made from
  prompt key                  fold_in(fold_in(fold_in(PRNGKey(seed), step),
                              stream 0), prompt id)
  codes [N] of a prompt       the prompt key: a shifted lattice
                              (j / N + u) mod 1 with u = uniform(key); van der
                              Corput (radical_inverse_2(j) + u) mod 1; iid
                              uniform(fold_in(key, j))      (`group_codes`)
  noise id of sample j        a hash of (seed, step, prompt id, stream 1) and
                              the float32 bits of its code (arithmetic
                              sampling: the same code, the same sample) or of
                              j (the other methods)          (`noise_ids`)
  key of sample j at a step   fold_in(fold_in(split(PRNGKey(0))[1], noise
                              id), position written)   (`choosers.Noise.
                              POSITION`: arithmetic sampling's fresh
                              uniforms once a code is spent; ancestral
                              sampling's draws)

Nothing in a sample's keys depends on its place in a batch or on the step
of the loop it runs in. The T5X drop-ins keep T5X's own key semantics
instead (`request.t5x_key`: T5X's `decode_rng`, the codes of all B inputs
made from it at once, noise from the loop's per-step key): they reproduce
what a T5X run with that key draws.

  >>> c = group_codes(0, 0, [5, 9], 4)
  >>> c.shape, bool(np.allclose(np.diff(np.sort(c[0])), 0.25, atol=1e-6))
  ((2, 4), True)
  >>> bool((group_codes(0, 0, [9], 4)[0] == c[1]).all())
  True
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.codes import (ONE_BELOW, CodeScheme, SchemeLike,
                                       as_code_scheme, radical_inverse_base2)


def check_prompt_ids(prompt_ids) -> np.ndarray:
  """int64 [B] in [0, 2**32); TypeError / ValueError naming `prompt_ids`."""
  ids = np.asarray(prompt_ids)
  if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
    raise TypeError("prompt_ids must be a non-empty 1-D sequence of ints; got "
                    f"{prompt_ids!r}.")
  if ids.min() < 0 or ids.max() >= 2**32:
    raise ValueError(f"prompt_ids must lie in [0, 2**32); got {prompt_ids!r}.")
  return ids.astype(np.int64)


def _prompt_keys(seed: int, step: int, prompt_ids: np.ndarray, stream: int):
  """[B] keys fold_in(fold_in(fold_in(PRNGKey(seed), step), stream), id)."""
  base = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), step),
                            stream)
  ids = jnp.asarray(prompt_ids, jnp.uint32)
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base, ids)


def group_codes(seed: int, step: int, prompt_ids, group_size: int,
                scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE) -> np.ndarray:
  """float32 [B, G] codes of each prompt's group, from (seed, step, id).

  A prompt's codes do not depend on the other prompts. Shifted lattice:
  (j / G + u) mod 1 with u uniform from the prompt's key; van der Corput:
  (radical_inverse_2(j) + u) mod 1 (a prefix of 2**k codes is the 2**k
  lattice); iid: code j uniform from fold_in(key, j) (a prefix of a larger
  group).
  """
  scheme = as_code_scheme(scheme)
  ids = check_prompt_ids(prompt_ids)
  g = validation.check_int("group_size", group_size, minimum=1)
  keys = _prompt_keys(seed, step, ids, 0)  # [B]
  index = jnp.arange(g, dtype=jnp.int32)
  if scheme is CodeScheme.IID:
    codes = jax.vmap(lambda k: jax.vmap(
        lambda j: jax.random.uniform(jax.random.fold_in(k, j)))(index))(keys)
  elif scheme in (CodeScheme.SHIFTED_LATTICE, CodeScheme.VAN_DER_CORPUT):
    shift = jax.vmap(jax.random.uniform)(keys)[:, None]  # [B, 1]
    grid = (index.astype(jnp.float32) / g if scheme is
            CodeScheme.SHIFTED_LATTICE else radical_inverse_base2(index))
    codes = grid[None, :] + shift  # [B, G] in [0, 2)
    codes = jnp.where(codes >= 1.0, codes - 1.0, codes)
  else:
    raise ValueError("code_scheme must be 'shifted_lattice', 'van_der_corput' "
                     f"or 'iid' for per-prompt codes; got {scheme.value!r} "
                     "(not random: biased).")
  return np.asarray(jnp.clip(codes, 0.0, ONE_BELOW), np.float32)


def noise_ids(seed: int, step: int, prompt_ids, names) -> np.ndarray:
  """int32 [B, G]: the id that selects a sample's noise, hashed from
  (seed, step, prompt id) and the sample's name [B, G]: its code's float32
  bits (arithmetic sampling) or its index j (the other methods). The same
  sample gets the same id wherever it is decoded.

  >>> a = noise_ids(0, 3, [7], np.float32([[0.25, 0.5]]))
  >>> b = noise_ids(0, 3, [2, 7], np.float32([[0.1, 0.2], [0.5, 0.9]]))
  >>> int(a[0, 1]) == int(b[1, 0]), int(a[0, 0]) != int(a[0, 1])
  (True, True)
  """
  ids = check_prompt_ids(prompt_ids)
  names = np.asarray(names)
  if names.ndim != 2 or names.shape[0] != ids.size:
    raise ValueError(f"names must have shape [batch, group] with batch = "
                     f"{ids.size}; got {names.shape}.")
  if np.issubdtype(names.dtype, np.floating):
    bits = names.astype(np.float32).view(np.uint32)
  else:
    bits = names.astype(np.uint32)
  keys = _prompt_keys(seed, step, ids, 1)  # [B]

  def one(key, b):
    return jax.random.bits(jax.random.fold_in(key, b), (), jnp.uint32)

  hashed = jax.vmap(lambda k, row: jax.vmap(lambda b: one(k, b))(row))(
      keys, jnp.asarray(bits))
  return np.asarray(jax.lax.bitcast_convert_type(hashed, jnp.int32))


def sample_names(codes, arithmetic: bool) -> np.ndarray:
  """What names a sample for its noise id (`noise_ids`): its code
  (arithmetic sampling) or its index j.

  >>> sample_names(np.zeros((2, 3), np.float32), False).tolist()
  [[0, 1, 2], [0, 1, 2]]
  """
  codes = np.asarray(codes, np.float32)
  if arithmetic:
    return codes
  return np.broadcast_to(np.arange(codes.shape[1], dtype=np.uint32),
                         codes.shape).copy()
