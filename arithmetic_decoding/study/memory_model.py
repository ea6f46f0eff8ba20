"""Per-chip bytes of a decode from a formula: the study's calculator.

The same question as the compiled sweep ("does N at length L fit on this
mesh?") for hardware we cannot compile for. Components (B = 1 input, R rows
per chip = N / data, model shards M, activations in the model's dtype):

  parameters   every array / M where one of its axes is sharded over
               `model` (heads, feed-forward, vocabulary; LOGICAL_AXIS_RULES),
               whole otherwise (replicated over `data`)
  self-attention cache   2 x layers x R x L x heads/M x d_kv, twice (the
               loop carries the old cache while writing the new one)
  encoder outputs        R x L x d_model (each row's copy of its input's
               encoding, as T5X expands it) + B x L x d_model
  cross-attention K/V    2 x R x L x heads/M x d_kv (recomputed per step and
               layer; one layer's live at a time)
  logits       R x V/M float32, LOGIT_COPIES times (logits, their exponentials
               and the step's other [R, V] temporaries)
  beam search  the K x V candidate scores of each input (float32, two
               copies) and a second cache (beams are reordered by gather)
  encoder pass B x heads/M x L x L float32 attention scores + activations;
               it runs before the loop, so it counts only if larger

`LOGIT_COPIES` and the cache factor are the two fitted constants; their
error against the compiled XXL points is in results/study/ (README).

  >>> from arithmetic_decoding.models import preset
  >>> parts = analytic_bytes(preset("xxl", dtype="bfloat16",
  ...     param_dtype="bfloat16"), "arithmetic", n=4, length=128, mesh=(1, 1))
  >>> round(parts["parameters"] / 2**30, 1)
  24.1
"""

from __future__ import annotations

from typing import Dict, Tuple

import jax
import numpy as np

from arithmetic_decoding.models import EncoderDecoderModel, T5Config
from arithmetic_decoding.sharding import LOGICAL_AXIS_RULES

LOGIT_COPIES = 3
CACHE_COPIES = 2
_MODEL_AXES = {name for name, axis in LOGICAL_AXIS_RULES if axis == "model"}


def parameter_bytes(config: T5Config, model_shards: int) -> int:
  """Parameter bytes on one chip."""
  model = EncoderDecoderModel(config)
  shapes = jax.tree.leaves(model.abstract_params())
  axes = jax.tree.leaves(model.param_logical_axes(),
                         is_leaf=lambda x: isinstance(x, tuple) or x is None)
  total = 0
  for shape, names in zip(shapes, axes):
    size = int(np.prod(shape.shape)) * shape.dtype.itemsize
    sharded = any(n in _MODEL_AXES for n in (names or ()))
    total += -(-size // model_shards) if sharded else size
  return total


def features(config: T5Config, n: int, length: int, mesh: Tuple[int, int],
             batch: int = 1) -> Tuple[int, int, int]:
  """One copy each of: the self-attention cache, the [rows, V/M] float32
  logits, the rows' encoder outputs (bytes per chip)."""
  data, shards = mesh
  act = np.dtype(config.activation_dtype).itemsize
  rows = max(1, batch * n // data)
  kv = -(-config.num_heads // shards) * config.d_kv
  return (2 * config.num_decoder_layers * rows * length * kv * act,
          rows * -(-config.vocab_size // shards) * 4,
          rows * length * config.d_model * act)


def analytic_bytes(config: T5Config, method: str, n: int, length: int,
                   mesh: Tuple[int, int], batch: int = 1) -> Dict[str, int]:
  """Per-chip bytes by component, and their "total"."""
  data, shards = mesh
  act = np.dtype(config.activation_dtype).itemsize
  rows = max(1, batch * n // data)
  heads = -(-config.num_heads // shards)
  kv = heads * config.d_kv
  cache = (CACHE_COPIES * 2 * config.num_decoder_layers * rows * length * kv *
           act)
  parts = {
      "parameters": parameter_bytes(config, shards),
      "cache": cache,
      "encoder_outputs": (rows + batch) * length * config.d_model * act,
      "cross_kv": 2 * rows * length * kv * act,
      "logits": LOGIT_COPIES * rows * -(-config.vocab_size // shards) * 4,
  }
  if method == "beam":
    parts["beam"] = (2 * batch * n * -(-config.vocab_size // shards) * 4 +
                     cache // CACHE_COPIES)
  encoder = (batch * heads * length * length * 4 +
             4 * batch * length * max(config.d_model, config.d_ff) * act)
  decode = sum(v for k, v in parts.items() if k != "parameters")
  parts["encoder_pass"] = max(0, encoder - decode)
  parts["total"] = sum(parts.values())
  return parts


# Memory per chip of hardware we cannot compile for (bytes): the question
# "how many chips for N at L" answered by the formula alone.
HARDWARE = {
    "TPU v4 (32 GiB)": 32 * 2**30,
    "TPU v5e (16 GiB)": 16 * 2**30,
    "TPU v5p (95 GiB)": 95 * 2**30,
    "TPU v6e (32 GiB)": 32 * 2**30,
    "GPU 80 GB": 80 * 10**9,
    "GPU 141 GB": 141 * 10**9,
}
