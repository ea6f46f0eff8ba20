"""How many tokens can win an LLM's Gumbel-max draw, and what the draw costs.

    python scripts/profile_llm_draw.py                      # Gemma 3 270M
    python scripts/profile_llm_draw.py --model smollm2-135m

Ancestral sampling draws one Gumbel number per vocabulary entry per row
(`jax.random.categorical`); `ancestral.categorical_rows` draws them only
for the blocks of 16 tokens whose largest logit, plus the largest noise
jax.random can draw (`GUMBEL_MAX`), reaches a lower bound on the winning
value (the value of the row's most likely token), and falls back to
every token when the candidate blocks exceed its largest pooled capacity.

On the model's own steps: for each temperature, 8 chat prompts (the
engine benchmark's) x 8 ancestral samples of up to 64 new tokens
(seed 0), then 4 positions per sample picked at random inside the
completion, their teacher-forced logits / T (256 rows). Reports, for a
lower bound from the most likely token (`seed_blocks=0`, the draw's) and
from the tokens of the row's 1 or 8 blocks of largest logits (--seed_blocks:
what a tighter bound would remove):
  * candidate blocks per row (median, 90th percentile, mean), and the
    share of 64-row steps (rows taken in order) whose average fits each
    pooled capacity, or none (the full draw);
and the draw on the first 64 rows, compiled, best of 3 calls:
`jax.random.categorical` against `categorical_rows` with the capacities
of 2-128 blocks per row and with `ancestral.CAPACITIES`, with the tokens
compared (they must be equal).

With --sweep it times instead, on 64 rows of standard normal logits
scaled so that the candidates fill about two thirds of one pooled
capacity, that capacity's branch against every token's noise, at 8,000,
49,152 and 262,144 tokens (what `ancestral.MAX_POOLED_SHARE` rests on):

    python scripts/profile_llm_draw.py --sweep

Appends its JSON to --out (results/llm/profile_draw.jsonl) and prints a
one-line summary per temperature (or vocabulary).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import llm as llm_lib
from arithmetic_decoding.ancestral import (BLOCK, CAPACITIES, GUMBEL_MAX,
                                           categorical_rows)
from arithmetic_decoding.choosers import row_keys
from arithmetic_apps import llms
from bench_llm_engine import PROMPTS  # scripts/
from host import commit, cpu_name  # scripts/

ROWS = 64  # rows per timed draw, and per step when pooling
OUT = pathlib.Path(__file__).resolve().parent.parent / "results" / "llm" / (
    "profile_draw.jsonl")


def _best(fn, *args, repeats: int = 3) -> float:
  """Seconds of the fastest of `repeats` calls (after one to compile)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return min(times)


