"""Fits the memory model's key/value copy counts on the compiled XXL sweep.

  python scripts/fit_memory_model.py --out results/study/memory_model_fit.json

For each (method, program) of `study.memory_model` ("single": data = 1;
"split": data > 1) it picks the natural and squeezed copy counts (a grid of
0.05) that minimise the worst relative error of the total per-chip bytes
over the compiled points of `results/study/points.jsonl`, for each
`squeeze_at` in 0.90..1.00, and keeps the `squeeze_at` with the smallest
worst error. The logit copies stay those fitted on mT5-small
(`scripts/calibrate_memory_model.py`): at XXL's sizes the logits are too
small to pin down.

Then it says how far the counts carry beyond the points they were fitted
on: leave one length out and leave one topology out (refit on the rest,
error on the left-out points), mT5-small (`results/study/calibration.jsonl`)
and the other TPU generations (`results/study/other_hardware.jsonl`), all
with the library's own `analytic_bytes`. Prints JSON and a one-line
summary; paste the fitted counts into `memory_model.FITTED`.
"""

import argparse
import dataclasses
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from arithmetic_apps import jsonl  # noqa: E402
from arithmetic_apps.study import memory_model as mm  # noqa: E402
from arithmetic_apps.study import report  # noqa: E402
from arithmetic_apps.study.points import Point, model_of  # noqa: E402

GRID = np.round(np.arange(1.0, 9.0001, 0.05), 2)
# Cross-attention copies per input, with keys/values per input.
CROSS_GRID = np.round(np.arange(0.0, 4.0001, 0.1), 2)


def compiled(path):
  """The compiled (not failed) records of a JSON-lines file."""
  return [r for r in jsonl.load(path, key=lambda r: Point.of(r).key()).values()
          if not r.get("error") and "total_bytes" in r]


