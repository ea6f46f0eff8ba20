"""The paper's Figs. 2-4 on the embedded English->French model.

    python scripts/experiments.py                    # run (resumable) + report
    python scripts/experiments.py --report_only      # tables/plots from runs
    python scripts/experiments.py --quick --out DIR  # a tiny budget (tests)
    python scripts/experiments.py --verify           # recompute the committed
                                                     # runs, compare exactly

Runs append to `results/experiments/runs.jsonl` as they finish; a rerun
skips finished ones. Then writes `summary.json`, `experiments.md` and
`fig2.png`, `fig3.png`, `fig4.png` next to it, and prints the summary as
JSON plus one line. Sizes: `translation.experiments.Budget` (the defaults,
or `--quick`).
"""

from __future__ import annotations

import json
import pathlib
import sys
import zlib

import jax
import numpy as np

from arithmetic_apps.translation import experiments as ex
from arithmetic_apps.translation.data import load_split

QUICK = ex.Budget(quality_verses=2, quality_n=(3,), quality_temperatures=(0.5,),
                  estimator_verses=2, estimator_repeats=3, estimator_n=(2, 4),
                  estimator_temperatures=(0.5,), max_rows=64)


def plan(budget: ex.Budget):
  """Every run: (kind, n, temperature, method, verse) keys."""
  runs = [("quality", n, t, m, -1) for n in budget.quality_n
          for t in budget.quality_temperatures for m in ex.METHODS]
  runs += [("beam", n, 0.0, "beam", -1) for n in budget.quality_n]
  test = load_split("test")
  runs += [("estimator", n, t, m, v)
           for v in ex.estimator_verses(test, budget.estimator_verses)
           for t in budget.estimator_temperatures for n in budget.estimator_n
           for m in ex.METHODS]
  return runs


def key_of(record):
  return (record["kind"], record["n"], record["temperature"], record["method"],
          record["verse"])


def run_one(translator, budget, run, seed):
  kind, n, temperature, method, verse = run
  test = load_split("test")
  # A key per run from its description (stable across processes).
  key = jax.random.fold_in(jax.random.PRNGKey(seed), zlib.crc32(
      json.dumps(run).encode()) % 2**31)
  if kind == "quality":
    result = ex.quality_point(translator, test[:budget.quality_verses], n,
                              temperature, method, key, budget.max_rows)
  elif kind == "beam":
    result = ex.beam_point(translator, test[:budget.quality_verses], n)
  else:
    result = ex.estimator_runs(translator, test[verse], n, temperature,
                               method, budget.estimator_repeats, key,
                               budget.max_rows)
  return dict(zip(("kind", "n", "temperature", "method", "verse"), run),
              **result)


def summarize(records, budget):
  """Fig. 2 table rows, Fig. 4 std curves, the N = 16 ratio."""
  summary = {"budget": budget.__dict__, "quality": [], "estimator": {}}
  for r in records:
    if r["kind"] in ("quality", "beam"):
      summary["quality"].append({"n": r["n"], "temperature": r["temperature"],
                                 "method": r["method"], **r["macro"]})
  stds = {}
  for r in records:
    if r["kind"] == "estimator":
      stds.setdefault((r["temperature"], r["n"], r["method"]), {})[
          r["verse"]] = float(np.std(r["estimates"]))
  for (t, n, m), by_verse in sorted(stds.items()):
    summary["estimator"].setdefault(f"T={t}", {}).setdefault(m, {})[n] = float(
        np.mean(list(by_verse.values())))
  ratios = {}
  for t in budget.estimator_temperatures:
    n = 16 if 16 in budget.estimator_n else max(budget.estimator_n)
    a, b = stds.get((t, n, "arithmetic")), stds.get((t, n, "ancestral"))
    if a and b:
      verses = sorted(set(a) & set(b))
      ratio = ex.bootstrap_ratio(np.array([a[v] for v in verses]),
                                 np.array([b[v] for v in verses]))
      ratios[f"T={t}"] = {"n": n, "ratio": ratio[0], "ci95": ratio[1:]}
  summary["std_ratio"] = ratios
  return summary


