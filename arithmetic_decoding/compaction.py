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
as they are; with `Compaction.pad_samples`, a batch of independent rows,
such as a decoder-only model's, is padded past the rows it has,
`sample_rows`, so that its programs do not depend on N). The cache grows by
the model's `CacheGrowth.slots` as the rows advance. The rows keep their
ids, the loop keeps its step count and PRNG stream, and the model computes
every row the same way at any row count from `Compaction.min_rows` up, so
every sample, log-probability and code is the fused loop's, bit for bit, on
XLA:CPU (`tests/test_engine.py`, `tests/test_throughput.py`).

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
      of two (`geometric`) or to a multiple of this (or of more: see
      `per_octave`).
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
    per_octave: with `geometric` off and this k > 0, counts are rounded
      to a multiple of max(`multiple`, 2^j / k) where 2^j < n <= 2^(j+1):
      k counts per doubling, so at most about 1/k of the rows kept are
      ended ones, and the distinct counts up to R grow as k log2(R), not
      R / `multiple` (with `multiple` 16 and k 4: 64, 80, 96, 112, 128,
      160, 192, 224, 256, 320, ...). 0: multiples of `multiple`.
    pad_small: decodes of fewer than `min_rows` sample rows still run the
      model on at least `min_rows` rows, so that a sample's bits do not
      depend on how many rows it was decoded with (the LLM entry points:
      the same completions alone or in any batch).
    pad_samples: a batch of independent rows (`RowLayout.groups` 1)
      decodes `sample_rows` of its live rows, padded with ended rows of no
      request, not exactly as many as it has, and at most as many model
      rows: its programs then do not depend on the N of its requests (N =
      5, 6, 7 and 8 run the programs compiled for one of them; a server's
      batch, whatever N its requests ask), at the cost of steps over the
      padding (arithmetic sampling's rows cost next to nothing; ancestral
      sampling draws noise for each). The same samples where the model
      computes a row the same at those model-row counts (the LLM entry
      points: `llm.LLM_COMPACTION`); the T5 translator of one input does
      not at every count (its rows' last bits can move), so the default
      is off.
  """

  segment_steps: int = 8
  multiple: int = 8
  min_rows: int = 64
  share_prefixes: bool = True
  geometric: bool = True
  pad_small: bool = False
  pad_samples: bool = False
  per_octave: int = 0

  def __post_init__(self):
    for name in ("segment_steps", "multiple", "min_rows"):
      validation.check_int(f"Compaction.{name}", getattr(self, name),
                           minimum=1)
    validation.check_int("Compaction.per_octave", self.per_octave, minimum=0)
    if self.per_octave and self.geometric:
      raise ValueError("Compaction.per_octave needs geometric=False "
                       "(geometric counts are one per doubling already); "
                       f"got per_octave={self.per_octave}.")
    for name in ("share_prefixes", "geometric", "pad_small", "pad_samples"):
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
              min_per_group: int, geometric: bool = True,
              per_octave: int = 0) -> np.ndarray:
  """Which live rows the next segment decodes: per group of consecutive
  rows, those not ended first (in order), then ended ones up to a count
  that is the most of any group rounded up by `_round`, at least
  `min_per_group`, at most the group.

  >>> keep_rows(np.array([1, 0, 1, 1, 0, 0, 1, 1], bool), 2, 2, 1).tolist()
  [1, 0, 4, 5]
  >>> keep_rows(np.array([1, 1, 1, 0, 1, 1, 1, 1], bool), 2, 1, 1).tolist()
  [3, 4]
  """
  per_group = ended.size // groups
  ended = ended.reshape(groups, per_group)
  need = int((~ended).sum(axis=1).max())
  keep = _round(need, multiple, min_per_group, per_group, geometric,
                per_octave)
  # Stable: within a group, decoding rows first in their order, then ended.
  order = np.argsort(ended, axis=1, kind="stable")[:, :keep]
  return (order + per_group * np.arange(groups)[:, None]).reshape(-1)



def _round(n: int, multiple: int, least: int, most: int,
           geometric: bool = True, per_octave: int = 0) -> int:
  """The least `multiple` x 2^k >= n (`geometric`: few distinct row
  counts, so few compiled programs) or the least multiple of `multiple`
  >= n (with `per_octave` k > 0: of max(`multiple`, 2^j / k), where 2^j is
  the largest power of two below n), within [least, most].

  >>> [_round(n, 8, 8, 64) for n in (1, 9, 17, 33, 60)]
  [8, 16, 32, 64, 64]
  >>> [_round(n, 8, 8, 64, geometric=False) for n in (1, 9, 17, 33, 60)]
  [8, 16, 24, 40, 64]
  >>> [_round(n, 16, 0, 999, False, 4) for n in (65, 128, 129, 257, 449)]
  [80, 128, 160, 320, 512]
  """
  if geometric:
    size = multiple
    while size < n:
      size *= 2
  else:
    step = multiple
    if per_octave:
      below = 1 << max(0, (n - 1).bit_length() - 1)  # 2^j < n <= 2^(j+1)
      step = max(multiple, below // per_octave)
    size = -(-n // step) * step
  return min(most, max(least, size))


def sample_rows(n: int, multiple: int, least: int,
                geometric: bool = True, per_octave: int = 0) -> int:
  """How many sample rows a one-pool batch (`RowLayout.groups` 1) decodes
  when `n` of them are still decoding: below `multiple`, the least power
  of two >= n from min(8, multiple); from `multiple` on, `_round`'s
  count; at least `least`. Never capped by the rows the batch has: it is
  padded with ended rows up to the count, so the programs a batch needs
  are one per count, not one per sum of its requests' N.

  >>> [sample_rows(n, 64, 0, geometric=False) for n in (1, 8, 9, 40, 65)]
  [8, 8, 16, 64, 128]
  >>> [sample_rows(n, 8, 64) for n in (1, 9, 65)]
  [64, 64, 128]
  >>> [sample_rows(n, 16, 0, False, 4) for n in (1, 9, 17, 65, 130)]
  [8, 16, 32, 80, 160]
  """
  if n < multiple:
    size = min(8, multiple)
    while size < n:
      size *= 2
    size = min(size, multiple)
  else:
    size = _round(n, multiple, 0, 2 * n + multiple, geometric,  # uncapped
                  per_octave)
  return max(size, least)


def keep_rows_padded(ended: np.ndarray, multiple: int, least: int,
                     geometric: bool = True,
                     per_octave: int = 0) -> np.ndarray:
  """`keep_rows` of one group, its count `sample_rows` of the rows not
  ended: the rows not ended first (in order), then ended ones, then, past
  the C rows there are, index C for each padding row to add (an ended row
  that belongs to no request).

  >>> keep_rows_padded(np.array([1, 0, 0, 1, 0], bool), 4, 0).tolist()
  [1, 2, 4, 0]
  >>> keep_rows_padded(np.array([0, 1, 0], bool), 4, 0).tolist()
  [0, 2, 1, 3]
  """
  keep = sample_rows(int((~ended).sum()), multiple, least, geometric,
                     per_octave)
  order = np.argsort(ended, kind="stable")[:keep]
  return np.concatenate([order, np.full(keep - order.size, ended.size)])


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


@functools.partial(jax.jit, static_argnames=("options", "slots", "growth",
                                             "padding"))
def _start(request: DecodeRequest, owner, model_take, *, options, slots,
           growth, padding=0):
  """The live arrays of all C sample rows (then `padding` ended rows, on
  model row 0), their model rows `request.cache[model_take]` (the inputs
  whose caches they start from) over `slots` slots, each sample row on
  model row `owner`; and the C rows' codes and the request's key."""
  rows = request.rows(with_cache=False)
  cache = jax.tree_util.tree_map(lambda x: jnp.take(x, model_take, axis=0),
                                 request.cache)
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = initial_state(rows.inputs, None, rows.initial_index, rows.rng,
                        options.chooser.init_state(rows.codes))
  state = state.replace(cache={"model": cache, "owner": owner,
                               "active": ~state.ended[:, 0]})
  arrays = (state, rows.row_ids, rows.temperature,
            jnp.broadcast_to(rows.max_decode_len, rows.row_ids.shape),
            count_eos(state.sequences, options.eos_id))
  if padding:  # [C] -> [C + padding]: index C is a padding row
    count = rows.row_ids.shape[0]
    arrays = _pick_rows(arrays, jnp.minimum(
        jnp.arange(count + padding), count).astype(jnp.int32))
  return arrays + (rows.codes, rows.rng)


def _pick_rows(live_arrays, take):
  """Sample rows `take` [C'] of the live arrays (model rows as they are);
  an index past the C rows gives a padding row: ended, on model row 0,
  nothing decoded, temperature 1."""
  state, row_ids, temperature, max_decode_len, eos_count = live_arrays

  def pick(x, fill=0):  # [C, ...] -> [C', ...]
    return jnp.take(x, take, axis=0, mode="fill", fill_value=fill)

  ended = pick(state.ended, True)
  state = state.replace(
      cur_index=pick(state.cur_index), sequences=pick(state.sequences),
      cache=dict(state.cache, owner=pick(state.cache["owner"]),
                 active=~ended[:, 0]),
      cur_token=pick(state.cur_token), ended=ended,
      log_prob=pick(state.log_prob),
      chooser_state=jax.tree_util.tree_map(pick, state.chooser_state))
  return (state, pick(row_ids),
          pick(temperature, 1) if jnp.ndim(temperature) else temperature,
          pick(max_decode_len), pick(eos_count))


@functools.partial(jax.jit, static_argnames=("fns", "options", "pools",
                                             "growth"),
                   donate_argnames=("state",))
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
  """Sample rows `take` [C'] (an index past the C rows: a padding row,
  `_pick_rows`) and model rows `model_take` [P'] (their cache resized to
  `slots`) of the live arrays; the sample rows' new model rows `owner`
  [C']."""
  state, *rest = _pick_rows(live_arrays, take)
  cache = jax.tree_util.tree_map(lambda x: jnp.take(x, model_take, axis=0),
                                 state.cache["model"])
  if slots != growth.size_of(cache):
    cache = growth.resize(cache, slots)
  state = state.replace(cache=dict(state.cache, model=cache, owner=owner))
  return (state, *rest)


@functools.partial(jax.jit, static_argnames=("slots", "growth"))
def _merge(live_arrays, new_arrays, *, slots, growth):
  """The live arrays of two sets of rows, one after the other: sample rows
  concatenated (sequences padded to the longer), model rows concatenated
  (caches resized to `slots`), the second set's owners moved past the
  first set's model rows."""
  (a, a_ids, a_t, a_len, a_eos), (b, b_ids, b_t, b_len, b_eos) = (
      live_arrays, new_arrays)
  width = max(a.sequences.shape[1], b.sequences.shape[1])
  pad = lambda x: jnp.pad(x, ((0, 0), (0, width - x.shape[1])))
  size = lambda c: growth.resize(c, slots) if growth.size_of(c) != slots else c
  model_a, model_b = size(a.cache["model"]), size(b.cache["model"])
  cat = lambda *x: jnp.concatenate(x, axis=0)
  offset = jax.tree_util.tree_leaves(model_a)[0].shape[0]
  state = a.replace(
      cur_index=cat(a.cur_index, b.cur_index),
      sequences=cat(pad(a.sequences), pad(b.sequences)),
      cache={"model": jax.tree_util.tree_map(cat, model_a, model_b),
             "owner": cat(a.cache["owner"], b.cache["owner"] + offset),
             "active": cat(a.cache["active"], b.cache["active"])},
      cur_token=cat(a.cur_token, b.cur_token), ended=cat(a.ended, b.ended),
      log_prob=cat(a.log_prob, b.log_prob),
      chooser_state=jax.tree_util.tree_map(cat, a.chooser_state,
                                           b.chooser_state))
  # A scalar temperature is the program's (`join` checks it is the same).
  return (state, cat(a_ids, b_ids), cat(a_t, b_t) if jnp.ndim(a_t) else a_t,
          cat(a_len, b_len), cat(a_eos, b_eos))


@functools.partial(jax.jit, donate_argnums=0)
def _end(state, rows):
  """The state with sample rows `rows` [k] ended (their results stay)."""
  return state.replace(ended=state.ended.at[rows].set(True))


@dataclasses.dataclass
class _Part:
  """One request's rows in a running batch: global sample-row ids
  [start, start + rows), its B inputs x N decodes, the codes they started
  from, and the host copy of each row's results (filled as rows end)."""

  start: int
  batch: int
  num_decodes: int
  codes: np.ndarray
  sequences: np.ndarray
  log_probs: np.ndarray
  ended: np.ndarray

  @property
  def rows(self) -> int:
    return self.batch * self.num_decodes


class Compacted:
  """The compacted scheduler's running batch: the rows of one request, or
  of several requests that join between segments (continuous batching),
  stepped in host-driven segments that drop ended rows and share prefixes.

    batch = Compacted(request, layout)         # its rows, not yet stepped
    batch.join("b", other_request)             # pooled layouts: more rows
    while batch.keys():
      for key in batch.step():                 # one segment
        tokens, log_probs, codes = batch.pop(key)

A request that joins must be run by the same program: the same static
options but N (its chooser, stop ids, static cuts, noise policy), the same
step function and context, the same decode key, and a layout whose rows
are independent (`RowLayout.groups` 1). Its rows then draw exactly what
they would in a batch of their own (`choosers.Noise.POSITION`: a row's
noise is its own), and the model computes each row by itself
(`docs/engine.md`, batch invariance). Its prompt and token limit may be
longer than any request's in the batch: the cache grows to the longest
need, the model rows to all the batch's rows, and its samples share model
rows only with samples of the same input.

`run_compacted` runs one request to its end.
  """

  def __init__(self, request: DecodeRequest, layout: RowLayout,
               compaction: Compaction = Compaction(), key=0):
    if not isinstance(compaction, Compaction):
      raise TypeError(f"compaction must be a Compaction; got "
                      f"{type(compaction).__name__}.")
    if not isinstance(layout, RowLayout):
      raise TypeError(f"layout must be a RowLayout; got "
                      f"{type(layout).__name__}.")
    self._check(request, layout)
    self.layout, self.compaction = layout, compaction
    self.fns, self.context = request.fns, request.context
    self.options = dataclasses.replace(request.options, num_decodes=1)
    self.topk, self.topp = request.topk, request.topp
    self.temperature = request.temperature  # a scalar: every row's
    self.growth = layout.growth
    self.counts = {"segments": 0, "row_steps": 0, "sample_row_steps": 0,
                   "segment_seconds": 0.0}
    rows_total = request.batch * request.num_decodes
    self.small = (rows_total < compaction.min_rows and
                  not compaction.pad_small)
    self.share = compaction.share_prefixes and not self.small
    # One group of independent rows: sample rows padded to `sample_rows`
    # (ended rows of no request), so that a batch's programs do not depend
    # on the N of its requests.
    self.pad = (compaction.pad_samples and layout.groups == 1 and
                not self.small)
    groups = layout.groups
    per_class = groups % layout.classes == 0
    self.pools = layout.pools if self.share else (groups if per_class else 1)
    self.spread = groups // self.pools if per_class else 1
    # Model rows per cross-attention group: at least min_rows in all, at
    # most the group's sample rows (padded up to min_rows with pad_small).
    self.least = -(-compaction.min_rows // groups)
    self.least_rows = -(-compaction.min_rows // self.pools)
    self.rows_seen = rows_total // groups  # sample rows per group, all
    self.cap = self._cap()
    self.parts = {}
    self._stop = 0
    self._stalled = False
    self.live = None
    self.decode_key = None
    self.full = self.growth.size_of(request.cache)
    self._next_row = 0
    self._finished = []  # requests completed by `end`, for the next step
    self._add(key, request, first=True)

  @staticmethod
  def _check(request: DecodeRequest, layout: RowLayout):
    fns, options = request.fns, request.options
    if fns.state_callback_fn is not None or fns.logit_callback_fn is not None:
      raise ValueError("the compacted scheduler runs no callbacks (its "
                       "steps see model rows, not sample rows): use the "
                       "fused one.")
    if options.cache_offset != 0 or request.targets is not None:
      raise ValueError("the compacted scheduler samples, from a cache whose "
                       "batch is at axis 0.")
    if request.batch % layout.classes or (
        layout.groups > 1 and layout.groups != request.batch):
      raise ValueError(f"layout {layout} does not fit {request.batch} "
                       "inputs.")

  def keys(self):
    """The requests with rows in the batch."""
    return list(self.parts)

  @property
  def rows(self) -> int:
    """Sample rows in the batch (of all its requests, ended or not, and
    the padding rows of a one-group batch)."""
    return 0 if self.live is None else int(self.live.rows.size)

  def _model_rows(self, request: DecodeRequest, classes: int):
    """(rows_m, m, owner [C], model_take [rows_m]) of a request's rows on
    their own, its inputs in `classes` runs of equal inputs: each class's
    samples on one model row (sharing), else each sample on its own."""
    batch, n = request.batch, request.num_decodes
    rows_total = batch * n
    if self.share:
      per_pool = classes // self.pools
      m = self._per_group(-(-per_pool // self.spread))
      rows_m = self.pools * self.spread * m
      klass = np.arange(rows_total) // n // (batch // classes)
      owner = (klass // per_pool) * self.spread * m + klass % per_pool
      model_take = np.zeros(rows_m, np.int64)  # the first input of a pool
      model_take[::self.spread * m] = np.arange(0, batch, batch // self.pools)
      model_take[owner] = np.arange(rows_total) // n
    else:
      rows_m = (rows_total if self.small else
                self._sample_rows(rows_total) if self.pad else
                max(rows_total, self.compaction.min_rows))
      m = rows_m // self.layout.groups
      owner = np.arange(rows_total)
      model_take = np.minimum(np.arange(rows_m), rows_total - 1) // n
    return rows_m, m, owner, model_take

  def _per_group(self, need: int) -> int:
    c = self.compaction
    return _round(need, c.multiple, self.least, self.cap, c.geometric,
                  c.per_octave)

  def _cap(self) -> int:
    # Model rows per group at most: the group's sample rows (in a padded
    # batch, `sample_rows` of them; with pad_small at least min_rows).
    cap = self._sample_rows(self.rows_seen) if self.pad else self.rows_seen
    return max(cap, self.least) if self.compaction.pad_small else cap

  def _sample_rows(self, need: int) -> int:
    # Sample rows are model rows too when prefixes are not shared.
    c = self.compaction
    return sample_rows(need, c.multiple, 0 if self.share else
                       self.least_rows, c.geometric, c.per_octave)

  def _add(self, key, request: DecodeRequest, first: bool = False):
    # The first request's inputs form `layout.classes` runs of equal
    # inputs; a request that joins shares model rows only among the
    # samples of each of its inputs (its runs are not known).
    rows_m, m, owner, model_take = self._model_rows(
        request, self.layout.classes if first else request.batch)
    # The cache grows up to what the longest request needs (a request that
    # joins may have a longer prompt or more new tokens than the first).
    full = max(self.full, self.growth.size_of(request.cache))
    start = (0 if request.initial_index is None else
             int(np.max(np.asarray(request.initial_index))))
    slots = (full if self.small else
             min(full, -(-(start + 1 - self.growth.lag) //
                         self.growth.slots) * self.growth.slots))
    if self.live is not None:
      slots = max(slots, self.growth.size_of(
          self.live.state.cache["model"]))
    padding = (self._sample_rows(owner.size) - owner.size if self.pad
               else 0)
    state, row_ids, temperature, max_len, eos_count, codes, key_ = _start(
        request, jnp.asarray(owner, jnp.int32),
        jnp.asarray(model_take, jnp.int32), options=request.options,
        slots=slots, growth=self.growth, padding=padding)
    arrays = (state, row_ids, temperature, max_len, eos_count)
    if self.live is not None:
      arrays = _merge(self.live.arrays(), arrays, slots=slots,
                      growth=self.growth)
    # Nothing below fails: the request is in the batch from here on.
    self.full = full
    begin = self._next_row  # global sample-row ids are never reused
    self._next_row += owner.size
    # global sample-row ids; -1: a padding row
    rows = np.concatenate([np.arange(begin, begin + owner.size),
                           np.full(padding, -1)])
    width = state.sequences.shape[1]
    self.parts[key] = _Part(
        begin, request.batch, request.num_decodes, np.asarray(codes),
        np.zeros((owner.size, width), np.int32),
        np.zeros((owner.size,), np.float32), np.zeros(owner.size, bool))
    if not first:  # as many model rows as all its rows
      self.rows_seen += owner.size // self.layout.groups
      self.cap = self._cap()
    if self.live is None:
      self.decode_key = key_
      self.live = _Live(*arrays, rows)
      self.m, self.rows_m = m, rows_m
      return
    self.live = _Live(*arrays, np.concatenate([self.live.rows, rows]))
    self.rows_m += rows_m
    self._repack(np.asarray(self.live.state.ended[:, 0]), slots,
                 self._distinct_owners(), force=True)

  def join(self, key, request: DecodeRequest):
    """Adds a request's rows; they are stepped from the next segment on.

    Raises:
      ValueError: the key is in use, the layout's rows are not
        independent, or the request needs another program (see the class
        docstring).
    """
    if key in self.parts:
      raise ValueError(f"request key {key!r} is already in the batch.")
    if self.layout.groups != 1 or self.small:
      raise ValueError("only requests of independent rows (RowLayout."
                       "groups 1, at least min_rows model rows) can join.")
    self._check(request, dataclasses.replace(self.layout,
                                             classes=request.batch))
    same = (dataclasses.replace(request.options, num_decodes=1) ==
            self.options and request.fns == self.fns and
            request.topk is None and request.topp is None and
            self.topk is None and self.topp is None and
            _same_arrays(request.context, self.context))
    if same and not self.options.per_row_temperature:
      same = float(request.temperature) == float(self.temperature)
    if not same:
      raise ValueError("the request needs another program (options, step "
                       "function, context or a scalar temperature differ): "
                       "start another batch.")
    key_ = jax.random.split(request.rng)[1]
    if self.decode_key is not None and not bool(
        (jnp.asarray(key_) == jnp.asarray(self.decode_key)).all()):
      raise ValueError("the request's decode key differs from the batch's.")
    self._add(key, request)

  def _distinct_owners(self) -> int:
    owner = np.asarray(self.live.state.cache["owner"])
    ended = np.asarray(self.live.state.ended[:, 0])
    return max(1, np.unique(owner[~ended]).size)

  def step(self) -> list:
    """Runs one segment; returns the keys of the requests whose rows have
    all ended (`pop` their results)."""
    live, c = self.live, self.compaction
    if live is None:
      finished, self._finished = self._finished, []
      return finished
    done = int(live.state.step)
    self._stop = (np.iinfo(np.int32).max if self.small else
                  max(self._stop, done) + c.segment_steps)
    started = time.perf_counter()
    state, ended, cur_index, need = _segment(
        self.context, *live.arrays(), self.topk, self.topp, self.decode_key,
        jnp.int32(self._stop), fns=self.fns, options=self.options,
        pools=self.pools, growth=self.growth)
    ended, cur_index = np.asarray(ended), np.asarray(cur_index)
    need = -(-int(np.asarray(need).max()) // self.spread)  # per group
    self.counts["segment_seconds"] += time.perf_counter() - started
    live.state = state
    steps = int(state.step) - done
    if steps == 0 and self._stalled:
      # A scheduler defect: fail the batch's requests, never spin.
      raise RuntimeError("the compacted batch made no progress in two "
                         "segments.")
    self._stalled = steps == 0
    self.counts["segments"] += 1
    self.counts["row_steps"] += self.rows_m * steps
    self.counts["sample_row_steps"] += ended.size * steps
    finished, self._finished = self._finished + self._collect(ended), []
    if ended.all():
      self.live, self._stop = None, 0
      return finished
    size = self.growth.size_of(state.cache["model"])
    grow = (int(cur_index[~ended].max()) - self.growth.lag >= size and
            size < self.full)
    slots = min(size + self.growth.slots, self.full) if grow else size
    self._repack(ended, slots, need)
    return finished

  def _collect(self, ended: np.ndarray) -> list:
    """Copies the results of ended rows to their requests; the keys of the
    requests now complete."""
    sequences = log_probs = None
    finished = []
    for key, part in self.parts.items():
      mine = (self.live.rows >= part.start) & (
          self.live.rows < part.start + part.rows)
      new = mine & ended
      new[mine] &= ~part.ended[self.live.rows[mine] - part.start]
      if new.any():
        if sequences is None:
          sequences = np.asarray(self.live.state.sequences)
          log_probs = np.asarray(self.live.state.log_prob)
        at = self.live.rows[new] - part.start
        part.sequences[at] = sequences[new, :part.sequences.shape[1]]
        part.log_probs[at] = log_probs[new]
        part.ended[at] = True
        if part.ended.all():
          finished.append(key)
    return finished

  def _repack(self, ended, slots, need, force=False):
    """Keeps the rows still decoding (rounded up), lays the model rows out
    again for `need` model rows per group, and sizes the cache."""
    c = self.compaction
    live = self.live
    size = self.growth.size_of(live.state.cache["model"])
    groups = self.layout.groups
    if self.small:
      return
    if self.pad:
      take = keep_rows_padded(ended, c.multiple, 0 if self.share else
                              self.least_rows, c.geometric, c.per_octave)
    else:
      take = keep_rows(ended, self.pools, c.multiple, self.least_rows,
                       c.geometric, c.per_octave)
    if self.share:
      # Overflow (a step needs more model rows): twice what it needs.
      m_new = self._per_group(2 * need if need > self.m else need)
    else:
      m_new = max(take.size, self.least * groups if c.pad_small
                  else 0) // groups
    if (not force and take.size == ended.size and slots == size and
        m_new == self.m):
      return
    # index C (padding) reads these ends: an ended row of no request
    extend = lambda x, v: np.concatenate([x, [v]])
    model_take, owner = pack_model_rows(
        extend(np.asarray(live.state.cache["owner"]), 0)[take],
        extend(ended, True)[take], self.pools, m_new * groups // self.pools)
    arrays = _take(live.arrays(), jnp.asarray(take, jnp.int32),
                   jnp.asarray(model_take, jnp.int32),
                   jnp.asarray(owner, jnp.int32), slots=slots,
                   growth=self.growth)
    self.live = _Live(*arrays, extend(live.rows, -1)[take])
    self.m, self.rows_m = m_new, m_new * groups

  def end(self, key, rows=None):
    """Ends a request's rows (all, or its row indices `rows`: a client
    that disconnected, a stop string found): they stop drawing tokens and
    leave at the next segment; their results so far stay."""
    part = self.parts[key]
    if self.live is None:
      return
    picked = np.arange(part.rows) if rows is None else np.asarray(rows)
    at = np.flatnonzero(np.isin(self.live.rows, part.start + picked))
    if at.size:
      self.live.state = _end(self.live.state, jnp.asarray(at, jnp.int32))
      # Their results so far are taken now: a request that joins before
      # the next segment repacks the rows, and may drop ended ones.
      self._finished += self._collect(
          np.asarray(self.live.state.ended[:, 0]))

  def progress(self, key):
    """(tokens so far [C, L] of a request's rows (BOS dropped, 0 after an
    end), ended [C]): what a streaming client has been sent can be read
    here between segments."""
    part = self.parts[key]
    sequences = part.sequences.copy()
    ended = part.ended.copy()
    if self.live is not None:
      mine = np.flatnonzero((self.live.rows >= part.start) &
                            (self.live.rows < part.start + part.rows))
      live_rows = self.live.rows[mine] - part.start
      open_ = ~ended[live_rows]
      current = np.asarray(self.live.state.sequences)[mine]
      sequences[live_rows[open_]] = current[open_, :sequences.shape[1]]
    return sequences[:, 1:1 - SPARE_SLOTS], ended

  def pop(self, key, sort: bool = True
          ) -> Tuple[jax.Array, jax.Array, jax.Array]:
    """A finished request's (tokens [B, N, L], log_probs [B, N], codes
    [B, N]), each input's samples by increasing log-probability, as
    `engine.run_fused` returns them (or in sample order j, not `sort`);
    the request leaves the batch."""
    part = self.parts.pop(key)
    # [C, L + SPARE_SLOTS] -> [C, L]: drop BOS and the spare slots.
    decodes = jnp.asarray(part.sequences[:, 1:1 - SPARE_SLOTS])
    if not sort:  # [C, ...] -> [B, N, ...]
      shape = (part.batch, part.num_decodes)
      return (decodes.reshape(shape + decodes.shape[-1:]),
              jnp.asarray(part.log_probs).reshape(shape),
              jnp.asarray(part.codes).reshape(shape))
    return sort_samples(decodes, jnp.asarray(part.log_probs),
                        jnp.asarray(part.codes), part.batch,
                        part.num_decodes)


def _same_arrays(a, b) -> bool:
  """The same pytree of the same array objects (a shared context)."""
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  return (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
          and all(x is y for x, y in zip(la, lb)))


def run_compacted(request: DecodeRequest, layout: RowLayout,
                  compaction: Compaction = Compaction(),
                  stats: Optional[dict] = None
                  ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """The compacted scheduler: the request's samples, decoded with ended
  rows dropped and prefixes shared (one `Compacted` batch, run to its
  end).

  Args:
    request: a `DecodeRequest` whose step function takes a context
      (`DecodeRequest.context`), without callbacks, its cache's batch at
      axis 0.
    layout: what may be done with its rows (`RowLayout`).
    compaction: segments and granularity (`Compaction`).
    stats: a dict to fill with "segments" (compiled calls run),
      "row_steps" (model rows x loop steps decoded), "sample_row_steps"
      (sample rows x steps, padding rows included; the fused loop
      decodes R x the steps of the longest sample) and "segment_seconds"
      (wall time from each segment's call until its ended rows reach the
      host: the compiled loop's share of the call), or None.

  Returns:
    tokens int32 [B, N, L], log_probs float32 [B, N], codes float32 [B, N]:
    each input's samples by increasing log-probability, as
    `engine.run_fused(request)` returns them.
  """
  batch = Compacted(request, layout, compaction)
  while batch.keys():
    batch.step()
    if batch.live is None:
      break
  if stats is not None:
    stats.update(batch.counts)
  return batch.pop(0)
