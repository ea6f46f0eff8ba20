"""First-token lattice counts and duplicate completions of the real LLMs.

For each model, prompt, temperature and N, draws N completions with
arithmetic sampling and with ancestral sampling and records:

  - first tokens: how many of the N samples begin with token t, against
    N * q(t), q the model's (tempered) next-token distribution at the end of
    the prompt. Arithmetic sampling on a shifted lattice puts exactly
    floor(N q) or ceil(N q) samples on every token; iid samples do not.
    Recorded: the share of tokens (among those with N q >= 0.5 or a sample)
    whose count is floor or ceil, and the largest |count - N q|.
  - distinct completions and duplicates (N - distinct) of up to
    `--max_new_tokens` tokens, and distinct first tokens.

The prompts of a model decode in one batch (each prompt's samples do not
depend on the others). Appends one JSON line per (model, temperature, N,
method, seed), holding every prompt's record, to `--out` and skips those
already there (resumable); prints a summary table and one JSON summary
line.

  python scripts/llm_diversity.py [--models smollm2-135m gemma3-270m]
      [--num_samples 16 64] [--temperatures 0.7 1.0 1.3] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter

import numpy as np

# jax, the library and the applications are imported where they are used:
# `summarize` and `summary_line` read records alone (scripts/doc_numbers.py
# writes docs/llm.md's table with them).

PROMPTS = {
    # Chat prompts for the instruct model (its template is applied).
    "smollm2-135m": ["Name a fruit.", "Write a short poem about the sea.",
                     "What is the capital of France?",
                     "Give me a random number between 1 and 100."],
    # Plain text for the base model (no chat template).
    "gemma3-270m": ["My favourite fruit is", "Once upon a time,",
                    "The capital of France is", "A random number: "],
}


def first_token_probs(llm, prompt: str, temperature: float, chat: bool):
  """q: float64 [V], the tempered next-token distribution after the prompt."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  text = llm.chat_prompt(prompt) if chat else prompt
  ids = llm.encode(text)
  logits = np.asarray(llm.model.logits(llm.params, jnp.array([ids])))[0, -1]
  z = logits.astype(np.float64) / temperature
  q = np.exp(z - z.max())
  return q / q.sum()


def lattice_stats(first_tokens, q, n):
  counts = Counter(first_tokens)
  expected = n * q
  tokens = set(counts) | set(np.nonzero(expected >= 0.5)[0].tolist())
  within = [math.floor(expected[t]) <= counts.get(t, 0) <= math.ceil(expected[t])
            for t in tokens]
  deviation = max(abs(counts.get(t, 0) - expected[t]) for t in tokens)
  top = sorted(tokens, key=lambda t: -expected[t])[:5]
  return {"tokens_checked": len(tokens),
          "share_floor_or_ceil": float(np.mean(within)),
          "max_abs_deviation": float(deviation),
          "top_tokens": [{"token": int(t), "n_q": round(float(expected[t]), 3),
                          "count": counts.get(t, 0)} for t in top]}


def measure(key, args):
  from arithmetic_decoding.llm import generate  # pylint: disable=g-import-not-at-top
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  model, temperature, n, method, seed = key
  llm = llms.load(model, verbose=False)
  chat = bool(llm.vocab.chat_template)
  prompts = PROMPTS[model]
  out = generate(llm, prompts, n, method=method, temperature=temperature,
                 seed=seed, max_new_tokens=args.max_new_tokens, chat=chat)
  records = []
  for b, prompt in enumerate(prompts):
    tokens = out.tokens[b]
    firsts = [t[0] if t else -1 for t in tokens]
    q = first_token_probs(llm, prompt, temperature, chat)
    distinct = out.distinct()[b]
    records.append({
        "prompt": prompt, "prompt_index": b, "distinct": distinct,
        "duplicates": n - distinct,
        "distinct_first_tokens": len(set(firsts)),
        **lattice_stats(firsts, q, n)})
  return {"model": model, "temperature": temperature, "n": n,
          "method": method, "seed": seed,
          "max_new_tokens": args.max_new_tokens, "prompts": records}


