"""python -m arithmetic_apps.study: the Figure 5 sweep, resumable.

  python -m arithmetic_apps.study                      # mT5-XXL, all L
  python -m arithmetic_apps.study --preset tiny --lengths 128 \\
      --topologies v4-1x1x1 v4-2x2x1 --out /tmp/study       # a small one
  python -m arithmetic_apps.study --report_only         # tables, figure

Appends one JSON line per compiled point to OUT/points.jsonl (rerun to
resume; finished points are not compiled again; --report_only compiles
nothing and reports what is there), then writes OUT/study.md,
OUT/summary.json, OUT/figure5.png and OUT/figure5_bytes.png, and prints
JSON plus a one-line summary. Needs libtpu (the `[tpu]` extra), no TPU.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v4-8")

from tqdm import tqdm  # noqa: E402

from arithmetic_apps.study import report  # noqa: E402
from arithmetic_apps.study.points import compile_point  # noqa: E402
from arithmetic_apps.study.sweep import (TOPOLOGIES, Sweep,  # noqa: E402
                                             SweepConfig)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="xxl")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--methods", nargs="+",
                      default=["beam", "arithmetic", "arithmetic_shared"])
  parser.add_argument("--lengths", nargs="+", type=int,
                      default=[128, 256, 512, 1024])
  parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES))
  parser.add_argument("--max_exp", type=int, default=10)
  parser.add_argument("--guess", default="previous",
                      choices=["previous", "formula"],
                      help="where each search starts (study.sweep)")
  parser.add_argument("--out", default="results/study")
  parser.add_argument("--report_only", action="store_true")
  args = parser.parse_args(argv)
  config = SweepConfig(preset=args.preset, dtype=args.dtype,
                       methods=tuple(args.methods),
                       lengths=tuple(args.lengths),
                       topologies=tuple(args.topologies), max_exp=args.max_exp,
                       guess=args.guess)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  bar = tqdm(total=len(config.searches()), desc="study searches",
             file=sys.stderr, disable=args.report_only)
  sweep = Sweep(config, str(out / "points.jsonl"), compile_fn=compile_point,
                read_only=args.report_only, on_compile=lambda r: bar.set_postfix(
                    compiled=sweep.compiled, last=f"{r['method']} L{r['length']}"
                    f" {r['topology']} N{r['n']}"))
  best = sweep.run(progress=bar.update)
  bar.close()
  records = [r for r in sweep.records.values()
             if r["preset"] == config.preset and r["dtype"] == config.dtype]
  command = "python -m arithmetic_apps.study " + " ".join(
      argv if argv is not None else sys.argv[1:])
  text = report.markdown(best, records, config, command.strip())
  if sweep.missing:
    text = (f"**Partial:** the sweep is still running; "
            f"{summary_incomplete(sweep)} searches are incomplete (their N "
            "is a lower bound or missing).\n\n" + text)
  (out / "study.md").write_text(text)
  report.figure(best, records, config, out / "figure5.png")
  summary = {"best": {f"{m} L{l} {t}": v for (m, l, t), v in best.items()},
             "chips": report.chips_table(best, config),
             "beam_first_needs": {str(k): v for k, v in
                                  report.first_chip_counts(best, config).items()},
             "compiled_points": len(records),
             "compiled_now": sweep.compiled,
             "searches_incomplete": len({(p.method, p.length, p.topology,
                                          p.mesh) for p in sweep.missing})}
  (out / "summary.json").write_text(json.dumps(summary, indent=1))
  print(json.dumps(summary))
  firsts = "; ".join(f"L={l}: " + ", ".join(f"{k} chips from N={n}"
                                            for k, n in v.items())
                     for l, v in report.first_chip_counts(best, config).items())
  print(f"study {config.preset}: {len(records)} points ({sweep.compiled} "
        f"compiled now); beam search needs {firsts or 'one chip throughout'}")
  return 0


def summary_incomplete(sweep) -> int:
  return len({(p.method, p.length, p.topology, p.mesh) for p in sweep.missing})


if __name__ == "__main__":
  sys.exit(main())
