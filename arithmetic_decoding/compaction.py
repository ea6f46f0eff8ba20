"""The compacted scheduler: a request's rows in host-driven segments that
drop ended rows and share prefixes (the same samples).

The fused loop (`engine.run_fused`) steps all of a request's R rows until
the last one ends: a row that drew EOS early still costs a full step (its
model call, its attention over the cache) at every later step. Sampled rows
of one input end at very different steps; on the embedded translation model
40 % of a loop's row-steps belong to rows that have already ended.

`run_compacted` runs the request's own loop (`loop.run_segment`, with the
request's chooser and options) in short segments (`Compaction.
segment_steps` steps, each segment one compiled call) and, between
segments, keeps only the rows that are still decoding, rounded up to
`Compaction.multiple` x 2^k (padded with ended rows, which the loop leaves
as they are). The cache grows by the model's `CacheGrowth.slots` as the
rows advance. The rows keep their ids, the loop keeps its step count and
PRNG stream, and the model computes every row the same way at any row
count from `Compaction.min_rows` up, so every sample, log-probability and
code is the fused loop's, bit for bit, on XLA:CPU (`tests/test_engine.py`,
`tests/test_throughput.py`).

    request, layout = for_row_model(model, params, encoder_tokens,
                                    Method.ARITHMETIC, eos_id=1, key=key,
                                    num_decodes=64, max_decode_len=160,
                                    temperature=0.5)
    tokens, log_probs, codes = run_compacted(request, layout)

Example: 8 inputs x 64 samples at T = 0.5, segments of 8 steps. After 40
steps input 3 has 11 rows still decoding (the most of any input): the next
segment decodes 8 x 16 rows instead of 512.

Prefix sharing (`Compaction.share_prefixes`, on by default). At a low
temperature most samples of an input agree on their first tokens, and at
any temperature arithmetic sampling's codes that lie close together decode
the same prefix: the model's work for a prefix does not depend on which
sample asked. So the sample rows are not model rows: each sample row
reads the logits of the model row that holds its prefix (`owner`), and a
model row runs once for all the samples on it. A decoder-only model's
prompt is prefilled once per prompt, not once per sample: all N samples
start on their prompt's model row. When the samples of one model row draw
different tokens they part: the first keeps the row, the others take free
rows, copied from it (`assign_model_rows`, `copy_rows`). A segment stops
before a step that needs more model rows than it has; the host then lays
the model rows out again (`pack_model_rows`), as it drops ended sample
rows. Each sample still draws its token from its own code (or key) and its
logits are those of its prefix, so the samples are again the fused loop's.

Example: one verse as 8 x 64 rows at T = 0.1: the model runs fewer than a
third of the row-steps the 512 samples take, and never fewer than their
distinct prefixes (`tests/test_throughput.py`).

The model's side comes with the request: a static step function of
(context, state) (`request.DecodeRequest.context`) whose rows may be any
subset that keeps its `RowLayout.groups` groups equal in size, and how its
cache grows (`RowLayout.growth`). The model's cache carries its batch at
axis 0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.choosers import Chooser
from arithmetic_decoding.loop import (CacheGrowth, LoopInputs, ModelFns,
                                      count_eos, initial_state, run_segment)
from arithmetic_decoding.protocol import SPARE_SLOTS, SamplingLoopState
from arithmetic_decoding.request import DecodeRequest
from arithmetic_decoding.rows import sort_samples


@dataclasses.dataclass(frozen=True)
class Compaction:
  """When and how finely `run_compacted` drops ended rows (static).

  Attributes:
    segment_steps: loop steps per compiled call; ended rows are dropped
      between calls.
    multiple: rows kept per pool are rounded up to this times a power
      of two (`geometric`) or to a multiple of this.
    min_rows: never run the model on fewer rows than this in one call
      (XLA:CPU picks other dot kernels for small batches, which moves last
      bits). A decode of fewer sample rows runs as the fused loop does
      (all rows, the full cache: the fused loop's bits), unless
      `pad_small`.
    share_prefixes: rows of one input that have decoded the same tokens so
      far share one model row (see `assign_model_rows`): the model runs
      once per distinct prefix, not once per sample.
    geometric: row counts 8, 16, 32, ... (with `multiple` 8) rather than
      8, 16, 24, ...: fewer distinct shapes, so fewer programs compiled
      and kept (each (rows, model rows, cache size) is one), at the cost
      of decoding more ended rows. On the bench workload
      (`scripts/bench_experiments.py --rounding`): the first pass, compiles
      included, ~20 % shorter; ~8 % fewer tokens/s once compiled.
    pad_small: decodes of fewer than `min_rows` sample rows still run the
      model on at least `min_rows` rows, so that a sample's bits do not
      depend on how many rows it was decoded with (the LLM entry points:
      the same completions alone or in any batch).
  """

  segment_steps: int = 8
  multiple: int = 8
  min_rows: int = 64
  share_prefixes: bool = True
  geometric: bool = True
  pad_small: bool = False

  def __post_init__(self):
    for name in ("segment_steps", "multiple", "min_rows"):
      validation.check_int(f"Compaction.{name}", getattr(self, name),
                           minimum=1)
    for name in ("share_prefixes", "geometric", "pad_small"):
      if not isinstance(getattr(self, name), bool):
        raise TypeError(f"Compaction.{name} must be a bool; got "
                        f"{getattr(self, name)!r}.")


@dataclasses.dataclass(frozen=True)
class RowLayout:
  """What the compacted scheduler may do with a request's rows (static;
  the entry point that made the step function knows it).

  Attributes:
    growth: how the model's cache grows (`loop.CacheGrowth`): the cache
      starts with the fewest `growth.slots` multiples that hold the
      prompts and grows by as many when a row still decoding reaches its
      end.
    groups: the step function reads its rows as this many groups of
      consecutive rows, equal in number (an encoder-decoder's per-input
      cross-attention: group g reads input g); 1: any rows (a decoder-only
      model). Model rows are laid out in these groups.
    classes: the inputs form this many runs of equal inputs
      (`same_input_runs`); the samples of one run may share model rows.
      Either `classes` divides `groups` (each run's samples share the
      model rows of its groups) or `groups` is 1 (all model rows form one
      pool).
  """

  growth: CacheGrowth
  groups: int = 1
  classes: int = 1

  def __post_init__(self):
    for name in ("groups", "classes"):
      validation.check_int(f"RowLayout.{name}", getattr(self, name),
                           minimum=1)
    if self.groups % self.classes and self.groups != 1:
      raise ValueError(f"RowLayout.classes ({self.classes}) must divide "
                       f"RowLayout.groups ({self.groups}), or groups be 1.")

  @property
  def pools(self) -> int:
    """Sets of model rows that samples share within: one per class, or
    one for all when the rows are independent (`groups` 1)."""
    return self.classes if self.groups % self.classes == 0 else 1


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




@dataclasses.dataclass(frozen=True)
class _OnModelRows(Chooser):
  """The request's chooser over logits per model row: the step's logits
  are [P, V] and sample row r reads row owner[r] (the loop state's
  cache["owner"]). The passes over the vocabulary that do not depend on
  the row's code or key run once per model row (`Chooser.choose_rows`),
  the same tokens bit for bit as on [C, V] gathered logits. A per-row
  temperature is read per model row (the rows of a model row share a
  prompt, and so a request)."""

  inner: Chooser

  def choose(self, raw, state, step, dist):
    owner = state.cache["owner"]
    if jnp.ndim(dist.temperature):  # [C] -> [P]
      at = jnp.where(state.cache["active"], owner, raw.shape[0])
      dist = dataclasses.replace(dist, temperature=jnp.zeros(
          raw.shape[:1], jnp.float32).at[at].set(dist.temperature,
                                                  mode="drop"))
    return self.inner.choose_rows(raw, owner, state, step, dist)

  def from_greedy(self, greedy, state, step):
    owner = state.cache["owner"]  # [P] -> [C]
    return self.inner.from_greedy(dataclasses.replace(
        greedy, token=jnp.take(greedy.token, owner),
        valid=jnp.take(greedy.valid, owner)), state, step)


def _shared_step(step, model_rows: int):
  """tokens_to_logits over sample rows from `step` over model rows: the
  cache is {"model": the model's cache [P, ...], "owner": int [C],
  "active": bool [C]}; each model row is fed the token of its sample rows
  at their position (a model row no sample row decodes is fed 0 at
  position 0) and the logits stay per model row ([P, V], for
  `_OnModelRows`)."""

  def tokens_to_logits(state):
    owner, active = state.cache["owner"], state.cache["active"]
    # [C] -> [P]: the rows of one model row feed the same token there.
    at = jnp.where(active, owner, model_rows)
    token = jnp.zeros((model_rows, 1), jnp.int32).at[at].set(
        state.cur_token, mode="drop")
    index = jnp.zeros((model_rows,), jnp.int32).at[at].set(
        state.cur_index, mode="drop")
    logits, cache = step(state.replace(cur_token=token, cur_index=index,
                                       cache=state.cache["model"]))
    return logits, dict(state.cache, model=cache)

  return tokens_to_logits


@dataclasses.dataclass
class _Live:
  """The rows a segment decodes (arrays on the device) and `rows` int
  [C'] numpy: their indices among all C sample rows.

  Attributes:
    state: the loop state; its cache is {"model", "owner", "active"}.
    row_ids: int32 [C']; temperature: float32 [] or [C'];
    max_decode_len: int32 [] or [C']; eos_count: int32 [C'] (`count_eos`
    of each row before the first step).
  """

  state: SamplingLoopState
  row_ids: jax.Array
  temperature: jax.Array
  max_decode_len: jax.Array
  eos_count: jax.Array
  rows: np.ndarray

  def arrays(self):
    return (self.state, self.row_ids, self.temperature, self.max_decode_len,
            self.eos_count)


@functools.partial(jax.jit, static_argnames=("options", "slots", "growth"))
def _start(request: DecodeRequest, owner, model_take, *, options, slots,
           growth):
  """The live arrays of all C sample rows, their model rows
  `request.cache[model_take]` (the inputs whose caches they start from)
  over `slots` slots, each sample row on model row `owner`."""
  rows = request.rows(with_cache=False)
  cache = jax.tree_util.tree_map(lambda x: jnp.take(x, model_take, axis=0),
                                 request.cache)
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = initial_state(rows.inputs, None, rows.initial_index, rows.rng,
                        options.chooser.init_state(rows.codes))
  state = state.replace(cache={"model": cache, "owner": owner,
                               "active": ~state.ended[:, 0]})
  return (state, rows.row_ids, rows.temperature,
          jnp.broadcast_to(rows.max_decode_len, rows.row_ids.shape),
          count_eos(state.sequences, options.eos_id), rows.codes, rows.rng)


@functools.partial(jax.jit, static_argnames=("fns", "options", "pools",
                                             "growth"))
def _segment(context, state, row_ids, temperature, max_decode_len, eos_count,
             topk, topp, decode_key, stop_step, *, fns, options, pools,
             growth):
  """The request's loop from `state` until every row has ended, or step
  `stop_step`, or a row still decoding reaches the end of the cache, or a
  step would need more model rows than a pool has. Returns (state, ended
  [C], cur_index [C], need [pools])."""
  if context is not None:
    fns = dataclasses.replace(fns, tokens_to_logits=functools.partial(
        fns.tokens_to_logits, context))
  rows_m = jax.tree_util.tree_leaves(state.cache["model"])[0].shape[0]
  shared = ModelFns(_shared_step(fns.tokens_to_logits, rows_m),
                    shared_logits=True)
  options = dataclasses.replace(
      options, chooser=_OnModelRows(options.chooser.on_one_device()))
  inputs = LoopInputs(options.distribution(temperature, topk, topp),
                      row_ids=row_ids, max_decode_len=max_decode_len,
                      decode_key=decode_key)

  def assign(s):
    return assign_model_rows(s.cache["owner"], s.cur_token[:, 0],
                             s.ended[:, 0], pools, rows_m)

  def prepare(s):
    owner, _, (to, frm, count) = assign(s)
    cache = copy_rows(s.cache["model"], to, frm, count)
    return s.replace(cache={"model": cache, "owner": owner,
                            "active": ~s.ended[:, 0]})

  state = run_segment(
      state, inputs, shared, options, eos_count, stop_step=stop_step,
      slots=growth.size_of(state.cache["model"]) + growth.lag,
      fits=lambda s: jnp.max(assign(s)[1]) <= rows_m // pools,
      prepare=prepare)
  return state, state.ended[:, 0], state.cur_index, assign(state)[1]


@functools.partial(jax.jit, static_argnames=("slots", "growth"))
def _take(live_arrays, take, model_take, owner, *, slots, growth):
  """Sample rows `take` [C'] and model rows `model_take` [P'] (their cache
  resized to `slots`) of the live arrays; the sample rows' new model rows
  `owner` [C']."""
  state, row_ids, temperature, max_decode_len, eos_count = live_arrays
  pick = lambda x: jnp.take(x, take, axis=0)
  cache = jax.tree_util.tree_map(lambda x: jnp.take(x, model_take, axis=0),
                                 state.cache["model"])
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = state.replace(
      cur_index=pick(state.cur_index), sequences=pick(state.sequences),
      cache={"model": cache, "owner": owner,
             "active": ~pick(state.ended)[:, 0]},
      cur_token=pick(state.cur_token), ended=pick(state.ended),
      log_prob=pick(state.log_prob),
      chooser_state=jax.tree_util.tree_map(pick, state.chooser_state))
  return (state, pick(row_ids),
          pick(temperature) if jnp.ndim(temperature) else temperature,
          pick(max_decode_len), pick(eos_count))


def run_compacted(request: DecodeRequest, layout: RowLayout,
                  compaction: Compaction = Compaction(),
                  stats: Optional[dict] = None
                  ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """The compacted scheduler: the request's samples, decoded with ended
  rows dropped and prefixes shared.

  Args:
    request: a `DecodeRequest` whose step function takes a context
      (`DecodeRequest.context`), without callbacks, its cache's batch at
      axis 0.
    layout: what may be done with its rows (`RowLayout`).
    compaction: segments and granularity (`Compaction`).
    stats: a dict to fill with "segments" (compiled calls run),
      "row_steps" (model rows x loop steps decoded), "sample_row_steps"
      (sample rows x steps; the fused loop decodes R x the steps of the
      longest sample) and "segment_seconds" (wall time from each segment's
      call until its ended rows reach the host: the compiled loop's share
      of the call), or None.

  Returns:
    tokens int32 [B, N, L], log_probs float32 [B, N], codes float32 [B, N]:
    each input's samples by increasing log-probability, as
    `engine.run_fused(request)` returns them.
  """
  if not isinstance(compaction, Compaction):
    raise TypeError(f"compaction must be a Compaction; got "
                    f"{type(compaction).__name__}.")
  if not isinstance(layout, RowLayout):
    raise TypeError(f"layout must be a RowLayout; got "
                    f"{type(layout).__name__}.")
  fns, options = request.fns, request.options
  if fns.state_callback_fn is not None or fns.logit_callback_fn is not None:
    raise ValueError("the compacted scheduler runs no callbacks (its steps "
                     "see model rows, not sample rows): use the fused one.")
  if options.cache_offset != 0 or request.targets is not None:
    raise ValueError("the compacted scheduler samples, from a cache whose "
                     "batch is at axis 0.")
  if request.batch % layout.classes or (
      layout.groups > 1 and layout.groups != request.batch):
    raise ValueError(f"layout {layout} does not fit {request.batch} inputs.")
  batch, n = request.batch, request.num_decodes
  rows_total = batch * n
  growth = layout.growth
  small = rows_total < compaction.min_rows and not compaction.pad_small
  share = compaction.share_prefixes and not small
  groups = layout.groups
  per_class_pools = groups % layout.classes == 0
  pools = layout.pools if share else (groups if per_class_pools else 1)
  spread = groups // pools if per_class_pools else 1
  # Model rows per cross-attention group: at least min_rows in all, at most
  # the group's sample rows (padded up to min_rows with `pad_small`).
  least = -(-compaction.min_rows // groups)
  cap = rows_total // groups
  if compaction.pad_small:
    cap = max(cap, least)
  if share:
    per_pool = layout.classes // pools  # classes whose samples share a pool
    m = _round(-(-per_pool // spread), compaction.multiple, least, cap,
               compaction.geometric)
    rows_m = pools * spread * m
    inputs_per_class = batch // layout.classes
    klass = np.arange(rows_total) // n // inputs_per_class  # [C]
    owner = (klass // per_pool) * spread * m + klass % per_pool
    model_take = np.zeros(rows_m, np.int64)  # the first input of a pool
    model_take[::spread * m] = np.arange(0, batch, batch // pools)
    model_take[owner] = np.arange(rows_total) // n
  else:
    rows_m = rows_total if small else max(rows_total, compaction.min_rows)
    m = rows_m // groups
    owner = np.arange(rows_total)
    model_take = np.minimum(np.arange(rows_m), rows_total - 1) // n
  full = growth.size_of(request.cache)
  start = (0 if request.initial_index is None else
           int(np.max(np.asarray(request.initial_index))))
  slots = (full if small else
           min(full, -(-(start + 1 - growth.lag) // growth.slots) *
               growth.slots))
  state, row_ids, temperature, max_len, eos_count, codes, decode_key = _start(
      request, jnp.asarray(owner, jnp.int32),
      jnp.asarray(model_take, jnp.int32), options=options, slots=slots,
      growth=growth)
  live = _Live(state, row_ids, temperature, max_len, eos_count,
               np.arange(rows_total))
  sequences = np.zeros(state.sequences.shape, np.int32)
  log_probs = np.zeros((rows_total,), np.float32)
  least_rows = -(-compaction.min_rows // (layout.classes if share else pools))
  counts = {"segments": 0, "row_steps": 0, "sample_row_steps": 0,
            "segment_seconds": 0.0}
  step = 0
  while True:
    done = int(live.state.step)
    step = (np.iinfo(np.int32).max if small else
            max(step, done) + compaction.segment_steps)
    started = time.perf_counter()
    state, ended, cur_index, need = _segment(
        request.context, *live.arrays(), request.topk, request.topp,
        decode_key, jnp.int32(step), fns=fns, options=options, pools=pools,
        growth=growth)
    ended, cur_index = np.asarray(ended), np.asarray(cur_index)
    need = -(-int(np.asarray(need).max()) // spread)  # per group
    counts["segment_seconds"] += time.perf_counter() - started
    live.state = state
    steps = int(state.step) - done
    counts["segments"] += 1
    counts["row_steps"] += rows_m * steps
    counts["sample_row_steps"] += ended.size * steps
    if ended.all():
      break
    size = growth.size_of(state.cache["model"])
    grow = (int(cur_index[~ended].max()) - growth.lag >= size and
            size < full)
    slots = min(size + growth.slots, full) if grow else size
    take = keep_rows(ended, pools, compaction.multiple, least_rows,
                     compaction.geometric)
    if share:
      # Overflow (a step needs more model rows): twice what it needs.
      m_new = _round(2 * need if need > m else need, compaction.multiple,
                     least, cap, compaction.geometric)
    else:
      m_new = max(take.size, least * groups if compaction.pad_small
                  else 0) // groups
    if take.size == ended.size and slots == size and m_new == m:
      continue
    if take.size < ended.size:  # rows leave: keep their results
      sequences[live.rows] = np.asarray(state.sequences)
      log_probs[live.rows] = np.asarray(state.log_prob)
    model_take, owner = pack_model_rows(
        np.asarray(state.cache["owner"])[take], ended[take], pools,
        m_new * groups // pools)
    arrays = _take(live.arrays(), jnp.asarray(take, jnp.int32),
                   jnp.asarray(model_take, jnp.int32),
                   jnp.asarray(owner, jnp.int32), slots=slots, growth=growth)
    live = _Live(*arrays, live.rows[take])
    m, rows_m = m_new, m_new * groups
  sequences[live.rows] = np.asarray(live.state.sequences)
  log_probs[live.rows] = np.asarray(live.state.log_prob)
  if stats is not None:
    stats.update(counts)
  # [C, L + SPARE_SLOTS] -> [C, L]: drop BOS and the spare slots.
  decodes = jnp.asarray(sequences[:, 1:1 - SPARE_SLOTS])
  return sort_samples(decodes, jnp.asarray(log_probs), codes, batch, n)
