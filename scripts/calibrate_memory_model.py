"""Fits the memory model's logit copies on mT5-small compiles.

  python scripts/calibrate_memory_model.py --out results/study/calibration.jsonl

Compiles (AOT, TPU v4 compiler) a grid of mT5-small decodes (beam search and
arithmetic sampling; N, L and meshes varied), then fits, per method,
compiled temporaries ~ a * (one key/value unit) + b * (one copy of the
[rows, V/M] float32 logits) by least squares. b is the formula's logit
copies (`memory_model.FITTED.logit_copies`: at XXL's sizes the logits are
too small to fit there); the key/value copies are fitted on the XXL sweep
itself (`scripts/fit_memory_model.py`), for which these 20 points are an
out-of-sample check. Resumable (JSON lines); prints JSON and a one-line
summary.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v4-8")

import numpy as np  # noqa: E402

from arithmetic_apps import jsonl  # noqa: E402
from arithmetic_apps.study.memory_model import features  # noqa: E402
from arithmetic_apps.study.points import Point, compile_point, model_of  # noqa: E402

GRID = [(L, topo, mesh, n) for L in (128, 512)
        for (topo, mesh, n) in [("v4-1x1x1", (1, 1), 8), ("v4-1x1x1", (1, 1), 64),
                                ("v4-1x2x1", (1, 2), 32), ("v4-2x2x1", (4, 1), 64),
                                ("v4-2x2x1", (2, 2), 16)]]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="small")
  parser.add_argument("--out", default="results/study/calibration.jsonl")
  args = parser.parse_args(argv)
  points = [Point(args.preset, m, L, t, mesh, n) for m in ("beam", "arithmetic")
            for (L, t, mesh, n) in GRID]
  done = jsonl.run_missing(args.out, points, Point.of, compile_point,
                           "calibration")
  fitted = {}
  for method in ("beam", "arithmetic"):
    rows = [r for r in done.values() if r["method"] == method and
            "temp_bytes" in r]
    x = np.array([features(model_of(Point.of(r)).config, r["n"], r["length"],
                           tuple(r["mesh"])) for r in rows])
    y = np.array([r["temp_bytes"] for r in rows], np.float64)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    fitted[method] = [round(float(c), 3) for c in coef]
  print(json.dumps({"fitted": fitted, "points": len(done)}))
  print("calibration: " + "; ".join(f"{m}: key/value units x{c[0]}, "
                                    f"logits x{c[1]}"
                                    for m, c in fitted.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
