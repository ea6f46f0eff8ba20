"""The paper's Figs. 2-4 at the paper's statistical power, on the embedded
English->French model.

    python scripts/experiments_paper.py                 # run (resumable) + report
    python scripts/experiments_paper.py --report_only   # tables/plots from runs
    python scripts/experiments_paper.py --quick --out DIR   # tiny (tests)
    python scripts/experiments_paper.py --verify 6      # recompute 6 runs

The grid (`PAPER`):
  * Fig. 4: 100 test verses spread over the split x 100 repeats, N = 2, 4,
    8, 16, 32, 64, T = 0.1, 0.2, 0.5, arithmetic vs i.i.d. sampling: the standard
    deviation over the repeats of the estimate of each verse's expected
    sentence BLEU, averaged over verses, and the ratio with a bootstrap
    interval over verses. Each repeat decodes 64 samples; each N is an exact
    N-sample set nested in them (`experiments.nested_estimator_runs`).
  * Fig. 3: the first 4 of those verses (the verses of the small grid),
    the estimates' mean and 2.5-97.5 percentile band per N.
  * Fig. 2: all 345 test verses, N = 5, 10, 20 (nested in 20 per verse),
    T = 0.1 ... 0.8: mean / min / oracle sentence BLEU against n-gram
    diversity; beam search with N beams for reference; the oracle gain of
    arithmetic over i.i.d. sampling per point with a bootstrap interval.

The i.i.d. baseline is ancestral sampling by inverse CDF: each sample
decodes its own independent uniform code in the same decoder (the same
distribution as `Method.ANCESTRAL`'s Gumbel-max draws, at half their cost
here; see `experiments.IID`).

Runs are ordered so that any prefix of the plan is a usable grid: Fig. 4 on
the 4 Fig. 3 verses, Fig. 2 at T = 0.1, Fig. 4 on 12 more verses, the rest
of Fig. 2 and beam search, then Fig. 4 on the other verses; Fig. 4's
verses come in an order spread over the split. Each finished run is appended to
`results/experiments_paper/runs.jsonl` (a rerun skips it); the report
(`summary.json`, `experiments.md`, `fig2.png`, `fig3.png`, `fig4.png`) uses
the finished runs and states how many verses Fig. 4 covers.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
import zlib
from typing import Tuple

import jax
import numpy as np

from arithmetic_apps import programs
from arithmetic_apps.translation import experiments as ex
from arithmetic_apps.translation.data import load_split


@dataclasses.dataclass(frozen=True)
class PaperBudget:
  estimator_verses: int = 100
  figure3_verses: int = 4
  repeats: int = 100
  estimator_n: Tuple[int, ...] = (2, 4, 8, 16, 32, 64)
  estimator_temperatures: Tuple[float, ...] = (0.1, 0.2, 0.5)
  quality_verses: int = 345
  quality_n: Tuple[int, ...] = (5, 10, 20)
  quality_temperatures: Tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6,
                                             0.7, 0.8)
  max_rows: int = 512


PAPER = PaperBudget()
QUICK = PaperBudget(estimator_verses=3, figure3_verses=2, repeats=4,
                    estimator_n=(2, 4), estimator_temperatures=(0.5,),
                    quality_verses=3, quality_n=(2, 4),
                    quality_temperatures=(0.5,), max_rows=64)


def spread_order(count: int) -> list:
  """0 ... count-1 ordered so that every prefix is spread over the range
  (bit-reversed fractions).

  >>> spread_order(5)
  [0, 2, 1, 3, 4]
  """
  def radical(i):
    x, f = 0.0, 0.5
    while i:
      x, i, f = x + f * (i & 1), i >> 1, f / 2
    return x
  return sorted(range(count), key=lambda i: (radical(i), i))


def plan(budget: PaperBudget):
  """Every run, in order: (kind, verse, temperature, method or N)."""
  test = load_split("test")
  verses = ex.estimator_verses(test, budget.estimator_verses)
  first = ex.estimator_verses(test, budget.figure3_verses)
  rest = [verses[i] for i in spread_order(len(verses)) if verses[i] not in first]
  fig4 = lambda vs: [("fig4", v, t, m) for v in vs
                     for t in budget.estimator_temperatures
                     for m in ex.NESTED_METHODS]
  fig2 = lambda ts: [("fig2", -1, t, m) for t in ts
                     for m in ex.NESTED_METHODS]
  temps = budget.quality_temperatures
  # Fig. 4 on 16 verses (its power) before the rest of Fig. 2.
  runs = fig4(first) + fig2(temps[:1]) + fig4(rest[:12]) + fig2(temps[1:])
  runs += [("beam", -1, 0.0, n) for n in budget.quality_n]
  return runs + fig4(rest[12:])


# Mappings (`programs.mappings`) above which the compiled programs are
# cleared before the next run: under the kernel's 65,530 by more than a
# run adds, and about 10 GB of memory.
MAX_MAPPINGS = 45_000


def host_cpu() -> str:
  """The CPU's model name and widest vector extension (XLA:CPU compiles for
  the host: on another CPU the same code may round differently, so a
  record is reproducible bit for bit on the kind of CPU that made it)."""
  try:
    info = pathlib.Path("/proc/cpuinfo").read_text()
  except OSError:
    return "unknown"
  model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                if line.startswith("model name")), "unknown")
  flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                if line.startswith("flags")), [])
  vector = next((f for f in ("avx512f", "avx2", "avx") if f in flags), "")
  return f"{model} ({vector})" if vector else model


def key_of(record):
  return (record["kind"], record["verse"], record["temperature"],
          record["method"])


def run_one(translator, budget, run, seed):
  kind, verse, temperature, method = run
  test = load_split("test")
  key = jax.random.fold_in(jax.random.PRNGKey(seed), zlib.crc32(
      json.dumps(run).encode()) % 2**31)
  start = time.time()
  if kind == "fig4":
    result = ex.nested_estimator_runs(
        translator, test[verse], budget.estimator_n, temperature, method,
        budget.repeats, key, budget.max_rows)
  elif kind == "fig2":
    result = ex.nested_quality_point(
        translator, test[:budget.quality_verses], budget.quality_n,
        temperature, method, key, budget.max_rows)
  else:
    result = ex.beam_point(translator, test[:budget.quality_verses], method)
  result["seconds"] = round(time.time() - start, 2)
  result["device"] = jax.devices()[0].device_kind
  result["host"] = host_cpu()
  record = dict(zip(("kind", "verse", "temperature", "method"), run), **result)
  return json.loads(json.dumps(record))  # N keys as strings, as reloaded


def _bootstrap_mean(values, draws=2000, seed=0):
  values = np.asarray(values, np.float64)
  rng = np.random.default_rng(seed)
  boot = values[rng.integers(0, len(values), (draws, len(values)))].mean(1)
  return [float(values.mean()), float(np.percentile(boot, 2.5)),
          float(np.percentile(boot, 97.5))]


def summarize(records, budget):
  """Fig. 4 curves and ratios, Fig. 3 bands, Fig. 2 points and oracle gains."""
  summary = {"budget": dataclasses.asdict(budget), "fig4": {}, "fig3": {},
             "fig2": [], "oracle_gain": [], "tokens": 0, "seconds": 0.0}
  for r in records:
    summary["tokens"] += r.get("tokens", 0)
    summary["seconds"] += r.get("seconds", 0.0)
  fig4 = [r for r in records if r["kind"] == "fig4"]
  by = {(r["verse"], r["temperature"], r["method"]): r for r in fig4}
  for t in budget.estimator_temperatures:
    verses = sorted({v for (v, tt, m) in by if tt == t and
                     (v, t, ex.IID) in by and (v, t, "arithmetic") in by})
    rows = {}
    for n in budget.estimator_n:
      std = {m: np.array([np.std(by[(v, t, m)]["estimates"][str(n)], ddof=1)
                          for v in verses]) for m in ex.NESTED_METHODS} if verses else {}
      if not verses:
        continue
      ratio = ex.bootstrap_ratio(std["arithmetic"], std[ex.IID])
      below = float(np.mean(std["arithmetic"] < std[ex.IID]))
      rows[str(n)] = {
          "std_arithmetic": float(std["arithmetic"].mean()),
          "std_iid": float(std[ex.IID].mean()),
          "ratio": ratio[0], "ci95": list(ratio[1:]),
          "verses_lower": below,
          "distinct": {m: float(np.mean([by[(v, t, m)]["distinct"][str(n)]
                                         for v in verses]))
                       for m in ex.NESTED_METHODS},
          "stratified_depth": float(np.mean(
              [by[(v, t, "arithmetic")]["stratified_depth"][str(n)]
               for v in verses])),
          "mean_estimate": {m: float(np.mean(
              [np.mean(by[(v, t, m)]["estimates"][str(n)]) for v in verses]))
              for m in ex.NESTED_METHODS}}
    texts = [by[(v, t, m)]["texts"] for v in verses for m in ex.NESTED_METHODS]
    summary["fig4"][f"T={t}"] = {
        "verses": len(verses), "by_n": rows,
        # distinct texts among a verse's repeats x 64 samples
        "distinct_texts": float(np.mean(texts)) if texts else None}
  test = load_split("test")
  for v in ex.estimator_verses(test, budget.figure3_verses):
    for t in budget.estimator_temperatures:
      for m in ex.NESTED_METHODS:
        r = by.get((v, t, m))
        if r is None:
          continue
        summary["fig3"].setdefault(f"verse={v}", {}).setdefault(
            f"T={t}", {})[m] = {
                n: [float(np.mean(e)), float(np.percentile(e, 2.5)),
                    float(np.percentile(e, 97.5))]
                for n, e in ((k, np.array(x))
                             for k, x in r["estimates"].items())}
  fig2 = {(r["temperature"], r["method"]): r for r in records
          if r["kind"] == "fig2"}
  for (t, m), r in sorted(fig2.items()):
    for n, point in r["by_n"].items():
      summary["fig2"].append({"n": int(n), "temperature": t, "method": m,
                              **point["macro"]})
  for r in records:
    if r["kind"] == "beam":
      summary["fig2"].append({"n": r["method"], "temperature": 0.0,
                              "method": "beam", **r["macro"]})
  for t in budget.quality_temperatures:
    a, b = fig2.get((t, "arithmetic")), fig2.get((t, ex.IID))
    if not (a and b):
      continue
    for n in budget.quality_n:
      diff = [x["max_bleu"] - y["max_bleu"] for x, y in
              zip(a["by_n"][str(n)]["per_verse"], b["by_n"][str(n)]["per_verse"])]
      summary["oracle_gain"].append({"n": n, "temperature": t,
                                     "gain": _bootstrap_mean(diff)})
  return summary


def markdown(summary) -> str:
  lines = ["## Fig. 4: std of the expected-BLEU estimate (over repeats), "
           "averaged over verses", "",
           "| T | verses | N | std arithmetic | std i.i.d. | ratio | 95 % "
           "bootstrap | verses lower | distinct arith / iid | stratified "
           "tokens |", "|---:|---:|---:|---:|---:|---:|---|---:|---|---:|"]
  for t, block in summary["fig4"].items():
    for n, r in block["by_n"].items():
      lines.append(
          f"| {t[2:]} | {block['verses']} | {n} | {r['std_arithmetic']:.3f} | "
          f"{r['std_iid']:.3f} | {r['ratio']:.2f} | {r['ci95'][0]:.2f} - "
          f"{r['ci95'][1]:.2f} | {r['verses_lower']:.2f} | "
          f"{r['distinct']['arithmetic']:.1f} / {r['distinct'][ex.IID]:.1f}"
          f" | {r['stratified_depth']:.1f} |")
  lines += ["", "## Fig. 2: macro-averaged sentence BLEU and n-gram diversity",
            "", "| N | T | method | mean BLEU | min BLEU | oracle BLEU | "
            "diversity | duplicates |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
  for q in sorted(summary["fig2"], key=lambda q: (q["n"], q["temperature"],
                                                  q["method"])):
    lines.append(f"| {q['n']} | {q['temperature']} | {q['method']} | "
                 f"{q['mean_bleu']:.2f} | {q['min_bleu']:.2f} | "
                 f"{q['max_bleu']:.2f} | {q['diversity']:.3f} | "
                 f"{q['duplicates']:.3f} |")
  lines += ["", "## Oracle (best-of-N) BLEU, arithmetic minus i.i.d., per "
            "verse", "", "| N | T | gain | 95 % bootstrap |", "|---:|---:|---:|---|"]
  for g in summary["oracle_gain"]:
    lines.append(f"| {g['n']} | {g['temperature']} | {g['gain'][0]:+.2f} | "
                 f"{g['gain'][1]:+.2f} - {g['gain'][2]:+.2f} |")
  return "\n".join(lines) + "\n"


def plots(summary, out: pathlib.Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  colors = {"arithmetic": "C0", ex.IID: "C1"}
  temps = list(summary["fig4"])
  if temps:
    fig, axes = plt.subplots(2, len(temps), figsize=(4.2 * len(temps), 6.5),
                             squeeze=False)
    for j, t in enumerate(temps):
      block = summary["fig4"][t]
      ns = [int(n) for n in block["by_n"]]
      for m in ex.NESTED_METHODS:
        axes[0][j].plot(ns, [block["by_n"][str(n)]["std_" + m] for n in ns],
                        "-o", color=colors[m], label=m)
      axes[0][j].set(title=f"T = {t[2:]} ({block['verses']} verses)",
                     xscale="log", ylabel="std of the estimate")
      ratio = [block["by_n"][str(n)]["ratio"] for n in ns]
      lo = [block["by_n"][str(n)]["ci95"][0] for n in ns]
      hi = [block["by_n"][str(n)]["ci95"][1] for n in ns]
      axes[1][j].plot(ns, ratio, "-o", color="k")
      axes[1][j].fill_between(ns, lo, hi, color="k", alpha=0.15)
      axes[1][j].axhline(1.0, color="gray", lw=0.8)
      axes[1][j].axhline(0.5, color="gray", lw=0.8, ls=":")
      axes[1][j].set(xscale="log", xlabel="N", ylabel="ratio arith / iid")
      for ax in axes[:, j]:
        ax.minorticks_off()
        ax.set_xticks(ns, [str(n) for n in ns])
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fig4.png", dpi=110)
    plt.close(fig)
  if summary["fig3"]:
    verses = list(summary["fig3"])
    fig, axes = plt.subplots(len(temps), len(verses),
                             figsize=(3.6 * len(verses), 2.9 * len(temps)),
                             squeeze=False)
    for i, t in enumerate(temps):
      for j, v in enumerate(verses):
        ax = axes[i][j]
        for m, band in summary["fig3"][v].get(t, {}).items():
          ns = sorted(int(n) for n in band)
          pts = [band[str(n)] for n in ns]
          ax.plot(ns, [p[0] for p in pts], color=colors[m], label=m)
          ax.fill_between(ns, [p[1] for p in pts], [p[2] for p in pts],
                          color=colors[m], alpha=0.2)
        ax.set(xscale="log", title=f"{v}, T = {t[2:]}", xlabel="N",
               ylabel="est. BLEU")
        ax.minorticks_off()
        ax.set_xticks(ns, [str(n) for n in ns])
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig3.png", dpi=110)
    plt.close(fig)
  ns = sorted({q["n"] for q in summary["fig2"]})
  if ns:
    fig, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 4), squeeze=False)
    for ax, n in zip(axes[0], ns):
      for m in ex.NESTED_METHODS:
        pts = sorted((q for q in summary["fig2"] if q["n"] == n and
                      q["method"] == m), key=lambda q: q["temperature"])
        for stat, style in (("mean_bleu", "-o"), ("max_bleu", "--^"),
                            ("min_bleu", ":v")):
          ax.plot([q["diversity"] for q in pts], [q[stat] for q in pts], style,
                  color=colors[m], label=f"{m} {stat.split('_')[0]}")
      for q in summary["fig2"]:
        if q["n"] == n and q["method"] == "beam":
          ax.plot(q["diversity"], q["mean_bleu"], "k*", ms=12, label="beam mean")
      ax.set(title=f"N = {n}", xlabel="n-gram diversity", ylabel="sentence BLEU")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=110)
    plt.close(fig)


def verify(path: str, budget, seed: int, count: int) -> dict:
  """Recomputes `count` finished runs of `path` (spread over the file, at
  most one per kind and temperature first) and compares each record with
  the committed one: every field but the run's seconds and device must be
  identical, except `stratified_depth` (a diagnostic computed from the
  model's teacher-forced log-probabilities, not from the samples; since
  it runs compiled, they differ from those of the eager runs before in
  their last bits, so a prefix within ~1e-4 of log(1/N) may count
  differently), which is reported on its own. Records are reproducible
  on the kind of CPU that made them (`host`, recorded since 2026-12-02):
  XLA:CPU compiles for the host's vector units. The first runs (no
  `host`) are recomputed bit for bit on an Intel Xeon (AVX-512), not on
  an AMD EPYC (AVX-512)."""
  from arithmetic_apps.translation.translate import Translator  # pylint: disable=g-import-not-at-top
  records = [json.loads(line) for line in open(path) if line.strip()]
  seen, picks = set(), []
  for record in records:  # one per (kind, T) first, then spread
    if (record["kind"], record["temperature"]) not in seen:
      seen.add((record["kind"], record["temperature"]))
      picks.append(record)
  picks = (picks + records[::max(1, len(records) // count)])[:count]
  translator = Translator.load()
  checked = []
  strip = lambda r: {k: v for k, v in r.items() if k not in (
      "seconds", "device", "host", "stratified_depth")}
  for record in picks:
    fresh = run_one(translator, budget, key_of(record), seed)
    checked.append({"run": list(key_of(record)),
                    "identical": strip(fresh) == strip(record),
                    "depth_identical": (fresh.get("stratified_depth") ==
                                        record.get("stratified_depth"))})
    print(json.dumps(checked[-1]), flush=True)
  return {"checked": len(checked),
          "identical": sum(c["identical"] for c in checked),
          "depth_identical": sum(c["depth_identical"] for c in checked),
          "runs": checked}


def main(argv=None) -> int:
  parser = ex.experiment_parser(__doc__.splitlines()[0],
                                "results/experiments_paper")
  parser.add_argument("--verify", type=int, default=0, metavar="K",
                      help="recompute K finished runs and compare them with "
                      "their records (nothing is written)")
  parser.add_argument("--max_rows", type=int, default=None,
                      help="rows per decode call (an accelerator takes more)")
  parser.add_argument("--max_minutes", type=float, default=None,
                      help="stop starting new runs after this long")
  args = parser.parse_args(argv)
  budget = QUICK if args.quick else PAPER
  if args.max_rows:
    budget = dataclasses.replace(budget, max_rows=args.max_rows)
  deadline = (time.time() + 60 * args.max_minutes if args.max_minutes
              else float("inf"))
  out = pathlib.Path(args.out)
  if args.verify:
    result = verify(str(out / "runs.jsonl"), budget, args.seed, args.verify)
    print(json.dumps(result))
    print(f"experiments_paper --verify: {result['identical']} of "
          f"{result['checked']} recomputed runs identical to their records "
          f"(stratified depth identical in {result['depth_identical']})")
    return 0 if result["identical"] == result["checked"] else 1
  out.mkdir(parents=True, exist_ok=True)
  runs = plan(budget)

  def one(translator, run):
    if time.time() > deadline:
      raise TimeoutError
    # Decoding with ended rows dropped and prefixes shared compiles a
    # program per (rows, model rows, cache size) it meets: kept while the
    # process has room for them (`programs`), so a run reuses the compiles
    # of the runs before it. A run adds 1,000-2,000 mappings (and ~0.2 GB).
    programs.release_if_many(MAX_MAPPINGS)
    return run_one(translator, budget, run, args.seed)

  try:
    done = ex.run_plan(str(out / "runs.jsonl"), runs, key_of, one,
                       report_only=args.report_only, desc="experiments_paper")
  except TimeoutError:
    print(f"experiments_paper: --max_minutes {args.max_minutes} reached",
          file=sys.stderr)
    done = ex.run_plan(str(out / "runs.jsonl"), runs, key_of, one,
                       report_only=True, desc="experiments_paper")
  records = [done[r] for r in runs if r in done]
  summary = summarize(records, budget)
  summary["runs"] = {"done": len(records), "planned": len(runs)}
  (out / "summary.json").write_text(json.dumps(summary, indent=1))
  (out / "experiments.md").write_text(markdown(summary))
  plots(summary, out)
  print(json.dumps(summary))
  at16 = ", ".join(
      f"T={t[2:]}: {b['by_n']['16']['ratio']:.2f} [{b['by_n']['16']['ci95'][0]:.2f},"
      f" {b['by_n']['16']['ci95'][1]:.2f}] ({b['verses']} verses)"
      for t, b in summary["fig4"].items() if "16" in b["by_n"])
  print(f"experiments_paper: {len(records)}/{len(runs)} runs; Fig. 4 std "
        f"arithmetic / i.i.d. at N = 16: {at16 or 'n/a'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
