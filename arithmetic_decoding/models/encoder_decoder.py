"""`EncoderDecoderModel`: the T5 module as a functional, T5X-protocol model.

Parameters are passed in, never stored, so every method works inside
`jax.jit` with sharded parameters. Decoding enters through three methods
that any model can offer (`sharding.RowModel`): `decode_start` (per input:
the encoded input, the empty cache), `row_context` (what a run of rows
reads of their inputs) and `step_fn` (T5X's `tokens_to_logits` over rows);
`decode_inputs` combines them the way T5X's
`EncoderDecoderModel.predict_batch_with_aux` hands a decode function its
arguments.

Cross-attention keys and values (`CrossKV`): T5X expands the encoded input
N-fold, one copy per sample, and projects every decoder layer's keys and
values from it again at every step. The N samples of an input share that
input, so by default (`CrossKV.PER_INPUT`) each layer's keys and values are
projected once per input when decoding starts, and the rows of an input read
them in place. For mT5-XXL at source length S that is 24 layers x 2
projections of [S, 4096] x [4096, 4096] per input, once, instead of per
sample and per step; and 48 x S x 4096 values per input instead of per
sample. `CrossKV.PER_SAMPLE` keeps T5X's layout (the paper's setting, for
the Figure 5 study). Both compute the same function:

  >>> from arithmetic_decoding.models.config import preset
  >>> cfg = preset("tiny")
  >>> shared = EncoderDecoderModel(cfg)
  >>> t5x_style = EncoderDecoderModel(cfg, cross_kv="per_sample")
  >>> params = shared.init(jax.random.PRNGKey(0))
  >>> tokens = jnp.array([[5, 9, 3, 1]])
  >>> outs = []
  >>> for model in (shared, t5x_style):
  ...   inputs, cache, step = model.decode_inputs(params, tokens, 4, 3)
  ...   cache = expand_cache(cache, 3, 0, False)
  ...   state = DecodingState(cur_index=jnp.zeros(3, jnp.int32),
  ...                         sequences=jnp.zeros((3, 4), jnp.int32),
  ...                         cur_token=jnp.zeros((3, 1), jnp.int32),
  ...                         cache=cache)
  ...   outs.append(step(state)[0])
  >>> bool(jnp.allclose(outs[0], outs[1], atol=1e-5))
  True
"""

from __future__ import annotations

from typing import Any, Dict

import enum
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from arithmetic_decoding import validation
from arithmetic_decoding.loop import CacheGrowth, cache_slots, resize_cache
from arithmetic_decoding.models import initializers
from arithmetic_decoding.models.config import T5Config, preset
from arithmetic_decoding.models.t5 import T5, constrain
from arithmetic_decoding.protocol import (ContextStep, DecodingState,
                                          expand_cache, expand_rows)

PyTree = Any


class CrossKV(enum.Enum):
  """Where decoding's cross-attention keys and values come from.

  PER_INPUT: projected once per input when decoding starts; the rows of an
    input read them (no N-fold copy, no per-step projection). Ours.
  PER_SAMPLE: T5X's layout: the encoded input copied per row, every layer's
    keys and values projected from it at every step (XLA hoists that
    loop-invariant projection out of the decode loop, so in the compiled
    program it runs once per row and N copies stay live). The paper's
    setting.
  """

  PER_INPUT = "per_input"
  PER_SAMPLE = "per_sample"


def as_cross_kv(value) -> CrossKV:
  """A `CrossKV` or its value ("per_input" / "per_sample")."""
  return validation.check_member("cross_kv", CrossKV, value)


def group_size(num_decodes: int, rows: int) -> int:
  """Consecutive rows that share one input in every run of `rows` rows that
  starts at a multiple of `rows` (batch-major rows: row i is of input
  i // num_decodes).

  >>> group_size(4, 8), group_size(4, 2), group_size(6, 4), group_size(1, 8)
  (4, 2, 2, 1)
  """
  return math.gcd(num_decodes, rows)


def init_cache(config: T5Config, batch: int, length: int,
               time_minor: bool = False) -> Dict[str, Any]:
  """Zeros: {"layer_i": {"key", "value": [batch, length, H, K]}}, or
  [batch, H, K, length] with `time_minor` (see `t5.DecoderLayer`)."""
  shape = ((batch, config.num_heads, config.d_kv, length) if time_minor else
           (batch, length, config.num_heads, config.d_kv))
  zeros = jnp.zeros(shape, config.activation_dtype)
  return {f"layer_{i}": {"key": zeros, "value": zeros}
          for i in range(config.num_decoder_layers)}


