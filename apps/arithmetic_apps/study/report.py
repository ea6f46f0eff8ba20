"""The study's outputs: the chip table, the Figure 5 plot, bytes vs N."""

from __future__ import annotations

import pathlib
from typing import Dict, List, Tuple

from arithmetic_apps.study.memory_model import (FITTED, HARDWARE,
                                                    Constants, analytic_bytes,
                                                    calculator)
from arithmetic_apps.study.points import Point, model_of
from arithmetic_apps.study.sweep import (SweepConfig, replica_chips,
                                             min_chips)
from arithmetic_apps.topology import load_topology

_GIB = 2**30


def chips_table(best: Dict, config: SweepConfig) -> List[dict]:
  """Per (L, N): min chips for beam search and arithmetic sampling (one
  parallel step, one program), arithmetic sampling split over independent
  replicas of one topology, and arithmetic with keys/values per input."""
  rows = []
  for length in config.lengths:
    for e in range(config.max_exp + 1):
      n = 2**e
      rows.append({"length": length, "n": n,
                   "beam": min_chips(best, "beam", length, n,
                                     config.topologies),
                   "arithmetic": min_chips(best, "arithmetic", length, n,
                                           config.topologies),
                   "arithmetic_replicas": replica_chips(
                       best, length, n, config.topologies),
                   "arithmetic_shared": min_chips(best, "arithmetic_shared",
                                                  length, n,
                                                  config.topologies)})
  return rows


def model_error(records: List[dict],
                constants: Constants = FITTED) -> List[dict]:
  """Compiled vs analytic bytes for every compiled (not failed) point."""
  out = []
  for r in records:
    if r.get("error") or "total_bytes" not in r:
      continue
    point = Point.of(r)
    analytic = analytic_bytes(model_of(point).config, point.method, point.n,
                              point.length, point.mesh,
                              memory=r["hbm_bytes"],
                              constants=constants)["total"]
    out.append({"method": point.method, "length": point.length,
                "topology": point.topology, "mesh": list(point.mesh),
                "n": point.n, "compiled_gib": r["total_bytes"] / _GIB,
                "analytic_gib": analytic / _GIB,
                "error": analytic / r["total_bytes"] - 1})
  return out


def point_errors(records: List[dict], constants: Constants = FITTED
                 ) -> List[Tuple[Point, float]]:
  """(point, analytic / compiled - 1) for every compiled point of `records`."""
  compiled = [r for r in records
              if not r.get("error") and "total_bytes" in r]
  return [(Point.of(r), e["error"])
          for r, e in zip(compiled, model_error(compiled, constants))]


def markdown(best: Dict, records: List[dict], config: SweepConfig,
             command: str) -> str:
  lines = [f"# Figure 5: chips for N samples of {config.preset} "
           f"({config.dtype}) on TPU v4", "",
           f"Regenerate: `{command}`.", "",
           "## Largest N per chip set (best mesh)", "",
           "| method | L | " + " | ".join(config.topologies) + " |",
           "|---|---|" + "---|" * len(config.topologies)]
  for method in config.methods:
    for length in config.lengths:
      cells = []
      for name in config.topologies:
        slot = best.get((method, length, name), {})
        cells.append("-" if slot.get("n") is None else
                     f"{slot['n']} ({slot['mesh'][0]}x{slot['mesh'][1]})")
      lines.append(f"| {method} | {length} | " + " | ".join(cells) + " |")
  lines += ["", "## Minimum chips for N (one parallel step; replicas: "
            "N split over independent copies of one topology)", "",
            "| L | N | beam | arithmetic | arithmetic, replicas | arithmetic, "
            "shared K/V |", "|---|---|---|---|---|---|"]
  for row in chips_table(best, config):
    cell = lambda v: "does not fit" if v is None else str(v)
    lines.append(f"| {row['length']} | {row['n']} | {cell(row['beam'])} | "
                 f"{cell(row['arithmetic'])} | "
                 f"{cell(row['arithmetic_replicas'])} | "
                 f"{cell(row['arithmetic_shared'])} |")
  errors = model_error(records)
  if errors:
    worst = max(abs(e["error"]) for e in errors)
    lines += ["", f"## Analytic model vs compiled ({len(errors)} points, "
              f"worst error {100 * worst:.1f} %)", "",
              "| method | L | topology | mesh | N | compiled GiB | analytic "
              "GiB | error |", "|---|---|---|---|---|---|---|---|"]
    for e in errors:
      lines.append(f"| {e['method']} | {e['length']} | {e['topology']} | "
                   f"{e['mesh'][0]}x{e['mesh'][1]} | {e['n']} | "
                   f"{e['compiled_gib']:.2f} | {e['analytic_gib']:.2f} | "
                   f"{100 * e['error']:+.1f} % |")
  lines += calculator_markdown(config)
  failed = [r for r in records if r.get("error")]
  lines += ["", f"Compiled points: {len(records)}; not fitting or failed: "
            f"{len(failed)}; compile time "
            f"{sum(r.get('compile_s', 0) for r in records) / 60:.1f} min."]
  return "\n".join(lines) + "\n"


