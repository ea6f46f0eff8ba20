"""Per-chip bytes of a decode from a formula: the study's calculator.

The same question as the compiled sweep ("does N at length L fit on this
mesh?") for hardware we cannot compile for. With B = 1 input, R = N / data
rows per chip and M model shards:

  parameters    every array / M where one of its axes is sharded over
                `model` (heads, feed-forward, vocabulary; LOGICAL_AXIS_RULES),
                whole where not (replicated over `data`): exact
  keys/values   copies of 2 x layers x R x L x heads/M x d_kv: the
                self-attention cache (carried and rewritten by the loop,
                reordered by gathers in beam search) and the cross-attention
                keys/values of every layer (XLA hoists their projection out
                of the loop)
  logits        copies of [R, V/M] float32 (logits and the step's [R, V]
                temporaries; beam search's K x V candidate scores)
  encoder pass  attention scores and activations of the encoder, which
                runs before the loop: counted only where larger

The copy counts per method are fitted on mT5-small compiles (FITTED); their
error against the compiled mT5-XXL points is reported by the study.

  >>> from arithmetic_decoding.models import preset
  >>> parts = analytic_bytes(preset("xxl", dtype="bfloat16",
  ...     param_dtype="bfloat16"), "arithmetic", n=4, length=128, mesh=(1, 1))
  >>> round(parts["parameters"] / 2**30, 1)
  24.1
"""

from __future__ import annotations

import functools
from typing import Dict, Tuple

import jax
import numpy as np

from arithmetic_decoding.models import EncoderDecoderModel, T5Config
from arithmetic_decoding.sharding import LOGICAL_AXIS_RULES

# Copies of (all layers' keys/values for the rows, the rows' float32 logits)
# in the compiled temporaries, fitted by least squares on 20 mT5-small
# compiles (`python scripts/calibrate_memory_model.py`); tested out of sample
# on the mT5-XXL sweep.
FITTED = {"beam": (8.37, 0.545), "arithmetic": (3.95, 2.115)}
# Arithmetic sampling with keys/values shared per input (`models.CrossKV`):
# not fitted. In T5X's layout half of the key/value copies are taken to be
# the self-attention cache and half the cross-attention keys/values (the
# two are the same size at input length = output length); sharing keeps the
# cache copies per row and makes the cross copies per input. Its error
# against the compiled points is in the study's report.
SHARED_KV_COPIES = (FITTED["arithmetic"][0] / 2, FITTED["arithmetic"][0] / 2)
_MODEL_AXES = {name for name, axis in LOGICAL_AXIS_RULES if axis == "model"}


@functools.lru_cache(maxsize=None)
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
             batch: int = 1) -> Tuple[int, int]:
  """Bytes per chip of (1) one copy of all decoder layers' keys and values
  for the rows at length L -- the self-attention cache, and as much again
  for the cross-attention keys/values, which XLA hoists out of the loop
  (loop-invariant); with input length = output length the two cannot be
  told apart -- and (2) one copy of the [rows, V/M] float32 logits."""
  data, shards = mesh
  act = np.dtype(config.activation_dtype).itemsize
  rows = max(1, batch * n // data)
  kv = -(-config.num_heads // shards) * config.d_kv
  return (config.num_decoder_layers * 2 * rows * length * kv * act,
          rows * -(-config.vocab_size // shards) * 4)


def analytic_bytes(config: T5Config, method: str, n: int, length: int,
                   mesh: Tuple[int, int], batch: int = 1) -> Dict[str, int]:
  """Per-chip bytes by component, and their "total"."""
  kv_bytes, logit_bytes = features(config, n, length, mesh, batch)
  kv_copies, logit_copies = FITTED["beam" if method == "beam" else
                                   "arithmetic"]
  if method == "arithmetic_shared":
    # The chip's rows hold ceil(rows / N) inputs' cross keys/values (one
    # per chip for batch 1), not one per row.
    rows = max(1, batch * n // mesh[0])
    inputs = -(-rows // n)
    cache_copies, cross_copies = SHARED_KV_COPIES
    kv_bytes = kv_bytes * (cache_copies + cross_copies * inputs / rows)
    kv_copies = 1.0
  shards = mesh[1]
  heads = -(-config.num_heads // shards)
  act = np.dtype(config.activation_dtype).itemsize
  parts = {"parameters": parameter_bytes(config, shards),
           "keys_values": int(kv_copies * kv_bytes),
           "logits": int(logit_copies * logit_bytes)}
  # The encoder runs before the loop: its attention scores and activations
  # count only where they exceed the loop's working memory.
  encoder = (batch * heads * length * length * 4 +
             4 * batch * length * max(config.d_model, config.d_ff) * act)
  parts["encoder_pass"] = max(0, encoder - parts["keys_values"] -
                              parts["logits"])
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

# Usable share of a device's memory: the TPU v4 compiler's 30.75 of 32 GiB.
USABLE_FRACTION = 30.75 / 32


def calculator(config: T5Config, method: str, length: int, memory: int,
               max_exp: int = 10, chip_counts=(1, 2, 4, 8)) -> Dict[int, int]:
  """{N: fewest devices} from the formula alone, for a device of `memory`
  bytes: for each N = 2**e, the fewest devices c (among `chip_counts`) with
  a (data, model) split of c where the formula's total fits. Ns that fit
  nowhere are left out.

  >>> from arithmetic_decoding.models import preset
  >>> xxl = preset("xxl", dtype="bfloat16", param_dtype="bfloat16")
  >>> calculator(xxl, "beam", 128, 16 * 2**30)[1]   # 24 GiB of parameters
  2
  """
  out = {}
  for e in range(max_exp + 1):
    n = 2**e
    for chips in chip_counts:
      splits = [(d, chips // d) for d in range(1, chips + 1)
                if chips % d == 0 and n % d == 0]
      if any(analytic_bytes(config, method, n, length, split)["total"] <=
             USABLE_FRACTION * memory for split in splits):
        out[n] = chips
        break
  return out
