"""A decoder-only transformer in Flax (Llama-style, Gemma 3), in T5X's protocol.

The architecture is read from a `DecoderConfig` (filled from a GGUF file's
metadata by `gguf_loader`): pre-norm blocks of grouped-query attention with
RoPE and a gated feed-forward layer, plus Gemma 3's sandwich norms, QK-norm,
embedding scale and interleaved sliding-window / global layers.

Positions. A sequence slot of the decode loop is a model position plus one:
slot 0 holds T5X's BOS placeholder (0), which is never a model input, and the
prompt's first real token (Gemma's `<bos>` included) sits in slot 1 at model
position 0:

  slots            0    1     2      3     4
  inputs          [0,  <bos>, The,  Lord,  0 ...]
  model position       0     1      2
  initial_index = 3 (the last prompt token's slot)

The decode cache is an explicit pytree, batch at axis 0, one entry per model
position (cache position p holds the keys/values of model position p):

  {"layer_i": {"key": [B, Hkv, K, S], "value": [B, Hkv, K, S]}, ...}

positions minor, so that attention reads each head's positions contiguously
and a decode step writes one column per row, in place inside the loop
(`write_cache`), instead of rewriting the whole cache with a select.

Each step writes its row's position before attending, so a row only ever
reads positions it wrote (or the prefill wrote for its prompt); what a
longer neighbour's prefill left beyond a row's prompt is overwritten before
it is read. That is why a batch of prompts of different lengths decodes each
prompt exactly as it would alone (T5X's `initial_index` semantics, no left
padding: a row's positions are its own).

Shapes: B batch, T tokens in a call, S cache positions, D d_model, H query
heads, Hkv key/value heads, G = H / Hkv, K head_dim, F d_ff, V vocabulary.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from arithmetic_decoding.models import initializers
from arithmetic_decoding.models.decoder_config import DecoderConfig

PyTree = Any
# Added to masked attention logits (finite: a fully masked query stays NaN-free).
_MASK = -1e30


def _param(module: nn.Module, name: str, shape, axes, dtype, init=None):
  init = init or initializers.normal(0.02)
  return module.param(name, nn.with_logical_partitioning(init, axes), shape,
                      dtype)


def constrain(x: jax.Array, axes) -> jax.Array:
  return nn.with_logical_constraint(x, axes)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
  """x / rms(x) * scale over the last axis, in float32.

  >>> [round(v, 4) for v in rms_norm(jnp.array([3.0, 4.0]), jnp.ones(2), 0.0).tolist()]
  [0.8485, 1.1314]
  """
  x32 = x.astype(jnp.float32)
  variance = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
  scale = scale.astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
  return x32 * jax.lax.rsqrt(variance + eps) * scale


def rope(x: jax.Array, positions: jax.Array, base: float, scale: float,
         style: str) -> jax.Array:
  """Rotary position embedding of x [B, T, heads, K] at positions [B, T].

  Pair i of a head (frequency base**(-2i/K)) is dimensions (2i, 2i + 1)
  with style "interleaved", (i, i + K/2) with "halves"; a pair at position
  p turns by the angle p / scale * base**(-2i/K). Position 0 is unturned:

  >>> x = jnp.arange(4.0).reshape(1, 1, 1, 4)
  >>> rope(x, jnp.zeros((1, 1), jnp.int32), 10.0, 1.0, "halves").tolist()
  [[[[0.0, 1.0, 2.0, 3.0]]]]
  >>> y = rope(jnp.array([[[[1.0, 0.0]]]]), jnp.ones((1, 1), jnp.int32), 10.0,
  ...          1.0, "interleaved")  # (cos 1, sin 1)
  >>> [round(v, 4) for v in y[0, 0, 0].tolist()]
  [0.5403, 0.8415]
  """
  k = x.shape[-1]
  inv_freq = 1.0 / (base ** (jnp.arange(0, k, 2, dtype=jnp.float32) / k))
  # [B, T, 1] * [K/2] -> [B, T, 1, K/2]
  angles = ((positions.astype(jnp.float32) / scale)[..., None] *
            inv_freq[None, None, :])
  cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
  x32 = x.astype(jnp.float32)
  if style == "interleaved":
    even, odd = x32[..., 0::2], x32[..., 1::2]
    turned = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], -1)
    return turned.reshape(x.shape).astype(x.dtype)
  first, second = x32[..., :k // 2], x32[..., k // 2:]
  return jnp.concatenate([first * cos - second * sin,
                          first * sin + second * cos], -1).astype(x.dtype)


def attention_mask(query_positions: jax.Array, key_positions: jax.Array,
                   window: int) -> jax.Array:
  """bool [B, Tq, S]: key position <= query position (and, with a window
  w > 0, query - key < w).

  >>> attention_mask(jnp.array([[2]]), jnp.arange(4), 2).tolist()
  [[[False, True, True, False]]]
  """
  # [B, Tq, 1] - [1, 1, S] -> [B, Tq, S]
  distance = query_positions[:, :, None] - key_positions[None, None, :]
  visible = distance >= 0
  if window > 0:
    visible &= distance < window
  return visible


class Attention(nn.Module):
  """Grouped-query attention with RoPE (and Gemma's QK-norm)."""

  config: DecoderConfig
  kind: str  # "global" or "sliding"

  def setup(self):
    cfg = self.config
    d, h, hkv, k = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    dt = cfg.jnp_dtype
    self.query = _param(self, "query", (d, h, k), ("embed", "heads", "kv"), dt)
    self.key = _param(self, "key", (d, hkv, k), ("embed", "kv_heads", "kv"), dt)
    self.value = _param(self, "value", (d, hkv, k), ("embed", "kv_heads", "kv"),
                        dt)
    self.out = _param(self, "out", (h, k, d), ("heads", "kv", "embed"), dt)
    if cfg.qk_norm:
      ones = nn.initializers.ones
      self.query_norm = _param(self, "query_norm", (k,), ("kv",), dt, ones)
      self.key_norm = _param(self, "key_norm", (k,), ("kv",), dt, ones)

  def _project(self, x, kernel):
    # [B*T, D] x [D, heads*K] -> [B, T, heads, K]. A plain 2-D matmul: XLA:CPU
    # computes each row the same way whatever the batch.
    batch, length, d = x.shape
    y = x.reshape(batch * length, d) @ kernel.reshape(d, -1).astype(x.dtype)
    return y.reshape(batch, length, kernel.shape[1], kernel.shape[2])

  def __call__(self, x, positions, cache):
    """x [B, T, D] at positions [B, T]; cache {"key", "value": [B, Hkv, K, S]}.

    Writes this call's keys/values at their positions, then attends over the
    whole cache (masked to each query's visible positions). Returns the
    output [B, T, D] and the new cache.
    """
    cfg = self.config
    dt = x.dtype
    sliding = self.kind == "sliding"
    base = cfg.rope_base_local if sliding else cfg.rope_base
    scale = 1.0 if sliding else cfg.rope_scale
    q = self._project(x, self.query)  # [B, T, H, K]
    k = self._project(x, self.key)  # [B, T, Hkv, K]
    v = self._project(x, self.value)
    if cfg.qk_norm:
      q = rms_norm(q, self.query_norm, cfg.norm_eps).astype(dt)
      k = rms_norm(k, self.key_norm, cfg.norm_eps).astype(dt)
    q = rope(q, positions, base, scale, cfg.rope_style)
    k = rope(k, positions, base, scale, cfg.rope_style)
    cache = write_cache(cache, positions, k, v)
    keys, values = cache["key"], cache["value"]  # [B, Hkv, K, S]
    batch, length = x.shape[:2]
    slots = keys.shape[-1]
    g = cfg.heads_per_kv
    # [B, T, H, K] -> [B, T, Hkv, G, K]: head h reads key/value head h // G.
    q = q.reshape(batch, length, cfg.num_kv_heads, g, cfg.head_dim)
    # [B, T, Hkv, G, K] x [B, Hkv, K, S] -> [B, Hkv, G, T, S]
    logits = jnp.einsum("btngk,bnks->bngts", q, keys,
                        preferred_element_type=jnp.float32) * cfg.query_scale
    visible = attention_mask(positions, jnp.arange(slots),
                             cfg.sliding_window if sliding else 0)
    logits = jnp.where(visible[:, None, None], logits, _MASK)
    weights = jax.nn.softmax(logits, axis=-1).astype(dt)
    # [B, Hkv, G, T, S] x [B, Hkv, K, S] -> [B, T, Hkv, G, K] -> [B*T, H*K]
    mixed = jnp.einsum("bngts,bnks->btngk", weights, values)
    mixed = mixed.reshape(batch * length, cfg.num_heads * cfg.head_dim)
    out = mixed @ self.out.reshape(-1, cfg.d_model).astype(dt)
    return out.reshape(batch, length, cfg.d_model), cache


def write_cache(cache, positions, keys, values):
  """Writes keys/values [B, T, Hkv, K] at positions [B, T] of the cache
  [B, Hkv, K, S] (positions minor: attention reads contiguous positions);
  positions outside 0..S-1 write nothing. A scatter of B x T columns: in
  place in the decode loop (a select would rewrite the whole cache).

  >>> c = {"key": jnp.zeros((1, 1, 1, 3)), "value": jnp.zeros((1, 1, 1, 3))}
  >>> new = write_cache(c, jnp.array([[1]]), jnp.ones((1, 1, 1, 1)),
  ...                   jnp.ones((1, 1, 1, 1)))
  >>> new["key"][0, 0, 0].tolist()
  [0.0, 1.0, 0.0]
  """
  slots = cache["key"].shape[-1]
  rows = jnp.arange(keys.shape[0])[:, None]  # [B, 1]
  # Negative positions would wrap: send them past the end (dropped).
  at = jnp.where(positions >= 0, positions, slots)  # [B, T]
  # cache[rows, :, :, at] is [B, T, Hkv, K], the layout of keys/values.
  return {"key": cache["key"].at[rows, :, :, at].set(
              keys.astype(cache["key"].dtype), mode="drop"),
          "value": cache["value"].at[rows, :, :, at].set(
              values.astype(cache["value"].dtype), mode="drop")}


class GatedMlp(nn.Module):
  """act(x W_gate) * (x W_up) -> W_down (SwiGLU or GeGLU)."""

  config: DecoderConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    d, f, dt = cfg.d_model, cfg.d_ff, cfg.jnp_dtype
    gate = _param(self, "gate", (d, f), ("embed", "mlp"), dt)
    up = _param(self, "up", (d, f), ("embed", "mlp"), dt)
    down = _param(self, "down", (f, d), ("mlp", "embed"), dt)
    batch, length = x.shape[:2]
    x2 = x.reshape(batch * length, d)  # [B*T, D]
    g = x2 @ gate.astype(x.dtype)  # [B*T, F]
    g = (jax.nn.silu(g) if cfg.activation == "silu" else
         jax.nn.gelu(g, approximate=True))
    hidden = constrain(g * (x2 @ up.astype(x.dtype)), ("batch", "mlp"))
    return (hidden @ down.astype(x.dtype)).reshape(batch, length, d)


class Block(nn.Module):
  """One layer: attention and feed-forward, each in a residual branch."""

  config: DecoderConfig
  kind: str

  @nn.compact
  def __call__(self, x, positions, cache):
    cfg = self.config
    dt = cfg.jnp_dtype
    ones = nn.initializers.ones
    norm = lambda name, y: rms_norm(
        y, _param(self, name, (cfg.d_model,), ("embed",), dt, ones),
        cfg.norm_eps).astype(dt)
    h, cache = Attention(cfg, self.kind, name="attention")(
        norm("attention_norm", x), positions, cache)
    if cfg.post_norms:
      h = norm("post_attention_norm", h)
    x = x + h
    h = GatedMlp(cfg, name="mlp")(norm("mlp_norm", x))
    if cfg.post_norms:
      h = norm("post_mlp_norm", h)
    return constrain(x + h, ("batch", "length", "embed")), cache


class DecoderOnly(nn.Module):
  """The whole model: embedding, blocks, final norm, output projection."""

  config: DecoderConfig

  def setup(self):
    cfg = self.config
    dt = cfg.jnp_dtype
    self.embedding = _param(self, "embedding", (cfg.vocab_size, cfg.d_model),
                            ("vocab", "embed"), dt)
    self.blocks = [Block(cfg, kind, name=f"layer_{i}")
                   for i, kind in enumerate(cfg.layer_kinds)]
    self.final_norm = _param(self, "final_norm", (cfg.d_model,), ("embed",),
                             dt, nn.initializers.ones)
    if not cfg.tied_embedding:
      self.output = _param(self, "output", (cfg.d_model, cfg.vocab_size),
                           ("embed", "vocab"), dt)

  def hidden(self, tokens, positions, cache):
    """tokens [B, T] at positions [B, T] -> final hidden [B, T, D] and the
    cache with their keys/values written."""
    cfg = self.config
    dt = cfg.jnp_dtype
    x = jnp.take(self.embedding, tokens, axis=0).astype(dt)  # [B, T, D]
    if cfg.embed_scale != 1.0:
      x = (x.astype(jnp.float32) * cfg.embed_scale).astype(dt)
    new_cache = {}
    for i, block in enumerate(self.blocks):
      x, new_cache[f"layer_{i}"] = block(x, positions, cache[f"layer_{i}"])
    return rms_norm(x, self.final_norm, cfg.norm_eps), new_cache

  def logits(self, hidden):
    """[B, T, D] (float32) -> logits float32 [B, T, V]."""
    cfg = self.config
    batch, length, d = hidden.shape
    h = hidden.reshape(batch * length, d).astype(cfg.jnp_dtype)
    if cfg.tied_embedding:
      # [B*T, D] x [V, D]^T -> [B*T, V]
      out = jax.lax.dot_general(h, self.embedding.astype(h.dtype),
                                (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32)
    else:
      out = jnp.dot(h, self.output.astype(h.dtype),
                    preferred_element_type=jnp.float32)
    return constrain(out.reshape(batch, length, -1), ("batch", "length", "vocab"))

  def __call__(self, tokens, positions, cache):
    """-> (logits float32 [B, T, V], new cache)."""
    hidden, cache = self.hidden(tokens, positions, cache)
    return self.logits(hidden), cache

  def prefill(self, tokens, positions, cache):
    """The cache with the keys/values of tokens [B, T] (no logits)."""
    return self.hidden(tokens, positions, cache)[1]

  def decode_step(self, cur_token, cur_index, cache):
    """One step of T5X's protocol: cur_token [R, 1] in slot cur_index [R]
    (model position cur_index - 1) -> (logits float32 [R, V], new cache)."""
    positions = (cur_index - 1)[:, None]  # [R] -> [R, 1]
    logits, cache = self(cur_token, positions, cache)
    return logits[:, 0], cache


def init_cache(config: DecoderConfig, batch: int, slots: int,
               dtype=None) -> Dict[str, Any]:
  """Zeros: {"layer_i": {"key", "value": [batch, Hkv, K, slots]}}."""
  shape = (batch, config.num_kv_heads, config.head_dim, slots)
  zeros = jnp.zeros(shape, dtype or config.jnp_dtype)
  return {f"layer_{i}": {"key": zeros, "value": zeros}
          for i in range(config.num_layers)}
