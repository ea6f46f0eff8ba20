"""A tiny decoder-only language model speaking T5X's DecoderOnlyModel protocol.

T5X's decoder-only example network is not part of its package at cc342d4, so
the decoder-only `t5x infer` test brings this one: a causal "history" model,
logits_t = (e[x_t] + mean(e[x_0..x_t]) M) e^T / sqrt(D), with the running sum
of embeddings as its cache. It has what DecoderOnlyModel needs: a training
call, cache initialisation (`decode=True` without a cache), prompt prefill
(`prefill=True`, `prefill_lengths`) and one-token decode steps. Parameters
carry logical axes (params_axes) for T5X's partitioner.
"""

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import partitioning


class HistoryLM(nn.Module):
  vocab_size: int = 8000
  emb_dim: int = 16

  def _weights(self):
    embedding = partitioning.param_with_axes(
        "embedding", nn.initializers.normal(stddev=1.0),
        (self.vocab_size, self.emb_dim), jnp.float32, axes=("vocab", "embed"))
    mix = partitioning.param_with_axes(
        "mix", nn.initializers.normal(stddev=1.0), (self.emb_dim, self.emb_dim),
        jnp.float32, axes=("embed", "mlp"))
    return embedding, mix

  def _logits(self, embedding, mix, current, history_mean):
    # [..., D] -> [..., V]
    hidden = current + history_mean @ mix
    return hidden @ embedding.T / jnp.sqrt(self.emb_dim)

  @nn.compact
  def __call__(self, decoder_input_tokens, decoder_target_tokens,
               decoder_segment_ids=None, decoder_positions=None,
               decoder_causal_attention=None, *, enable_dropout=True,
               decode=False, max_decode_length=None, prefill=False,
               prefill_lengths=None):
    del decoder_target_tokens, decoder_segment_ids, decoder_positions
    del decoder_causal_attention, enable_dropout, max_decode_length
    embedding, mix = self._weights()
    tokens = decoder_input_tokens.astype(jnp.int32)
    x = embedding[tokens]  # [B, L, D]
    batch = tokens.shape[0]
    # Whole sequences: causal running means [B, L, D].
    sums = jnp.cumsum(x, axis=1)
    means = sums / jnp.arange(1, tokens.shape[1] + 1, dtype=jnp.float32
                              )[None, :, None]
    if not (decode or prefill):  # training / scoring: no cache at all
      return self._logits(embedding, mix, x, means)
    initialized = self.has_variable("cache", "total")
    total = self.variable("cache", "total", jnp.zeros, (batch, self.emb_dim),
                          jnp.float32)
    count = self.variable("cache", "count", jnp.zeros, (batch,), jnp.float32)
    if decode and initialized:  # one step: x [B, 1, D]
      total.value = total.value + x[:, 0]
      count.value = count.value + 1.0
      mean = total.value / count.value[:, None]
      return self._logits(embedding, mix, x, mean[:, None, :])
    if prefill:
      # Positions before prefill_lengths are in the cache; decoding feeds the
      # token at prefill_lengths next.
      keep = (jnp.arange(tokens.shape[1])[None, :] <
              prefill_lengths[:, None]).astype(jnp.float32)
      total.value = jnp.sum(x * keep[:, :, None], axis=1)
      count.value = prefill_lengths.astype(jnp.float32)
    return self._logits(embedding, mix, x, means)
