"""One point of the study: a sharded decode compiled ahead of time for a TPU
topology by the real TPU compiler, and what it needs per chip.

A `Point` is (model preset and dtype, method, length L, topology, mesh
(data, model), N). Batch 1 and input length = output length = L, as in the
paper's Figure 5. `compile_point` lowers `sharding.make_sharded_decode` (the
decode users run: encoder + decode loop) with abstract parameters
(`jax.ShapeDtypeStruct`s carrying their shardings: nothing of the model's
size is allocated) for the topology's AOT devices and returns the compiled
program's per-chip bytes from `memory_analysis()`.

Needs libtpu (`pip install 'arithmetic-decoding[tpu]'`) and no TPU; set
JAX_PLATFORMS=cpu on machines without TPUs (the CLI does).
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Dict, Optional, Tuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_decoding.sharding import (DecodeSetup, make_sharded_decode,
                                          param_shardings)
from arithmetic_apps.study.memory_model import RESERVE_BYTES
from arithmetic_apps.topology import aot_devices, load_topology, make_mesh

# Study method -> (decode method, the model's cross-attention keys/values).
# The paper's setting is T5X's layout ("per_sample"); "arithmetic_shared" is
# arithmetic sampling with keys/values projected once per input
# (`models.CrossKV`), our own line beside the paper's.
VARIANTS = {"beam": (Method.BEAM, "per_sample"),
            "arithmetic": (Method.ARITHMETIC, "per_sample"),
            "ancestral": (Method.ANCESTRAL, "per_sample"),
            "arithmetic_shared": (Method.ARITHMETIC, "per_input")}
METHODS = tuple(VARIANTS)
# A program fits when its total bytes per chip are at most the chip's HBM
# minus the reserve libtpu keeps (`memory_model.RESERVE_BYTES`, 1.25 GiB).


@dataclasses.dataclass(frozen=True)
class Point:
  """One compile: everything that changes the compiled program."""

  preset: str
  method: str
  length: int
  topology: str
  mesh: Tuple[int, int]
  n: int
  dtype: str = "bfloat16"

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
    object.__setattr__(self, "mesh", tuple(int(x) for x in self.mesh))

  def key(self) -> tuple:
    return (self.preset, self.dtype, self.method, self.length, self.topology,
            self.mesh, self.n)

  @classmethod
  def of(cls, record: dict) -> "Point":
    return cls(**{f.name: record[f.name] for f in dataclasses.fields(cls)})


def model_of(point: Point) -> EncoderDecoderModel:
  return EncoderDecoderModel(preset(point.preset, dtype=point.dtype,
                                    param_dtype=point.dtype),
                             cross_kv=VARIANTS[point.method][1])


def supported(point: Point) -> Optional[str]:
  """Why the point cannot be compiled (rows do not split over `data`), or None."""
  data = point.mesh[0]
  if point.n % data:
    return (f"N = {point.n} rows do not split over data = {data} devices "
            "(batch 1)")
  return None


def _limit_from(message: str) -> Optional[int]:
  """The compiler's HBM limit from an out-of-memory message, if it says."""
  match = (re.search(r"available HBM \(([0-9.]+)([KMG])\)", message) or
           re.search(r"of ([0-9.]+)([KMG])i?B? hbm", message))
  if not match:
    return None
  scale = {"K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
  return int(float(match.group(1)) * scale)


def compiled_memory(model: EncoderDecoderModel, mesh, setup: DecodeSetup,
                    batch: int, source_length: int):
  """`memory_analysis()` of the sharded decode compiled for `mesh`'s
  devices, from abstract parameters with their shardings (nothing of the
  model's size is allocated)."""
  decode = make_sharded_decode(model, mesh, setup)
  params = jax.tree_util.tree_map(
      lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
      model.abstract_params(), param_shardings(model, mesh))
  replicated = NamedSharding(mesh, P())
  tokens = jax.ShapeDtypeStruct((batch, source_length), jnp.int32,
                                sharding=replicated)
  key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
  return decode.lower(params, tokens, key).compile().memory_analysis()


def compile_point(point: Point) -> Dict:
  """AOT-compiles the point; its record (bytes per chip, fit, compile time).

  A compile that fails (the compiler's out-of-memory, an unsupported mesh)
  is a record with `error` set and `fits` False, not an exception.
  """
  topology = load_topology(point.topology)
  record = dict(dataclasses.asdict(point), mesh=list(point.mesh),
                hbm_bytes=topology.hbm_bytes_per_chip, error=None)
  reason = supported(point)
  if reason is not None:
    return dict(record, fits=False, error=f"unsupported: {reason}",
                compile_s=0.0)
  model = model_of(point)
  # Outside the try: a machine without libtpu, or a libtpu that cannot
  # start, is an error of the run, never a point's record.
  mesh = make_mesh(topology, point.mesh, devices=aot_devices(topology))
  start = time.time()
  try:
    stats = compiled_memory(model, mesh, DecodeSetup(
        method=VARIANTS[point.method][0], num_decodes=point.n,
        max_decode_len=point.length), batch=1, source_length=point.length)
  except Exception as error:  # pylint: disable=broad-except
    message = f"{type(error).__name__}: {error}"
    out_of_memory = "RESOURCE_EXHAUSTED" in message or "hbm" in message.lower()
    return dict(record, fits=False, compile_s=round(time.time() - start, 1),
                error=("out of memory: " if out_of_memory else "") +
                message[:2000],
                compiler_limit_bytes=_limit_from(message))
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes +
           stats.temp_size_in_bytes + stats.generated_code_size_in_bytes -
           stats.alias_size_in_bytes)
  return dict(record, compile_s=round(time.time() - start, 1),
              argument_bytes=int(stats.argument_size_in_bytes),
              output_bytes=int(stats.output_size_in_bytes),
              temp_bytes=int(stats.temp_size_in_bytes),
              alias_bytes=int(stats.alias_size_in_bytes),
              code_bytes=int(stats.generated_code_size_in_bytes),
              total_bytes=int(total),
              fits=fits(total, topology.hbm_bytes_per_chip))


def fits(total_bytes: int, hbm_bytes: int) -> bool:
  """The fit rule: total per-chip bytes within the chip's usable HBM."""
  return total_bytes <= hbm_bytes - RESERVE_BYTES


def record_fits(record: dict) -> bool:
  """A record's fit under the current rule (not the stored flag, so a
  changed rule needs no recompile)."""
  if record.get("error") or "total_bytes" not in record:
    return False
  return fits(record["total_bytes"], record["hbm_bytes"])
