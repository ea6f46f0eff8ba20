"""Sampling that drops ended rows and shares prefixes (host-driven, same
samples).

The decode loop steps all of its R rows until the last one ends: a row
that drew EOS early still costs a full step (its model call, its attention
over the cache) at every later step. Sampled rows of one input end at very
different steps; on the embedded translation model 40 % of a loop's
row-steps belong to rows that have already ended.

`sample_compacted` runs the same loop in short segments (`Compaction.
segment_steps` steps, each segment one compiled call) and, between
segments, keeps only the rows that are still decoding: per input, the
surviving rows are gathered to the front and the count is rounded up to
`Compaction.multiple` (padded with ended rows of the same input, which the
loop leaves as they are). The cache grows by `Compaction.growth_slots` as
the rows advance, as with `loop.CacheGrowth`. The rows keep their global
ids, the loop keeps its step count and PRNG stream, and cross-attention
runs at its original shape (`EncoderDecoderModel.step_fn(group_rows=)`),
so every sample, log-probability and code is the one `Method.decode`
returns, bit for bit, on XLA:CPU from 64 rows per call up
(`tests/test_throughput.py`).

    tokens, log_probs, codes = sample_compacted(
        model, params, encoder_tokens, method=Method.ARITHMETIC, eos_id=1,
        key=jax.random.PRNGKey(0), num_decodes=64, max_decode_len=160,
        temperature=0.5)

Example: 8 inputs x 64 samples at T = 0.5, segments of 8 steps. After 40
steps input 3 has 11 rows still decoding (the most of any input): the next
segment decodes 8 x 16 rows instead of 512.

Prefix sharing (`Compaction.share_prefixes`, on by default). At a low
temperature most samples of an input agree on their first tokens, and at
any temperature arithmetic sampling's codes that lie close together decode
the same prefix: the model's work for a prefix does not depend on which
sample asked. So the sample rows are not model rows: each sample row
reads the logits of the model row that holds its prefix (`owner`), and a
model row runs once for all the samples on it. When the samples of one
model row draw different tokens they part: the first keeps the row, the
others take free rows, copied from it (`assign_model_rows`, `copy_rows`).
A segment stops before a step that needs more model rows than it has; the
host then lays the model rows out again (`pack_model_rows`), as it drops
ended sample rows. Samples share within a run of the same input (the
experiments decode one verse as 8 inputs x 64 samples: all 512 share);
model rows are laid out in the cross-attention groups, so each reads its
own input's keys at the original shape. Each sample still draws its token
from its own code (or key) and its logits are those of its prefix, so the
samples are again `Method.decode`'s, bit for bit.

Example: one verse as 8 x 64 rows at T = 0.1: the model runs fewer than a
third of the row-steps the 512 samples take, and never fewer than their
distinct prefixes (`tests/test_throughput.py`).

The model must be a `sharding.RowModel` that decodes from slot 0
(`start_index` None: no prefilled prompt) and whose `step_fn` takes
`lockstep` and `group_rows` (`EncoderDecoderModel`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.calls import T5XArgs, validate
from arithmetic_decoding.choosers import Ancestral, Arithmetic, Chooser
from arithmetic_decoding.codes import CodeScheme
from arithmetic_decoding.loop import (DecodeOptions, LoopInputs, ModelFns,
                                      count_eos, initial_state, loop_fns)
from arithmetic_decoding.methods import Method
from arithmetic_decoding.protocol import SPARE_SLOTS, SamplingLoopState
from arithmetic_decoding.rows import sort_samples


@dataclasses.dataclass(frozen=True)
class Compaction:
  """When and how finely `sample_compacted` drops ended rows (static).

  Attributes:
    segment_steps: loop steps per compiled call; ended rows are dropped
      between calls.
    multiple: rows kept per input are rounded up to this times a power
      of two (`geometric`) or to a multiple of this.
    min_rows: never decode fewer rows than this in one call (XLA:CPU picks
      other dot kernels for small batches, which moves last bits); a
      decode of fewer rows runs without compaction or cache growth.
    growth_slots: the cache starts with this many slots and grows by as
      many when a row that is still decoding reaches its end.
    share_prefixes: rows of one input that have decoded the same tokens so
      far share one model row (see `assign_model_rows`): the model runs
      once per distinct prefix, not once per sample.
    geometric: row counts 8, 16, 32, ... (with `multiple` 8) rather than
      8, 16, 24, ...: fewer distinct shapes, so fewer programs compiled
      and kept (each (rows, model rows, cache size) is one), at the cost
      of decoding more ended rows. On the bench workload
      (`scripts/bench_experiments.py --rounding`): the first pass, compiles
      included, ~20 % shorter; ~8 % fewer tokens/s once compiled.
  """

  segment_steps: int = 8
  multiple: int = 8
  min_rows: int = 64
  growth_slots: int = 32
  share_prefixes: bool = True
  geometric: bool = True

  def __post_init__(self):
    for name in ("segment_steps", "multiple", "min_rows", "growth_slots"):
      validation.check_int(f"Compaction.{name}", getattr(self, name),
                           minimum=1)
    for name in ("share_prefixes", "geometric"):
      if not isinstance(getattr(self, name), bool):
        raise TypeError(f"Compaction.{name} must be a bool; got "
                        f"{getattr(self, name)!r}.")


@dataclasses.dataclass
class _Live:
  """The rows a segment decodes: the loop state and what each row reads
  (arrays on the device), and `rows` int [R'] numpy: their indices among
  all R rows."""

  state: SamplingLoopState
  row_ids: jax.Array
  eos_count: jax.Array
  rows: np.ndarray


def _chooser(method: Method, code_scheme: CodeScheme):
  if method is Method.ARITHMETIC:
    return Arithmetic(code_scheme=code_scheme)
  if method is Method.ANCESTRAL:  # rows on one device: pooled candidates
    return Ancestral(pruned=True)
  if method is Method.GREEDY:  # the arithmetic loop at temperature 0
    return Arithmetic()
  raise ValueError(f"method must be 'arithmetic', 'ancestral' or 'greedy' for "
                   f"sample_compacted; got {method.value!r}.")


@functools.partial(jax.jit, static_argnames=("model", "chooser", "eos_id",
                                             "num_decodes", "max_decode_len",
                                             "slots"))
def _start(params, encoder_tokens, key, temperature, codes, *, model, chooser,
           eos_id, num_decodes, max_decode_len, slots):
  """-> (the loop's first state over a `slots`-slot cache, row ids [R],
  initial EOS counts [R], the rows' context, the decode's options, codes
  [R], the number of rows per cross-attention group)."""
  inputs, cache, context = model.decode_start(params, encoder_tokens,
                                              max_decode_len)
  rows_total = encoder_tokens.shape[0] * num_decodes
  row_context = model.row_context(params, context, jnp.arange(rows_total),
                                  num_decodes)
  call = validate(T5XArgs(inputs, cache,
                          model.step_fn(params, row_context, lockstep=True),
                          eos_id, key, num_decodes, temperature, topk=0),
                  chooser, codes=codes)
  rows = call.rows()
  state = initial_state(rows.inputs, model.cache_growth().resize(rows.cache, slots),
                        None, rows.rng, chooser.init_state(rows.codes))
  return (state, rows.row_ids, count_eos(state.sequences, eos_id), row_context,
          rows.temperature, rows.codes)


@functools.partial(jax.jit, static_argnames=("model", "options", "group_rows",
                                             "max_decode_len"))
def _segment(params, row_context, state, row_ids, eos_count, temperature,
             stop_step, *, model, options, group_rows, max_decode_len):
  """Runs the loop from `state` until every row has ended, or step
  `stop_step`, or a row still decoding reaches the end of the cache."""
  fns = ModelFns(model.step_fn(params, row_context, lockstep=True,
                               group_rows=group_rows))
  inputs = LoopInputs(options.distribution(temperature), row_ids,
                      jnp.asarray(max_decode_len, jnp.int32))
  cond_fn, body_fn = loop_fns(inputs, fns, options, eos_count)
  size = model.cache_growth().size_of(state.cache)

  def segment_cond(s):
    furthest = jnp.max(jnp.where(s.ended[:, 0], -1, s.cur_index))
    return cond_fn(s) & (s.step < stop_step) & (furthest < size)

  state = jax.lax.while_loop(segment_cond, body_fn, state)
  return state, state.ended[:, 0], state.cur_index


@functools.partial(jax.jit, static_argnames=("model", "slots"))
def _take(state, row_ids, eos_count, take, *, model, slots):
  """Rows `take` int [R'] of the live arrays, the cache resized to
  `slots`."""
  pick = lambda x: jnp.take(x, take, axis=0)
  cache = jax.tree_util.tree_map(pick, state.cache)
  growth = model.cache_growth()
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = state.replace(
      cur_index=pick(state.cur_index), sequences=pick(state.sequences),
      cache=cache, cur_token=pick(state.cur_token), ended=pick(state.ended),
      log_prob=pick(state.log_prob),
      chooser_state=jax.tree_util.tree_map(pick, state.chooser_state))
  return state, pick(row_ids), pick(eos_count)


def assign_model_rows(owner, cur_token, ended, groups: int, model_rows: int):
  """Prefix sharing's bookkeeping before a step.

  Sample rows ("codes", C of them in G groups of consecutive rows, one
  group per input) are decoded by model rows (P = G x m, m per group): a
  model row holds the cache of one prefix, and every sample row that has
  decoded exactly that prefix reads its logits. At a step, the sample rows
  of one model row that fed different tokens part: the first (in row
  order) of each distinct (model row, token) keeps going; the first one
  keeps the model row, the others take free model rows of the group, whose
  cache is copied from the parent's.

  Args:
    owner: int [C]; each sample row's model row (global index).
    cur_token: int [C]; the token each row feeds at this step.
    ended: bool [C]; rows that have ended (they need no model row).
    groups, model_rows: G and P.

  Returns:
    (owner [C] for this step, need [G]: model rows each group needs at
    this step, and the splits: to [C], from [C], count []: the first
    `count` entries of `to` are model rows that start here as copies of
    the model rows in `from`).

  Example: one group, 4 sample rows on model row 0 feeding tokens 5, 7, 5,
  9 (none ended), 4 model rows: rows 0 and 2 stay on model row 0; row 1
  takes model row 1 and row 3 model row 2, both copied from row 0.

  >>> o, need, (to, frm, count) = assign_model_rows(
  ...     jnp.array([0, 0, 0, 0]), jnp.array([5, 7, 5, 9]),
  ...     jnp.zeros(4, bool), 1, 4)
  >>> o.tolist(), need.tolist(), to[:2].tolist(), frm[:2].tolist(), int(count)
  ([0, 1, 0, 2], [3], [1, 2], [0, 0], 2)
  """
  rows = owner.shape[0]
  per = rows // groups  # sample rows per group
  m = model_rows // groups  # model rows per group
  offset = (jnp.arange(groups) * m)[:, None]  # [G, 1]
  own = owner.reshape(groups, per) - offset  # [G, c]: local model row
  tok = cur_token.reshape(groups, per)
  act = ~ended.reshape(groups, per)
  idx = jnp.arange(per)
  same_owner = own[:, :, None] == own[:, None, :]  # [G, c, c]
  # [G, c, c]: row j (active) feeds row i's prefix and token
  same = same_owner & (tok[:, :, None] == tok[:, None, :]) & act[:, None, :]
  first = jnp.argmax(same, axis=-1)  # [G, c]: first row with i's key
  leader = act & (first == idx[None, :])
  earlier = (same_owner & leader[:, None, :] &
             (idx[None, None, :] < idx[None, :, None]))
  keeper = leader & ~earlier.any(-1)  # keeps its model row
  fresh = leader & ~keeper  # needs a free model row
  slots = jnp.arange(m)
  # [G, m]: model rows kept by a keeper this step
  kept = ((own[:, :, None] == slots[None, None, :]) &
          keeper[:, :, None]).any(1)
  free_rank = jnp.cumsum(~kept, axis=1) - 1  # [G, m]
  fresh_rank = jnp.cumsum(fresh, axis=1) - 1  # [G, c]
  # [G, c]: the k-th fresh leader takes the k-th free model row
  new_row = jnp.argmax((~kept)[:, None, :] &
                       (free_rank[:, None, :] == fresh_rank[:, :, None]),
                       axis=-1)
  lead_row = jnp.where(keeper, own, new_row)
  new_own = jnp.where(act, jnp.take_along_axis(lead_row, first, axis=1), own)
  need = leader.sum(axis=1)
  # [C]: the fresh leaders' (new row, parent row), listed first.
  fresh = fresh.reshape(-1)
  at = jnp.where(fresh, jnp.cumsum(fresh) - 1, rows)
  to = jnp.zeros((rows,), jnp.int32).at[at].set(
      (new_row + offset).reshape(-1), mode="drop")
  frm = jnp.zeros((rows,), jnp.int32).at[at].set(
      (own + offset).reshape(-1), mode="drop")
  return (new_own + offset).reshape(-1), need, (to, frm, fresh.sum())


# Model rows copied per scatter when sample rows split (`copy_rows`).
_COPY_CHUNK = 8


def copy_rows(cache, to, frm, count):
  """The cache with model rows to[:count] replaced by copies of rows
  frm[:count], `_COPY_CHUNK` rows per in-place scatter (a split copies
  only the rows that start, not the whole cache)."""
  pad = lambda x: jnp.pad(x, (0, _COPY_CHUNK))
  to, frm = pad(to), pad(frm)
  rows = jax.tree_util.tree_leaves(cache)[0].shape[0]

  def chunk(i, c):
    start = i * _COPY_CHUNK
    dst = jax.lax.dynamic_slice(to, (start,), (_COPY_CHUNK,))
    src = jax.lax.dynamic_slice(frm, (start,), (_COPY_CHUNK,))
    valid = (start + jnp.arange(_COPY_CHUNK)) < count
    dst = jnp.where(valid, dst, rows)  # out of range: dropped
    return jax.tree_util.tree_map(
        lambda x: x.at[dst].set(jnp.take(x, src, axis=0), mode="drop"), c)

  return jax.lax.fori_loop(0, (count + _COPY_CHUNK - 1) // _COPY_CHUNK,
                           chunk, cache)


@dataclasses.dataclass(frozen=True)
class _OnModelRows(Chooser):
  """Sampling over logits per model row: the step's logits are [P, V] and
  sample row r reads row owner[r] (the loop state's cache["owner"]). The
  passes over the vocabulary that do not depend on the row's code or key
  run once per model row (`choose_rows` of `Arithmetic`, of pruned
  `Ancestral`), the same tokens bit for bit as on [C, V] gathered
  logits."""

  inner: Union[Arithmetic, Ancestral]

  def choose(self, raw, state, step, dist):
    return self.inner.choose_rows(raw, state.cache["owner"], state, step,
                                  dist)

  def from_greedy(self, greedy, state, step):
    owner = state.cache["owner"]  # [P] -> [C]
    return self.inner.from_greedy(dataclasses.replace(
        greedy, token=jnp.take(greedy.token, owner),
        valid=jnp.take(greedy.valid, owner)), state, step)


def _shared_step_fn(step, model_rows: int, gather: bool = True):
  """tokens_to_logits over sample rows from `step` over model rows: the
  cache is {"model": the model's cache [P, ...], "owner": int [C],
  "active": bool [C]}; each model row is fed its sample rows' token and
  each sample row reads its model row's logits ([C, V]; or, without
  `gather`, the model rows' [P, V], for `_OnModelRows`)."""

  def tokens_to_logits(state):
    owner, active = state.cache["owner"], state.cache["active"]
    # [C, 1] -> [P, 1]: the rows of one model row feed the same token.
    token = jnp.zeros((model_rows, 1), jnp.int32).at[
        jnp.where(active, owner, model_rows)].set(state.cur_token,
                                                  mode="drop")
    index = jnp.broadcast_to(jnp.max(state.cur_index), (model_rows,))
    logits, cache = step(state.replace(cur_token=token, cur_index=index,
                                       cache=state.cache["model"]))
    if gather:  # [P, V] -> [C, V]
      logits = jnp.take(logits, owner, axis=0)
    return logits, dict(state.cache, model=cache)

  return tokens_to_logits


@functools.partial(jax.jit, static_argnames=("model", "options", "group_rows",
                                             "max_decode_len", "classes"))
def _segment_shared(params, row_context, state, row_ids, eos_count,
                    temperature, stop_step, *, model, options, group_rows,
                    max_decode_len, classes):
  """`_segment` with prefix sharing among the rows of each of `classes`
  equal runs of rows (inputs that are the same): stops also before a step
  that needs more model rows than the class has. Returns (state, ended
  [C], cur_index [C], need [classes])."""
  rows_m = jax.tree_util.tree_leaves(state.cache["model"])[0].shape[0]
  step = model.step_fn(params, row_context, lockstep=True,
                       group_rows=group_rows)
  # The samplers read the logits per model row (others would gather them
  # per sample row first).
  on_model_rows = (isinstance(options.chooser, Arithmetic) or (
      isinstance(options.chooser, Ancestral) and options.chooser.pruned))
  if on_model_rows:
    options = dataclasses.replace(options,
                                  chooser=_OnModelRows(options.chooser))
  fns = ModelFns(_shared_step_fn(step, rows_m, gather=not on_model_rows),
                 shared_logits=on_model_rows)
  inputs = LoopInputs(options.distribution(temperature), row_ids,
                      jnp.asarray(max_decode_len, jnp.int32))
  cond_fn, body_fn = loop_fns(inputs, fns, options, eos_count)
  size = model.cache_growth().size_of(state.cache["model"])
  pool = rows_m // classes

  def assign(s):
    return assign_model_rows(s.cache["owner"], s.cur_token[:, 0],
                             s.ended[:, 0], classes, rows_m)

  def segment_cond(s):
    furthest = jnp.max(jnp.where(s.ended[:, 0], -1, s.cur_index))
    fits = jnp.max(assign(s)[1]) <= pool
    return cond_fn(s) & (s.step < stop_step) & (furthest < size) & fits

  def shared_body(s):
    owner, _, (to, frm, count) = assign(s)
    cache = copy_rows(s.cache["model"], to, frm, count)
    return body_fn(s.replace(cache={"model": cache, "owner": owner,
                                    "active": ~s.ended[:, 0]}))

  state = jax.lax.while_loop(segment_cond, shared_body, state)
  return state, state.ended[:, 0], state.cur_index, assign(state)[1]


@functools.partial(jax.jit, static_argnames=("model", "slots"))
def _take_shared(state, row_ids, eos_count, take, model_take, owner, *, model,
                 slots):
  """Sample rows `take` [C'], model rows `model_take` [P'] (their cache
  resized to `slots`), the sample rows' new owners `owner` [C']."""
  pick = lambda x: jnp.take(x, take, axis=0)
  cache = jax.tree_util.tree_map(lambda x: jnp.take(x, model_take, axis=0),
                                 state.cache["model"])
  growth = model.cache_growth()
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = state.replace(
      cur_index=pick(state.cur_index), sequences=pick(state.sequences),
      cache={"model": cache, "owner": owner,
             "active": ~pick(state.ended)[:, 0]},
      cur_token=pick(state.cur_token), ended=pick(state.ended),
      log_prob=pick(state.log_prob),
      chooser_state=jax.tree_util.tree_map(pick, state.chooser_state))
  return state, pick(row_ids), pick(eos_count)


def pack_model_rows(owner: np.ndarray, ended: np.ndarray, groups: int,
                    per_group: int):
  """The model rows a segment keeps: per group, those some decoding row
  reads (in order), padded with the group's first to `per_group`.

  Args:
    owner: int [C] (global model rows); ended: bool [C]; groups: G;
    per_group: model rows per group from now on (>= the most in use).

  Returns:
    (model_take int [G * per_group]: old model row of each new one,
    owner int [C]: the rows' new model rows; an ended row's is its
    group's first).

  >>> t, o = pack_model_rows(np.array([0, 3, 3, 6, 7]), np.array(
  ...     [1, 0, 0, 0, 1], bool), 1, 2)
  >>> t.tolist(), o.tolist()
  ([3, 6], [0, 0, 0, 1, 0])
  """
  per = owner.size // groups
  owner_g = owner.reshape(groups, per)
  live_g = ~ended.reshape(groups, per)
  take = np.zeros((groups, per_group), np.int64)
  new = np.zeros((groups, per), np.int64)
  for g in range(groups):
    used = np.unique(owner_g[g][live_g[g]])
    if used.size > per_group:
      raise ValueError(f"group {g} uses {used.size} model rows; "
                       f"per_group is {per_group}.")
    fill = used[0] if used.size else owner_g[g][0]
    take[g] = np.concatenate([used, np.full(per_group - used.size, fill)])
    local = np.searchsorted(used, owner_g[g]) if used.size else 0
    new[g] = np.where(live_g[g], local, 0) + g * per_group
  return take.reshape(-1), new.reshape(-1)


def keep_rows(ended: np.ndarray, groups: int, multiple: int,
              min_per_group: int, geometric: bool = True) -> np.ndarray:
  """Which live rows the next segment decodes: per group of consecutive
  rows, those not ended first (in order), then ended ones up to a count
  that is the most of any group rounded up to `multiple` x 2^k (to a
  multiple of `multiple` if not `geometric`), at least `min_per_group`,
  at most the group.

  >>> keep_rows(np.array([1, 0, 1, 1, 0, 0, 1, 1], bool), 2, 2, 1).tolist()
  [1, 0, 4, 5]
  >>> keep_rows(np.array([1, 1, 1, 0, 1, 1, 1, 1], bool), 2, 1, 1).tolist()
  [3, 4]
  """
  per_group = ended.size // groups
  ended = ended.reshape(groups, per_group)
  need = int((~ended).sum(axis=1).max())
  keep = _round(need, multiple, min_per_group, per_group, geometric)
  # Stable: within a group, decoding rows first in their order, then ended.
  order = np.argsort(ended, axis=1, kind="stable")[:, :keep]
  return (order + per_group * np.arange(groups)[:, None]).reshape(-1)


def sample_compacted(model, params, encoder_tokens, *, method, eos_id: int,
                     key: jax.Array, num_decodes: int, max_decode_len: int,
                     temperature, codes: Optional[jax.Array] = None,
                     code_scheme=CodeScheme.SHIFTED_LATTICE,
                     compaction: Compaction = Compaction(),
                     stats: Optional[dict] = None
                     ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """`method.decode`'s samples, decoded with ended rows dropped.

  Args:
    model: an `EncoderDecoderModel` (see the module docstring).
    params: its parameters; encoder_tokens: int32 [B, S].
    method: `Method.ARITHMETIC`, `ANCESTRAL` or `GREEDY` (or their names).
    eos_id, key, num_decodes (N), max_decode_len (L), temperature (a
      scalar), codes (float32 [B, N], arithmetic only), code_scheme: as
      for `Method.decode` (top-k and top-p off).
    compaction: segments and granularity (`Compaction`).
    stats: a dict to fill with "segments" (compiled calls run),
      "row_steps" (rows x loop steps decoded; without compaction it would
      be R x the steps of the longest sample) and "segment_seconds" (wall
      time from each segment's call until its ended rows reach the host:
      the compiled loop's share of the call), or None.

  Returns:
    tokens int32 [B, N, L], log_probs float32 [B, N], codes float32 [B, N]
    (zeros for ancestral sampling): each input's samples by increasing
    log-probability, exactly as `Method.decode(..., return_codes=True)`.
  """
  method = Method.of(method)
  chooser = _chooser(method, code_scheme)
  if not isinstance(compaction, Compaction):
    raise TypeError(f"compaction must be a Compaction; got "
                    f"{type(compaction).__name__}.")
  if model.start_index(encoder_tokens) is not None:
    raise ValueError("sample_compacted decodes from slot 0; this model "
                     "starts rows at a prefilled prompt (start_index).")
  batch = encoder_tokens.shape[0]
  rows_total = batch * num_decodes
  small = rows_total < compaction.min_rows
  first = max_decode_len if small else min(compaction.growth_slots,
                                           max_decode_len)
  state, row_ids, eos_count, row_context, temperature, codes = _start(
      params, encoder_tokens, key,
      jnp.float32(0.0 if method is Method.GREEDY else temperature), codes,
      model=model, chooser=chooser, eos_id=eos_id, num_decodes=num_decodes,
      max_decode_len=max_decode_len, slots=first)
  options = DecodeOptions(eos_id=eos_id, num_decodes=num_decodes,
                          chooser=chooser, topk=0, topp=0.0)
  # Rows per cross-attention group (`EncoderDecoderModel.row_context`).
  per_group = math.gcd(num_decodes, rows_total)
  groups = rows_total // per_group
  min_per_group = -(-compaction.min_rows // groups)
  # Results of all R rows, filled in as rows are dropped and at the end.
  sequences = np.zeros(state.sequences.shape, np.int32)
  log_probs = np.zeros((rows_total,), np.float32)
  live = _Live(state, row_ids, eos_count, np.arange(rows_total))
  if compaction.share_prefixes and not small:
    _share(live, params, row_context, temperature, model, options,
           compaction, max_decode_len, groups, per_group,
           same_input_runs(np.asarray(encoder_tokens)), sequences,
           log_probs, stats)
    return _finish(sequences, log_probs, codes, method, batch, num_decodes)
  step = 0
  counts = {"segments": 0, "row_steps": 0, "segment_seconds": 0.0}
  while True:
    step += compaction.segment_steps
    done = int(live.state.step)
    started = time.perf_counter()
    state, ended, cur_index = _segment(
        params, row_context, live.state, live.row_ids, live.eos_count,
        temperature, jnp.int32(step), model=model, options=options,
        group_rows=per_group, max_decode_len=max_decode_len)
    ended, cur_index = np.asarray(ended), np.asarray(cur_index)
    counts["segment_seconds"] += time.perf_counter() - started
    live.state = state
    counts["segments"] += 1
    counts["row_steps"] += ended.size * (int(state.step) - done)
    if ended.all():
      break
    size = model.cache_growth().size_of(state.cache)
    grow = (not small and int(cur_index[~ended].max()) >= size and
            size < max_decode_len)
    slots = (min(size + compaction.growth_slots, max_decode_len) if grow
             else size)
    take = (np.arange(ended.size) if small else
            keep_rows(ended, groups, compaction.multiple, min_per_group,
                      compaction.geometric))
    if take.size == ended.size and slots == size:
      continue
    if take.size < ended.size:  # rows leave: keep their results
      sequences[live.rows] = np.asarray(state.sequences)
      log_probs[live.rows] = np.asarray(state.log_prob)
    live.state, live.row_ids, live.eos_count = _take(
        state, live.row_ids, live.eos_count, jnp.asarray(take, jnp.int32),
        model=model, slots=slots)
    live.rows = live.rows[take]
  sequences[live.rows] = np.asarray(live.state.sequences)
  log_probs[live.rows] = np.asarray(live.state.log_prob)
  if stats is not None:
    stats.update(counts)
  return _finish(sequences, log_probs, codes, method, batch, num_decodes)


def _finish(sequences, log_probs, codes, method, batch, num_decodes):
  """All rows' results -> `Method.decode`'s sorted [B, N, ...] arrays."""
  # [R, L + SPARE_SLOTS] -> [R, L]: drop BOS and the spare slots.
  decodes = jnp.asarray(sequences[:, 1:1 - SPARE_SLOTS])
  if method is not Method.ARITHMETIC:
    codes = jnp.zeros_like(codes)
  return sort_samples(decodes, jnp.asarray(log_probs), codes, batch,
                      num_decodes)


def _round(n: int, multiple: int, least: int, most: int,
           geometric: bool = True) -> int:
  """The least `multiple` x 2^k >= n (`geometric`: few distinct row
  counts, so few compiled programs) or the least multiple of `multiple`
  >= n, within [least, most].

  >>> [_round(n, 8, 8, 64) for n in (1, 9, 17, 33, 60)]
  [8, 16, 32, 64, 64]
  >>> [_round(n, 8, 8, 64, geometric=False) for n in (1, 9, 17, 33, 60)]
  [8, 16, 24, 40, 64]
  """
  if geometric:
    size = multiple
    while size < n:
      size *= 2
  else:
    size = -(-n // multiple) * multiple
  return min(most, max(least, size))


def same_input_runs(encoder_tokens: np.ndarray) -> int:
  """The fewest equal runs of consecutive inputs [B, S] such that the
  inputs of each run are the same (B when no two neighbours are).

  >>> same_input_runs(np.array([[3, 4], [3, 4], [5, 1], [5, 1]]))
  2
  >>> same_input_runs(np.array([[3, 4], [3, 4], [3, 4], [5, 1]]))
  4
  """
  batch = encoder_tokens.shape[0]
  for runs in range(1, batch + 1):
    if batch % runs == 0:
      blocks = encoder_tokens.reshape(runs, batch // runs, -1)
      if (blocks == blocks[:, :1]).all():
        return runs
  return batch


def _share(live: _Live, params, row_context, temperature, model, options,
           compaction: Compaction, max_decode_len: int, groups: int,
           per_group: int, classes: int, sequences: np.ndarray,
           log_probs: np.ndarray, stats: Optional[dict]) -> None:
  """`sample_compacted`'s loop with prefix sharing; fills `sequences` and
  `log_probs` of all rows.

  Sample rows share within `classes` runs of same inputs (each run holds
  whole cross-attention groups, `groups` of them in all, `per_group`
  sample rows each); model rows are laid out as the cross-attention
  groups read them, m per group (`per_group` at most), so a class's
  pool of model rows is its groups' rows."""
  rows_total = live.rows.size
  spread = groups // classes  # cross-attention groups per class
  least = -(-compaction.min_rows // groups)  # model rows per group
  least_rows = -(-compaction.min_rows // classes)  # sample rows per class
  m = _round(1, compaction.multiple, least, per_group, compaction.geometric)
  model_take = np.arange(groups * m)  # the empty cache: any rows
  owner = np.repeat(np.arange(classes) * spread * m, rows_total // classes)
  live.state = live.state.replace(cache={
      "model": live.state.cache, "owner": jnp.asarray(owner, jnp.int32),
      "active": ~live.state.ended[:, 0]})
  live.state, live.row_ids, live.eos_count = _take_shared(
      live.state, live.row_ids, live.eos_count,
      jnp.arange(rows_total, dtype=jnp.int32),
      jnp.asarray(model_take, jnp.int32), jnp.asarray(owner, jnp.int32),
      model=model,
      slots=model.cache_growth().size_of(live.state.cache["model"]))
  step = 0
  counts = {"segments": 0, "row_steps": 0, "sample_row_steps": 0,
            "segment_seconds": 0.0}
  while True:
    done = int(live.state.step)
    step = max(step, done) + compaction.segment_steps
    started = time.perf_counter()
    state, ended, cur_index, need = _segment_shared(
        params, row_context, live.state, live.row_ids, live.eos_count,
        temperature, jnp.int32(step), model=model, options=options,
        group_rows=per_group, max_decode_len=max_decode_len, classes=classes)
    ended, cur_index = np.asarray(ended), np.asarray(cur_index)
    need = -(-int(np.asarray(need).max()) // spread)  # per group
    counts["segment_seconds"] += time.perf_counter() - started
    live.state = state
    steps = int(state.step) - done
    counts["segments"] += 1
    counts["row_steps"] += groups * m * steps
    counts["sample_row_steps"] += ended.size * steps
    if ended.all():
      break
    size = model.cache_growth().size_of(state.cache["model"])
    grow = (int(cur_index[~ended].max()) >= size and size < max_decode_len)
    slots = (min(size + compaction.growth_slots, max_decode_len) if grow
             else size)
    take = keep_rows(ended, classes, compaction.multiple, least_rows,
                     compaction.geometric)
    # Overflow (a step needs more model rows): twice what it needs.
    m_new = _round(2 * need if need > m else need, compaction.multiple,
                   least, per_group, compaction.geometric)
    if take.size == ended.size and slots == size and m_new == m:
      continue
    if take.size < ended.size:  # rows leave: keep their results
      sequences[live.rows] = np.asarray(state.sequences)
      log_probs[live.rows] = np.asarray(state.log_prob)
    model_take, owner = pack_model_rows(
        np.asarray(state.cache["owner"])[take], ended[take], classes,
        spread * m_new)
    live.state, live.row_ids, live.eos_count = _take_shared(
        state, live.row_ids, live.eos_count, jnp.asarray(take, jnp.int32),
        jnp.asarray(model_take, jnp.int32), jnp.asarray(owner, jnp.int32),
        model=model, slots=slots)
    live.rows = live.rows[take]
    m = m_new
  sequences[live.rows] = np.asarray(live.state.sequences)
  log_probs[live.rows] = np.asarray(live.state.log_prob)
  if stats is not None:
    stats.update(counts)
