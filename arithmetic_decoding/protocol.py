"""T5X's decoding protocol, honoured by duck typing (t5x is never imported).

A T5X model enters decoding only through

  tokens_to_logits(decoding_state) -> (logits [B*N, vocab], new_cache)

where `decoding_state` has the fields of T5X's `DecodingState`. Callbacks see
the loop state, whose fields include all of T5X's `SamplingLoopState` fields.
Both are frozen dataclasses registered as pytrees, with T5X's (flax struct)
`replace` method, so code written against T5X's classes runs unchanged.

The `num_decodes` expansion is batch-major: row `b * N + j` is decode `j` of
input `b`. For N = 2:

  inputs [[0, 5], [0, 8]]  ->  [[0, 5], [0, 5], [0, 8], [0, 8]]

Every array of the cache is expanded the same way at axis `cache_offset` (1
for scanned layers, whose leading axis is the layer), except: an entry named
`cache_index` only when decoding starts from `initial_index` (it is then a
per-row vector), and `cached_bias` / `position_embedder_index` never (they
have no batch axis). FrozenDict caches stay FrozenDicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Tuple

import jax
import jax.numpy as jnp

PyTree = Any

# Slots appended to `SamplingLoopState.sequences` after the output positions:
# a row that reaches its length limit before the others keeps writing into
# the last one. Models never see them (`call_model` drops them).
SPARE_SLOTS = 2
# Cache entries without a batch axis, never expanded (as in T5X).
_NEVER_EXPANDED = ("cached_bias", "position_embedder_index")
# Expanded only when decoding starts from a prefilled cache (initial_index).
_CACHE_INDEX = "cache_index"


class _Replaceable:
  """T5X's states are flax structs; callbacks call `state.replace(...)`."""

  def replace(self, **updates):
    return dataclasses.replace(self, **updates)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DecodingState(_Replaceable):
  """What `tokens_to_logits` sees at each step (T5X's `DecodingState`).

  Attributes:
    cur_index: int32 [B*N]; position of the token being fed, per row.
    sequences: int32 [B*N, length]; prompt plus tokens decoded so far; BOS 0
      at position 0.
    cur_token: int32 [B*N, 1]; the token being fed (sequences[:, cur_index]).
    cache: the model's autoregressive cache pytree.
  """

  cur_index: jax.Array
  sequences: jax.Array
  cur_token: jax.Array
  cache: PyTree


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SamplingLoopState(_Replaceable):
  """The decode loop's whole state: T5X's `SamplingLoopState` fields, plus
  one field that belongs to the token chooser (`chooser_state`).

  Attributes:
    step: int32 []; loop iterations so far, from 0.
    cur_index: int32 [B*N]; position of the token fed at this step.
    sequences: int32 [B*N, length + SPARE_SLOTS]; BOS, prompt and decoded
      tokens, plus the spare slots (see `SPARE_SLOTS`).
    cache: the model's cache pytree.
    cur_token: int32 [B*N, 1]; the token fed at this step.
    ended: bool [B*N, 1]; the row has produced EOS or reached its limit.
    rng: PRNG key, split into (step key, next rng) every step. It starts as
      a child of `decode_rng` (the other child makes the codes), so the key
      stream is not T5X's. Arithmetic sampling uses the step key for the
      residual's refresh noise (`categorical.refresh_residual`) and for the
      fresh codes of spent ones; ancestral sampling draws its tokens from it.
    log_prob: float32 [B*N]; log-probability of the decoded tokens so far
      (prompt tokens excluded, EOS included, nothing after EOS).
    chooser_state: the per-row state the chooser owns and updates
      (`choosers`): `CodeState(residual, log_width)` [B*N] each for
      arithmetic sampling (what is left of each row's code, and how much of
      it the decoded tokens used); `IntervalState(low)` [B*N] for encoding
      (each prefix's code interval starts there); None for the choosers that
      keep no state (ancestral, greedy).
  """

  step: jax.Array
  cur_index: jax.Array
  sequences: jax.Array
  cache: PyTree
  cur_token: jax.Array
  ended: jax.Array
  rng: jax.Array
  log_prob: jax.Array
  chooser_state: PyTree


def expand_rows(x: jax.Array, num_decodes: int, axis: int = 0) -> jax.Array:
  """Repeats each entry along `axis` `num_decodes` times, batch-major.

  >>> expand_rows(jnp.array([[0, 5], [0, 8]]), 2).tolist()
  [[0, 5], [0, 5], [0, 8], [0, 8]]
  """
  if num_decodes == 1:
    return x
  # [..., B, ...] -> [..., B*N, ...]
  return jnp.repeat(x, num_decodes, axis=axis)


