"""A compact T5.1.1 / mT5 encoder-decoder in Flax, speaking T5X's protocol.

Architecture (T5.1.1 as used by mT5): pre-norm blocks with RMS layer norm
(scale only, no bias, no mean subtraction); attention without biases and
without 1/sqrt(d_kv) (folded into the query initialisation); one relative
position bias table per stack, shared by its layers (bidirectional buckets in
the encoder, causal ones in the decoder); gated-GELU feed-forward
(`gelu(x W0) * (x W1)`); token embedding shared by encoder and decoder input;
untied output projection. No dropout: this model only decodes.

Every parameter and activation carries logical axis names (see
`sharding.LOGICAL_AXIS_RULES`): parameters through
`nn.with_logical_partitioning`, activations through
`nn.with_logical_constraint`, which constrain only under a mesh and a rules
context (set by `sharding`), and are plain identities elsewhere.

The decode cache is an explicit pytree, batch at axis 0:

  {"layer_0": {"key": [B, T, H, K], "value": [B, T, H, K]}, ...}

([B, H, K, T] with `time_minor`)

written at each row's `cur_index` (so rows may sit at different positions, as
they do after T5X's `initial_index`). Cross-attention keys and values are
either projected from the encoded input at every step, as T5X's decoder
does, or projected once per input (`T5.cross_kv`) and read by all the rows
of that input (see `DecoderLayer`).

Shapes: B batch, S encoder length, T decoder length, D d_model, H heads,
K d_kv, F d_ff, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding.models import initializers
from arithmetic_decoding.models.config import T5Config

# Logical axes of the decode cache's key/value arrays: [B, T, H, K] (T5X's
# layout, the default), [B, H, K, T] with `time_minor`.
CACHE_AXES = ("cache_batch", "cache_length", "cache_heads", "cache_kv")
CACHE_AXES_TIME_MINOR = ("cache_batch", "cache_heads", "cache_kv",
                         "cache_length")
# Added to masked attention logits (finite, so a fully masked row stays NaN-free).
_MASK = -1e10


def relative_position_bucket(relative_position: jax.Array, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> jax.Array:
  """Maps key_position - query_position to T5's relative attention buckets.

  Small distances get a bucket each; larger ones share logarithmically wider
  buckets up to `max_distance`, beyond which all share the last. In the
  bidirectional (encoder) case half the buckets are for keys after the query.
  Causal buckets count only keys at or before the query (later ones -> 0).

  >>> rp = jnp.array([-20, -3, -1, 0, 1, 3, 20])
  >>> relative_position_bucket(rp, True, 8, 16).tolist()
  [3, 2, 1, 0, 5, 6, 7]
  >>> relative_position_bucket(rp, False, 8, 16).tolist()
  [7, 3, 1, 0, 0, 0, 0]
  """
  distance = -relative_position  # > 0: the key is before the query.
  bucket = jnp.zeros_like(relative_position)
  if bidirectional:
    num_buckets //= 2
    bucket = jnp.where(distance < 0, num_buckets, 0)
    distance = jnp.abs(distance)
  else:
    distance = jnp.maximum(distance, 0)
  exact = num_buckets // 2
  # Logarithmic buckets for exact <= distance < max_distance.
  scaled = (jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact) /
            math.log(max_distance / exact) * (num_buckets - exact))
  far = jnp.minimum(exact + scaled.astype(jnp.int32), num_buckets - 1)
  return bucket + jnp.where(distance < exact, distance, far)


def _param(module: nn.Module, name: str, shape, axes, std: float, dtype):
  init = initializers.normal(std)
  return module.param(name, nn.with_logical_partitioning(init, axes), shape,
                      dtype)


def constrain(x: jax.Array, axes) -> jax.Array:
  return nn.with_logical_constraint(x, axes)


class RMSNorm(nn.Module):
  """T5's layer norm: x / rms(x) * scale, computed in float32."""

  config: T5Config

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    scale = self.param(
        "scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        (cfg.d_model,), cfg.parameter_dtype)
    x32 = x.astype(jnp.float32)
    variance = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = x32 * jax.lax.rsqrt(variance + cfg.layer_norm_epsilon)
    scale = scale.astype(jnp.float32).reshape((1,) * (y.ndim - 1) + (-1,))
    return (y * scale).astype(cfg.activation_dtype)


class RelativePositionBias(nn.Module):
  """[H, buckets] table -> attention bias [B, H, Tq, Tk] from positions."""

  config: T5Config
  bidirectional: bool

  @nn.compact
  def __call__(self, query_positions, key_positions):
    """query_positions int [B, Tq], key_positions int [Tk]."""
    cfg = self.config
    table = _param(self, "rel_embedding",
                   (cfg.num_heads, cfg.relative_attention_num_buckets),
                   ("heads", "relpos_buckets"), 1.0, cfg.parameter_dtype)
    # [B, Tq, 1], [1, 1, Tk] -> [B, Tq, Tk]
    relative = key_positions[None, None, :] - query_positions[:, :, None]
    buckets = relative_position_bucket(relative, self.bidirectional,
                                       cfg.relative_attention_num_buckets,
                                       cfg.relative_attention_max_distance)
    # [H, buckets] gathered at [B, Tq, Tk] -> [H, B, Tq, Tk] -> [B, H, Tq, Tk]
    bias = jnp.transpose(jnp.asarray(table)[:, buckets], (1, 0, 2, 3))
    return bias.astype(cfg.activation_dtype)


class Attention(nn.Module):
  """Multi-head attention without biases or logit scaling (T5)."""

  config: T5Config

  def setup(self):
    cfg = self.config
    d, h, k = cfg.d_model, cfg.num_heads, cfg.d_kv
    dt = cfg.parameter_dtype
    self.query = _param(self, "query", (d, h, k), ("embed", "heads", "kv"),
                        (d * k) ** -0.5, dt)
    self.key = _param(self, "key", (d, h, k), ("embed", "heads", "kv"),
                      d ** -0.5, dt)
    self.value = _param(self, "value", (d, h, k), ("embed", "heads", "kv"),
                        d ** -0.5, dt)
    self.out = _param(self, "out", (h, k, d), ("heads", "kv", "embed"),
                      (h * k) ** -0.5, dt)

  def _project(self, x, kernel):
    cfg = self.config
    batch, length, d = x.shape
    # [B*T, D] x [D, H*K] -> [B, T, H, K]. A plain 2-D matmul: XLA:CPU then
    # computes each row the same way whatever the batch (a 3-D einsum does
    # not), which keeps samples identical across data-parallel topologies.
    y = x.reshape(batch * length, d) @ kernel.astype(cfg.activation_dtype
                                                     ).reshape(d, -1)
    y = y.reshape(batch, length, cfg.num_heads, cfg.d_kv)
    return constrain(y, ("batch", "length", "heads", "kv"))

  def project_kv(self, x):
    return self._project(x, self.key), self._project(x, self.value)

  def __call__(self, x, keys, values, bias, cached: bool = False):
    """x [B, Tq, D]; keys, values [B, Tk, H, K], or the decode cache's
    [B, H, K, Tk] (`cached`); bias [B, H or 1, Tq, Tk].

    Both layouts run the same dot products: XLA computes the [B, Tk, H, K]
    form by first copying keys and values to [B, H, K, Tk], which the cache
    layout stores directly (no copy of the cache per step).
    """
    dt = self.config.activation_dtype
    q = self._project(x, self.query)
    # [B, Tq, H, K] x keys -> [B, H, Tq, Tk]
    logits = jnp.einsum("bqhk,bhkt->bhqt" if cached else "bqhk,bthk->bhqt",
                        q, keys).astype(jnp.float32)
    weights = jax.nn.softmax(logits + bias.astype(jnp.float32), axis=-1)
    # [B, H, Tq, Tk] x values -> [B, Tq, H, K]
    mixed = jnp.einsum("bhqt,bhkt->bqhk" if cached else "bhqt,bthk->bqhk",
                       weights.astype(dt), values)
    mixed = constrain(mixed, ("batch", "length", "heads", "kv"))
    batch, length = mixed.shape[:2]
    # [B*Tq, H*K] x [H*K, D] -> [B, Tq, D] (a 2-D matmul, as in _project).
    out = self.out.astype(dt)
    y = (mixed.reshape(batch * length, -1) @ out.reshape(-1, out.shape[-1])
         ).reshape(batch, length, -1)
    return constrain(y, ("batch", "length", "embed"))


class GatedGeluMlp(nn.Module):
  """gelu(x W0) * (x W1) -> W_out."""

  config: T5Config

  @nn.compact
  def __call__(self, x):
    cfg = self.config
    d, f, dt = cfg.d_model, cfg.d_ff, cfg.activation_dtype
    wi_0 = _param(self, "wi_0", (d, f), ("embed", "mlp"), d ** -0.5,
                  cfg.parameter_dtype)
    wi_1 = _param(self, "wi_1", (d, f), ("embed", "mlp"), d ** -0.5,
                  cfg.parameter_dtype)
    wo = _param(self, "wo", (f, d), ("mlp", "embed"), f ** -0.5,
                cfg.parameter_dtype)
    # [B, T, D] -> [B, T, F]
    gate = jax.nn.gelu(x @ wi_0.astype(dt), approximate=True)
    hidden = constrain(gate * (x @ wi_1.astype(dt)), ("batch", "length", "mlp"))
    # [B, T, F] -> [B, T, D]
    return constrain(hidden @ wo.astype(dt), ("batch", "length", "embed"))


class EncoderLayer(nn.Module):
  config: T5Config

  @nn.compact
  def __call__(self, x, bias):
    cfg = self.config
    h = RMSNorm(cfg, name="pre_attention_norm")(x)
    attention = Attention(cfg, name="attention")
    keys, values = attention.project_kv(h)
    x = x + attention(h, keys, values, bias)
    return x + GatedGeluMlp(cfg, name="mlp")(RMSNorm(cfg, name="pre_mlp_norm")(x))


class DecoderLayer(nn.Module):
  """Self-attention (full or one cached step), cross-attention, MLP.

  `time_minor`: the decode cache is [B, H, K, T] (written by a scatter or
  one slice update) instead of T5X-style [B, T, H, K] (written by a select
  over all slots); the same values and logits, bit for bit on XLA:CPU.
  """

  config: T5Config
  time_minor: bool = False

  def setup(self):
    cfg = self.config
    self.pre_self_attention_norm = RMSNorm(cfg)
    self.self_attention = Attention(cfg)
    self.pre_cross_attention_norm = RMSNorm(cfg)
    self.cross_attention = Attention(cfg)
    self.pre_mlp_norm = RMSNorm(cfg)
    self.mlp = GatedGeluMlp(cfg)

  def cross_kv(self, encoded):
    """encoded [B, S, D] -> this layer's cross-attention keys, values [B, S, H, K]."""
    keys, values = self.cross_attention.project_kv(encoded)
    return {"key": keys, "value": values}

  def __call__(self, x, self_bias, cross, cross_bias, cache=None,
               write_at=None, group_rows=None):
    """x [B, T, D] (T = 1 with a cache); write_at int [B]: each row's slot,
    or int []: one slot for all rows (< the cache's slots); group_rows: see
    `_grouped_attention`.

    `cross` is either the encoded input [B, S, D] (its keys and values are
    projected here, at every call, as T5X does) or this layer's projected
    keys and values per input, {"key", "value": [G, S, H, K]}, which the
    B = G * r rows read in groups of r consecutive rows (`cross_bias`
    [G, 1, 1, S]): row g * r + j attends to input g.
    """
    h = self.pre_self_attention_norm(x)
    keys, values = self.self_attention.project_kv(h)
    new_cache = None
    if cache is not None and not self.time_minor:
      # Write this step's key/value: [B, 1, H, K] into [B, Tcache, H, K]
      # where the slot is each row's write_at (one-hot select).
      slots = jnp.arange(cache["key"].shape[1])
      where = (slots[None, :] == jnp.broadcast_to(
          write_at, keys.shape[:1])[:, None])[:, :, None, None]
      keys = jnp.where(where, keys, cache["key"])
      values = jnp.where(where, values, cache["value"])
      keys, values = constrain(keys, CACHE_AXES), constrain(values, CACHE_AXES)
      new_cache = {"key": keys, "value": values}
    elif cache is not None:
      # Write this step's key/value [B, 1, H, K] at each row's slot
      # write_at [B] of the cache [B, H, K, Tcache]: a scatter of B columns,
      # in place in the decode loop (a select would rewrite the whole cache).
      if write_at.ndim == 0:  # one slot: a plain in-place slice update
        at = (0, 0, 0, write_at)
        keys = lax.dynamic_update_slice(cache["key"], keys[:, 0, ..., None],
                                        at)
        values = lax.dynamic_update_slice(cache["value"],
                                          values[:, 0, ..., None], at)
      else:
        rows = jnp.arange(keys.shape[0])
        keys = cache["key"].at[rows, :, :, write_at].set(keys[:, 0],
                                                        mode="drop")
        values = cache["value"].at[rows, :, :, write_at].set(values[:, 0],
                                                            mode="drop")
      keys, values = (constrain(keys, CACHE_AXES_TIME_MINOR),
                      constrain(values, CACHE_AXES_TIME_MINOR))
      new_cache = {"key": keys, "value": values}
    x = x + self.self_attention(h, keys, values, self_bias,
                                cached=cache is not None and self.time_minor)
    h = self.pre_cross_attention_norm(x)
    if isinstance(cross, Mapping):
      x = x + _grouped_attention(self.cross_attention, h, cross, cross_bias,
                                 group_rows)
    else:
      enc_keys, enc_values = self.cross_attention.project_kv(cross)
      x = x + self.cross_attention(h, enc_keys, enc_values, cross_bias)
    x = x + self.mlp(self.pre_mlp_norm(x))
    return x, new_cache


def _grouped_attention(attention: Attention, h, kv, bias, group_rows=None):
  """Rows attend to their group's keys/values: h [G*r, T, D], kv [G, S, H, K].

  The r rows of a group (r * T queries) become the query axis of one
  attention over the group's keys, so the keys and values are read once
  per group, never copied per row: [G*r, T, D] -> [G, r*T, D] -> attention
  -> [G*r, T, D].

  `group_rows` (static, >= r): run the attention as if each group had that
  many rows (zero rows appended, their outputs dropped). Decoding that
  drops ended rows (`compaction`) passes the group size it started with:
  XLA:CPU picks its dot kernel by shape, so each row's output keeps the
  same bits as among all rows.
  """
  rows, length, d = h.shape
  groups = kv["key"].shape[0]
  if rows % groups:
    raise ValueError(f"{rows} rows do not form groups of the {groups} inputs' "
                     "cross-attention keys/values (rows must be a multiple).")
  per_group = rows // groups
  grouped = h.reshape(groups, per_group * length, d)
  if group_rows is not None and group_rows > per_group:
    # [G, r*T, D] -> [G, group_rows*T, D]
    grouped = jnp.pad(grouped,
                      ((0, 0), (0, (group_rows - per_group) * length), (0, 0)))
  out = attention(grouped, kv["key"], kv["value"], bias)
  return out[:, :per_group * length].reshape(rows, length, d)


def _padding_bias(key_mask: jax.Array) -> jax.Array:
  """bool [B, Tk] (True = attend) -> additive bias [B, 1, 1, Tk]."""
  return jnp.where(key_mask, 0.0, _MASK)[:, None, None, :].astype(jnp.float32)


class T5(nn.Module):
  """The encoder-decoder. Methods: `encode`, `decode` (teacher-forced),
  `decode_step` (one cached step), `__call__` (all three, for init).
  `time_minor`: the decode cache's layout (see `DecoderLayer`)."""

  config: T5Config
  time_minor: bool = False

  def setup(self):
    cfg = self.config
    self.token_embedder = _param(self, "token_embedder",
                                 (cfg.vocab_size, cfg.d_model),
                                 ("vocab", "embed"), 1.0, cfg.parameter_dtype)
    self.encoder_relpos = RelativePositionBias(cfg, bidirectional=True)
    self.decoder_relpos = RelativePositionBias(cfg, bidirectional=False)
    self.encoder_layers = [EncoderLayer(cfg, name=f"encoder_{i}")
                           for i in range(cfg.num_encoder_layers)]
    self.decoder_layers = [DecoderLayer(cfg, self.time_minor,
                                        name=f"decoder_{i}")
                           for i in range(cfg.num_decoder_layers)]
    self.encoder_norm = RMSNorm(cfg)
    self.decoder_norm = RMSNorm(cfg)
    self.logits_dense = _param(self, "logits_dense",
                               (cfg.d_model, cfg.vocab_size),
                               ("embed", "vocab"), cfg.d_model ** -0.5,
                               cfg.parameter_dtype)

  def _embed(self, tokens):
    dt = self.config.activation_dtype
    # [B, T] -> [B, T, D]
    x = jnp.take(self.token_embedder, tokens, axis=0).astype(dt)
    return constrain(x, ("batch", "length", "embed"))

  def _logits(self, x):
    dt = self.config.activation_dtype
    # [B, T, D] -> [B, T, V]
    logits = self.decoder_norm(x) @ self.logits_dense.astype(dt)
    return constrain(logits, ("batch", "length", "vocab"))

  def encode(self, encoder_tokens):
    """int [B, S] (0 = padding) -> encoded [B, S, D]."""
    batch, length = encoder_tokens.shape
    mask = encoder_tokens > 0
    positions = jnp.broadcast_to(jnp.arange(length)[None, :], (batch, length))
    bias = (self.encoder_relpos(positions, jnp.arange(length)) +
            _padding_bias(mask))
    x = self._embed(encoder_tokens)
    for layer in self.encoder_layers:
      x = layer(x, bias)
    return self.encoder_norm(x)

  def decode(self, encoded, encoder_mask, decoder_input_tokens):
    """Teacher-forced: decoder inputs [B, T] (BOS 0 first) -> logits [B, T, V].

    Logits at position t predict the token after decoder_input_tokens[:, t].
    """
    batch, length = decoder_input_tokens.shape
    positions = jnp.broadcast_to(jnp.arange(length)[None, :], (batch, length))
    causal = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]
    self_bias = (self.decoder_relpos(positions, jnp.arange(length)) +
                 jnp.where(causal, 0.0, _MASK)[None, None, :, :])
    cross_bias = _padding_bias(encoder_mask)
    x = self._embed(decoder_input_tokens)
    for layer in self.decoder_layers:
      x, _ = layer(x, self_bias, encoded, cross_bias)
    return self._logits(x)

  def cross_kv(self, encoded):
    """encoded [B, S, D] -> every decoder layer's cross-attention keys and
    values: {"layer_i": {"key", "value": [B, S, H, K]}}."""
    return {f"layer_{i}": layer.cross_kv(encoded)
            for i, layer in enumerate(self.decoder_layers)}

  def decode_step(self, cross, encoder_mask, cur_token, cur_index, cache,
                  group_rows=None):
    """One cached step: cur_token [B, 1] at positions cur_index [B] (or one
    position [] for all rows, as T5X's beam search passes it: then the
    cache is written by one slice update and the position bias computed
    once, the same values as per row).

    `cross` is the encoded input per row [B, S, D] with `encoder_mask`
    [B, S] (keys and values projected at every step, as T5X does), or
    `cross_kv`'s projected keys and values per input [G, S, H, K] with
    `encoder_mask` [G, S], read by groups of B / G consecutive rows.

    Returns logits [B, V] for the next position and the updated cache.
    """
    cur_index = jnp.asarray(cur_index)
    # [B] per row, or (time-minor cache) [1] for all rows: bias [B or 1, H,
    # 1, Tcache].
    positions = (cur_index.reshape(-1) if self.time_minor else
                 jnp.broadcast_to(cur_index, cur_token.shape[:1]))
    length = cache["layer_0"]["key"].shape[-1 if self.time_minor else 1]
    slots = jnp.arange(length)
    visible = slots[None, :] <= positions[:, None]  # [B or 1, Tcache]
    self_bias = (self.decoder_relpos(positions[:, None], slots) +
                 jnp.where(visible, 0.0, _MASK)[:, None, None, :])
    cross_bias = _padding_bias(encoder_mask)
    x = self._embed(cur_token)
    new_cache = {}
    for i, layer in enumerate(self.decoder_layers):
      name = f"layer_{i}"
      layer_cross = cross[name] if isinstance(cross, Mapping) else cross
      x, new_cache[name] = layer(x, self_bias, layer_cross, cross_bias,
                                 cache=cache[name], write_at=cur_index,
                                 group_rows=group_rows)
    return self._logits(x)[:, 0, :], new_cache

  def __call__(self, encoder_tokens, decoder_input_tokens):
    encoded = self.encode(encoder_tokens)
    return self.decode(encoded, encoder_tokens > 0, decoder_input_tokens)