def calculator_markdown(config: SweepConfig) -> List[str]:
  """The formula's answer for hardware we cannot compile for: the largest
  N on one device, and the fewest devices (of 1, 2, 4, 8) for N = 1024."""
  from arithmetic_decoding.models import preset  # pylint: disable=g-import-not-at-top
  model = preset(config.preset, dtype=config.dtype, param_dtype=config.dtype)
  lines = ["", "## The calculator (analytic model only): largest N on one "
           "device / devices for N = 1024", "",
           "| hardware | method | " + " | ".join(
               f"L={l}" for l in config.lengths) + " |",
           "|---|---|" + "---|" * len(config.lengths)]
  for name, memory in HARDWARE.items():
    for method in config.methods:
      cells = []
      for length in config.lengths:
        table = calculator(model, method, length, memory, config.max_exp)
        one = max([n for n, c in table.items() if c == 1], default=None)
        top = table.get(2**config.max_exp)
        cells.append(f"{one or '-'} / {top or '>8'}")
      lines.append(f"| {name} | {method} | " + " | ".join(cells) + " |")
  return lines


def figure(best: Dict, records: List[dict], config: SweepConfig,
           path: pathlib.Path) -> None:
  """Figure 5's layout: min chips vs N (log2), one panel per L; beam solid,
  arithmetic dotted; and a second file with per-chip GiB vs N on one chip."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  table = chips_table(best, config)
  fig, axes = plt.subplots(1, len(config.lengths),
                           figsize=(4 * len(config.lengths), 3.4), sharey=True)
  axes = axes if hasattr(axes, "__len__") else [axes]
  for ax, length in zip(axes, config.lengths):
    rows = [r for r in table if r["length"] == length]
    for key, style, label in (("beam", "-o", "beam search"),
                              ("arithmetic", ":s", "arithmetic (one step)"),
                              ("arithmetic_replicas", ":^",
                               "arithmetic (replicas)"),
                              ("arithmetic_shared", "--d",
                               "arithmetic, shared K/V (ours)")):
      xs = [r["n"] for r in rows if r[key] is not None]
      ys = [r[key] for r in rows if r[key] is not None]
      ax.plot(xs, ys, style, label=label, markersize=4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    tallest = max([load_topology(t).chips for t in config.topologies] +
                  [r[k] for r in table for k in r
                   if k not in ("length", "n") and r[k] is not None])
    ax.set_ylim(0.7, tallest * 1.5)
    ax.set_title(f"L = {length}")
    ax.set_xlabel("N (samples / beams)")
  axes[0].set_ylabel("minimum TPU v4 chips")
  axes[-1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  fig, axes = plt.subplots(1, len(config.lengths),
                           figsize=(4 * len(config.lengths), 3.4), sharey=True)
  axes = axes if hasattr(axes, "__len__") else [axes]
  first = config.topologies[0]
  hbm = load_topology(first).hbm_bytes_per_chip / _GIB
  for ax, length in zip(axes, config.lengths):
    for method, style in (("beam", "-o"), ("arithmetic", ":s"),
                          ("ancestral", "x"), ("arithmetic_shared", "--d")):
      pts = sorted((r["n"], r["total_bytes"] / _GIB) for r in records
                   if r["method"] == method and r["length"] == length and
                   r["topology"] == first and "total_bytes" in r)
      if pts:
        ax.plot(*zip(*pts), style, label=method, markersize=4)
    ax.axhline(hbm, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_title(f"L = {length}, {first}")
    ax.set_xlabel("N")
  axes[0].set_ylabel("compiled bytes per chip (GiB)")
  axes[-1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path.with_name(path.stem + "_bytes.png"), dpi=120)
  plt.close(fig)


def first_chip_counts(best: Dict, config: SweepConfig) -> Dict:
  """The N at which beam search first needs 2, 4, 8 chips or no longer
  fits, per L (docs/study.md's comparison with Figure 5)."""
  out = {}
  for length in config.lengths:
    firsts = {}
    for row in chips_table(best, config):
      if row["length"] != length:
        continue
      need = row["beam"]
      label = "no fit" if need is None else str(need)
      if label not in firsts and (need is None or need > 1):
        firsts[label] = row["n"]
    out[length] = firsts
  return out
