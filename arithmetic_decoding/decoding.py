"""`arithmetic_sample`: T5X's `temperature_sample`, drawing with codes.

The loop is T5X's, step for step: the same teacher forcing of prompt tokens,
the same end-of-sequence rule (a row ends when its count of `eos_id` rises
above the count in its prompt, or at its length limit), the same padding after
EOS, the same log-probability accounting and callbacks. The only difference is
how a token is drawn: instead of `jax.random.categorical(key, logits)`, each
row carries a code in [0, 1) and `categorical.arithmetic_step` decodes one
token from it, leaving a residual code for the next step.

Shapes: B inputs, N = num_decodes samples each, L = inputs.shape[1]. Inside
the loop everything is flat, [B*N, ...], batch-major (row b*N + j is sample j
of input b); results are [B, N, L] and [B, N], sorted by increasing log-prob.

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
from typing import Any, Callable, Mapping, Optional, Tuple, Union

import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding import validation
from arithmetic_decoding.categorical import (CODE_RESOLUTION, arithmetic_step,
                                             refresh_residual, token_interval)
from arithmetic_decoding.codes import CodeScheme, SchemeLike, as_code_scheme, make_codes
from arithmetic_decoding.protocol import (DecodingState, SamplingLoopState,
                                          call_model, expand_cache, expand_rows)
from arithmetic_decoding.transforms import MIN_TEMPERATURE, scale, truncate

PyTree = Any
TokensToLogits = Callable[[DecodingState], Tuple[jax.Array, PyTree]]
StateCallbackFn = Callable[[SamplingLoopState], SamplingLoopState]
LogitCallbackFn = Callable[[jax.Array, SamplingLoopState], jax.Array]

# Spare slots appended to `sequences` inside the loop (see SamplingLoopState).
_SPARE = 2


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
  """Static configuration of one decode. Every field is a recompile trigger.

  Attributes:
    eos_id: end-of-sequence token id.
    num_decodes: samples per input, N.
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
    code_scheme: how codes are made when none are given.
    code_resolution: how deep a code decides its sample. Once the tokens
      decoded from a code have probability below it, the code is spent and
      the row continues from a fresh uniform drawn from its own key (exact in
      distribution: the unused part of a uniform code is itself uniform and
      independent of the tokens so far). 2**-22 (default) is float32's
      limit. Larger values make samples robust to tiny differences in the
      logits (a difference d moves a code's sample once its prefix has
      probability ~d), e.g. across compilers and shardings; 1/N keeps the
      lattice's stratification, since below that width no two of an
      input's N lattice codes share an interval.
    ancestral: draw each token with `jax.random.categorical` from a per-row
      key instead of from the row's code (ordinary ancestral sampling, for
      comparison; the codes are then carried but unused).
  """

  eos_id: int
  num_decodes: int
  cache_offset: int = 0
  rescale_log_probs: bool = True
  topk: Optional[int] = 0
  topp: Optional[float] = 0.0
  per_row_temperature: bool = False
  expand_cache_index: bool = False
  code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE
  code_resolution: float = CODE_RESOLUTION
  ancestral: bool = False


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Distribution:
  """The traced knobs of the per-step distribution.

  Attributes:
    temperature: float32 [] or [B*N].
    topk: int32 [] when traced, else None (the static value is in options).
    topp: float32 [] when traced, else None.
  """

  temperature: jax.Array
  topk: Optional[jax.Array]
  topp: Optional[jax.Array]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Choice:
  """What a chooser returns for one step.

  Attributes:
    token: int32 [B*N]; the token for rows past their prompt.
    log_prob: float32 [B*N]; its log-probability as reported (raw logits if
      not `rescale_log_probs`).
    codes: float32 [B*N]; the updated `SamplingLoopState.codes`.
    valid: bool [B*N]; False where the logits admit no sample (NaN/inf).
    code_log_width: float32 [B*N]; the updated
      `SamplingLoopState.code_log_width`.
  """

  token: jax.Array
  log_prob: jax.Array
  codes: jax.Array
  valid: jax.Array
  code_log_width: jax.Array


def _transformed(raw: jax.Array, options: DecodeOptions,
                 dist: Distribution) -> jax.Array:
  """[B*N, V] float32 logits -> temperature-scaled, top-k/top-p-masked."""
  topk = options.topk if options.topk is not None else dist.topk
  topp = options.topp if options.topp is not None else dist.topp
  temperature = jnp.broadcast_to(dist.temperature, raw.shape[:1])  # [B*N]
  return truncate(scale(raw, temperature), topk, topp)


def _greedy_or_sample(options: DecodeOptions, temperature: jax.Array,
                      sample: Callable[[], Tuple], greedy: Callable[[], Tuple]):
  """Picks the greedy or the sampling branch per row (or once, for a scalar).

  A scalar temperature runs one branch (lax.cond, like T5X); a per-row
  temperature computes both and selects per row.
  """
  if not options.per_row_temperature:
    return lax.cond(temperature > MIN_TEMPERATURE, sample, greedy)
  is_greedy = temperature <= MIN_TEMPERATURE  # [B*N]
  return jax.tree_util.tree_map(
      lambda g, s: jnp.where(is_greedy, g, s), greedy(), sample())


def row_keys(key: jax.Array, row_ids: jax.Array) -> jax.Array:
  """One PRNG key per row: fold_in(key, global row index).

  A row's randomness then depends on its global index only, never on how
  the rows are batched or sharded (as in levanter's engine).
  """
  # [] key, [R] -> [R] keys
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row_ids)


def _row_uniform(key: jax.Array, row_ids: jax.Array) -> jax.Array:
  """float32 [R] uniform in [0, 1), one per row (see `row_keys`)."""
  return jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(
      row_keys(key, row_ids))


def _choose_by_code(logits: jax.Array, state: SamplingLoopState, key: jax.Array,
                    row_ids: jax.Array, options: DecodeOptions,
                    dist: Distribution) -> Choice:
  """Decodes one token per row from its residual code."""
  codes = state.codes
  # [B*N, V] in float32, whatever the model's dtype.
  raw = logits.astype(jnp.float32)

  def sample():
    # [B*N, V] -> [B*N]
    step = arithmetic_step(_transformed(raw, options, dist), codes)
    fresh = _row_uniform(key, row_ids)
    residual = refresh_residual(step.residual, step.log_prob, fresh)
    log_width = state.code_log_width + step.log_prob
    # A spent code is replaced by the row's fresh uniform.
    spent = log_width < jnp.log(jnp.float32(options.code_resolution))
    return (step.token, step.log_prob, jnp.where(spent, fresh, residual),
            step.valid, jnp.where(spent, 0.0, log_width))

  def greedy():
    token = jnp.argmax(raw, axis=-1).astype(jnp.int32)
    valid = jnp.isfinite(jnp.max(raw, axis=-1))
    # The argmax owns all of [0, 1): the code passes through unchanged.
    return (token, jnp.zeros_like(codes), codes, valid,
            state.code_log_width)

  token, log_prob, residual, valid, log_width = _greedy_or_sample(
      options, dist.temperature, sample, greedy)
  return _reported(raw, options,
                   Choice(token, log_prob, residual, valid, log_width))


def _choose_by_key(logits: jax.Array, state: SamplingLoopState, key: jax.Array,
                   row_ids: jax.Array, options: DecodeOptions,
                   dist: Distribution) -> Choice:
  """Ancestral sampling: each row draws from its own key (see `row_keys`)."""
  raw = logits.astype(jnp.float32)

  def sample():
    x = _transformed(raw, options, dist)  # [B*N, V]
    # NaN anywhere, +inf, or nothing finite: no distribution to draw from.
    top = jnp.max(x, axis=-1)
    valid = jnp.isfinite(top) & ~jnp.any(jnp.isnan(x), axis=-1)
    safe = jnp.where(valid[:, None], x, 0.0)
    # [R] keys, [R, V] -> [R]
    token = jax.vmap(jax.random.categorical)(row_keys(key, row_ids), safe)
    token = token.astype(jnp.int32)
    log_probs = jax.nn.log_softmax(safe, axis=-1)
    log_prob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    return (jnp.where(valid, token, -1), jnp.where(valid, log_prob, jnp.nan),
            valid)

  def greedy():
    token = jnp.argmax(raw, axis=-1).astype(jnp.int32)
    return token, jnp.zeros(raw.shape[:1], jnp.float32), jnp.isfinite(
        jnp.max(raw, axis=-1))

  token, log_prob, valid = _greedy_or_sample(options, dist.temperature, sample,
                                             greedy)
  return _reported(raw, options, Choice(token, log_prob, state.codes, valid,
                                        state.code_log_width))


def _reported(raw: jax.Array, options: DecodeOptions, choice: Choice) -> Choice:
  """The log-prob to report: under the transform, or under the raw logits."""
  if options.rescale_log_probs:
    return choice
  # [B*N, V] -> [B*N]: log-prob under the untransformed logits.
  token = jnp.maximum(choice.token, 0)[:, None]
  picked = jnp.take_along_axis(raw, token, axis=-1)[:, 0]
  return dataclasses.replace(choice,
                             log_prob=picked - jax.nn.logsumexp(raw, axis=-1))


def _choose_target(logits: jax.Array, state: SamplingLoopState, target: jax.Array,
                   options: DecodeOptions, dist: Distribution) -> Choice:
  """Forces `target` [B*N]; moves each prefix's interval lower end to it."""
  raw = logits.astype(jnp.float32)

  def sample():
    # The interval's width is exp(log_prob); log_prob is the accurate form.
    iv = token_interval(_transformed(raw, options, dist), target)
    return iv.low, iv.log_prob, iv.valid

  def greedy():
    # The argmax owns all of [0, 1); every other token owns nothing.
    is_argmax = target == jnp.argmax(raw, axis=-1)
    valid = jnp.isfinite(jnp.max(raw, axis=-1))
    return (jnp.zeros(raw.shape[:1], jnp.float32),
            jnp.where(is_argmax, 0.0, -jnp.inf).astype(jnp.float32), valid)

  low, log_prob, valid = _greedy_or_sample(options, dist.temperature, sample,
                                           greedy)
  # [B*N]: the prefix's interval [L, L + W) narrows to [L + W * low, ...),
  # with W = exp(log-prob of the prefix) (encoding always rescales).
  new_low = state.codes + jnp.exp(state.log_prob) * low
  return Choice(target, log_prob, new_low, valid, state.code_log_width)


def _initial_state(inputs: jax.Array, cache: PyTree,
                   initial_index: Optional[jax.Array], rng: jax.Array,
                   codes: jax.Array) -> SamplingLoopState:
  """The loop state before the first step; inputs are [B*N, L]."""
  rows = inputs.shape[0]
  # [B*N, L] -> [B*N, L + 2]
  sequences = jnp.pad(inputs, ((0, 0), (0, _SPARE)))
  if initial_index is None:
    cur_index = jnp.zeros((rows,), jnp.int32)
    cur_token = jnp.zeros((rows, 1), jnp.int32)
  else:
    cur_index = initial_index
    # [B*N, L + 2] -> [B*N, 1]: the prompt token at the initial index.
    cur_token = jnp.take_along_axis(sequences, cur_index[:, None], axis=1)
  return SamplingLoopState(
      step=jnp.zeros((), jnp.int32),
      cur_index=cur_index,
      sequences=sequences,
      cache=cache,
      cur_token=cur_token,
      ended=jnp.zeros((rows, 1), bool),
      rng=rng,
      log_prob=jnp.zeros((rows,), jnp.float32),
      codes=codes,
      code_log_width=jnp.zeros((rows,), jnp.float32))


def _run_loop(state: SamplingLoopState, tokens_to_logits: TokensToLogits,
              choose: Callable[..., Choice],
              max_decode_len: jax.Array, options: DecodeOptions,
              state_callback_fn: Optional[StateCallbackFn],
              logit_callback_fn: Optional[LogitCallbackFn]) -> SamplingLoopState:
  """T5X's sampling loop with a pluggable token chooser.

  Args:
    state: the initial state (see `_initial_state`).
    choose: (logits [B*N, V], state, position [B*N], key) -> Choice, where
      `position` is the output position being written and `key` the step's
      PRNG key.
    max_decode_len: int32 [] or [B*N]; each row's length limit.
  """
  width = state.sequences.shape[1]
  # [1, L + 2]
  slots = jnp.arange(width, dtype=jnp.int32)[None, :]
  # [B*N]: EOS already in the prompt does not end a row.
  initial_eos_count = jnp.sum(state.sequences == options.eos_id, axis=1)

  def cond_fn(state: SamplingLoopState) -> jax.Array:
    return ~jnp.all(state.ended)

  def body_fn(state: SamplingLoopState) -> SamplingLoopState:
    if state_callback_fn is not None:
      state = state_callback_fn(state)
    # The same key stream as T5X; the step key only refreshes the bits of
    # residual codes that float32 cannot resolve (categorical.refresh_residual).
    step_rng, next_rng = jax.random.split(state.rng)
    logits, cache = call_model(tokens_to_logits, state)
    if logit_callback_fn is not None:
      logits = logit_callback_fn(logits, state)
    vocab = logits.shape[-1]
    if isinstance(options.topk, int) and options.topk > vocab:
      raise ValueError(
          f"topk must be <= the vocabulary size {vocab}; got {options.topk}.")

    # A row past its limit keeps writing into the last spare slot.
    i = jnp.minimum(state.cur_index, max_decode_len)  # [B*N]
    at_next = slots == (i + 1)[:, None]  # [B*N, L + 2]
    # [B*N, L + 2] -> [B*N]: the prompt token to force, or 0 past the prompt.
    prompt_token = jnp.sum(jnp.where(at_next, state.sequences, 0), axis=1)
    in_prompt = prompt_token != 0
    ended = state.ended[:, 0]
    active = ~in_prompt & ~ended  # [B*N]: rows that draw a token now

    choice = choose(logits, state, i, step_rng)
    token = jnp.where(in_prompt, prompt_token, choice.token)
    failed = active & ~choice.valid
    log_prob = state.log_prob + jnp.where(active, choice.log_prob, 0.0)
    log_prob = jnp.where(failed, jnp.nan, log_prob)
    codes = jnp.where(active, choice.codes, state.codes)
    code_log_width = jnp.where(active, choice.code_log_width,
                               state.code_log_width)

    written = jnp.where(ended | failed, 0, token).astype(jnp.int32)  # [B*N]
    sequences = jnp.where(at_next, written[:, None], state.sequences)
    # Counted over the whole row, as T5X does: a state callback may write EOS
    # anywhere (T5X's own example appends one after a given token).
    eos_count = jnp.sum(sequences == options.eos_id, axis=1)  # [B*N]
    now_ended = (ended | (eos_count > initial_eos_count) |
                 (i >= max_decode_len - 1) | failed)
    return SamplingLoopState(
        step=state.step + 1,
        cur_index=i + 1,
        sequences=sequences,
        cache=cache,
        cur_token=written[:, None],
        ended=now_ended[:, None],
        rng=next_rng,
        log_prob=log_prob,
        codes=codes,
        code_log_width=code_log_width)

  final = lax.while_loop(cond_fn, body_fn, state)
  if state_callback_fn is not None:
    final = state_callback_fn(final)
  return final


def _expand_inputs(inputs, cache, initial_index, max_decode_steps, temperature,
                   options: DecodeOptions):
  """Flattens the N decodes into rows and derives each row's length limit.

  Returns:
    inputs [B*N, L], cache, initial_index [B*N] or None, temperature [] or
    [B*N], max_decode_len [] or [B*N].
  """
  n = options.num_decodes
  inputs_x = expand_rows(inputs, n)  # [B, L] -> [B*N, L]
  cache_x = expand_cache(cache, n, options.cache_offset,
                         options.expand_cache_index)
  index_x = None if initial_index is None else expand_rows(initial_index, n)
  temperature_x = (expand_rows(temperature, n)
                   if options.per_row_temperature else temperature)
  length = inputs.shape[1]
  if max_decode_steps is None:
    max_decode_len = jnp.asarray(length, jnp.int32)
  else:
    steps = jnp.broadcast_to(max_decode_steps, inputs.shape[:1])  # [B]
    # Prompt tokens (non-zero) plus the allowed steps, capped at L.
    max_decode_len = jnp.minimum(
        length, jnp.sum(inputs_x != 0, axis=1) + expand_rows(steps, n))
  return inputs_x, cache_x, index_x, temperature_x, max_decode_len


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Rows:
  """Everything one decode needs per row, flattened to R = B*N rows.

  Rows are independent: any subset (a shard of rows on one device) decodes
  to the same result as it would among all of them.

  Attributes:
    inputs: int32 [R, L]; each row's prompt (BOS 0 first).
    cache: the expanded model cache (batch at axis `cache_offset`).
    initial_index: int32 [R] or None.
    temperature: float32 [] or [R].
    max_decode_len: int32 [] or [R]; each row's length limit.
    codes: float32 [R]; each row's code.
    row_ids: int32 [R]; global row index b*N + j (selects per-row noise).
    rng: the loop's PRNG key (the same for all rows).
  """

  inputs: jax.Array
  cache: PyTree
  initial_index: Optional[jax.Array]
  temperature: jax.Array
  max_decode_len: jax.Array
  codes: jax.Array
  row_ids: jax.Array
  rng: jax.Array


def make_rows(inputs, cache, decode_rng, codes, temperature, initial_index,
              max_decode_steps, options: DecodeOptions) -> Rows:
  """Validated [B, ...] arguments -> `Rows` for B*N rows."""
  batch = inputs.shape[0]
  n = options.num_decodes
  codes_rng, loop_rng = jax.random.split(decode_rng)
  if codes is None:
    codes = make_codes(codes_rng, batch, n, options.code_scheme)
  inputs_x, cache_x, index_x, temperature_x, max_decode_len = _expand_inputs(
      inputs, cache, initial_index, max_decode_steps, temperature, options)
  # [B, N] -> [B*N]
  return Rows(inputs_x, cache_x, index_x, temperature_x, max_decode_len,
              codes.reshape(batch * n).astype(jnp.float32),
              jnp.arange(batch * n, dtype=jnp.int32), loop_rng)


def decode_rows(rows: Rows, topk, topp, *, tokens_to_logits,
                options: DecodeOptions, state_callback_fn=None,
                logit_callback_fn=None):
  """Decodes every row to its end. Unsorted, one result per row.

  Returns:
    decodes int32 [R, L] (BOS dropped), log_probs float32 [R], codes
    float32 [R] (the codes the rows started from).
  """
  dist = Distribution(rows.temperature, topk, topp)
  state = _initial_state(rows.inputs, rows.cache, rows.initial_index, rows.rng,
                         rows.codes)
  chooser = _choose_by_key if options.ancestral else _choose_by_code
  choose = lambda logits, state, i, key: chooser(logits, state, key,
                                                 rows.row_ids, options, dist)
  final = _run_loop(state, tokens_to_logits, choose, rows.max_decode_len,
                    options, state_callback_fn, logit_callback_fn)
  # [R, L + 2] -> [R, L]: drop BOS and the spare slots.
  return final.sequences[:, 1:-1], final.log_prob, rows.codes


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


def _sample_core(inputs, cache, decode_rng, codes, temperature, topk, topp,
                 initial_index, max_decode_steps, *, tokens_to_logits,
                 options: DecodeOptions, state_callback_fn, logit_callback_fn):
  """Validated arguments in, sorted ([B, N, L], [B, N], [B, N] codes) out."""
  rows = make_rows(inputs, cache, decode_rng, codes, temperature,
                   initial_index, max_decode_steps, options)
  decodes, log_probs, row_codes = decode_rows(
      rows, topk, topp, tokens_to_logits=tokens_to_logits, options=options,
      state_callback_fn=state_callback_fn, logit_callback_fn=logit_callback_fn)
  return sort_samples(decodes, log_probs, row_codes, inputs.shape[0],
                      options.num_decodes)


_STATIC = ("tokens_to_logits", "options", "state_callback_fn", "logit_callback_fn")
_sample_core_jit = jax.jit(_sample_core, static_argnames=_STATIC)


def _encode_core(inputs, cache, decode_rng, targets, temperature, topk, topp,
                 initial_index, max_decode_steps, *, tokens_to_logits,
                 options: DecodeOptions,
                 state_callback_fn, logit_callback_fn):
  """Validated arguments in, ([B, N] low, [B, N] log-width) out."""
  batch, length = inputs.shape
  n = options.num_decodes
  inputs_x, cache_x, index_x, temperature_x, max_decode_len = _expand_inputs(
      inputs, cache, initial_index, max_decode_steps, temperature, options)
  dist = Distribution(temperature_x, topk, topp)
  rows = batch * n
  targets_x = targets.reshape(rows, length)  # [B, N, L] -> [B*N, L]
  # Nothing is drawn when encoding; the key is there for callbacks only.
  state = _initial_state(inputs_x, cache_x, index_x, decode_rng,
                         jnp.zeros((rows,), jnp.float32))
  positions = jnp.arange(length, dtype=jnp.int32)[None, :]

  def choose(logits, state, i, key):
    del key
    # Output position i holds sequences[:, i + 1]; clamp for the spare slot.
    at = positions == jnp.minimum(i, length - 1)[:, None]
    target = jnp.sum(jnp.where(at, targets_x, 0), axis=1)  # [B*N]
    return _choose_target(logits, state, target, options, dist)

  final = _run_loop(state, tokens_to_logits, choose, max_decode_len, options,
                    state_callback_fn, logit_callback_fn)
  return final.codes.reshape(batch, n), final.log_prob.reshape(batch, n)


_encode_core_jit = jax.jit(_encode_core, static_argnames=_STATIC)


def call_core(core, jitted, args, static):
  """Calls the jitted core, or the plain one when already being traced.

  Inside an outer `jax.jit` (T5X's pjit'ed predict) the outer compile covers
  everything. Outside one, the jitted core compiles once per static
  configuration; its cache is keyed by the identity of `tokens_to_logits` and
  the callbacks, so reuse the same function objects to reuse the program.
  """
  leaves = jax.tree_util.tree_leaves(args)
  if any(validation.is_traced(x) for x in leaves):
    return core(*args, **static)
  try:
    for value in static.values():
      hash(value)
  except TypeError:
    return core(*args, **static)
  return jitted(*args, **static)


def _key_or_default(decode_rng):
  """The validated key; None means PRNGKey(0), T5X's default (drop-in parity:
  pass your own key)."""
  decode_rng = validation.check_rng(decode_rng)
  return jax.random.PRNGKey(0) if decode_rng is None else decode_rng


def _common_checks(inputs, cache, tokens_to_logits, eos_id, num_decodes,
                   temperature, topk, topp, cache_offset, initial_index,
                   max_decode_steps, max_decode_steps_hard_limit,
                   state_callback_fn, logit_callback_fn):
  inputs = validation.check_inputs(inputs)
  batch, length = inputs.shape
  validation.check_callable("tokens_to_logits", tokens_to_logits)
  validation.check_callable("state_callback_fn", state_callback_fn, optional=True)
  validation.check_callable("logit_callback_fn", logit_callback_fn, optional=True)
  eos_id = validation.check_int("eos_id", eos_id, minimum=0)
  num_decodes = validation.check_int("num_decodes", num_decodes, minimum=1)
  cache_offset = validation.check_int("cache_offset", cache_offset, minimum=0)
  temperature = validation.check_temperature(temperature, batch)
  topk = validation.check_topk(topk)
  topp = validation.check_topp(topp)
  validation.check_topk_topp(topk, topp)
  initial_index = validation.check_initial_index(initial_index, batch, length)
  max_decode_steps = validation.check_max_decode_steps(
      max_decode_steps, max_decode_steps_hard_limit, batch, length)
  static_topk = topk if isinstance(topk, int) else None
  static_topp = topp if isinstance(topp, float) else None
  options = DecodeOptions(
      eos_id=eos_id,
      num_decodes=num_decodes,
      cache_offset=cache_offset,
      topk=static_topk,
      topp=static_topp,
      per_row_temperature=temperature.ndim == 1,
      expand_cache_index=initial_index is not None)
  traced_topk = None if static_topk is not None else topk
  traced_topp = None if static_topp is not None else topp
  return (inputs, temperature, traced_topk, traced_topp, initial_index,
          max_decode_steps, options)


def arithmetic_sample(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    decode_rng: Optional[jax.Array] = None,
    num_decodes: int = 1,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    rescale_log_probs: bool = True,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
    *,
    codes: Optional[jax.Array] = None,
    code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
    code_resolution: float = CODE_RESOLUTION,
    return_codes: bool = False,
):
  """Arithmetic sampling with the signature, defaults and returns of T5X's
  `decoding.temperature_sample`.

  Every argument means what it means there; see the module docstring for the
  loop. Sample j of input b decodes code `codes[b, j]`; by default the N codes
  of each input are a randomly shifted lattice, so the N samples are exact
  model samples, stratified over the model's distribution.

  Args:
    inputs: int [B, L]; non-zero entries are a teacher-forced prompt; position
      0 is BOS (0) unless `initial_index` says where to start.
    cache: the model's autoregressive cache (dict or FrozenDict).
    tokens_to_logits: (DecodingState) -> (logits [B*N, V], new cache).
    eos_id: end-of-sequence token id.
    decode_rng: PRNG key for the codes; None means PRNGKey(0), as in T5X.
    num_decodes: N, samples per input (static).
    temperature: float >= 0, or float [B] per input; <= 1e-4 is greedy.
    topk: keep the k most likely tokens (0: all). T5X's default 1 is greedy;
      set topk=0 to sample from the full distribution. May be traced.
    topp: keep the smallest most-likely set of mass >= topp (0: off). May be
      traced. At most one of topk/topp may be non-zero.
    cache_offset: batch axis of cache arrays (1 with scanned layers).
    initial_index: int [B]; positions to start from (prefilled cache).
    max_decode_steps: int or int [B]; steps after the prompt, at most L.
    max_decode_steps_hard_limit: static int cap on max_decode_steps.
    rescale_log_probs: return log-probs under the transformed distribution.
    state_callback_fn: (SamplingLoopState) -> SamplingLoopState, each step.
    logit_callback_fn: (logits, SamplingLoopState) -> logits, each step.
    codes: keyword-only; float [B, N] in [0, 1) to decode instead of making
      codes from `decode_rng`.
    code_scheme: keyword-only; a `CodeScheme` (or its string value) used when
      `codes` is None.
    code_resolution: keyword-only; float in [2**-22, 1]: a code decides its
      sample until the decoded tokens' probability falls below this, then a
      fresh per-row uniform takes over (see `DecodeOptions`). The default
      uses all of float32; 1 / num_decodes keeps the lattice's
      stratification and makes samples robust to tiny logit differences.
    return_codes: keyword-only; also return the codes [B, N], in the same
      order as the samples.

  Returns:
    decodes: int32 [B, N, L], each input's samples sorted by increasing
      log-prob; log_probs: float32 [B, N]; and codes [B, N] if `return_codes`.
    A row whose logits hold NaN (or +inf, or no finite value) at a step it
    must draw from ends there: it is padded with 0 from that position and
    its log-prob is NaN (sorted last). Nothing is sampled from NaN.

  Example (a model that always prefers token 2 with probability 0.6):

    decodes, log_probs = arithmetic_sample(
        jnp.zeros((1, 3), jnp.int32), {}, tokens_to_logits, eos_id=1,
        decode_rng=jax.random.PRNGKey(0), num_decodes=4, topk=0)
  """
  decodes, log_probs, sorted_codes = _sample(
      inputs, cache, tokens_to_logits, eos_id, decode_rng, num_decodes,
      temperature, topk, topp, cache_offset, initial_index, max_decode_steps,
      max_decode_steps_hard_limit, rescale_log_probs, state_callback_fn,
      logit_callback_fn, codes=codes, code_scheme=code_scheme,
      code_resolution=code_resolution, ancestral=False)
  if return_codes:
    return decodes, log_probs, sorted_codes
  return decodes, log_probs


def _sample(inputs, cache, tokens_to_logits, eos_id, decode_rng, num_decodes,
            temperature, topk, topp, cache_offset, initial_index,
            max_decode_steps, max_decode_steps_hard_limit, rescale_log_probs,
            state_callback_fn, logit_callback_fn, *, codes, code_scheme,
            code_resolution=CODE_RESOLUTION, ancestral):
  (inputs, temperature, topk, topp, initial_index, max_decode_steps,
   options) = _common_checks(inputs, cache, tokens_to_logits, eos_id,
                             num_decodes, temperature, topk, topp, cache_offset,
                             initial_index, max_decode_steps,
                             max_decode_steps_hard_limit, state_callback_fn,
                             logit_callback_fn)
  options = dataclasses.replace(
      options,
      rescale_log_probs=bool(rescale_log_probs),
      code_scheme=as_code_scheme(code_scheme),
      code_resolution=validation.check_code_resolution(code_resolution),
      ancestral=ancestral)
  batch = inputs.shape[0]
  codes = validation.check_codes(codes, batch, options.num_decodes)
  decode_rng = _key_or_default(decode_rng)
  args = (inputs, cache, decode_rng, codes, temperature, topk, topp,
          initial_index, max_decode_steps)
  static = dict(tokens_to_logits=tokens_to_logits, options=options,
                state_callback_fn=state_callback_fn,
                logit_callback_fn=logit_callback_fn)
  return call_core(_sample_core, _sample_core_jit, args, static)


def ancestral_sample(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    decode_rng: Optional[jax.Array] = None,
    num_decodes: int = 1,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    rescale_log_probs: bool = True,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
):
  """Ordinary ancestral sampling in the same loop: T5X's `temperature_sample`.

  Same signature, defaults and returns as `arithmetic_sample` (without the
  code arguments) and the same loop; each token is drawn with
  `jax.random.categorical` instead of from a code. The one difference from
  T5X: every row draws from its own key, `fold_in(step_key, row)`
  (`row_keys`), where T5X draws the whole batch from one step key, so a
  row's sample does not depend on the batch or on the sharding around it.
  The baseline that arithmetic sampling is measured against.
  """
  return _sample(
      inputs, cache, tokens_to_logits, eos_id, decode_rng, num_decodes,
      temperature, topk, topp, cache_offset, initial_index, max_decode_steps,
      max_decode_steps_hard_limit, rescale_log_probs, state_callback_fn,
      logit_callback_fn, codes=None, code_scheme=CodeScheme.IID,
      ancestral=True)[:2]


def arithmetic_encode(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    sequences: jax.Array,
    decode_rng: Optional[jax.Array] = None,
    *,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
) -> Tuple[jax.Array, jax.Array]:
  """The code interval of each given sequence: the inverse of sampling.

  Runs the decode loop with `sequences` teacher-forced and returns where each
  one sits in code space. With the same model inputs and the same
  temperature/topk/topp, `arithmetic_sample` decodes every code in
  [low, low + exp(log_width)) to that sequence; in particular its midpoint
  `low + exp(log_width) / 2` decodes back to it (for sequences of probability
  >= ~1e-5; below that float32 cannot place the interval).

  The defaults are `arithmetic_sample`'s (topk=1 is greedy: every sequence
  but the greedy one then has width 0); pass the settings you sample with.

  Args:
    inputs, cache, tokens_to_logits, eos_id, temperature, topk, topp,
    cache_offset, initial_index, max_decode_steps, max_decode_steps_hard_limit,
    state_callback_fn, logit_callback_fn: as for `arithmetic_sample`.
    decode_rng: nothing is drawn when encoding; this key only seeds the loop
      state's `rng` field for callbacks that read it (None: PRNGKey(0)).
    sequences: int [B, N, L]; N sequences per input in the layout
      `arithmetic_sample` returns (prompt included, padding after EOS).
      Prompt positions are read from `inputs`; tokens after a sequence's end
      (its first decoded EOS, or its length limit) are ignored.

  Returns:
    low: float32 [B, N]; lower end of each sequence's code interval.
    log_width: float32 [B, N]; log of its width, i.e. the sequence's
      log-probability under the temperature/topk/topp transform (-inf for a
      sequence the transformed model cannot produce; NaN if the model's
      logits were NaN on its path).
  """
  (inputs, temperature, topk, topp, initial_index, max_decode_steps,
   options) = _common_checks(inputs, cache, tokens_to_logits, eos_id, 1,
                             temperature, topk, topp, cache_offset,
                             initial_index, max_decode_steps,
                             max_decode_steps_hard_limit, state_callback_fn,
                             logit_callback_fn)
  shape = getattr(sequences, "shape", None)
  dtype = getattr(sequences, "dtype", None)
  if shape is None or dtype is None or not jnp.issubdtype(dtype, jnp.integer):
    raise TypeError("sequences must be an integer array [batch, num, length].")
  if len(shape) != 3 or shape[0] != inputs.shape[0] or shape[2] != inputs.shape[1]:
    raise ValueError(
        "sequences must have shape [batch, num, length] with batch, length = "
        f"inputs.shape = {tuple(inputs.shape)}; got {tuple(shape)}.")
  options = dataclasses.replace(options, num_decodes=int(shape[1]))
  decode_rng = _key_or_default(decode_rng)
  args = (inputs, cache, decode_rng, jnp.asarray(sequences, jnp.int32),
          temperature, topk,
          topp, initial_index, max_decode_steps)
  static = dict(tokens_to_logits=tokens_to_logits, options=options,
                state_callback_fn=state_callback_fn,
                logit_callback_fn=logit_callback_fn)
  return call_core(_encode_core, _encode_core_jit, args, static)
