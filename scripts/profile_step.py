"""Where a decode step's time goes on the embedded En->Fr model.

    python scripts/profile_step.py            # about 2 minutes

Times, each compiled and the best of 3 (steps inside one program, the cache
donated so that it is updated in place as in the decode loop):
  * the model's step (`EncoderDecoderModel.step_fn`, lockstep, time-minor
    cache, per-input cross-attention) for R rows over a cache of S slots;
  * the samplers' draws on [R, 8000] logits: arithmetic sampling's
    categorical step (`categorical.arithmetic_step`) and ancestral
    sampling's Gumbel-max draw with one key per row (`jax.random.
    categorical`, as `choosers.Ancestral` draws);
  * the logits matmul [R, 256] x [256, 8000];
  * the Gumbel-max draw on the model's own logits at T = 0.1, 0.2 and 0.5
    (R positions picked from 4 test verses' ancestral samples, their
    teacher-forced logits over the temperature): every token's noise
    (`jax.random.categorical`) vs only the tokens that can win
    (`ancestral.categorical_rows`, `Ancestral(pruned=True)`), with the
    tokens they draw compared, and how many tokens per row can win.

With --workload T [T ...] it times instead the paper grid's calls
(`experiments_paper.py`'s Fig. 4 runs decode one verse per call, 8 repeats
x 64 samples) on 4 test verses spread over the split, 2 calls each, at
each temperature and method, compiled first, and splits each call's wall
time: the compiled segments of the loop (`run_compacted`'s
"segment_seconds") against the rest (the host's re-layouts of rows
between segments, the encoder, the sorting of samples); and counts model
row-steps (`row_steps`: one model row through one step, prefixes shared)
per generated token:

    python scripts/profile_step.py --workload 0.1 0.5   # about 5 minutes

Prints one JSON object and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import categorical
from arithmetic_decoding.ancestral import GUMBEL_MAX, categorical_rows
from arithmetic_decoding.choosers import row_keys
from arithmetic_decoding.loop import resize_cache
from arithmetic_decoding.protocol import DecodingState, expand_cache
from arithmetic_apps.translation.data import load_split
from arithmetic_apps.translation.translate import Translator

STEPS = 10  # model steps per timed program


def _best(fn, *args, repeats: int = 3) -> float:
  """Seconds of the fastest of `repeats` calls (after one to compile)."""
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - start)
  return best


def model_step_ms(translator, rows: int, slots: int) -> float:
  """Milliseconds of one model step for `rows` rows over `slots` slots."""
  model, params = translator.model, translator.params
  verse = load_split("test")[100].source
  groups = max(1, rows // 64)
  tokens = translator.encode([verse] * groups)
  _, cache, context = model.decode_start(params, tokens, slots)
  row_context = model.row_context(params, context, jnp.arange(rows),
                                  rows // groups)
  cache = jax.tree_util.tree_map(
      lambda x: x + 0.01, resize_cache(expand_cache(cache, rows // groups, 0,
                                                    False), slots))
  step = model.step_fn(params, row_context, lockstep=True,
                       group_rows=rows // groups)

  def run(cache):
    def body(_, cache):
      state = DecodingState(
          cur_index=jnp.full((rows,), slots - 1, jnp.int32),
          sequences=jnp.zeros((rows, 2), jnp.int32),
          cur_token=jnp.ones((rows, 1), jnp.int32), cache=cache)
      return step(state)[1]
    return jax.lax.fori_loop(0, STEPS, body, cache)

  run = jax.jit(run, donate_argnums=0)
  cache = run(cache)
  jax.block_until_ready(cache)
  best = float("inf")
  for _ in range(3):
    start = time.perf_counter()
    cache = run(cache)
    jax.block_until_ready(cache)
    best = min(best, time.perf_counter() - start)
  return 1e3 * best / STEPS


def sampler_ms(rows: int, vocab: int) -> dict:
  logits = jax.random.normal(jax.random.PRNGKey(0), (rows, vocab)) / 0.5
  codes = jax.random.uniform(jax.random.PRNGKey(1), (rows,))
  arithmetic = jax.jit(lambda x, c: categorical.arithmetic_step(x, c).token)
  keys = row_keys(jax.random.PRNGKey(2), jnp.arange(rows))
  ancestral = jax.jit(jax.vmap(jax.random.categorical))
  x = jax.random.normal(jax.random.PRNGKey(3), (rows, 256))
  w = jax.random.normal(jax.random.PRNGKey(4), (256, vocab))
  matmul = jax.jit(lambda x, w: x @ w)
  return {"arithmetic_step_ms": 1e3 * _best(arithmetic, logits, codes),
          "gumbel_draw_ms": 1e3 * _best(ancestral, keys, logits),
          "logits_matmul_ms": 1e3 * _best(matmul, x, w)}


def model_logits(translator, rows: int, temperature: float) -> jax.Array:
  """[rows, V] logits / T at positions of the model's own ancestral
  samples (4 test verses spread over the split)."""
  test = load_split("test")
  verses = [test[int(i)].source
            for i in np.linspace(0, len(test) - 1, 4).round()]
  samples = translator.sample(verses, rows // 4, temperature,
                              jax.random.PRNGKey(5), "ancestral")
  tokens = np.array([s.tokens for row in samples for s in row])  # [rows, L]
  inputs = np.pad(tokens[:, :-1], ((0, 0), (1, 0)))  # decoder start 0
  encoded = translator.encode([v for v in verses for _ in range(rows // 4)])
  logits = jax.jit(translator.model.logits)(translator.params, encoded,
                                            jnp.asarray(inputs))
  # Positions up to each sample's EOS (the steps a decode runs them).
  length = np.where((tokens == 1).any(-1), (tokens == 1).argmax(-1) + 1,
                    tokens.shape[1])
  pick = np.random.default_rng(0).integers(0, length)  # [rows]
  return logits[np.arange(rows), pick] / temperature


def pruned_draw_ms(translator, rows: int) -> dict:
  keys = row_keys(jax.random.PRNGKey(2), jnp.arange(rows))
  every = jax.jit(jax.vmap(jax.random.categorical))
  pruned = jax.jit(categorical_rows)
  out = {}
  for t in (0.1, 0.2, 0.5):
    x = model_logits(translator, rows, t)
    # Tokens that can win: logit + GUMBEL_MAX >= the top token's value.
    noise = jax.vmap(lambda k: jax.random.gumbel(k, (x.shape[1],)))(keys)
    top = jnp.argmax(x, axis=-1)
    value = jnp.take_along_axis(x + noise, top[:, None], axis=-1)
    count = np.asarray(jnp.sum(x + GUMBEL_MAX >= value, axis=-1))
    out[f"T={t}"] = {
        "candidate_tokens_median": float(np.median(count)),
        "candidate_tokens_p90": float(np.percentile(count, 90)),
        "every_token_ms": round(1e3 * _best(every, keys, x), 2),
        "pruned_ms": round(1e3 * _best(pruned, keys, x), 2),
        "same_tokens": bool((every(keys, x) == pruned(keys, x)).all())}
  return out


def workload_split(translator, temperature: float, method: str,
                   verses: int = 4, repeats: int = 2, n: int = 64,
                   per_call: int = 8) -> dict:
  """Wall time of the paper grid's calls (`per_call` copies of one verse x
  `n` samples), split into the compiled segments and the rest, with model
  row-steps and generated tokens (up to and including EOS)."""
  from arithmetic_decoding.compaction import run_compacted  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.engine import for_row_model  # pylint: disable=g-import-not-at-top
  from bench_experiments import EOS, _steps  # pylint: disable=g-import-not-at-top
  test = load_split("test")
  picks = np.linspace(0, len(test) - 1, verses).round().astype(int)

  def run():
    totals = {"seconds": 0.0, "segment_seconds": 0.0, "row_steps": 0,
              "tokens": 0}
    for v in picks:
      tokens = translator.encode([test[int(v)].source] * per_call)
      for repeat in range(repeats):
        stats = {}
        start = time.perf_counter()
        request, layout = for_row_model(
            translator.model, translator.params, tokens, method,
            eos_id=EOS, key=jax.random.PRNGKey(repeat), num_decodes=n,
            max_decode_len=translator.max_decode_len,
            temperature=temperature)
        out = run_compacted(request, layout, translator.compaction, stats)
        samples = np.asarray(out[0])  # [B, N, L]
        totals["seconds"] += time.perf_counter() - start
        totals["segment_seconds"] += stats["segment_seconds"]
        totals["row_steps"] += stats["row_steps"]
        totals["tokens"] += int(_steps(samples).sum())
    return totals

  run()  # compiles every program the timed pass runs
  totals = run()
  return {"temperature": temperature, "method": method,
          "seconds": round(totals["seconds"], 2),
          "segment_share": round(totals["segment_seconds"]
                                 / totals["seconds"], 3),
          "tokens": totals["tokens"], "row_steps": totals["row_steps"],
          "row_steps_per_token": round(totals["row_steps"]
                                       / totals["tokens"], 3),
          "us_per_row_step": round(1e6 * totals["segment_seconds"]
                                   / totals["row_steps"], 1),
          "tokens_per_s": round(totals["tokens"] / totals["seconds"])}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", type=int, nargs="+", default=[64, 128, 256,
                                                              512])
  parser.add_argument("--slots", type=int, nargs="+", default=[32, 64, 96])
  parser.add_argument("--workload", type=float, nargs="+", default=None,
                      metavar="T", help="time the paper grid's calls at "
                      "these temperatures instead")
  args = parser.parse_args(argv)
  translator = Translator.load()
  if args.workload:
    rows = [workload_split(translator, t, m) for t in args.workload
            for m in ("arithmetic", "ancestral")]
    print(json.dumps({"workload": rows, "backend": jax.default_backend()}))
    print("profile_step --workload: " + "; ".join(
        f"T = {r['temperature']} {r['method']}: {r['tokens_per_s']} tokens/s,"
        f" {100 * r['segment_share']:.0f} % in the compiled segments, "
        f"{r['row_steps_per_token']:.3f} model row-steps per token, "
        f"{r['us_per_row_step']:.0f} us each" for r in rows))
    return 0
  steps = [{"rows": r, "slots": s,
            "ms": round(model_step_ms(translator, r, s), 2)}
           for r in args.rows for s in args.slots]
  for row in steps:
    row["us_per_row"] = round(1e3 * row["ms"] / row["rows"], 1)
  rows = max(args.rows)
  samplers = {k: round(v, 2) for k, v in sampler_ms(
      rows, translator.model.config.vocab_size).items()}
  record = {"model_step": steps, "samplers_rows": rows, **samplers,
            "gumbel_draw_model_logits": pruned_draw_ms(translator, rows),
            "backend": jax.default_backend()}
  print(json.dumps(record))
  at = [s for s in steps if s["rows"] == rows]
  print(f"profile_step: {rows} rows: model step "
        + ", ".join(f"{s['ms']:.1f} ms at {s['slots']} slots" for s in at)
        + f"; arithmetic step {samplers['arithmetic_step_ms']:.1f} ms, "
        f"Gumbel draw {samplers['gumbel_draw_ms']:.1f} ms, logits matmul "
        f"{samplers['logits_matmul_ms']:.1f} ms; Gumbel draw on the "
        f"model's logits, every token vs pruned: "
        + ", ".join(f"{t} {d['every_token_ms']:.1f} vs {d['pruned_ms']:.1f} "
                    f"ms" for t, d in record["gumbel_draw_model_logits"].items())
        + "; per row at 64 slots: "
        + ", ".join(f"{s['rows']} rows {s['us_per_row']:.0f} us"
                    for s in steps if s["slots"] == 64))
  return 0


if __name__ == "__main__":
  sys.exit(main())
