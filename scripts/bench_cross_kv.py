"""Benchmark: cross-attention keys/values per input vs per sample (T5X-style).

The same decode twice, side by side in one run: `arithmetic_sample` (or
`--method beam`) on the encoder-decoder built with `cross_kv="per_sample"`
(T5X's layout: the encoded input copied per sample, keys and values
projected from it) and with `cross_kv="per_input"` (projected once per
input, read by its N rows; `models.CrossKV`). Each is jitted with the
parameters as arguments, warmed up and timed alternately (median of
--repeats). Reports ms per loop step, the ratio, and XLA's
`memory_analysis` temporaries of each compiled program; checks that both
give the same tokens (code resolution 1 / N: see `DecodeSetup`).

  python scripts/bench_cross_kv.py --out results/bench_cross_kv.jsonl
  python scripts/bench_cross_kv.py --presets tiny --n 4 --source-len 16

Prints one JSON object per configuration, a JSON summary and a one-line
summary. With --out, finished configurations are appended as they complete
and skipped when the script runs again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import jax
import numpy as np

from arithmetic_apps import jsonl
from arithmetic_apps.bench import (compile_all, loop_steps, make_decode,
                                   time_alternately)
from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import CrossKV, EncoderDecoderModel, preset

LAYOUTS = tuple(c.value for c in CrossKV)


def measure(name: str, method: str, n: int, batch: int, length: int,
            source_len: int, repeats: int) -> dict:
  config = preset(name)
  models = {c: EncoderDecoderModel(config, cross_kv=c) for c in LAYOUTS}
  params = models["per_input"].init(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, source_len), 2,
                              config.vocab_size)
  key = jax.random.PRNGKey(2)
  fns, outs, mems = compile_all(
      {c: make_decode(m, method, n, length,
                      Method.of(method).default_code_resolution(n))
       for c, m in models.items()},
      (params, tokens, key))
  times = time_alternately(fns, (params, tokens, key), repeats, "per_sample")
  record = {"preset": name, "method": method, "n": n, "batch": batch,
            "max_decode_len": length, "source_len": source_len,
            "backend": jax.default_backend()}
  for layout in LAYOUTS:
    seconds = statistics.median(times[layout])
    steps = (length if method == "beam" else
             loop_steps(np.asarray(outs[layout][0])))
    record[layout] = {"seconds": round(seconds, 5), "steps": steps,
                      "ms_per_step": round(1e3 * seconds / steps, 4),
                      **mems[layout]}
  a, b = outs["per_sample"], outs["per_input"]
  record["same_tokens"] = bool(np.array_equal(np.asarray(a[0]),
                                              np.asarray(b[0])))
  record["max_score_diff"] = float(np.max(np.abs(np.asarray(a[1]) -
                                                 np.asarray(b[1]))))
  record["speedup"] = round(record["per_sample"]["seconds"] /
                            record["per_input"]["seconds"], 3)
  if record["per_input"].get("temp_mb"):
    record["temp_ratio"] = round(record["per_sample"]["temp_mb"] /
                                 record["per_input"]["temp_mb"], 3)
  return record


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
  parser.add_argument("--method", default="arithmetic",
                      choices=[Method.ARITHMETIC.value, Method.BEAM.value])
  parser.add_argument("--n", type=int, nargs="+", default=[1, 4, 16, 64])
  parser.add_argument("--source-len", type=int, nargs="+", default=[16, 128])
  parser.add_argument("--batch", type=int, default=2)
  parser.add_argument("--max-decode-len", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--out", default=None,
                      help="JSON-lines file: results are appended and reused.")
  args = parser.parse_args(argv)

  record_key = lambda r: (r["preset"], r["method"], r["n"], r["batch"],
                          r["max_decode_len"], r["source_len"])
  configs = [(p, args.method, n, args.batch, args.max_decode_len, s)
             for p in args.presets for s in args.source_len for n in args.n]
  done = jsonl.run_missing(
      args.out, configs, record_key,
      lambda c: measure(c[0], c[1], c[2], c[3], c[4], c[5], args.repeats),
      desc="bench_cross_kv")
  results = [done[c] for c in configs]
  for r in results:
    print(json.dumps(r))
  small = [r["speedup"] for r in results
           if r["preset"] == "small" and r["source_len"] == 128]
  summary = {"configs": len(results),
             "all_same_tokens": all(r["same_tokens"] for r in results),
             "max_score_diff": max(r["max_score_diff"] for r in results),
             "median_speedup": statistics.median(r["speedup"] for r in results),
             "small_source128_speedups": small,
             "max_temp_ratio": max(r.get("temp_ratio", 1.0) for r in results),
             "backend": jax.default_backend()}
  print(json.dumps({"summary": summary}))
  print(f"bench_cross_kv ({args.method}): per-sample / per-input time "
        f"median {summary['median_speedup']:.2f}x; mT5-small, source 128: "
        f"{', '.join(f'{x:.2f}x' for x in small) or 'not run'} (N = "
        f"{', '.join(map(str, args.n))}); temporaries up to "
        f"{summary['max_temp_ratio']:.1f}x smaller; same tokens: "
        f"{summary['all_same_tokens']}; {len(results)} configs on "
        f"{summary['backend']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