def summarize(records):
  rows = {}
  for record in records:
    k = (record["model"], record["temperature"], record["n"], record["method"])
    rows.setdefault(k, []).extend(record["prompts"])
  table = []
  for (model, t, n, method), rs in sorted(rows.items()):
    table.append({
        "model": model, "temperature": t, "n": n, "method": method,
        "runs": len(rs),
        "mean_distinct": float(np.mean([r["distinct"] for r in rs])),
        "mean_duplicates": float(np.mean([r["duplicates"] for r in rs])),
        "mean_distinct_first_tokens": float(np.mean(
            [r["distinct_first_tokens"] for r in rs])),
        "share_floor_or_ceil": float(np.mean(
            [r["share_floor_or_ceil"] for r in rs])),
        "all_floor_or_ceil": all(r["share_floor_or_ceil"] == 1.0 for r in rs),
        "max_abs_deviation": float(max(r["max_abs_deviation"] for r in rs))})
  return table


def summary_line(table) -> str:
  """The one-line summary of `summarize`'s table."""
  arith = [r for r in table if r["method"] == "arithmetic"]
  iid = [r for r in table if r["method"] == "ancestral"]
  return (f"arithmetic: floor/ceil first-token counts in "
          f"{sum(r['all_floor_or_ceil'] for r in arith)}/{len(arith)} "
          f"settings (max |count - Nq| "
          f"{max(r['max_abs_deviation'] for r in arith):.2f}); ancestral: "
          f"{sum(r['all_floor_or_ceil'] for r in iid)}/{len(iid)} (max "
          f"{max(r['max_abs_deviation'] for r in iid):.2f}); mean "
          f"duplicates arithmetic "
          f"{np.mean([r['mean_duplicates'] for r in arith]):.2f} vs "
          f"ancestral {np.mean([r['mean_duplicates'] for r in iid]):.2f}")


def main(argv=None) -> int:
  from arithmetic_apps import jsonl, llms  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--models", nargs="+", default=sorted(llms.MODELS))
  p.add_argument("--num_samples", nargs="+", type=int, default=[16, 64])
  p.add_argument("--temperatures", nargs="+", type=float,
                 default=[0.7, 1.0, 1.3])
  p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
  p.add_argument("--max_new_tokens", type=int, default=24)
  p.add_argument("--out", default="results/llm/diversity.jsonl")
  args = p.parse_args(argv)
  for m in args.models:
    llms.check_name(m)
  keys = [(m, t, n, method, s) for m in args.models
          for t in args.temperatures for n in args.num_samples
          for method in ("arithmetic", "ancestral") for s in args.seeds]
  done = jsonl.run_missing(
      args.out, keys,
      key=lambda r: (r["model"], r["temperature"], r["n"], r["method"],
                     r["seed"]),
      run=lambda k: measure(k, args), desc="llm diversity")
  table = summarize([done[k] for k in keys])
  print(f"{'model':14s} {'T':>4s} {'N':>3s} {'method':10s} {'distinct':>8s} "
        f"{'dups':>6s} {'1st tok':>7s} {'floor/ceil':>10s} {'max|c-Nq|':>9s}")
  for r in table:
    print(f"{r['model']:14s} {r['temperature']:4.1f} {r['n']:3d} "
          f"{r['method']:10s} {r['mean_distinct']:8.1f} "
          f"{r['mean_duplicates']:6.1f} {r['mean_distinct_first_tokens']:7.1f} "
          f"{r['share_floor_or_ceil']:10.3f} {r['max_abs_deviation']:9.2f}")
  print(json.dumps({"summary": table}))
  print(summary_line(table))
  return 0


if __name__ == "__main__":
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_platforms", "cpu")
  sys.exit(main())
