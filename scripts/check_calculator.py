"""Checks the study's memory formula on TPU generations beyond v4 with the
real compiler: v6e (32 GiB), v5e (16 GiB), v5p (95 GiB).

  python scripts/check_calculator.py --out results/study/other_hardware.jsonl

For each topology of `tpu_configs/other/` (one process each: libtpu reads
the accelerator type once), each method and length, the formula's largest
N on the topology's first mesh (`memory_model.fits`) is compiled for mT5-XXL (bf16) together with 2N, so
the compiler says whether the formula's answer fits and whether one more
doubling would; where the formula says nothing fits, N = 1 is compiled.
Resumable (JSON lines, the study's point records plus the formula's
bytes when compiled). The printed summary recomputes the formula for every
record (`--report_only`: compile nothing), so after a refit of the
formula it checks the same compiled points, which an earlier formula may
have chosen; prints JSON and a one-line summary.
"""

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from arithmetic_apps import jsonl  # noqa: E402

TOPOLOGIES = ("v6e-1x1", "v5e-1x1", "v5p-2x2x1")
PLAN = {"v6e-1x1": (128, 1024), "v5e-1x1": (128,), "v5p-2x2x1": (1024,)}
# The calculator's two lines of the paper (study method names, `points.VARIANTS`).
METHODS = ("beam", "arithmetic")


def run_topology(name: str, out: str) -> None:
  from arithmetic_apps.study.memory_model import (analytic_bytes,
                                                      largest_n)
  from arithmetic_apps.study.points import Point, compile_point, model_of
  from arithmetic_apps.topology import load_topology
  topo = load_topology(name)
  mesh = tuple(topo.mesh_shapes[0])
  points = []
  for method in METHODS:
    for length in PLAN[name]:
      probe = Point("xxl", method, length, name, mesh, 1)
      config = model_of(probe).config
      n = largest_n(config, method, length, mesh, topo.hbm_bytes_per_chip)
      ns = [1] if n is None else [n, 2 * n]
      points += [(Point("xxl", method, length, name, mesh, k), n) for k in ns]

  def run(item):
    point, predicted = item
    record = compile_point(point)
    analytic = analytic_bytes(model_of(point).config, point.method, point.n,
                              point.length, point.mesh)["total"]
    return dict(record, analytic_bytes=int(analytic), formula_n=predicted)

  jsonl.run_missing(out, points, lambda r: (Point.of(r), r["formula_n"]), run,
                    desc=f"check_calculator {name}")


def summarise(r: dict) -> dict:
  """A record against the current formula (recomputed: the records keep
  only what the compiler said)."""
  from arithmetic_apps.study.memory_model import (analytic_bytes, fits,
                                                      largest_n)
  from arithmetic_apps.study.points import Point, model_of
  point = Point.of(r)
  config = model_of(point).config
  formula = analytic_bytes(config, point.method, point.n, point.length,
                           point.mesh, memory=r["hbm_bytes"])["total"]
  compiled = r.get("total_bytes")
  return {
      "topology": r["topology"], "method": r["method"], "length": r["length"],
      "n": r["n"], "compiled_gib": (None if compiled is None else
                                    round(compiled / 2**30, 2)),
      "formula_gib": round(formula / 2**30, 2),
      "error": None if compiled is None else round(formula / compiled - 1, 3),
      "fits": r["fits"],
      "formula_fits": fits(config, point.method, point.n, point.length,
                           point.mesh, r["hbm_bytes"]),
      "formula_n": largest_n(config, point.method, point.length, point.mesh,
                             r["hbm_bytes"]),
      "compiler_limit_gib": (None if not r.get("compiler_limit_bytes") else
                             round(r["compiler_limit_bytes"] / 2**30, 2))}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES))
  parser.add_argument("--out", default="results/study/other_hardware.jsonl")
  parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--report_only", action="store_true",
                      help="compile nothing: the summary of the records")
  args = parser.parse_args(argv)
  if args.one:
    run_topology(args.one, args.out)
    return 0
  for name in [] if args.report_only else args.topologies:
    subprocess.run([sys.executable, __file__, "--one", name, "--out",
                    args.out], check=True)
  records = [json.loads(line) for line in open(args.out) if line.strip()]
  summary = [summarise(r) for r in records]
  for s in summary:
    print(json.dumps(s))
  agree = sum(1 for s in summary if s["fits"] == s["formula_fits"])
  errors = [abs(s["error"]) for s in summary if s["error"] is not None]
  print(f"check_calculator: the formula's fit decision agrees with the "
        f"compiler at {agree} of {len(summary)} points; bytes error on the "
        f"{len(errors)} compiled points: worst "
        f"{100 * max(errors or [0]):.1f} %")
  return 0


if __name__ == "__main__":
  sys.exit(main())
