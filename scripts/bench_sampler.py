"""Benchmark: one arithmetic categorical step vs `jax.random.categorical`.

Both are jitted, warmed up, and timed side by side in one run (alternating
calls, median of repeats), over vocabularies of T5 (32,128) and mT5 (250,112)
and batches of 8 and 64 rows. Goal: the arithmetic step costs no more than the
categorical step.

  python scripts/bench_sampler.py                      # the full table
  python scripts/bench_sampler.py --out results/s.jsonl  # resumable

Prints one JSON object per configuration, then a JSON summary and a one-line
summary. With --out, finished configurations are appended to the file as they
complete and skipped when the script is run again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax

from arithmetic_decoding import arithmetic_categorical
from arithmetic_apps import jsonl


def time_pair(fns, args, repeats: int, inner: int):
  """Median seconds per call of each function, alternating between them."""
  for fn, a in zip(fns, args):  # compile and warm up
    jax.block_until_ready(fn(*a))
    jax.block_until_ready(fn(*a))
  samples = [[] for _ in fns]
  for _ in range(repeats):
    for k, (fn, a) in enumerate(zip(fns, args)):
      start = time.perf_counter()
      for _ in range(inner):
        out = fn(*a)
      jax.block_until_ready(out)
      samples[k].append((time.perf_counter() - start) / inner)
  return [statistics.median(s) for s in samples]


def measure(vocab: int, batch: int, dtype: str, repeats: int, inner: int) -> dict:
  key = jax.random.PRNGKey(0)
  logits = (3.0 * jax.random.normal(key, (batch, vocab))).astype(dtype)
  codes = jax.random.uniform(jax.random.PRNGKey(1), (batch,))
  arithmetic = jax.jit(arithmetic_categorical)
  categorical = jax.jit(lambda k, x: jax.random.categorical(k, x, axis=-1))
  t_arith, t_cat = time_pair([arithmetic, categorical],
                             [(logits, codes), (key, logits)], repeats, inner)
  return {
      "vocab": vocab, "batch": batch, "dtype": dtype,
      "arithmetic_ms": round(1e3 * t_arith, 4),
      "categorical_ms": round(1e3 * t_cat, 4),
      "ratio": round(t_arith / t_cat, 3),
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--vocab", type=int, nargs="+", default=[32128, 250112])
  parser.add_argument("--batch", type=int, nargs="+", default=[8, 64])
  parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
  parser.add_argument("--repeats", type=int, default=15)
  parser.add_argument("--inner", type=int, default=5)
  parser.add_argument("--out", default=None,
                      help="JSON-lines file: results are appended and reused.")
  args = parser.parse_args(argv)

  configs = [(v, b, d) for v in args.vocab for b in args.batch for d in args.dtype]

  def run(config):
    record = measure(*config, repeats=args.repeats, inner=args.inner)
    return dict(record, backend=jax.default_backend())

  done = jsonl.run_missing(
      args.out, configs, lambda r: (r["vocab"], r["batch"], r["dtype"]), run,
      "bench_sampler")
  results = [done[c] for c in configs]
  for r in results:
    print(json.dumps(r))
  ratios = [r["ratio"] for r in results]
  summary = {"configs": len(results), "max_ratio": max(ratios),
             "median_ratio": statistics.median(ratios),
             "goal_met": max(ratios) <= 1.0, "backend": jax.default_backend(),
             "devices": str(jax.devices()[0].device_kind)}
  print(json.dumps({"summary": summary}))
  print(f"bench_sampler: arithmetic / categorical step time ratio median "
        f"{summary['median_ratio']:.2f}, worst {summary['max_ratio']:.2f} over "
        f"{len(results)} configs on {summary['backend']} "
        f"(goal <= 1.0: {'met' if summary['goal_met'] else 'NOT met'})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