# `EncoderDecoderModel.cache_growth`: 32 slots a segment, from 64 rows up,
# keep the decoder's logits bit for bit those over the full cache on
# XLA:CPU (below 32 rows its attention dots take another kernel and the
# last bits move; `tests/test_throughput.py`).
CACHE_GROWTH_SLOTS = 32
CACHE_GROWTH_MIN_ROWS = 64


class EncoderDecoderModel:
  """Parameters, encoder and T5X-protocol decoding for one `T5Config`.

  A functional wrapper: parameters are passed in, never stored, so every
  method works inside `jax.jit` with sharded parameters.

    model = EncoderDecoderModel(preset("tiny"))
    params = model.init(jax.random.PRNGKey(0))
    inputs, cache, tokens_to_logits = model.decode_inputs(
        params, encoder_tokens, max_decode_len=16, num_decodes=4)
    decodes, log_probs = arithmetic_sample(inputs, cache, tokens_to_logits,
                                           eos_id=1, num_decodes=4, topk=0)

  With `cross_kv="per_sample"`, `decode_inputs` expands the encoded input
  N-fold, as T5X's `EncoderDecoderModel.predict_batch_with_aux` does before
  it calls the decode function (which expands `inputs` and `cache` itself);
  with the default "per_input" the decode function gets the same
  (inputs, cache, tokens_to_logits) but tokens_to_logits reads each input's
  projected keys and values (see `CrossKV`).
  """

  def __init__(self, config: T5Config, cross_kv="per_input",
               time_minor: bool = False):
    self.config = config
    self.cross_kv = as_cross_kv(cross_kv)
    self.time_minor = bool(time_minor)
    self.module = T5(config, self.time_minor)
    axis = -1 if self.time_minor else 1  # the cache's slot axis
    # Made once, so equal CacheGrowth objects share compiled programs.
    self._resize_cache = functools.partial(resize_cache, axis=axis)
    self._cache_slots = functools.partial(cache_slots, axis=axis)

  def init(self, rng: jax.Array) -> PyTree:
    """Random parameters (their logical axes: `param_logical_axes`)."""
    tokens = jnp.ones((1, 4), jnp.int32)
    return initializers.params(self.module, rng, tokens, tokens)

  def param_logical_axes(self) -> PyTree:
    """Logical axis names of the parameters (no arrays are allocated)."""
    tokens = jnp.ones((1, 4), jnp.int32)
    boxed = jax.eval_shape(
        lambda: self.module.init(jax.random.PRNGKey(0), tokens, tokens)["params"])
    return nn.get_partition_spec(boxed)

  def abstract_params(self) -> PyTree:
    """ShapeDtypeStructs of the parameters (for AOT compilation)."""
    return jax.eval_shape(lambda: self.init(jax.random.PRNGKey(0)))

  def encode(self, params, encoder_tokens):
    """int [B, S] -> encoded [B, S, D]."""
    return self.module.apply({"params": params}, encoder_tokens,
                             method=T5.encode)

  def logits(self, params, encoder_tokens, decoder_input_tokens):
    """Teacher-forced logits [B, T, V]."""
    return self.module.apply({"params": params}, encoder_tokens,
                             decoder_input_tokens)

  def cache_growth(self, slots: int = CACHE_GROWTH_SLOTS) -> CacheGrowth:
    """Decode over a cache grown by `slots` slots at a time (pass it as
    `cache_growth` to the decode functions): the same samples, attention
    over the slots written so far instead of all `max_decode_len`."""
    return CacheGrowth(slots, self._resize_cache, self._cache_slots,
                       min_rows=CACHE_GROWTH_MIN_ROWS)

  def decode_start(self, params, encoder_tokens, max_decode_len: int):
    """Everything decoding needs per input, before the N-fold expansion.

    Returns:
      inputs int32 [B, max_decode_len] (zeros: no prompt), the empty decode
      cache for B rows, and the context [B, ...] that `step_fn` reads:
      {"encoded": [B, S, D], "mask": bool [B, S]}.
    """
    batch = encoder_tokens.shape[0]
    context = {"encoded": self.encode(params, encoder_tokens),
               "mask": encoder_tokens > 0}
    inputs = jnp.zeros((batch, max_decode_len), jnp.int32)
    return inputs, init_cache(self.config, batch, max_decode_len,
                              self.time_minor), context

  def start_index(self, encoder_tokens):
    """None: decoding starts at slot 0 (no decoder prompt)."""
    del encoder_tokens
    return None

  def row_context(self, params, context, row_ids: jax.Array,
                  num_decodes: int):
    """What `step_fn` reads for a run of rows, from the per-input context.

    Args:
      params: the parameters.
      context: `decode_start`'s {"encoded": [B, S, D], "mask": [B, S]}.
      row_ids: int [R]; the rows' global indices (row i decodes input
        i // num_decodes), consecutive and starting at a multiple of R, as a
        device's shard of the B * N rows is.
      num_decodes: N.

    Returns:
      PER_SAMPLE: each row's own copy, {"encoded": [R, S, D], "mask": [R, S]}.
      PER_INPUT: {"cross": {"layer_i": {"key", "value": [G, S, H, K]}},
      "mask": [G, S]} for the G = R / g groups of g = gcd(N, R) consecutive
      rows that share an input (g = N when the run holds whole inputs;
      otherwise an input split over runs is projected in each run).
    """
    if self.cross_kv is CrossKV.PER_SAMPLE:
      # [B, ...] -> [R, ...]
      return jax.tree_util.tree_map(
          lambda x: jnp.take(x, row_ids // num_decodes, axis=0), context)
    g = group_size(num_decodes, row_ids.shape[0])
    inputs = row_ids[::g] // num_decodes  # [G]
    encoded = jnp.take(context["encoded"], inputs, axis=0)  # [G, S, D]
    cross = self.module.apply({"params": params}, encoded, method=T5.cross_kv)
    return {"cross": cross, "mask": jnp.take(context["mask"], inputs, axis=0)}

  def step_fn(self, params, context, lockstep: bool = False,
              group_rows=None):
    """The T5X-protocol `tokens_to_logits` over the rows of `row_context`.

    Rows may sit at different positions (T5X's `initial_index`). With
    `lockstep` the caller promises that every row still decoding sits at
    the same position, the largest: true in the library's loop when it
    starts at slot 0 (no prefilled cache), where a row that ended at its
    length limit lags and its unused logits are computed at the leaders'
    position. Then the cache is written by one slice update instead of a
    scatter per row (the same values, bit for bit).

    `group_rows` (PER_INPUT): the rows per input the context was made for,
    when fewer are decoded (`compaction` drops ended rows); cross-attention
    then runs at its original shape, keeping every row's bits.
    """
    cross = context["cross"] if "cross" in context else context["encoded"]

    def tokens_to_logits(state):
      index = jnp.max(state.cur_index) if lockstep else state.cur_index
      return self.module.apply({"params": params}, cross, context["mask"],
                               state.cur_token, index, state.cache,
                               group_rows, method=T5.decode_step)

    return tokens_to_logits

  def row_groups(self, batch: int, num_decodes: int) -> int:
    """The groups the rows of `step_fn` form (`compaction.RowLayout.
    groups`): the B inputs' cross-attention keys/values, each read by its
    input's rows. PER_SAMPLE reads a context row per sample, so its rows
    cannot be dropped or regrouped."""
    del num_decodes
    if self.cross_kv is CrossKV.PER_SAMPLE:
      raise ValueError("the compacted scheduler needs cross_kv='per_input' "
                       "(PER_SAMPLE keeps one context row per sample).")
    return batch

  def row_step(self, num_decodes: int) -> ContextStep:
    """The static step over the rows the compacted scheduler keeps: every
    row starts at slot 0 (`lockstep`), and each input's cross-attention
    runs at its N rows whatever is dropped (`group_rows`)."""
    return ContextStep(self.step_fn, (("group_rows", num_decodes),
                                      ("lockstep", True)))

  def decode_inputs(self, params, encoder_tokens, max_decode_len: int,
                    num_decodes: int = 1, lockstep: bool = False):
    """What a T5X decode function takes: (inputs, cache, tokens_to_logits).

    `lockstep`: the decode function starts every row at slot 0 (no
    `initial_index`), as the library's do here; see `step_fn`.

    `inputs` [B, max_decode_len] are zeros (no prompt); `cache` is for B rows
    (the decode function expands it); tokens_to_logits works on the B*N
    rows, batch-major (as every T5X decode function orders them): with
    PER_SAMPLE the encoded input is expanded N-fold here, as T5X's
    `EncoderDecoderModel.predict_batch_with_aux` does; with PER_INPUT the
    keys and values are projected once per input here.
    """
    inputs, cache, context = self.decode_start(params, encoder_tokens,
                                               max_decode_len)
    if self.cross_kv is CrossKV.PER_SAMPLE:
      # [B, ...] -> [B*N, ...]
      rows = {"encoded": constrain(expand_rows(context["encoded"], num_decodes),
                                    ("batch", "length", "embed")),
              "mask": constrain(expand_rows(context["mask"], num_decodes),
                                 ("batch", "length"))}
    else:
      rows = self.row_context(
          params, context,
          jnp.arange(encoder_tokens.shape[0] * num_decodes), num_decodes)
    return inputs, cache, self.step_fn(params, rows, lockstep)
