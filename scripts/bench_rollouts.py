"""Time per completion of group rollouts, arithmetic vs iid, against plain
`generate` (one call for the whole batch), on SmolLM2-135M (CPU).

  python scripts/bench_rollouts.py [--repeats 3]

Prints one JSON record per configuration (appended to
results/passk/bench_rollouts.jsonl) and a one-line summary. The workload:
8 word-problem prompts x G = 16 completions, 24 new tokens, temperature 1.0,
no early stop but EOS. Each configuration is compiled first (one untimed
run), then timed `--repeats` times; the best is kept. `rows_per_call` is
the row block of the per-token log-prob pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time


from arithmetic_apps import llms
from arithmetic_apps.verifiable import word_problems
from arithmetic_decoding.llm import generate
from arithmetic_decoding.rollouts import group_rollouts

OUT = os.path.join(os.path.dirname(__file__), "..", "results", "passk",
                   "bench_rollouts.jsonl")


def configs():
  return [
      ("rollouts", "shifted_lattice", 16, False),
      ("rollouts", "iid", 16, False),
      ("rollouts", "shifted_lattice", 16, True),
      ("generate", "arithmetic", None, False),
      ("generate", "ancestral", None, False),
  ]


def run(llm, prompts, kind, scheme, rows, logps, group, steps):
  if kind == "rollouts":
    out = group_rollouts(llm, prompts, group, prompt_ids=list(range(
        len(prompts))), seed=0, step=0, scheme=scheme, temperature=1.0,
                         max_new_tokens=steps, chat=True, rows_per_call=rows,
                         token_log_probs=logps)
    return int(out.mask.sum())
  out = generate(llm, prompts, group, method=scheme, temperature=1.0, seed=0,
                 max_new_tokens=steps, chat=True)
  return int(sum(len(t) + (s >= 0) for row, srow in zip(out.tokens,
                                                         out.stop_tokens)
                 for t, s in zip(row, srow)))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=OUT)
  args = parser.parse_args(argv)
  llm = llms.load("smollm2-135m")
  prompts = [word_problems.prompt(p["question"])
             for p in word_problems.make_problems(8, seed=0)]
  group, steps = 16, 24
  records = []
  for kind, scheme, rows, logps in configs():
    run(llm, prompts, kind, scheme, rows, logps, group, steps)  # compile
    times, tokens = [], 0
    for _ in range(args.repeats):
      start = time.perf_counter()
      tokens = run(llm, prompts, kind, scheme, rows, logps, group, steps)
      times.append(time.perf_counter() - start)
    best = min(times)
    record = dict(kind=kind, scheme=scheme, rows_per_call=rows,
                  token_log_probs=logps, prompts=len(prompts), group=group,
                  max_new_tokens=steps, seconds=round(best, 3),
                  seconds_per_completion=round(best / (len(prompts) * group),
                                               4),
                  tokens=tokens, tokens_per_second=round(tokens / best, 1),
                  times=[round(t, 3) for t in times],
                  machine=f"{platform.machine()} {os.cpu_count()} cores")
    print(json.dumps(record), flush=True)
    records.append(record)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
      f.write(json.dumps(record) + "\n")
  by = {(r["kind"], r["scheme"], r["rows_per_call"], r["token_log_probs"]):
        r for r in records}
  a = by[("rollouts", "shifted_lattice", 16, False)]
  i = by[("rollouts", "iid", 16, False)]
  g = by[("generate", "arithmetic", None, False)]
  lp = by[("rollouts", "shifted_lattice", 16, True)]
  print(f"s/completion: rollouts arithmetic {a['seconds_per_completion']:.4f}"
        f", iid {i['seconds_per_completion']:.4f} "
        f"({i['seconds_per_completion'] / a['seconds_per_completion']:.2f}x);"
        f" generate arithmetic (one call) {g['seconds_per_completion']:.4f} "
        f"({a['seconds_per_completion'] / g['seconds_per_completion']:.2f}x "
        f"for rollouts); "
        f"with per-token log-probs "
        f"{lp['seconds_per_completion'] / a['seconds_per_completion']:.2f}x")


if __name__ == "__main__":
  main()
