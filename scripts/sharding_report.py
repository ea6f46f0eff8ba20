"""Prints the sharding table of docs/sharding.md and per-step collective counts.

Runs `tests/multidevice_worker.py` (8 emulated CPU devices, tiny model,
float32, B = 8, N = 16, 12 positions) for the `meshes` and `hlo` scenarios
and compares every mesh with one device:

  python scripts/sharding_report.py            # table + JSON + summary
  python scripts/sharding_report.py --out r.json

Per mesh (data x model) and method: the share of tokens equal to the
one-device decode, the largest |difference| of log-probs / scores, and for
arithmetic sampling with full code resolution (2**-22) the share of equal
tokens. Then, for the 8-device data-parallel mesh, the collectives in the
compiled decode loop (body and condition) and outside it, per method.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

from arithmetic_decoding.methods import Method

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "multidevice_worker.py"
MESHES = ("2x1", "4x1", "8x1", "4x2", "2x4", "1x8")
METHODS = tuple(m.value for m in Method)


def run_worker(scenario: str, out: pathlib.Path) -> None:
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  subprocess.run([sys.executable, str(WORKER), str(out), scenario], env=env,
                 check=True)


def mesh_table(results) -> dict:
  table = {}
  for shape in MESHES:
    row = {}
    for method in METHODS:
      ref = results[f"{method}/1x1/tokens"]
      row[f"{method}_tokens_equal"] = float(
          np.mean(results[f"{method}/{shape}/tokens"] == ref))
      row[f"{method}_max_abs_score_diff"] = float(np.max(np.abs(
          results[f"{method}/{shape}/scores"] -
          results[f"{method}/1x1/scores"])))
    row["fullcode_tokens_equal"] = float(np.mean(
        results[f"fullcode/{shape}/tokens"] == results["fullcode/1x1/tokens"]))
    table[shape] = row
  return table


def loop_summary(report) -> dict:
  """The decode loop's collectives (the loop with matmuls) and the rest."""
  out = {}
  for method, found in report.items():
    loop = [l for l in found["loops"] if l["dots"] > 0][0]
    out[method] = {"matmuls_in_loop": loop["dots"],
                   "loop": {k: v for k, v in loop.items() if k != "dots"},
                   "outside_loops": found["outside"]}
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=None, help="write the JSON here too")
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    run_worker("meshes", tmp / "meshes.npz")
    run_worker("hlo", tmp / "hlo.json")
    table = mesh_table(dict(np.load(tmp / "meshes.npz")))
    collectives = loop_summary(json.loads((tmp / "hlo.json").read_text()))
  print("| mesh (data x model) | " + " | ".join(MESHES) + " |")
  print("|---|" + "---:|" * len(MESHES))
  rows = [(f"{m}: tokens equal", f"{m}_tokens_equal", "{:.0%}")
          for m in METHODS]
  rows += [("arithmetic, max abs log-prob difference",
            "arithmetic_max_abs_score_diff", "{:.1e}"),
           ("arithmetic with *full* code resolution: tokens equal",
            "fullcode_tokens_equal", "{:.0%}")]
  for label, key, fmt in rows:
    print(f"| {label} | " + " | ".join(fmt.format(table[s][key])
                                       for s in MESHES) + " |")
  print()
  for method, c in collectives.items():
    print(f"{method}: {c['matmuls_in_loop']} matmuls in the decode loop; "
          f"loop collectives {c['loop'] or 'none'}; outside "
          f"{c['outside_loops'] or 'none'}")
  result = {"meshes": table, "collectives": collectives}
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
  print(json.dumps(result))
  worst = min(table[s][f"{m}_tokens_equal"] for s in MESHES for m in METHODS)
  data_loops = sum(sum(collectives[m]["loop"].values())
                   for m in (m.value for m in Method.sampling()))
  print(f"sharding_report: worst token agreement with one device "
        f"{worst:.0%} over {len(MESHES)} meshes x {len(METHODS)} methods; "
        f"{data_loops} collectives in the data-parallel sampling loops; "
        f"beam search loop {collectives['beam']['loop']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
