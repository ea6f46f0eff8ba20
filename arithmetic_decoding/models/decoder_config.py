"""Configuration of the decoder-only family: Llama-style and Gemma 3.

One frozen dataclass describes every member; a GGUF file's metadata fills
it (`gguf_loader.config_from_metadata`), never a hard-coded size. What the
two architectures do differently is a field each:

  field            llama (SmolLM2)          gemma3
  norm placement   pre-norm                 pre- and post-norm (`post_norms`)
  QK-norm          no                       RMSNorm per head (`qk_norm`)
  feed-forward     SwiGLU (silu)            GeGLU (gelu, tanh approximation)
  embedding scale  1                        sqrt(d_model)
  RoPE pairs       interleaved (x0, x1)...  halves (x_i, x_{i + K/2})
  attention        all global               `layer_kinds`: 5 sliding-window
                                            layers per global one, each kind
                                            with its own RoPE base

A tiny configuration, for tests and worked examples:

  >>> cfg = DecoderConfig(architecture="llama", vocab_size=32, d_model=8,
  ...                     num_layers=2, num_heads=2, num_kv_heads=1,
  ...                     head_dim=4, d_ff=16)
  >>> cfg.layer_kinds, cfg.query_scale, cfg.heads_per_kv
  (('global', 'global'), 0.5, 2)
  >>> cfg.num_params()
  1448
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ARCHITECTURES = ("llama", "gemma3")
ROPE_STYLES = ("interleaved", "halves")
ACTIVATIONS = ("silu", "gelu_tanh")
LAYER_KINDS = ("global", "sliding")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  """One decoder-only transformer. Every field is static (shapes, dtypes).

  Attributes:
    architecture: "llama" or "gemma3" (the GGUF `general.architecture`).
    vocab_size: tokens (V).
    d_model: width of the residual stream (D).
    num_layers: blocks.
    num_heads: query heads (H).
    num_kv_heads: key/value heads (grouped-query attention; H is a multiple).
    head_dim: width of one head (K).
    d_ff: width of the gated feed-forward layer (F).
    norm_eps: RMSNorm epsilon.
    rope_base: RoPE base of the global layers.
    rope_base_local: RoPE base of the sliding-window layers.
    rope_scale: positions are divided by it in the global layers (linear
      RoPE scaling; 1 = none).
    rope_style: which dimensions RoPE rotates together: "interleaved"
      (2i, 2i + 1), as llama.cpp stores Llama's query/key weights, or
      "halves" (i, i + K/2), as Gemma's.
    activation: the gate's nonlinearity, "silu" (SwiGLU) or "gelu_tanh"
      (GeGLU).
    layer_kinds: "global" or "sliding" per layer (None: all global).
    sliding_window: a sliding layer's query at position p sees keys at
      positions p - sliding_window + 1 .. p.
    post_norms: RMSNorm on the attention and feed-forward outputs too
      (Gemma's sandwich norms).
    qk_norm: RMSNorm over each query and key head before RoPE.
    embed_scale: the token embedding is multiplied by it (Gemma: sqrt(D)).
    query_scale_base: attention logits are scaled by query_scale_base**-0.5
      (None: head_dim).
    tied_embedding: the output projection is the token embedding.
    context_length: the longest sequence the model was trained for.
    dtype: parameters and activations, "float32" or "bfloat16"; norms,
      softmax and logits are computed in float32 either way.
  """

  architecture: str
  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  d_ff: int
  norm_eps: float = 1e-5
  rope_base: float = 10_000.0
  rope_base_local: float = 10_000.0
  rope_scale: float = 1.0
  rope_style: str = "interleaved"
  activation: str = "silu"
  layer_kinds: Optional[Tuple[str, ...]] = None
  sliding_window: int = 0
  post_norms: bool = False
  qk_norm: bool = False
  embed_scale: float = 1.0
  query_scale_base: Optional[float] = None
  tied_embedding: bool = True
  context_length: int = 2048
  dtype: str = "float32"

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim", "d_ff", "context_length"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                       f"num_kv_heads ({self.num_kv_heads}).")
    if self.head_dim % 2:
      raise ValueError(f"head_dim must be even (RoPE rotates pairs); got "
                       f"{self.head_dim}.")
    for name, allowed in (("architecture", ARCHITECTURES),
                          ("rope_style", ROPE_STYLES),
                          ("activation", ACTIVATIONS), ("dtype", tuple(DTYPES))):
      if getattr(self, name) not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}; got "
                         f"{getattr(self, name)!r}.")
    kinds = self.layer_kinds
    if kinds is None:
      kinds = ("global",) * self.num_layers
    kinds = tuple(kinds)
    if len(kinds) != self.num_layers or not set(kinds) <= set(LAYER_KINDS):
      raise ValueError(f"layer_kinds must give one of {list(LAYER_KINDS)} per "
                       f"layer ({self.num_layers}); got {kinds!r}.")
    if "sliding" in kinds and self.sliding_window < 1:
      raise ValueError("sliding layers need sliding_window >= 1; got "
                       f"{self.sliding_window}.")
    object.__setattr__(self, "layer_kinds", kinds)

  @property
  def heads_per_kv(self) -> int:
    """Query heads sharing one key/value head (G)."""
    return self.num_heads // self.num_kv_heads

  @property
  def query_scale(self) -> float:
    """The factor on query . key."""
    base = self.head_dim if self.query_scale_base is None else self.query_scale_base
    return 1.0 / math.sqrt(base)

  @property
  def jnp_dtype(self):
    return DTYPES[self.dtype]

  def num_params(self) -> int:
    """Parameters, counting a tied embedding once."""
    d, k = self.d_model, self.head_dim
    attn = d * k * (2 * self.num_heads + 2 * self.num_kv_heads)
    norms = d * (4 if self.post_norms else 2) + (2 * k if self.qk_norm else 0)
    layer = attn + 3 * d * self.d_ff + norms
    embed = self.vocab_size * d * (1 if self.tied_embedding else 2)
    return self.num_layers * layer + embed + d

  def param_bytes(self) -> int:
    """Bytes of the parameters in `dtype`."""
    return self.num_params() * jnp.dtype(self.jnp_dtype).itemsize


# Small members of the family for tests and examples: every code path of
# the real ones (grouped-query attention, both RoPE pairings; Gemma's
# sandwich norms, QK-norm, embedding scale and a 3-position sliding window
# in 2 of 3 layers) at a size the CPU runs in milliseconds.
TINY = {
    "llama": DecoderConfig(
        architecture="llama", vocab_size=64, d_model=32, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=8, d_ff=64, rope_base=100.0,
        rope_style="interleaved", activation="silu", context_length=64),
    "gemma3": DecoderConfig(
        architecture="gemma3", vocab_size=64, d_model=32, num_layers=3,
        num_heads=4, num_kv_heads=1, head_dim=8, d_ff=64, norm_eps=1e-6,
        rope_base=1000.0, rope_base_local=100.0, rope_style="halves",
        activation="gelu_tanh", layer_kinds=("sliding", "sliding", "global"),
        sliding_window=3, post_norms=True, qk_norm=True,
        embed_scale=32 ** 0.5, query_scale_base=8.0, context_length=64),
}
