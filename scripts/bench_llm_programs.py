"""Benchmark: how many programs the compacted scheduler compiles as N varies,
with its sample rows padded to a bucket (`Compaction.pad_samples`) or not.

    python scripts/bench_llm_programs.py
    python scripts/bench_llm_programs.py --ns 8 5 6 7 3 --max_new_tokens 32

SmolLM2-135M (float32), one chat prompt, T = 1.0, `--max_new_tokens` new
tokens, through `llm.decode` with `llm.LLM_COMPACTION` (padded) and the
same with `pad_samples=False` (unpadded). Per (variant, method) the
compiled programs are cleared (`jax.clear_caches`), then each N of `--ns`
is decoded twice in a row: the first call's seconds include what it
compiles, the second is warm; after each, the count of compiled segment
programs (`compaction._segment`). Both variants draw the same samples
(`checksums`: the sum of the token ids per N). The padded variant decodes
8 sample rows for N <= 8 (16 for N <= 16, ...), so one set of programs
serves every N of a bucket; the unpadded one compiles a set per N.

One record per (variant, method) is appended to --out when it finishes
(with the CPU's name and the commit); a rerun skips those present for
this CPU and commit. Prints one JSON line per record and a one-line
summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import numpy as np

from host import commit as head_commit, cpu_name  # scripts/host.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "llm" / "bench_programs.jsonl"
PROMPT = "Write a short poem about the sea."


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--ns", type=int, nargs="+", default=[8, 5, 6, 7, 3])
  parser.add_argument("--max_new_tokens", type=int, default=32)
  parser.add_argument("--out", default=str(OUT))
  args = parser.parse_args(argv)
  import jax  # pylint: disable=g-import-not-at-top
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding import compaction  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding import llm as llm_lib  # pylint: disable=g-import-not-at-top
  commit = head_commit()
  out = pathlib.Path(args.out)
  host = cpu_name()
  done = set()
  if out.exists():
    for line in out.read_text().splitlines():
      r = json.loads(line)
      done.add((r["variant"], r["method"], tuple(r["ns"]), r["host"],
                r["commit"]))
  variants = {"padded": llm_lib.LLM_COMPACTION,
              "unpadded": dataclasses.replace(llm_lib.LLM_COMPACTION,
                                              pad_samples=False)}
  llm = llms.load("smollm2-135m", verbose=False)
  _, ids, _ = llm_lib.prepare_prompts(llm, [PROMPT], args.max_new_tokens,
                                      True)
  for method in ("arithmetic", "ancestral"):
    for name, setting in variants.items():
      if (name, method, tuple(args.ns), host, commit) in done:
        continue
      jax.clear_caches()
      first, warm, programs, checksums = [], [], [], []
      for n in args.ns:
        sampling = llm_lib.SamplingParams(
            n=n, method=method, temperature=1.0,
            max_new_tokens=args.max_new_tokens, seed=1)
        seconds = []
        for _ in range(2):  # first: with its compiles; second: warm
          start = time.perf_counter()
          decodes = llm_lib.decode(llm, ids, sampling, compaction=setting)[0]
          seconds.append(round(time.perf_counter() - start, 2))
        first.append(seconds[0])
        warm.append(seconds[1])
        programs.append(compaction._segment._cache_size())  # pylint: disable=protected-access
        checksums.append(int(np.asarray(decodes, np.int64).sum()))
        print(f"  {name} {method} N = {n}: first {seconds[0]} s, warm "
              f"{seconds[1]} s, segment programs {programs[-1]}", flush=True)
      record = dict(variant=name, method=method, ns=args.ns,
                    max_new_tokens=args.max_new_tokens,
                    first_seconds=first, warm_seconds=warm,
                    segment_programs=programs, checksums=checksums,
                    host=host, commit=commit)
      with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")
      print(json.dumps(record), flush=True)
  records = [json.loads(line) for line in out.read_text().splitlines()]
  by = {(r["variant"], r["method"]): r for r in records
        if r["host"] == host and r["ns"] == args.ns}
  parts = []
  for method in ("arithmetic", "ancestral"):
    pad, raw = by.get(("padded", method)), by.get(("unpadded", method))
    if pad and raw:
      parts.append(
          f"{method}: first calls {sum(raw['first_seconds']):.0f} -> "
          f"{sum(pad['first_seconds']):.0f} s, segment programs "
          f"{raw['segment_programs'][-1]} -> {pad['segment_programs'][-1]},"
          f" warm {sum(raw['warm_seconds']):.1f} -> "
          f"{sum(pad['warm_seconds']):.1f} s, same samples: "
          f"{raw['checksums'] == pad['checksums']}")
  print(f"programs (SmolLM2, N in {args.ns}, unpadded -> padded, {host}): "
        + "; ".join(parts))


if __name__ == "__main__":
  main()
