"""Per-chip memory of sharded decodes, compiled ahead of time for TPU v4.

Needs libtpu (`pip install 'jax[tpu]'`), no TPU: each topology of
`tpu_configs/` becomes an ahead-of-time device description, the sharded
decode is lowered with abstract parameters (nothing is allocated) and
compiled by the real TPU compiler, and `memory_analysis()` reports bytes per
chip. Runs with JAX_PLATFORMS=cpu and TPU_ACCELERATOR_TYPE=v4-8 (set here).

  python scripts/aot_memory.py --preset small --method arithmetic beam
  python scripts/aot_memory.py --out results/aot.jsonl    # resumable

Prints one JSON object per (topology, mesh, method), then a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v4-8")


from arithmetic_apps import jsonl  # noqa: E402
from arithmetic_decoding.models import EncoderDecoderModel, preset  # noqa: E402
from arithmetic_decoding.sharding import DecodeSetup  # noqa: E402
from arithmetic_apps.study.points import compiled_memory, fits  # noqa: E402
from arithmetic_apps.topology import (aot_devices, available_topologies,  # noqa: E402
                                          load_topology, make_mesh)


def measure(model, topo, mesh_shape, method, batch, source_len, n, length):
  mesh = make_mesh(topo, mesh_shape, devices=aot_devices(topo))
  stats = compiled_memory(model, mesh, DecodeSetup(
      method=method, num_decodes=n, max_decode_len=length), batch, source_len)
  mib = lambda b: round(b / 2**20, 2)
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes +
           stats.temp_size_in_bytes)
  return {"topology": topo.name, "mesh": list(mesh_shape), "method": method,
          "argument_mib": mib(stats.argument_size_in_bytes),
          "temp_mib": mib(stats.temp_size_in_bytes),
          "output_mib": mib(stats.output_size_in_bytes),
          "total_mib": mib(total),
          "fits_hbm": fits(total, topo.hbm_bytes_per_chip)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="small")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--method", nargs="+", default=["arithmetic", "beam"])
  parser.add_argument("--topology", nargs="+", default=None)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--source-len", type=int, default=64)
  parser.add_argument("--num-decodes", type=int, default=16)
  parser.add_argument("--max-decode-len", type=int, default=64)
  parser.add_argument("--all-meshes", action="store_true",
                      help="every data x model shape, not just data-only")
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)

  model = EncoderDecoderModel(preset(args.preset, dtype=args.dtype,
                                     param_dtype=args.dtype))
  configs = []
  for name in args.topology or available_topologies():
    topo = load_topology(name)
    shapes = topo.mesh_shapes if args.all_meshes else topo.mesh_shapes[:1]
    configs += [(name, tuple(shape), m) for shape in shapes
                for m in args.method]

  def run(config):
    name, shape, method = config
    record = measure(model, load_topology(name), shape, method, args.batch,
                     args.source_len, args.num_decodes, args.max_decode_len)
    return dict(record, preset=args.preset, dtype=args.dtype)

  done = jsonl.run_missing(
      args.out, configs,
      lambda r: (r["topology"], tuple(r["mesh"]), r["method"]), run,
      "aot_memory")
  results = [done[c] for c in configs]
  for r in results:
    print(json.dumps(r))
  print("aot_memory: " + "; ".join(
      f"{r['topology']} {r['mesh'][0]}x{r['mesh'][1]} {r['method']} "
      f"{r['total_mib']:.0f} MiB/chip" for r in results))
  return 0


if __name__ == "__main__":
  sys.exit(main())