def _group(records, constants):
  """Arrays of the formula's parts that do not depend on the copy counts."""
  base, kv, cross, limit, total = [], [], [], [], []
  for r in records:
    point = Point.of(r)
    config = model_of(point).config
    kv_bytes, logit_bytes = mm.features(config, point.n, point.length,
                                        point.mesh)
    method = mm.formula_method(point.method)
    rows = max(1, point.n // point.mesh[0])
    base.append(mm.parameter_bytes(config, point.mesh[1]) +
                int(constants.logit_copies[method] * logit_bytes))
    kv.append(kv_bytes)
    cross.append(kv_bytes * -(-rows // point.n) / rows)
    limit.append(constants.squeeze_at * mm.USABLE_FRACTION * r["hbm_bytes"])
    total.append(r["total_bytes"])
  return [np.array(a, np.float64) for a in (base, kv, cross, limit, total)]


def _fit_group(records, constants, cross_grid):
  """(natural, squeezed, cross copies) with the least worst error."""
  base, kv, cross, limit, total = _group(records, constants)
  best = (np.inf, None)
  for c in cross_grid:
    fixed = base + c * cross
    for natural in GRID:
      natural_total = fixed + natural * kv
      squeezed = natural_total > limit
      worst_natural = np.max(np.abs(natural_total / total - 1)[~squeezed],
                             initial=0.0)
      if worst_natural >= best[0]:
        continue
      if squeezed.any():
        # [grid, points]: every squeezed count at once.
        err = np.abs((fixed[squeezed] + GRID[:, None] * kv[squeezed]) /
                     total[squeezed] - 1).max(axis=1)
        err[GRID > natural] = np.inf
        k = int(np.argmin(err))
        worst, low = max(worst_natural, err[k]), GRID[k]
      else:
        worst, low = worst_natural, natural
      if worst < best[0]:
        best = (worst, (float(natural), float(low), float(c)))
  return best[1]


def fit(records, squeeze_at, start=mm.FITTED):
  """Constants fitted on `records` at this `squeeze_at`."""
  constants = dataclasses.replace(start, squeeze_at=squeeze_at)
  copies, shared_cross = dict(start.kv_copies), start.shared_cross_copies
  groups = {}
  for r in records:
    key = (mm.formula_method(r["method"]), mm.program(r["mesh"]))
    groups.setdefault(key, []).append(r)
  shared = [r for r in records if r["method"] == "arithmetic_shared"]
  if shared:  # one cross count for both programs of the shared layout
    best = None
    for c in CROSS_GRID:
      worst = 0.0
      for prog in ("single", "split"):
        rs = [r for r in shared if mm.program(r["mesh"]) == prog]
        if rs:
          natural, low, _ = _fit_group(rs, constants, [c])
          trial = _with(constants, {("arithmetic_shared", prog):
                                    mm.Copies(natural, low)}, c)
          worst = max(worst, max(abs(e) for e in errors(rs, trial)))
      if best is None or worst < best[0]:
        best = (worst, c)
    shared_cross = round(float(best[1]), 2)
  for key, rs in groups.items():
    cross_grid = [shared_cross] if key[0] == "arithmetic_shared" else [0.0]
    natural, low, _ = _fit_group(rs, constants, cross_grid)
    copies[key] = mm.Copies(natural, low)
  return _with(constants, copies, shared_cross)


def _with(constants, copies, shared_cross):
  merged = dict(constants.kv_copies)
  merged.update(copies)
  return dataclasses.replace(constants, kv_copies=merged,
                             shared_cross_copies=shared_cross)


def errors(records, constants):
  """Formula / compiled - 1 for each record, by the library's formula."""
  return [e["error"] for e in report.model_error(records, constants)]


def summary(errs):
  return {"points": len(errs),
          "within_10pct": int(sum(abs(e) <= 0.10 for e in errs)),
          "worst_pct": round(100 * max(map(abs, errs), default=0.0), 1)}


def held_out(records, squeeze_at, field):
  """Refit without each value of `field`; errors on the left-out points."""
  errs = {}
  for value in sorted({str(r[field]) for r in records}):
    train = [r for r in records if str(r[field]) != value]
    test = [r for r in records if str(r[field]) == value]
    errs[value] = summary(errors(test, fit(train, squeeze_at)))
  return errs


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--points", default="results/study/points.jsonl")
  parser.add_argument("--small", default="results/study/calibration.jsonl")
  parser.add_argument("--other", default="results/study/other_hardware.jsonl")
  parser.add_argument("--out", default="results/study/memory_model_fit.json")
  args = parser.parse_args(argv)
  records = [r for r in compiled(args.points) if r["preset"] == "xxl"]
  fits = {}
  for squeeze_at in np.round(np.arange(0.90, 1.0001, 0.01), 2):
    constants = fit(records, float(squeeze_at))
    fits[float(squeeze_at)] = (summary(errors(records, constants))
                               ["worst_pct"], constants)
  squeeze_at = min(fits, key=lambda s: (fits[s][0], -s))
  constants = fits[squeeze_at][1]
  by_method = {}
  for method in sorted({r["method"] for r in records}):
    rs = [r for r in records if r["method"] == method]
    by_method[method] = summary(errors(rs, constants))
  out = {
      "squeeze_at": squeeze_at,
      "kv_copies": {f"{m}/{p}": [c.natural, c.squeezed]
                    for (m, p), c in sorted(constants.kv_copies.items())},
      "shared_cross_copies": constants.shared_cross_copies,
      "in_sample": summary(errors(records, constants)),
      "in_sample_by_method": by_method,
      "leave_one_length_out": held_out(records, squeeze_at, "length"),
      "leave_one_topology_out": held_out(records, squeeze_at, "topology"),
      "mt5_small": summary(errors(compiled(args.small), constants)),
      "other_tpus": summary(errors(compiled(args.other), constants)),
  }
  with open(args.out, "w") as f:
    json.dump(out, f, indent=1)
  print(json.dumps(out))
  loo = out["leave_one_length_out"].values()
  lot = out["leave_one_topology_out"].values()
  print(f"fit_memory_model: in sample {out['in_sample']['within_10pct']}/"
        f"{out['in_sample']['points']} within 10 % (worst "
        f"{out['in_sample']['worst_pct']} %); leave one length out "
        f"{sum(s['within_10pct'] for s in loo)}/{sum(s['points'] for s in loo)}"
        f" (worst {max(s['worst_pct'] for s in loo)} %); leave one topology "
        f"out {sum(s['within_10pct'] for s in lot)}/"
        f"{sum(s['points'] for s in lot)} (worst "
        f"{max(s['worst_pct'] for s in lot)} %); mT5-small "
        f"{out['mt5_small']['within_10pct']}/{out['mt5_small']['points']}; "
        f"other TPUs {out['other_tpus']['within_10pct']}/"
        f"{out['other_tpus']['points']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
