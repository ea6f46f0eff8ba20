"""Confidence intervals from K shifted lattices, and extensible (van der
Corput) code sets, on the embedded English->French model.

    python scripts/intervals.py                    # run (resumable) + report
    python scripts/intervals.py --report_only      # tables from the runs
    python scripts/intervals.py --quick --out DIR  # a tiny budget (tests)

The quantity estimated: a verse's expected sentence BLEU at temperature T.
Its exact value ("truth") is estimated once from a 512-point shifted
lattice. Then, R times each:
  * N = 16 codes as K independent shifted lattices of 16 / K points: a
    t-interval (K - 1 d.o.f.) over the K lattice means (K = 4, 8; K = 2
    has 1 d.o.f., t = 12.7: too wide to be useful); against the i.i.d.
    t-interval (15 d.o.f.) from 16 ancestral samples (i.i.d. codes);
  * 16 van der Corput codes (one shift) whose prefixes of n = 4, 8, 12, 16
    are the estimates of a sample set grown in place, against a fresh
    shifted lattice of n points and n i.i.d. samples.
Runs append to `results/intervals/runs.jsonl`; a rerun skips finished runs.
Writes `summary.json` and `intervals.md` and prints JSON plus one line.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import zlib
from typing import Tuple

import jax
import numpy as np

from arithmetic_apps.translation import experiments as ex
from arithmetic_apps.translation import intervals as iv
from arithmetic_apps.translation.data import load_split


@dataclasses.dataclass(frozen=True)
class Budget:
  verses: int = 4
  temperatures: Tuple[float, ...] = (0.1, 0.2, 0.5)
  n: int = 16
  ks: Tuple[int, ...] = (4, 8)
  repeats: int = 32
  sizes: Tuple[int, ...] = (4, 8, 12, 16)
  truth_points: int = 512
  max_rows: int = 512


QUICK = Budget(verses=1, temperatures=(0.5,), n=4, ks=(2,), repeats=3,
               sizes=(2, 4), truth_points=8, max_rows=64)


def plan(budget: Budget):
  verses = ex.estimator_verses(load_split("test"), budget.verses)
  runs = []
  for v in verses:
    for t in budget.temperatures:
      runs += [("truth", v, t, 0), ("iid", v, t, 0), ("vdc", v, t, 0)]
      runs += [("klattice", v, t, k) for k in budget.ks]
      runs += [("lattice", v, t, n) for n in budget.sizes]
  return runs


def key_of(record):
  return (record["kind"], record["verse"], record["temperature"],
          record["param"])


def run_one(translator, budget: Budget, run, seed: int):
  kind, verse_index, temperature, param = run
  verse = load_split("test")[verse_index]
  tag = zlib.crc32(json.dumps(run).encode()) % 2**31
  key = jax.random.fold_in(jax.random.PRNGKey(seed), tag)
  rng = np.random.default_rng([seed, tag])
  r, n = budget.repeats, budget.n
  if kind == "truth":
    codes = iv.lattice_codes(rng.random((1, 1)), budget.truth_points)
  elif kind == "iid":
    codes = rng.random((r, max(n, max(budget.sizes))))
  elif kind == "vdc":
    codes = iv.van_der_corput_codes(rng.random(r), max(budget.sizes))
  elif kind == "klattice":
    codes = iv.lattice_codes(rng.random((r, param)), n // param)
  else:  # a fresh shifted lattice of `param` points
    codes = iv.lattice_codes(rng.random((r, 1)), param)
  texts = iv.decode_codes(translator, verse.source, codes, temperature, key,
                          budget.max_rows)
  values = iv.bleu_values(texts, verse.references)
  return {"kind": kind, "verse": verse_index, "temperature": temperature,
          "param": param, "values": values.round(6).tolist(),
          "distinct": float(np.mean([len(set(row)) for row in texts]))}


def summarize(records, budget: Budget):
  by = {key_of(r): np.array(r["values"]) for r in records}
  verses = sorted({r["verse"] for r in records})
  out = {"intervals": {}, "extensible": {}}
  for t in budget.temperatures:
    truths = {v: by[("truth", v, t, 0)].mean() for v in verses
              if ("truth", v, t, 0) in by}
    rows = {}
    methods = [("iid", 0)] + [("klattice", k) for k in budget.ks]
    for kind, k in methods:
      cover, width = [], []
      for v, truth in truths.items():
        if (kind, v, t, k) not in by:
          continue
        values = by[(kind, v, t, k)][:, :budget.n]
        est, half = (iv.t_interval(values) if kind == "iid" else
                     iv.k_lattice_interval(values, k))
        cover.append(iv.coverage(est, half, truth))
        width.append(float(np.mean(2 * half)))
      if cover:
        name = "iid" if kind == "iid" else f"K={k} x {budget.n // k}"
        rows[name] = {"coverage": float(np.mean(cover)),
                      "mean_width": float(np.mean(width)),
                      "intervals": len(cover) * budget.repeats}
    if "iid" in rows:
      for row in rows.values():
        row["width_vs_iid"] = row["mean_width"] / rows["iid"]["mean_width"]
    out["intervals"][str(t)] = rows
    ext = {}
    for n in budget.sizes:
      stds = {"vdc_prefix": [], "fresh_lattice": [], "iid": []}
      for v in verses:
        if not all(key in by for key in [("vdc", v, t, 0), ("lattice", v, t, n),
                                         ("iid", v, t, 0)]):
          continue
        stds["vdc_prefix"].append(by[("vdc", v, t, 0)][:, :n].mean(1).std(ddof=1))
        stds["fresh_lattice"].append(by[("lattice", v, t, n)].mean(1).std(ddof=1))
        stds["iid"].append(by[("iid", v, t, 0)][:, :n].mean(1).std(ddof=1))
      if stds["iid"]:
        ext[str(n)] = {k: float(np.mean(s)) for k, s in stds.items()}
    out["extensible"][str(t)] = ext
  return out


def markdown(summary, budget: Budget) -> str:
  lines = ["# Confidence intervals and extensible code sets",
           "", "Regenerate: `python scripts/intervals.py`.", "",
           f"## 95 % intervals at N = {budget.n} (coverage of the exact "
           "expectation)",
           "", "| T | codes | coverage | mean width (BLEU) | width / iid |",
           "|---|---|---|---|---|"]
  for t, rows in summary["intervals"].items():
    for name, row in rows.items():
      lines.append(f"| {t} | {name} | {row['coverage']:.3f} | "
                   f"{row['mean_width']:.2f} | {row.get('width_vs_iid', 1):.2f} |")
  lines += ["", "## Growing a sample set: std of the estimate over repeats",
            "", "| T | n | van der Corput prefix | fresh lattice | iid |",
            "|---|---|---|---|---|"]
  for t, ext in summary["extensible"].items():
    for n, row in ext.items():
      lines.append(f"| {t} | {n} | {row['vdc_prefix']:.2f} | "
                   f"{row['fresh_lattice']:.2f} | {row['iid']:.2f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  args = ex.experiment_parser(__doc__.splitlines()[0],
                              "results/intervals").parse_args(argv)
  budget = QUICK if args.quick else Budget()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  done = ex.run_plan(str(out / "runs.jsonl"), plan(budget), key_of,
                     lambda translator, run: run_one(translator, budget, run,
                                                     args.seed),
                     report_only=args.report_only, desc="intervals")
  records = [done[r] for r in plan(budget) if r in done]
  summary = summarize(records, budget)
  (out / "summary.json").write_text(json.dumps(summary, indent=1))
  (out / "intervals.md").write_text(markdown(summary, budget))
  print(json.dumps(summary))
  parts = []
  for t, rows in summary["intervals"].items():
    parts.append(f"T={t}: " + ", ".join(
        f"{name} cover {row['coverage']:.2f} width {row['mean_width']:.1f}"
        for name, row in rows.items()))
  print(f"intervals: {len(records)} runs; " + "; ".join(parts))
  return 0


if __name__ == "__main__":
  sys.exit(main())
