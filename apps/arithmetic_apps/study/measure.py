"""Measure mode: decode N samples on the devices at hand, for real.

What AOT compilation cannot tell is speed. This runs the same sharded decode
(`make_sharded_decode`) on the real chips of a topology (TPU slices from the
launcher, a GPU, or emulated CPU devices in the tests), with random weights
or a T5X checkpoint, and records per point: wall time per decode (median of
`repeats` after one warm-up call that compiles), samples/s, and the peak
device memory reported by `device.memory_stats()` (None where the backend
reports none, e.g. CPU).

  python -m arithmetic_apps.study.measure --preset xxl \\
      --topology v4-1x1x1 --methods beam arithmetic --lengths 128 \\
      --n 1 4 16 --out /tmp/measure.jsonl [--checkpoint gs://.../checkpoint_1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, Optional

import jax
import jax.numpy as jnp

from arithmetic_apps import jsonl
from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_decoding.sharding import (DecodeSetup, make_sharded_decode,
                                          param_shardings)
from arithmetic_apps.topology import load_topology, make_mesh


def random_params(model: EncoderDecoderModel, mesh, seed: int = 0):
  """Random weights created already sharded (never whole on one device)."""
  return jax.jit(model.init, out_shardings=param_shardings(model, mesh))(
      jax.random.PRNGKey(seed))


def peak_bytes(devices) -> Optional[int]:
  """Largest peak_bytes_in_use over the devices, or None if not reported."""
  peaks = []
  for device in devices:
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
      peaks.append(int(stats["peak_bytes_in_use"]))
  return max(peaks) if peaks else None


def measure_point(model, params, mesh, method: str, n: int, length: int,
                  repeats: int = 3, seed: int = 0) -> Dict:
  """One (method, N, L) on `mesh`: timing, throughput, peak memory."""
  decode = make_sharded_decode(model, mesh, DecodeSetup(
      method=method, num_decodes=n, max_decode_len=length))
  tokens = jax.random.randint(jax.random.PRNGKey(seed), (1, length), 2,
                              model.config.vocab_size, jnp.int32)
  key = jax.random.PRNGKey(seed)
  start = time.time()
  jax.block_until_ready(decode(params, tokens, key))  # compile + warm up
  first = time.time() - start
  times = []
  for i in range(repeats):
    start = time.time()
    decodes, _ = decode(params, tokens, jax.random.fold_in(key, i + 1))
    jax.block_until_ready(decodes)
    times.append(time.time() - start)
  seconds = statistics.median(times)
  return {"method": method, "n": n, "length": length,
          "mesh": [int(mesh.shape["data"]), int(mesh.shape["model"])],
          "platform": mesh.devices.flat[0].platform,
          "device_kind": mesh.devices.flat[0].device_kind,
          "first_call_s": round(first, 3), "decode_s": round(seconds, 6),
          "samples_per_s": round(n / seconds, 3),
          "peak_bytes": peak_bytes(mesh.devices.flat)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="tiny")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--topology", default="v4-1x1x1")
  parser.add_argument("--mesh", nargs=2, type=int, default=None)
  parser.add_argument("--methods", nargs="+", default=["beam", "arithmetic"])
  parser.add_argument("--lengths", nargs="+", type=int, default=[128])
  parser.add_argument("--n", nargs="+", type=int, default=[1, 4, 16])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--checkpoint", default=None,
                      help="a T5X checkpoint (local or gs://); default random")
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  topology = load_topology(args.topology)
  if topology.hosts > 1 and os.environ.get("JAX_PLATFORMS") != "cpu":
    # A multi-host slice: every worker runs this (emulated CPU devices are
    # one process).
    jax.distributed.initialize()
  mesh = make_mesh(topology, args.mesh)
  if args.checkpoint:
    from arithmetic_decoding.models.t5x_checkpoint import load_t5x_checkpoint  # pylint: disable=g-import-not-at-top
    from arithmetic_decoding.sharding import shard_params  # pylint: disable=g-import-not-at-top
    config, loaded = load_t5x_checkpoint(args.checkpoint, expected=args.preset,
                                         dtype=args.dtype)
    model = EncoderDecoderModel(config)
    params = shard_params(loaded, model, mesh)
  else:
    model = EncoderDecoderModel(preset(args.preset, dtype=args.dtype,
                                       param_dtype=args.dtype))
    params = random_params(model, mesh)
  mesh_shape = (int(mesh.shape["data"]), int(mesh.shape["model"]))
  key = lambda r: (r["method"], r["n"], r["length"], tuple(r["mesh"]))
  grid = [(m, n, l, mesh_shape) for m in args.methods for l in args.lengths
          for n in args.n if n % mesh_shape[0] == 0]

  def run(item):
    method, n, length, _ = item
    try:
      measured = measure_point(model, params, mesh, method, n, length,
                               args.repeats)
    except Exception as error:  # pylint: disable=broad-except
      if "RESOURCE_EXHAUSTED" not in str(error):
        raise
      measured = {"method": method, "n": n, "length": length,
                  "mesh": list(mesh_shape), "error": str(error)[:1000],
                  "decode_s": float("nan"), "samples_per_s": 0.0}
    return dict(measured, preset=args.preset, dtype=args.dtype,
                topology=topology.name, weights=args.checkpoint or "random")

  done = jsonl.run_missing(args.out, grid, key, run, "measure",
                           write=jax.process_index() == 0)
  results = [done[item] for item in grid]
  for r in results:
    print(json.dumps(r))
  print("measure: " + "; ".join(
      f"{r['method']} N={r['n']} L={r['length']}: {r['decode_s']:.3f} s, "
      f"{r['samples_per_s']:.1f} samples/s" for r in results))
  return 0


if __name__ == "__main__":
  sys.exit(main())
