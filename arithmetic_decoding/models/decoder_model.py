"""A decoder-only model in T5X's protocol: prefill, then decode from `initial_index`.

`DecoderOnlyModel` is a functional wrapper (parameters passed in, never
stored) around the Flax `DecoderOnly`, with the methods sharded decoding
asks of a model (`sharding.RowModel`). Prompts come in as int [B, P], each
row's tokens first and zeros after (the pad; a prompt holds no token 0):

  prompts       [[5, 6, 7], [8, 0, 0]]          (P = 3)
  inputs        [[0, 5, 6, 7, 0, 0],            (L = 6 slots; slot 0 is
                 [0, 8, 0, 0, 0, 0]]             T5X's BOS placeholder)
  initial_index [3, 1]                          (each prompt's last slot)

`decode_start` prefills the cache with every prompt token's keys and values
(one parallel pass over [B, P]); the decode loop then starts each row at its
own `initial_index`, feeding the prompt's last token (T5X's decoder-only
semantics, no left padding). Without `initial_index` the loop teacher-forces
the prompt one token at a time through an empty cache, with the same
samples (a slower path, used by beam search's tests and T5X's convention).

    model = DecoderOnlyModel(config)
    inputs, cache, tokens_to_logits = model.decode_inputs(params, prompts, L)
    decodes, log_probs = arithmetic_sample(
        inputs, cache, tokens_to_logits, eos_id, key, num_decodes=8,
        initial_index=model.start_index(prompts), topk=0)
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from arithmetic_decoding.loop import CacheGrowth, cache_slots, resize_cache
from arithmetic_decoding.models import initializers
from arithmetic_decoding.models.decoder_config import DecoderConfig
from arithmetic_decoding.models.decoder_only import DecoderOnly, init_cache
from arithmetic_decoding.protocol import ContextStep

# The compacted scheduler grows a decoder-only cache by this many positions.
CACHE_GROWTH_SLOTS = 32

PyTree = Any


def prompt_lengths(prompts: jax.Array) -> jax.Array:
  """int32 [B]: each row's count of non-zero tokens.

  >>> prompt_lengths(jnp.array([[5, 6, 7], [8, 0, 0]])).tolist()
  [3, 1]
  """
  return jnp.sum(prompts != 0, axis=1).astype(jnp.int32)


class DecoderOnlyModel:
  """Parameters, prefill and T5X-protocol decoding for one `DecoderConfig`."""

  def __init__(self, config: DecoderConfig):
    self.config = config
    self.module = DecoderOnly(config)
    # Made once, so equal CacheGrowth objects share compiled programs.
    self._resize_cache = functools.partial(resize_cache, axis=-1)
    self._cache_slots = functools.partial(cache_slots, axis=-1)

  # -- parameters ----------------------------------------------------------

  def _init_args(self):
    tokens = jnp.ones((1, 2), jnp.int32)
    return (tokens, jnp.arange(2)[None], init_cache(self.config, 1, 2))

  def init(self, rng: jax.Array) -> PyTree:
    """Random parameters (tests; real ones come from `gguf_loader`)."""
    return initializers.params(self.module, rng, *self._init_args())

  def param_logical_axes(self) -> PyTree:
    """Logical PartitionSpecs of the parameters (nothing allocated)."""
    boxed = jax.eval_shape(lambda: self.module.init(
        jax.random.PRNGKey(0), *self._init_args())["params"])
    return nn.get_partition_spec(boxed)

  def abstract_params(self) -> PyTree:
    return jax.eval_shape(lambda: self.init(jax.random.PRNGKey(0)))

  # -- teacher forcing -----------------------------------------------------

  def logits(self, params, tokens: jax.Array) -> jax.Array:
    """Logits float32 [B, T, V] of tokens [B, T] (from position 0)."""
    batch, length = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
    cache = init_cache(self.config, batch, length)
    return self.module.apply({"params": params}, tokens, positions, cache)[0]

  # -- decoding (sharding.RowModel) ----------------------------------------

  def start_index(self, prompts: jax.Array) -> jax.Array:
    """int32 [B]: the slot of each prompt's last token (its length)."""
    return prompt_lengths(prompts)

  def decode_start(self, params, prompts: jax.Array, max_decode_len: int):
    """Prefill. Returns inputs int32 [B, L] (BOS placeholder, prompt, zeros),
    the cache [B, L - 1 positions] with every prompt token's keys/values,
    and an empty context (a decoder-only row reads nothing else)."""
    batch, width = prompts.shape
    if max_decode_len <= width:
      raise ValueError(f"max_decode_len ({max_decode_len}) must exceed the "
                       f"prompt width ({width}): slot 0 is the BOS "
                       "placeholder and at least one token is decoded.")
    prompts = prompts.astype(jnp.int32)
    inputs = jnp.zeros((batch, max_decode_len), jnp.int32)
    inputs = inputs.at[:, 1:width + 1].set(prompts)
    cache = init_cache(self.config, batch, max_decode_len - 1)
    positions = jnp.broadcast_to(jnp.arange(width), (batch, width))
    cache = self.module.apply({"params": params}, prompts, positions, cache,
                              method=DecoderOnly.prefill)
    return inputs, cache, {}

  def row_context(self, params, context, row_ids, num_decodes: int):
    del params, row_ids, num_decodes
    return context

  def step_fn(self, params, context_rows):
    del context_rows

    def tokens_to_logits(state):
      return self.module.apply({"params": params}, state.cur_token,
                               state.cur_index, state.cache,
                               method=DecoderOnly.decode_step)

    return tokens_to_logits

  def cache_growth(self, slots: int = CACHE_GROWTH_SLOTS) -> CacheGrowth:
    """A cache grown `slots` positions at a time (the compacted scheduler's
    `RowLayout.growth`): attention over the positions written so far. A
    row at loop slot i writes model position i - 1 (`lag`)."""
    return CacheGrowth(slots, self._resize_cache, self._cache_slots, lag=1)

  def row_groups(self, batch: int, num_decodes: int) -> int:
    """1: each row reads only its own cache (`compaction.RowLayout`)."""
    del batch, num_decodes
    return 1

  def row_step(self, num_decodes: int) -> ContextStep:
    """The static step over any rows (`compaction`)."""
    del num_decodes
    return ContextStep(self.step_fn)

  def decode_inputs(self, params, prompts: jax.Array, max_decode_len: int,
                    num_decodes: int = 1):
    """(inputs [B, L], prefilled cache [B, ...], tokens_to_logits): what a
    T5X decode function takes, with `initial_index = start_index(prompts)`."""
    del num_decodes
    inputs, cache, context = self.decode_start(params, prompts,
                                               max_decode_len)
    return inputs, cache, self.step_fn(params, context)

  def empty_start(self, prompts: jax.Array, max_decode_len: int):
    """(inputs [B, L], an empty cache): the teacher-forcing path, decoded
    from slot 0 without `initial_index`."""
    batch, width = prompts.shape
    inputs = jnp.zeros((batch, max_decode_len), jnp.int32)
    inputs = inputs.at[:, 1:width + 1].set(prompts.astype(jnp.int32))
    return inputs, init_cache(self.config, batch, max_decode_len - 1)