def _last_key_name(path) -> Any:
  if not path:
    return None
  entry = path[-1]
  for attr in ("key", "name", "idx"):
    if hasattr(entry, attr):
      return getattr(entry, attr)
  return None


def map_batched(fn: Callable[[jax.Array], jax.Array], cache: PyTree,
                offset: int, with_cache_index: bool) -> PyTree:
  """Applies `fn` to the cache arrays that carry the batch at axis `offset`.

  Leaves named `cached_bias` or `position_embedder_index`, arrays of rank
  <= offset, and `cache_index` unless `with_cache_index`, are left as they
  are. The container types (dict, FrozenDict, ...) are preserved.
  """

  def apply(path, leaf):
    name = _last_key_name(path)
    if name in _NEVER_EXPANDED or (name == _CACHE_INDEX and
                                   not with_cache_index):
      return leaf
    leaf = jnp.asarray(leaf)
    if leaf.ndim <= offset:
      return leaf
    return fn(leaf)

  return jax.tree_util.tree_map_with_path(apply, cache)


def expand_cache(cache: PyTree, num_decodes: int, offset: int,
                 expand_cache_index: bool) -> PyTree:
  """Expands every batch-carrying cache array for `num_decodes` decodes
  (see `map_batched` for which arrays carry the batch)."""
  if num_decodes == 1:
    return cache
  return map_batched(lambda x: expand_rows(x, num_decodes, axis=offset), cache,
                     offset, expand_cache_index)


def match_container(reference: PyTree, new: PyTree) -> PyTree:
  """Gives `new` the container type of `reference` (T5X re-freezes caches).

  A model called on a FrozenDict cache may return a plain dict (flax's
  `mutable=` output); the loop carry must keep one structure, so a
  non-dict Mapping type (e.g. FrozenDict) is restored by calling it on `new`.
  """
  if (isinstance(reference, Mapping) and type(reference) is not dict and
      isinstance(new, Mapping) and type(new) is not type(reference)):
    return type(reference)(new)
  return new


def call_model(
    tokens_to_logits: Callable[[DecodingState], Tuple[jax.Array, PyTree]],
    decoding_state: DecodingState,
    any_rows: bool = False,
) -> Tuple[jax.Array, PyTree]:
  """Runs the model on one step's `DecodingState`; checks what it returns.

  Used by every decode loop (sampling, encoding, beam search), so each gets
  the same checks.

  Returns:
    logits [rows, vocab] as returned (dtype unchanged), rows being
    `decoding_state.sequences.shape[0]` (any number with `any_rows`: logits
    that rows share, `loop.ModelFns.shared_logits`), and the new cache with
    the given cache's container type.

  Raises:
    ValueError: the logits are not [rows, vocab], or the new cache's
      structure differs from the old one's.
  """
  logits, new_cache = tokens_to_logits(decoding_state)
  rows = decoding_state.sequences.shape[0]
  if len(getattr(logits, "shape", ())) != 2 or (logits.shape[0] != rows and
                                                not any_rows):
    raise ValueError(
        "tokens_to_logits must return logits of shape [batch * num_decodes, "
        f"vocab] = [{rows}, vocab]; got {getattr(logits, 'shape', None)}.")
  old_cache = decoding_state.cache
  new_cache = match_container(old_cache, new_cache)
  old_def = jax.tree_util.tree_structure(old_cache)
  new_def = jax.tree_util.tree_structure(new_cache)
  if old_def != new_def:
    raise ValueError(
        "tokens_to_logits must return a cache with the structure of the cache "
        f"it was given; got {new_def}, expected {old_def}.")
  return logits, new_cache


def decoding_state(state: SamplingLoopState) -> DecodingState:
  """What the model sees of the loop state: [B*N, length] sequences."""
  return DecodingState(cur_index=state.cur_index,
                       sequences=state.sequences[:, :-SPARE_SLOTS],
                       cur_token=state.cur_token, cache=state.cache)


@dataclasses.dataclass(frozen=True)
class ContextStep:
  """T5X's `tokens_to_logits` as a static function of (context, state):
  `step_fn(context["params"], context["rows"], **options)(state)`.

  A model's `step_fn` closes over arrays; a scheduler that compiles the
  step into several programs (`compaction`) needs it static and the arrays
  passed in. A `ContextStep` is hashable (`step_fn` a bound method, hashed
  by its model), so equal steps share compiled programs.

  Attributes:
    step_fn: (params, context_rows, **options) -> tokens_to_logits.
    options: the step's static keyword arguments, as sorted (name, value)
      pairs.
  """

  step_fn: Callable[..., Callable]
  options: Tuple[Tuple[str, Any], ...] = ()

  def __call__(self, context, state: DecodingState):
    return self.step_fn(context["params"], context["rows"],
                        **dict(self.options))(state)
