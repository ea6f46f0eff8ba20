"""T5X's sampling loop, step for step, with a pluggable token chooser.

The same teacher forcing of prompt tokens, the same end-of-sequence rule (a
row ends when its count of `eos_id` rises above the count in its prompt, or
at its length limit), the same padding after EOS, the same log-probability
accounting and callbacks as T5X's `temperature_sample`. What a step draws is
the chooser's business (`choosers`): arithmetic sampling decodes the token
from the row's code, ancestral sampling from a key, encoding forces a given
sequence.

Everything here is flat: R rows (R = B*N, batch-major; row b*N + j is
sample j of input b), L positions.

Example 2 of T5X's docstring (early stop; a..g are decoded tokens, EOS = 1):

  inputs           [[0, 5, 1, 0, 0, 0, 0],      # prompt "5 1", then decode
                    [0, 8, 0, 0, 0, 0, 0]]
  sequences (loop) [[0, 5, 1, a, b, c=1, 0, 0, _],
                    [0, 8, d, e, f=1, 0, 0, 0, _]]
  decodes          [[5, 1, a, b, 1, 0, 0],
                    [8, d, e, 1, 0, 0, 0]]

The prompt's own EOS does not end row 0 (it was already counted); the first
*decoded* EOS does, and everything after it is padding 0.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Tuple, Union

import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding.choosers import (Arithmetic, Chooser, Distribution,
                                          Noise, Step, choose_token)
from arithmetic_decoding.protocol import (SPARE_SLOTS, DecodingState,
                                          SamplingLoopState, call_model,
                                          decoding_state)

PyTree = Any
TokensToLogits = Callable[[DecodingState], Tuple[jax.Array, PyTree]]
StateCallbackFn = Callable[[SamplingLoopState], SamplingLoopState]
LogitCallbackFn = Callable[[jax.Array, SamplingLoopState], jax.Array]


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """Static configuration of one decode. Every field is a recompile trigger.

  Attributes:
    eos_id: end-of-sequence token id, or a tuple of ids any of which ends
      a row (an LLM's EOS and end-of-turn tokens).
    num_decodes: samples per input, N.
    chooser: how each token is picked (`choosers.Arithmetic`, `Ancestral`,
      `TeacherForced`).
    cache_offset: axis of the batch in cache arrays (1 for scanned layers).
    rescale_log_probs: report log-probs under the temperature/top-k/top-p
      transform (True) or under the raw logits (False).
    topk: the top-k cut when known at trace time (0 = off); None when topk is
      a traced array passed alongside.
    topp: likewise for top-p (0.0 = off; None = traced).
    per_row_temperature: temperature is a [batch] array (each row may be
      greedy or not); otherwise one scalar for all rows.
    expand_cache_index: decoding starts from `initial_index`, so the cache's
      `cache_index` entries are per-row and get expanded.
    noise: where each row's random numbers come from (`choosers.Noise`):
      the loop's per-step key (T5X's stream) or the row's own position.
  """

  eos_id: Union[int, Tuple[int, ...]]
  num_decodes: int
  chooser: Chooser = Arithmetic()
  cache_offset: int = 0
  rescale_log_probs: bool = True
  topk: Optional[int] = 0
  topp: Optional[float] = 0.0
  per_row_temperature: bool = False
  expand_cache_index: bool = False
  noise: Noise = Noise.LOOP_STEP

  def distribution(self, temperature: jax.Array,
                   topk: Optional[jax.Array] = None,
                   topp: Optional[jax.Array] = None) -> Distribution:
    """The step distribution: static top-k/top-p, or the traced ones given."""
    return Distribution(temperature,
                        self.topk if self.topk is not None else topk,
                        self.topp if self.topp is not None else topp)


@dataclasses.dataclass(frozen=True)
class CacheGrowth:
  """Decode over a cache that grows as the rows advance (static).

  A step's attention reads every slot of the cache, so a 160-slot cache
  costs 160 slots a step from the first token on. With a `CacheGrowth` the
  loop runs in segments: it starts with the fewest multiples of `slots`
  that hold the prompts, runs until all rows end or a row that is still
  decoding reaches the end of the cache, then pads the cache by `slots`
  more (`resize`) and goes on, up to the cache's full size. The slots not
  yet written are masked out of attention, so a model whose attention
  sums exactly-zero weights of masked slots computes the same logits, bit
  for bit, at any cache size. On XLA:CPU the encoder-decoder does for
  multiples of 32 slots and 32 rows or more (fewer rows get a different
  dot kernel at small sizes), hence `min_rows`; `tests/test_throughput.py`
  checks it.

  Example: a 160-slot cache with `slots=32` decodes steps 0-31 over 32
  slots, 32-63 over 64, ..., stopping early when every row has ended.

  Attributes:
    slots: slots added per segment (and the first segment's size).
    resize: (cache, slots) -> the cache with that many slots, its written
      entries kept and new ones zero (the model's `resize_cache`).
    size_of: cache -> its number of slots (the full size to grow to).
    min_rows: decodes of fewer rows use the full cache at every step.
    lag: a row at loop index i writes cache slot i - lag (0 for T5X's
      encoder-decoder; 1 for a decoder-only model, whose slot 0 of the
      loop is the BOS placeholder, not a model position).
  """

  slots: int
  resize: Callable[[PyTree, int], PyTree]
  size_of: Callable[[PyTree], int]
  min_rows: int = 0
  lag: int = 0

  def __post_init__(self):
    if (isinstance(self.slots, bool) or not isinstance(self.slots, int)
        or self.slots < 1):
      raise ValueError(f"CacheGrowth.slots must be an int >= 1; got "
                       f"{self.slots!r}.")


def cache_slots(cache: PyTree, axis: int = -1) -> int:
  """The number of slots of a cache whose leaves all carry the slots at
  `axis` (-1 for a time-minor cache, 1 for T5X's layout): the first
  leaf's size there."""
  return jax.tree_util.tree_leaves(cache)[0].shape[axis]


def resize_cache(cache: PyTree, slots: int, axis: int = -1) -> PyTree:
  """The cache with `slots` slots along `axis` of every leaf: cut, or
  padded with zeros (empty slots).

  >>> cache = {"layer_0": {"key": jnp.ones((2, 3, 4))}}
  >>> cache_slots(resize_cache(cache, 8)), cache_slots(resize_cache(cache, 2))
  (8, 2)
  >>> resize_cache(cache, 6)["layer_0"]["key"][0, 0].tolist()
  [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
  """
  def resize(x):
    ax = axis % x.ndim
    have = x.shape[ax]
    if slots <= have:
      return jax.lax.slice_in_dim(x, 0, slots, axis=ax)
    pad = [(0, 0)] * x.ndim
    pad[ax] = (0, slots - have)
    return jnp.pad(x, pad)
  return jax.tree_util.tree_map(resize, cache)


@dataclasses.dataclass(frozen=True)
class ModelFns:
  """The model side of a decode (static: compiled in, keyed by identity).

  Attributes:
    tokens_to_logits: (DecodingState) -> (logits [R, V], new cache).
    state_callback_fn: (SamplingLoopState) -> SamplingLoopState, run at the
      start of every step and once after the loop, or None.
    logit_callback_fn: (logits [R, V], SamplingLoopState) -> logits, or None.
    cache_growth: decode in segments over a growing cache (`CacheGrowth`),
      or None (the cache as given, every step).
    shared_logits: tokens_to_logits returns logits [P, V] that rows share
      (any P; the chooser knows which row reads which, as
      `compaction`'s prefix sharing does) instead of [R, V].
  """

  tokens_to_logits: TokensToLogits
  state_callback_fn: Optional[StateCallbackFn] = None
  logit_callback_fn: Optional[LogitCallbackFn] = None
  cache_growth: Optional[CacheGrowth] = None
  shared_logits: bool = False


@dataclasses.dataclass(frozen=True)
class LoopInputs:
  """What each step needs besides the state (arrays; built inside a trace).

  Attributes:
    dist: the step distribution (temperature [] or [R], top-k, top-p).
    row_ids: int32 [R]; each row's id: it selects the row's noise
      (`choosers.Noise`).
    max_decode_len: int32 [] or [R]; each row's length limit.
    decode_key: the decode's key, the same at every step (the rows' noise
      under `Noise.POSITION`).
    targets: int32 [R, L]; sequences to force (encoding), else None.
  """

  dist: Distribution
  row_ids: jax.Array
  max_decode_len: Union[jax.Array, int]
  decode_key: Optional[jax.Array] = None
  targets: Optional[jax.Array] = None


def initial_state(inputs: jax.Array, cache: PyTree,
                  initial_index: Optional[jax.Array], rng: jax.Array,
                  chooser_state: PyTree) -> SamplingLoopState:
  """The loop state before the first step; inputs [R, L], the chooser's
  state (`Chooser.init_state`)."""
  rows = inputs.shape[0]
  # [R, L] -> [R, L + SPARE_SLOTS]
  sequences = jnp.pad(inputs, ((0, 0), (0, SPARE_SLOTS)))
  if initial_index is None:
    cur_index = jnp.zeros((rows,), jnp.int32)
    cur_token = jnp.zeros((rows, 1), jnp.int32)
  else:
    cur_index = initial_index
    # [R, L + 2] -> [R, 1]: the prompt token at the initial index.
    cur_token = jnp.take_along_axis(sequences, cur_index[:, None], axis=1)
  zeros = jnp.zeros((rows,), jnp.float32)
  return SamplingLoopState(
      step=jnp.zeros((), jnp.int32), cur_index=cur_index, sequences=sequences,
      cache=cache, cur_token=cur_token, ended=jnp.zeros((rows, 1), bool),
      rng=rng, log_prob=zeros, chooser_state=chooser_state)


def is_eos(tokens: jax.Array, eos_id) -> jax.Array:
  """bool, tokens' shape: the token is `eos_id` (an int or a tuple of ids).

  >>> is_eos(jnp.array([0, 2, 5, 7]), (2, 7)).tolist()
  [False, True, False, True]
  """
  ids = eos_id if isinstance(eos_id, tuple) else (eos_id,)
  return functools.reduce(jnp.logical_or, [tokens == e for e in ids])


def count_eos(sequences: jax.Array, eos_id) -> jax.Array:
  """int [R]: tokens of each row of sequences [R, L] that are `eos_id`,
  an id 0 excepted (0 is also the padding: a drawn 0 ends its row through
  `is_eos` on the drawn token instead).

  >>> count_eos(jnp.array([[0, 2, 5, 2, 7]]), (2, 7, 0)).tolist()
  [3]
  """
  ids = eos_id if isinstance(eos_id, tuple) else (eos_id,)
  ids = tuple(e for e in ids if e != 0)
  if not ids:
    return jnp.zeros(sequences.shape[:1], jnp.int32)
  return jnp.sum(is_eos(sequences, ids), axis=1)


def raw_log_prob(raw: jax.Array, token: jax.Array) -> jax.Array:
  """log-softmax of the untransformed logits [R, V] at `token` [R]."""
  picked = jnp.take_along_axis(raw, jnp.maximum(token, 0)[:, None], axis=-1)
  return picked[:, 0] - jax.nn.logsumexp(raw, axis=-1)


def loop_fns(inputs: LoopInputs, fns: ModelFns, options: DecodeOptions,
             initial_eos_count: jax.Array,
             stop_together: Optional[str] = None):
  """(cond_fn, body_fn) of the decode loop: cond_fn(state) is "some row
  has not ended", body_fn(state) is one step of every row.

  `initial_eos_count` int [R] is `count_eos` of the rows' sequences before
  the first step (EOS already in a prompt does not end its row).

  `stop_together`: a mesh axis the rows are split over, manually (inside
  `shard_map`), when the step's model has collectives over another axis:
  every shard then runs the same number of steps (until no row of any
  shard is decoding), because a collective that some devices reach and
  others do not, having left their loop, never completes. None: the loop
  stops when its own rows have ended.
  """

  def cond_fn(state: SamplingLoopState) -> jax.Array:
    decoding = ~jnp.all(state.ended)
    if stop_together is not None:
      # Every shard of the axis steps until the last row of all has ended.
      decoding = lax.psum(decoding.astype(jnp.int32), stop_together) > 0
    return decoding

  def body_fn(state: SamplingLoopState) -> SamplingLoopState:
    slots = jnp.arange(state.sequences.shape[1], dtype=jnp.int32)[None, :]
    if fns.state_callback_fn is not None:
      state = fns.state_callback_fn(state)
    step_rng, next_rng = jax.random.split(state.rng)
    logits, cache = call_model(fns.tokens_to_logits, decoding_state(state),
                               any_rows=fns.shared_logits)
    if fns.logit_callback_fn is not None:
      logits = fns.logit_callback_fn(logits, state)
    if isinstance(options.topk, int) and options.topk > logits.shape[-1]:
      raise ValueError(f"topk must be <= the vocabulary size "
                       f"{logits.shape[-1]}; got {options.topk}.")

    # A row past its limit keeps writing into the last spare slot.
    i = jnp.minimum(state.cur_index, inputs.max_decode_len)  # [R]
    at_next = slots == (i + 1)[:, None]  # [R, L + 2]
    # [R, L + 2] -> [R]: the prompt token to force, or 0 past the prompt.
    prompt_token = jnp.sum(jnp.where(at_next, state.sequences, 0), axis=1)
    in_prompt = prompt_token != 0
    ended = state.ended[:, 0]
    active = ~in_prompt & ~ended  # [R]: rows that draw a token now

    raw = logits.astype(jnp.float32)  # [R, V], whatever the model's dtype
    keys = options.noise.row_keys(step_rng, inputs.decode_key,
                                  inputs.row_ids, i)  # [R] keys
    choice = choose_token(options.chooser, raw, state,
                          Step(keys, i, inputs.targets), inputs.dist,
                          options.per_row_temperature)
    choice_log_prob = (choice.log_prob if options.rescale_log_probs else
                       raw_log_prob(raw, choice.token))
    token = jnp.where(in_prompt, prompt_token, choice.token)
    failed = active & ~choice.valid
    log_prob = state.log_prob + jnp.where(active, choice_log_prob, 0.0)
    keep = lambda new, old: jnp.where(active, new, old)

    written = jnp.where(ended | failed, 0, token).astype(jnp.int32)  # [R]
    sequences = jnp.where(at_next, written[:, None], state.sequences)
    # Counted over the whole row, as T5X does: a state callback may write EOS
    # anywhere (T5X's own example appends one after a given token).
    eos_count = count_eos(sequences, options.eos_id)  # [R]
    now_ended = (ended | (eos_count > initial_eos_count) |
                 (active & is_eos(choice.token, options.eos_id)) |
                 (i >= inputs.max_decode_len - 1) | failed)
    return SamplingLoopState(
        step=state.step + 1, cur_index=i + 1, sequences=sequences,
        cache=cache, cur_token=written[:, None], ended=now_ended[:, None],
        rng=next_rng, log_prob=jnp.where(failed, jnp.nan, log_prob),
        chooser_state=jax.tree_util.tree_map(keep, choice.state,
                                             state.chooser_state))

  return cond_fn, body_fn


def run_loop(state: SamplingLoopState, inputs: LoopInputs, fns: ModelFns,
             options: DecodeOptions,
             stop_together: Optional[str] = None) -> SamplingLoopState:
  """Steps every row until all have ended; returns the final state
  (`stop_together`: see `loop_fns`)."""
  cond_fn, body_fn = loop_fns(inputs, fns, options,
                              count_eos(state.sequences, options.eos_id),
                              stop_together)
  growth = fns.cache_growth
  if growth is None or state.cur_index.shape[0] < growth.min_rows:
    final = lax.while_loop(cond_fn, body_fn, state)
  elif options.expand_cache_index:
    raise ValueError("cache_growth decodes from an empty cache; it cannot "
                     "continue a prefilled one (initial_index).")
  else:
    final = _grow_and_run(state, cond_fn, body_fn, fns.cache_growth)
  if fns.state_callback_fn is not None:
    final = fns.state_callback_fn(final)
  return final


def within_cache(state: SamplingLoopState, slots) -> jax.Array:
  """bool []: no row that is still decoding is at loop index `slots` or
  beyond at the next step (a segment over a growing cache stops before a
  row would write past it; see `CacheGrowth.lag`)."""
  # [R] -> []: the furthest slot a row still decoding writes next.
  furthest = jnp.max(jnp.where(state.ended[:, 0], -1, state.cur_index))
  return furthest < slots


def _grow_and_run(state: SamplingLoopState, cond_fn, body_fn,
                  growth: CacheGrowth) -> SamplingLoopState:
  """`lax.while_loop(cond_fn, body_fn, state)` in segments over a growing
  cache (`CacheGrowth`), up to the cache's full size. Decoding starts at
  slot 0 (no prefilled cache), so a segment's cache holds all that was
  written before it."""
  full = growth.size_of(state.cache)
  for size in list(range(growth.slots, full, growth.slots)) + [full]:
    state = lax.while_loop(
        lambda s, size=size: cond_fn(s) & within_cache(s, size + growth.lag),
        body_fn,
        state.replace(cache=growth.resize(state.cache, size)))
  return state


def run_segment(state: SamplingLoopState, inputs: LoopInputs, fns: ModelFns,
                options: DecodeOptions, eos_count: jax.Array, *,
                stop_step: jax.Array, slots,
                fits: Optional[Callable[[SamplingLoopState], jax.Array]] = None,
                prepare: Optional[Callable[[SamplingLoopState],
                                           SamplingLoopState]] = None
                ) -> SamplingLoopState:
  """The loop from `state` until every row has ended, or the loop reaches
  step `stop_step`, or a row still decoding would write past `slots`, or
  `fits(state)` is False before a step (one host-driven segment of
  `compaction`). `prepare(state)` runs before each step's body (the
  scheduler's bookkeeping); `eos_count` int [R] as for `loop_fns`."""
  cond_fn, body_fn = loop_fns(inputs, fns, options, eos_count)

  def cond(s):
    go = cond_fn(s) & (s.step < stop_step) & within_cache(s, slots)
    return go if fits is None else go & fits(s)

  body = body_fn if prepare is None else (lambda s: body_fn(prepare(s)))
  return lax.while_loop(cond, body, state)
