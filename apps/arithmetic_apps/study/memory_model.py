"""Per-chip bytes of a decode from a formula: the study's calculator.

The same question as the compiled sweep ("does N at length L fit on this
mesh?") for hardware we cannot compile for. With B = 1 input, R = N / data
rows per chip and M model shards:

  parameters    every array / M where one of its axes is sharded over
                `model` (heads, feed-forward, vocabulary; LOGICAL_AXIS_RULES),
                whole where not (replicated over `data`): exact
  keys/values   copies of one key/value unit, 2 x layers x R x L x
                heads/M x d_kv: the self-attention cache (carried and
                rewritten by the loop, reordered by gathers in beam search)
                and, in T5X's layout, the cross-attention keys/values of
                every layer (XLA hoists their projection out of the loop);
                with keys/values per input (`models.CrossKV`) the cross part
                counts per input, not per row
  logits        copies of [R, V/M] float32 (logits and the step's [R, V]
                temporaries; beam search's K x V candidate scores)
  encoder pass  attention scores and activations of the encoder, which
                runs before the loop: counted only where larger

How many key/value copies the compiled program keeps is the compiler's
choice, and the TPU v4 compiler makes two (the XXL sweep shows both):

  natural       with room to spare: a fixed count per method and program
                (beam search keeps ~8 when one program holds all of an
                input's rows, data = 1, ~5 when the rows are split over
                `data`; arithmetic sampling ~4.6 and ~3.3)
  squeezed      when the natural schedule would pass `squeeze_at` (0.97) of
                the usable memory, the compiler rematerialises down to a
                smaller count (~4.7 and ~3.7 for beam search, ~3.3 and
                ~3.1 for arithmetic sampling) and the program still fits

so the formula takes the natural count where it leaves room and the
squeezed count where not. The counts are fitted (minimax relative error)
on the compiled mT5-XXL sweep by `python scripts/fit_memory_model.py`,
which also cross-validates them (leave one length / one topology out) and
checks them on mT5-small and on other TPU generations; all of it is in
docs/study.md.

  >>> from arithmetic_decoding.models import preset
  >>> parts = analytic_bytes(preset("xxl", dtype="bfloat16",
  ...     param_dtype="bfloat16"), "arithmetic", n=4, length=128, mesh=(1, 1))
  >>> round(parts["parameters"] / 2**30, 1)
  24.1

On two chips (mesh 1x2) N = 64 at L = 128 keeps the natural 4.6 units of
1.5 GiB; N = 256 (units of 6 GiB) would need 27.6 GiB of keys/values
beside 12 GiB of parameters, so the squeezed 3.25 units are counted:

  >>> xxl = preset("xxl", dtype="bfloat16", param_dtype="bfloat16")
  >>> [round(analytic_bytes(xxl, "arithmetic", n, 128, (1, 2))
  ...        ["keys_values"] / 2**30, 2) for n in (64, 256)]
  [6.9, 19.5]
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, Mapping, Optional, Tuple

import jax
import numpy as np

from arithmetic_decoding.models import EncoderDecoderModel, T5Config
from arithmetic_decoding.sharding import LOGICAL_AXIS_RULES

_MODEL_AXES = {name for name, axis in LOGICAL_AXIS_RULES if axis == "model"}
V4_HBM_BYTES = 32 * 2**30
# The TPU v4 compiler's usable HBM: its out-of-memory message reads "exceeds
# available HBM (30.75G)" on a 32 GiB chip (measured here, mT5-XXL beam
# search, N = 128); libtpu holds the 1.25 GiB difference back for itself.
V4_USABLE_BYTES = int(30.75 * 2**30)
# The formula scales that usable share to other devices' memory; compiled
# points (`points.fits`) keep the absolute reserve instead.
USABLE_FRACTION = V4_USABLE_BYTES / V4_HBM_BYTES
RESERVE_BYTES = V4_HBM_BYTES - V4_USABLE_BYTES


@dataclasses.dataclass(frozen=True)
class Copies:
  """Key/value units the compiled program keeps: with room to spare
  (`natural`) and when squeezed near the limit (`squeezed`)."""

  natural: float
  squeezed: float


@dataclasses.dataclass(frozen=True)
class Constants:
  """The formula's fitted constants.

  Attributes:
    kv_copies: {(method, program): Copies}; method "beam", "arithmetic"
      (T5X's layout; ancestral sampling uses it too) or "arithmetic_shared"
      (cache copies per row); program "single" (data = 1) or "split"
      (data > 1).
    shared_cross_copies: with keys/values per input, copies of the cross
      keys/values per input held on the chip (a unit's worth per input).
    logit_copies: {method: copies of the [R, V/M] float32 logits}.
    squeeze_at: the natural schedule is kept while its total is at most
      this share of the usable memory.
  """

  kv_copies: Mapping[Tuple[str, str], Copies]
  shared_cross_copies: float
  logit_copies: Mapping[str, float]
  squeeze_at: float


FITTED = Constants(
    kv_copies={
        ("beam", "single"): Copies(7.8, 4.65),
        ("beam", "split"): Copies(5.1, 3.65),
        ("arithmetic", "single"): Copies(4.6, 3.25),
        ("arithmetic", "split"): Copies(3.25, 3.05),
        ("arithmetic_shared", "single"): Copies(2.1, 2.05),
        ("arithmetic_shared", "split"): Copies(2.05, 2.05),
    },
    shared_cross_copies=0.4,
    logit_copies={"beam": 0.545, "arithmetic": 2.115,
                  "arithmetic_shared": 2.115},
    squeeze_at=0.97)


def formula_method(method: str) -> str:
  """The constants' method: ancestral sampling is arithmetic's program but
  for the chooser."""
  return "arithmetic" if method == "ancestral" else method


def program(mesh: Tuple[int, int]) -> str:
  """"single" when one program holds all rows (data = 1), else "split"."""
  return "single" if mesh[0] == 1 else "split"


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
  """Bytes per chip of (1) one key/value unit -- all decoder layers' keys
  and values for the chip's rows at length L, the size of the
  self-attention cache (and of T5X's cross-attention keys/values at input
  length = output length) -- and (2) one copy of the [rows, V/M] float32
  logits."""
  data, shards = mesh
  act = np.dtype(config.activation_dtype).itemsize
  rows = max(1, batch * n // data)
  kv = -(-config.num_heads // shards) * config.d_kv
  return (config.num_decoder_layers * 2 * rows * length * kv * act,
          rows * -(-config.vocab_size // shards) * 4)


def analytic_bytes(config: T5Config, method: str, n: int, length: int,
                   mesh: Tuple[int, int], batch: int = 1,
                   memory: int = V4_HBM_BYTES,
                   constants: Constants = FITTED) -> Dict[str, int]:
  """Per-chip bytes by component, and their "total", on a device of
  `memory` bytes (which decides natural or squeezed copies)."""
  kv_bytes, logit_bytes = features(config, n, length, mesh, batch)
  method = formula_method(method)
  copies = constants.kv_copies[(method, program(mesh))]
  cross = 0.0
  if method == "arithmetic_shared":
    # The chip's rows hold ceil(rows / N) inputs' cross keys/values (one
    # per chip for batch 1), not one per row.
    rows = max(1, batch * n // mesh[0])
    cross = constants.shared_cross_copies * kv_bytes * -(-rows // n) / rows
  shards = mesh[1]
  heads = -(-config.num_heads // shards)
  act = np.dtype(config.activation_dtype).itemsize
  parts = {"parameters": parameter_bytes(config, shards),
           "keys_values": int(copies.natural * kv_bytes + cross),
           "logits": int(constants.logit_copies[method] * logit_bytes)}
  if (sum(parts.values()) >
      constants.squeeze_at * USABLE_FRACTION * memory):
    parts["keys_values"] = int(copies.squeezed * kv_bytes + cross)
  # The encoder runs before the loop: its attention scores and activations
  # count only where they exceed the loop's working memory.
  encoder = (batch * heads * length * length * 4 +
             4 * batch * length * max(config.d_model, config.d_ff) * act)
  parts["encoder_pass"] = max(0, encoder - parts["keys_values"] -
                              parts["logits"])
  parts["total"] = sum(parts.values())
  return parts


def fits(config: T5Config, method: str, n: int, length: int,
         mesh: Tuple[int, int], memory: int) -> bool:
  """The formula's fit decision on a device of `memory` bytes."""
  total = analytic_bytes(config, method, n, length, mesh,
                         memory=memory)["total"]
  return total <= USABLE_FRACTION * memory


def largest_n(config: T5Config, method: str, length: int,
              mesh: Tuple[int, int], memory: int,
              max_exp: int = 10) -> Optional[int]:
  """The formula's largest N = 2**e (e <= max_exp) that the mesh's `data`
  axis splits and that fits, or None."""
  ns = [2**e for e in range(max_exp + 1) if 2**e % mesh[0] == 0 and
        fits(config, method, 2**e, length, mesh, memory)]
  return max(ns, default=None)


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
      if any(fits(config, method, n, length, split, memory)
             for split in splits):
        out[n] = chips
        break
  return out