def markdown(summary) -> str:
  lines = ["| N | T | method | mean BLEU | min BLEU | oracle BLEU | "
           "diversity | duplicates |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
  for q in sorted(summary["quality"],
                  key=lambda q: (q["n"], q["temperature"], q["method"])):
    lines.append(f"| {q['n']} | {q['temperature']} | {q['method']} | "
                 f"{q['mean_bleu']:.2f} | {q['min_bleu']:.2f} | "
                 f"{q['max_bleu']:.2f} | {q['diversity']:.3f} | "
                 f"{q['duplicates']:.3f} |")
  lines += ["", "| T | N | std arithmetic | std ancestral | ratio |",
            "|---:|---:|---:|---:|---:|"]
  for t, methods in summary["estimator"].items():
    for n in sorted(methods.get("arithmetic", {}), key=int):
      a = methods["arithmetic"][n]
      b = methods.get("ancestral", {}).get(n, float("nan"))
      lines.append(f"| {t[2:]} | {n} | {a:.3f} | {b:.3f} | {a / b:.2f} |")
  lines += ["", "| T | N | std ratio arithmetic / ancestral | 95 % bootstrap |",
            "|---:|---:|---:|---|"]
  for t, r in summary["std_ratio"].items():
    lines.append(f"| {t[2:]} | {r['n']} | {r['ratio']:.2f} | "
                 f"{r['ci95'][0]:.2f} - {r['ci95'][1]:.2f} |")
  return "\n".join(lines) + "\n"


def _save(plt, fig, axes, path: pathlib.Path) -> None:
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plots(records, summary, out: pathlib.Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  ns = sorted({q["n"] for q in summary["quality"]})
  fig, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 4), squeeze=False)
  for ax, n in zip(axes[0], ns):
    for method, color in (("arithmetic", "C0"), ("ancestral", "C1")):
      pts = sorted((q for q in summary["quality"]
                    if q["n"] == n and q["method"] == method),
                   key=lambda q: q["temperature"])
      for stat, style in (("mean_bleu", "-o"), ("max_bleu", "--^"),
                          ("min_bleu", ":v")):
        ax.plot([q["diversity"] for q in pts], [q[stat] for q in pts], style,
                color=color, label=f"{method} {stat.split('_')[0]}")
    for q in summary["quality"]:
      if q["n"] == n and q["method"] == "beam":
        ax.plot(q["diversity"], q["mean_bleu"], "k*", ms=12, label="beam mean")
    ax.set(title=f"N = {n}", xlabel="n-gram diversity", ylabel="sentence BLEU")
  _save(plt, fig, axes, out / "fig2.png")

  estimator = [r for r in records if r["kind"] == "estimator"]
  verses = sorted({r["verse"] for r in estimator})[:4]
  temps = sorted({r["temperature"] for r in estimator})
  fig, axes = plt.subplots(len(temps), max(1, len(verses)),
                           figsize=(4 * max(1, len(verses)), 3 * len(temps)),
                           squeeze=False)
  for i, t in enumerate(temps):
    for j, v in enumerate(verses):
      ax = axes[i][j]
      for method, color in (("arithmetic", "C0"), ("ancestral", "C1")):
        rs = sorted((r for r in estimator if r["verse"] == v and
                     r["temperature"] == t and r["method"] == method),
                    key=lambda r: r["n"])
        x = [r["n"] for r in rs]
        est = [np.array(r["estimates"]) for r in rs]
        ax.plot(x, [e.mean() for e in est], color=color, label=method)
        ax.fill_between(x, [np.percentile(e, 2.5) for e in est],
                        [np.percentile(e, 97.5) for e in est], color=color,
                        alpha=0.2)
      ax.set_xscale("log", base=2)
      ax.set(title=f"verse {v}, T = {t}", xlabel="N", ylabel="est. BLEU")
  _save(plt, fig, axes, out / "fig3.png")

  fig, axes = plt.subplots(1, len(temps), figsize=(4 * len(temps), 3.5),
                           squeeze=False)
  for ax, t in zip(axes[0], temps):
    for method, color in (("arithmetic", "C0"), ("ancestral", "C1")):
      curve = summary["estimator"].get(f"T={t}", {}).get(method, {})
      x = sorted(curve, key=int)
      ax.plot([int(n) for n in x], [curve[n] for n in x], "-o", color=color,
              label=method)
    ax.set_xscale("log", base=2)
    ax.set(title=f"T = {t}", xlabel="N", ylabel="std of the estimate")
  _save(plt, fig, axes, out / "fig4.png")


def verify(path: pathlib.Path, budget, seed: int, kinds=None,
           only=None, fresh_path=None, translator=None) -> dict:
  """Recomputes the runs recorded in `path` (those of `kinds` and in `only`,
  or all) with this checkout's code and compares each record with the
  committed one, exactly: every per-verse statistic and estimate is a
  function of the sampled texts (and of their order, best first), so equal
  records mean the same samples. With `fresh_path` the recomputed records
  are appended there."""
  from arithmetic_apps import jsonl  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.translation.translate import Translator  # pylint: disable=g-import-not-at-top
  committed = jsonl.load(str(path), key=key_of)
  translator = translator or Translator.load()
  runs = [r for r in plan(budget) if r in committed and
          (kinds is None or r[0] in kinds) and (only is None or r in only)]
  differ = []
  for run in runs:
    fresh = json.loads(json.dumps(run_one(translator, budget, run, seed)))
    if fresh != committed[run]:
      differ.append(list(run))
    if fresh_path:
      jsonl.append(fresh_path, fresh)
  return {"recomputed": len(runs), "identical": len(runs) - len(differ),
          "differ": differ}


def main(argv=None) -> int:
  parser = ex.experiment_parser(__doc__.splitlines()[0], "results/experiments")
  parser.add_argument("--verify", action="store_true")
  parser.add_argument("--verify_out", default=None,
                      help="JSON-lines file for the recomputed records")
  args = parser.parse_args(argv)
  budget = QUICK if args.quick else ex.Budget()
  if args.verify:
    result = verify(pathlib.Path(args.out) / "runs.jsonl", budget, args.seed,
                    fresh_path=args.verify_out)
    print(json.dumps(result))
    print(f"experiments --verify: {result['identical']} of "
          f"{result['recomputed']} committed runs recomputed identically")
    return 0 if not result["differ"] else 1
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  done = ex.run_plan(str(out / "runs.jsonl"), plan(budget), key_of,
                     lambda translator, run: run_one(translator, budget, run,
                                                     args.seed),
                     report_only=args.report_only, desc="experiments")
  records = [done[r] for r in plan(budget) if r in done]
  summary = summarize(records, budget)
  (out / "summary.json").write_text(json.dumps(summary, indent=1))
  (out / "experiments.md").write_text(markdown(summary))
  plots(records, summary, out)
  print(json.dumps(summary))
  ratios = ", ".join(f"{t}: {r['ratio']:.2f} [{r['ci95'][0]:.2f}, "
                     f"{r['ci95'][1]:.2f}]"
                     for t, r in summary["std_ratio"].items())
  print(f"experiments: {len(records)} runs; estimator std arithmetic / "
        f"ancestral at N = 16: {ratios}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
