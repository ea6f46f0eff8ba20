"""`EncoderDecoderModel`: the T5 module as a functional, T5X-protocol model.

Parameters are passed in, never stored, so every method works inside
`jax.jit` with sharded parameters. Decoding enters through two methods that
any model can offer (`sharding.RowModel`): `decode_start` (per input: the
encoded input, the empty cache) and `step_fn` (T5X's `tokens_to_logits`
over rows); `decode_inputs` combines them the way T5X's
`EncoderDecoderModel.predict_batch_with_aux` hands a decode function its
arguments.
"""

from __future__ import annotations

from typing import Any, Dict

import flax.linen as nn
import jax
import jax.numpy as jnp

from arithmetic_decoding.models.config import T5Config
from arithmetic_decoding.models.t5 import T5, constrain
from arithmetic_decoding.protocol import expand_rows

PyTree = Any


def init_cache(config: T5Config, batch: int, length: int) -> Dict[str, Any]:
  """Zeros: {"layer_i": {"key", "value": [batch, length, H, K]}}."""
  shape = (batch, length, config.num_heads, config.d_kv)
  zeros = jnp.zeros(shape, config.activation_dtype)
  return {f"layer_{i}": {"key": zeros, "value": zeros}
          for i in range(config.num_decoder_layers)}


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

  `decode_inputs` expands the encoded input N-fold, as T5X's
  `EncoderDecoderModel.predict_batch_with_aux` does before it calls the
  decode function (which expands `inputs` and `cache` itself).
  """

  def __init__(self, config: T5Config):
    self.config = config
    self.module = T5(config)

  def init(self, rng: jax.Array) -> PyTree:
    """Random parameters (their logical axes: `param_logical_axes`)."""
    tokens = jnp.ones((1, 4), jnp.int32)
    return nn.unbox(self.module.init(rng, tokens, tokens)["params"])

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
    return inputs, init_cache(self.config, batch, max_decode_len), context

  def step_fn(self, params, context):
    """The T5X-protocol `tokens_to_logits` over rows of `context` [R, ...]."""

    def tokens_to_logits(state):
      return self.module.apply({"params": params}, context["encoded"],
                               context["mask"], state.cur_token,
                               state.cur_index, state.cache,
                               method=T5.decode_step)

    return tokens_to_logits

  def decode_inputs(self, params, encoder_tokens, max_decode_len: int,
                    num_decodes: int = 1):
    """What a T5X decode function takes: (inputs, cache, tokens_to_logits).

    `inputs` [B, max_decode_len] are zeros (no prompt); `cache` is for B rows
    (the decode function expands it); tokens_to_logits works on B*N rows:
    the encoded input is expanded N-fold here, as T5X's
    `EncoderDecoderModel.predict_batch_with_aux` does.
    """
    inputs, cache, context = self.decode_start(params, encoder_tokens,
                                               max_decode_len)
    # [B, ...] -> [B*N, ...]
    rows = {"encoded": constrain(expand_rows(context["encoded"], num_decodes),
                                  ("batch", "length", "embed")),
            "mask": constrain(expand_rows(context["mask"], num_decodes),
                               ("batch", "length"))}
    return inputs, cache, self.step_fn(params, rows)
