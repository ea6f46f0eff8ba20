"""Benchmark: how the compacted scheduler rounds the rows it keeps, on an LLM.

    python scripts/bench_llm_rounding.py                  # N = 64, T = 0.8
    python scripts/bench_llm_rounding.py --n 16 --variants octave4 multiple64

The workload of `scripts/bench_llm_engine.py` (SmolLM2-135M, its 8 chat
prompts x N samples, 64 new tokens, stop tokens honoured, float32), run
through `llm.decode` with one `Compaction` per variant:

* geometric: rows kept rounded up to 8 x 2^k (at least 64): a 512-row
  decode keeps all 512 rows while more than 256 are still decoding;
* multiple64: rows kept rounded up to a multiple of 64: 512, 448, 384,
  ... as samples end, but a 128-row decode stays at 128 rows until at
  most 64 are decoding;
* multiple64_seg4: the same with segments of 4 steps instead of 8 (rows
  dropped twice as often, twice as many host round trips);
* multiple32, multiple16: rows kept rounded up to a multiple of 32 or 16
  (finer steps as samples end, more distinct programs to compile);
* octave4: four counts per doubling, at least multiples of 16 (64, 80,
  96, 112, 128, 160, ..., 448, 512: `Compaction.per_octave`; the LLM
  entry points' `llm.LLM_COMPACTION`).

Each (variant, method) runs twice in one process: the first call compiles
what it needs (its seconds include those compiles), the second is timed
warm. Both draw the same samples (`checksum`: the sum of the token ids),
since a row's logits do not depend on how many rows it is decoded among.
Records (with the CPU's name and the commit) are appended to --out as
they finish; a rerun skips those present for this CPU and commit. Prints
one JSON line per record and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np

from host import commit as head_commit, cpu_name  # scripts/host.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "llm" / "bench_rounding.jsonl"


def variants():
  """The variants, each `llm.LLM_COMPACTION` with one thing changed."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.llm import LLM_COMPACTION  # pylint: disable=g-import-not-at-top
  change = lambda **kw: dataclasses.replace(LLM_COMPACTION, **kw)
  return {
      "geometric": change(geometric=True, multiple=8, per_octave=0),
      "multiple64": change(multiple=64, per_octave=0),
      "multiple64_seg4": change(multiple=64, per_octave=0, segment_steps=4),
      "multiple32": change(multiple=32, per_octave=0),
      "multiple16": change(multiple=16, per_octave=0),
      "octave4": LLM_COMPACTION,
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--n", type=int, default=64)
  parser.add_argument("--temperature", type=float, default=0.8)
  parser.add_argument("--variants", nargs="+",
                      default=["octave4", "multiple64"])
  parser.add_argument("--methods", nargs="+",
                      default=["arithmetic", "ancestral"])
  parser.add_argument("--out", default=str(OUT))
  args = parser.parse_args(argv)
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding import llm as llm_lib  # pylint: disable=g-import-not-at-top
  from bench_llm_engine import PROMPTS  # pylint: disable=g-import-not-at-top
  commit = head_commit(mark_changes=True)
  out = pathlib.Path(args.out)
  done = set()
  if out.exists():
    for line in out.read_text().splitlines():
      r = json.loads(line)
      done.add((r["variant"], r["method"], r["n"], r["temperature"],
                r["host"], r["commit"]))
  host = cpu_name()
  llm = llms.load("smollm2-135m", verbose=False)
  _, ids, _ = llm_lib.prepare_prompts(llm, PROMPTS, 64, True)
  table = variants()
  for method in args.methods:
    for name in args.variants:
      if (name, method, args.n, args.temperature, host, commit) in done:
        continue
      sampling = llm_lib.SamplingParams(
          n=args.n, method=method, temperature=args.temperature,
          max_new_tokens=64)
      seconds = []
      for _ in range(2):  # first: with its compiles; second: warm
        stats = {}
        start = time.perf_counter()
        decodes = llm_lib.decode(llm, ids, sampling, stats=stats,
                                 compaction=table[name])[0]
        seconds.append(time.perf_counter() - start)
      record = dict(
          variant=name, method=method, n=args.n,
          temperature=args.temperature, first_seconds=round(seconds[0], 1),
          warm_seconds=round(seconds[1], 1), row_steps=stats["row_steps"],
          sample_row_steps=stats["sample_row_steps"],
          segments=stats["segments"],
          checksum=int(np.asarray(decodes, np.int64).sum()), host=host,
          commit=commit)
      with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")
      print(json.dumps(record), flush=True)
  records = [json.loads(line) for line in out.read_text().splitlines()]
  mine = [r for r in records if r["host"] == host and r["n"] == args.n and
          r["temperature"] == args.temperature]
  by = {(r["variant"], r["method"]): r for r in mine}
  parts = []
  for method in args.methods:
    runs = [by[(name, method)] for name in args.variants
            if (name, method) in by]
    if len(runs) > 1:
      parts.append(
          f"{method}: warm " + " / ".join(
              f"{r['variant']} {r['warm_seconds']} s" for r in runs)
          + ", row-steps " + " / ".join(str(r["row_steps"]) for r in runs)
          + ", same samples: "
          + str(len({r["checksum"] for r in runs}) == 1))
  print(f"rounding (SmolLM2, N = {args.n}, T = {args.temperature}, {host}): "
        + "; ".join(parts))


if __name__ == "__main__":
  main()
