"""Configurations of the T5.1.1 / mT5 encoder-decoder.

The size presets carry the published mT5 dimensions (Xue et al., 2021,
"mT5: A massively multilingual pre-trained text-to-text transformer"): the
T5.1.1 recipe with a 250,112-token vocabulary and an untied output
projection. `tiny` is ours, for tests: every code path of the big ones at a
size the CPU decodes in milliseconds.

  >>> PRESETS["xxl"].num_heads * PRESETS["xxl"].d_kv
  4096
  >>> round(PRESETS["small"].num_params() / 1e6)
  300
"""

from __future__ import annotations

import dataclasses
from typing import Dict

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class T5Config:
  """One encoder-decoder. Every field changes shapes or dtypes: static.

  Attributes:
    vocab_size: tokens; 0 is padding / BOS, as in T5X.
    d_model: width of the residual stream.
    d_ff: width of the gated-GELU feed-forward layer.
    num_heads: attention heads.
    d_kv: width of one head (64 in every mT5 size).
    num_encoder_layers: encoder blocks.
    num_decoder_layers: decoder blocks.
    relative_attention_num_buckets: buckets of relative position, shared by
      all layers of a stack (bidirectional in the encoder: half per side).
    relative_attention_max_distance: distances beyond it share a bucket.
    layer_norm_epsilon: RMS layer norm epsilon.
    dtype: activations ("bfloat16" or "float32"); logits come out in it.
    param_dtype: parameters as stored ("float32" or "bfloat16").
  """

  vocab_size: int = 250_112
  d_model: int = 512
  d_ff: int = 1024
  num_heads: int = 6
  d_kv: int = 64
  num_encoder_layers: int = 8
  num_decoder_layers: int = 8
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  layer_norm_epsilon: float = 1e-6
  dtype: str = "float32"
  param_dtype: str = "float32"

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "d_ff", "num_heads", "d_kv",
                 "num_encoder_layers", "num_decoder_layers",
                 "relative_attention_num_buckets",
                 "relative_attention_max_distance"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}.")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(f"{name} must be one of {sorted(_DTYPES)}; got "
                         f"{getattr(self, name)!r}.")

  @property
  def activation_dtype(self):
    return _DTYPES[self.dtype]

  @property
  def parameter_dtype(self):
    return _DTYPES[self.param_dtype]

  def num_params(self) -> int:
    """Parameter count (embedding, both stacks, output projection)."""
    d, f, hk = self.d_model, self.d_ff, self.num_heads * self.d_kv
    attention = 4 * d * hk
    mlp = 3 * d * f
    relpos = self.num_heads * self.relative_attention_num_buckets
    encoder = self.num_encoder_layers * (attention + mlp + 2 * d) + d + relpos
    decoder = (self.num_decoder_layers * (2 * attention + mlp + 3 * d) + d +
               relpos)
    return 2 * self.vocab_size * d + encoder + decoder

  def replace(self, **changes) -> "T5Config":
    return dataclasses.replace(self, **changes)


PRESETS: Dict[str, T5Config] = {
    # Ours: for tests and the demo (a 64-token vocabulary, two layers each).
    "tiny": T5Config(vocab_size=64, d_model=32, d_ff=64, num_heads=8, d_kv=4,
                     num_encoder_layers=2, num_decoder_layers=2,
                     relative_attention_num_buckets=8,
                     relative_attention_max_distance=16),
    # mT5 sizes, as published.
    "small": T5Config(d_model=512, d_ff=1024, num_heads=6,
                      num_encoder_layers=8, num_decoder_layers=8),
    "base": T5Config(d_model=768, d_ff=2048, num_heads=12,
                     num_encoder_layers=12, num_decoder_layers=12),
    "large": T5Config(d_model=1024, d_ff=2816, num_heads=16,
                      num_encoder_layers=24, num_decoder_layers=24),
    "xl": T5Config(d_model=2048, d_ff=5120, num_heads=32,
                   num_encoder_layers=24, num_decoder_layers=24),
    "xxl": T5Config(d_model=4096, d_ff=10240, num_heads=64,
                    num_encoder_layers=24, num_decoder_layers=24),
}


def preset(name: str, **changes) -> T5Config:
  """A preset by name, with optional field changes (e.g. dtype="bfloat16")."""
  if name not in PRESETS:
    raise ValueError(f"preset must be one of {sorted(PRESETS)}; got {name!r}.")
  return PRESETS[name].replace(**changes)