def step_logits(llm, temperature: float, per_prompt: int = 8,
                positions: int = 4) -> np.ndarray:
  """float32 [8 * per_prompt * positions, V]: the logits / T at random
  positions of the model's own ancestral samples (module doc)."""
  sampling = llm_lib.SamplingParams(n=per_prompt, method="ancestral",
                                    temperature=temperature,
                                    max_new_tokens=64)
  texts, ids, _ = llm_lib.prepare_prompts(llm, PROMPTS, 64, True)
  arrays = llm_lib.decode(llm, ids, sampling)
  tokens = llm_lib.collect(llm, sampling.method, texts, ids, 64,
                           arrays).tokens  # [B][N] completions
  logits_fn = jax.jit(llm.model.logits)
  rng = np.random.default_rng(0)
  out = []
  for b, prompt in enumerate(ids):
    for s in range(per_prompt):
      completion = list(tokens[b][s])
      if not completion:
        continue
      sequence = np.asarray([list(prompt) + completion], np.int32)
      width = -(-sequence.shape[1] // 16) * 16
      padded = np.zeros((1, width), np.int32)
      padded[:, :sequence.shape[1]] = sequence
      x = np.asarray(logits_fn(llm.params, jnp.asarray(padded)))[0]
      # The logits that drew completion token i sit at position
      # len(prompt) - 1 + i.
      picks = rng.integers(0, len(completion), positions)
      out.append(x[len(prompt) - 1 + picks] / np.float32(temperature))
  return np.concatenate(out, axis=0).astype(np.float32)


def candidate_blocks(x: np.ndarray, noise: np.ndarray,
                     seed_blocks: int) -> np.ndarray:
  """[R] candidate blocks per row, recomputed in numpy: blocks whose
  largest logit + GUMBEL_MAX reaches the largest value among the seed
  tokens (0: the most likely token alone)."""
  rows, vocab = x.shape
  blocks = -(-vocab // BLOCK)
  padded = np.full((rows, blocks * BLOCK), -np.inf, np.float32)
  padded[:, :vocab] = x
  block_max = padded.reshape(rows, blocks, BLOCK).max(axis=2)
  value = (x + noise).astype(np.float32)
  if seed_blocks == 0:
    top = x.argmax(axis=1)
    bound = value[np.arange(rows), top]
  else:
    order = np.argsort(-block_max, axis=1, kind="stable")[:, :seed_blocks]
    tokens = (order[:, :, None] * BLOCK + np.arange(BLOCK)).reshape(rows, -1)
    tokens = np.minimum(tokens, vocab - 1)
    bound = np.take_along_axis(value, tokens, axis=1).max(axis=1)
  return (block_max + np.float32(GUMBEL_MAX) >= bound[:, None]).sum(axis=1)


def branch_shares(count: np.ndarray, blocks: int, capacities) -> dict:
  """Share of ROWS-row steps whose average candidate blocks per row fit
  each capacity (the smallest that holds them), or none ("full")."""
  caps = [c for c in capacities if c < blocks]
  steps = count[:len(count) // ROWS * ROWS].reshape(-1, ROWS).mean(axis=1)
  shares = {}
  for mean in steps:
    name = next((str(c) for c in caps if mean <= c), "full")
    shares[name] = shares.get(name, 0) + 1 / len(steps)
  return {k: round(v, 3) for k, v in shares.items()}


def profile(llm, temperature: float, seed_options, capacity_options) -> dict:
  x = step_logits(llm, temperature)
  rows, vocab = x.shape
  blocks = -(-vocab // BLOCK)
  keys = row_keys(jax.random.PRNGKey(2), jnp.arange(rows))
  noise = np.asarray(jax.vmap(lambda k: jax.random.gumbel(k, (vocab,)))(keys))
  out = {"temperature": temperature, "rows": rows, "vocab": vocab,
         "candidates": {}, "draw_ms": {}}
  for s in seed_options:
    count = candidate_blocks(x, noise, s)
    out["candidates"][f"seed_blocks={s}"] = {
        "median": float(np.median(count)),
        "p90": float(np.percentile(count, 90)),
        "mean": round(float(count.mean()), 1),
        "steps_by_capacity": branch_shares(count, blocks,
                                           capacity_options[-1])}
  timed = jnp.asarray(x[:ROWS])
  timed_keys = keys[:ROWS]
  every = jax.jit(jax.vmap(jax.random.categorical))
  reference = np.asarray(every(timed_keys, timed))
  out["draw_ms"]["jax_random_categorical"] = round(1e3 * _best(every, timed_keys,
                                                    timed), 2)
  same = True
  for caps in capacity_options:
    fn = jax.jit(lambda k, v, caps=caps: categorical_rows(
        k, v, capacities=caps))
    same &= bool((np.asarray(fn(timed_keys, timed)) == reference).all())
    out["draw_ms"][f"capacities={list(caps)}"] = round(
        1e3 * _best(fn, timed_keys, timed), 2)
  out["same_tokens"] = same
  return out


def capacity_sweep(vocabs=(8000, 49152, 262144),
                   capacities=(32, 128, 512, 2048)) -> list:
  """Per vocabulary: every token's draw and each capacity's pooled branch
  (ms, 64 rows), the capacity's share of the blocks (module doc)."""
  keys = row_keys(jax.random.PRNGKey(2), jnp.arange(ROWS))
  every = jax.jit(lambda k, x: categorical_rows(k, x, capacities=()))
  out = []
  for vocab in vocabs:
    blocks = -(-vocab // BLOCK)
    base = np.random.default_rng(0).standard_normal((ROWS, vocab)).astype(
        np.float32)
    padded = np.full((ROWS, blocks * BLOCK), -np.inf, np.float32)
    row = {"vocab": vocab, "every_token_ms": round(
        1e3 * _best(every, keys, jnp.asarray(base)), 2), "pooled": []}
    for cap in (c for c in capacities if c < blocks):
      # The largest scale (most peaked) whose candidates, bounded by the
      # top logit alone, fill 0.6 of the capacity on average.
      for scale in np.geomspace(60.0, 1.0, 40):
        padded[:, :vocab] = base * scale
        block_max = padded.reshape(ROWS, blocks, BLOCK).max(axis=2)
        mean = float((block_max + GUMBEL_MAX >= block_max.max(
            axis=1, keepdims=True)).sum() / ROWS)
        if mean >= 0.6 * cap:
          break
      x = jnp.asarray(base * scale)
      fn = jax.jit(lambda k, v, cap=cap: categorical_rows(
          k, v, capacities=(cap,)))
      pooled = bool((np.asarray(fn(keys, x)) == np.asarray(
          every(keys, x))).all())
      row["pooled"].append({"capacity": cap, "share": round(cap / blocks, 3),
                            "ms": round(1e3 * _best(fn, keys, x), 2),
                            "same_tokens": pooled})
    out.append(row)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="gemma3-270m")
  parser.add_argument("--temperatures", nargs="+", type=float,
                      default=[0.4, 0.8, 1.0])
  parser.add_argument("--seed_blocks", nargs="+", type=int,
                      default=[0, 1, 8])
  parser.add_argument("--sweep", action="store_true")
  parser.add_argument("--out", default=str(OUT))
  args = parser.parse_args(argv)
  if args.sweep:
    rows = capacity_sweep()
    with open(args.out, "a") as f:
      f.write(json.dumps({"sweep": rows, "host": cpu_name(),
                          "commit": commit(mark_changes=True)}) + "\n")
    for r in rows:
      print(f"V={r['vocab']}: every token {r['every_token_ms']} ms; pooled "
            + ", ".join(f"{p['capacity']} blocks ({p['share']:.0%}) "
                        f"{p['ms']} ms" for p in r["pooled"]))
    return
  llm = llms.load(args.model)
  capacity_options = [(2, 8, 32, 128), tuple(CAPACITIES)]
  report = {"model": args.model, "host": cpu_name(), "rows_per_draw": ROWS,
            "commit": commit(mark_changes=True), "temperatures": []}
  for t in args.temperatures:
    report["temperatures"].append(profile(llm, t, args.seed_blocks,
                                          capacity_options))
    print(json.dumps(report["temperatures"][-1]), flush=True)
  with open(args.out, "a") as f:
    f.write(json.dumps(report) + "\n")
  for r in report["temperatures"]:
    ms = r["draw_ms"]
    new = ms[f"capacities={list(CAPACITIES)}"]
    print(f"{args.model} T={r['temperature']}: jax.random.categorical "
          f"{ms['jax_random_categorical']} ms, categorical_rows {new} ms "
          f"(capacities "
          f"2-128 only: {ms['capacities=[2, 8, 32, 128]']} ms); candidate "
          f"blocks per row, mean "
          f"{r['candidates']['seed_blocks=0']['mean']} of "
          f"{-(-r['vocab'] // BLOCK)}; same tokens: {r['same_tokens']}")


if __name__ == "__main__":
  main()
