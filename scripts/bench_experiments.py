"""Benchmark: the paper experiments' decoding workload on the embedded model,
before and after, as tokens/s and as a fraction of this machine's matmul
roofline.

    python scripts/bench_experiments.py                  # before vs after
    python scripts/bench_experiments.py --baseline none  # after only
    python scripts/bench_experiments.py --out results/bench_experiments.jsonl
    python scripts/bench_experiments.py --baseline none --rounding multiple

The workload is the experiments' own (`experiments.sample_texts`: Figs. 3-4
decode one verse many times): for each T in --temperatures and each
sampling method (arithmetic, ancestral), --verses test verses spread over
the split x --repeats repeats x N = --n samples, in calls of --max-rows rows.
The whole workload runs once untimed first, so that every program the
timed pass runs is compiled (decoding that drops ended rows runs
programs for the row counts and cache sizes it meets).

* after: this checkout. before: the code at --baseline (a git commit: the
  checkout before the speedups), run from a temporary `git worktree` in a
  subprocess with the same script. Both decode the same keys, so they must
  give the same samples: every token and log-probability is compared, and
  `identical` says whether they all match bit for bit.
* roofline: float32 matmuls at the decoder's shapes ([rows, 256] x [256,
  256], [256, 768], [768, 256], [256, 8000]; --max-rows rows) timed here,
  weighted by their share of a token's FLOPs; model FLOPs per generated
  token are those matmuls' (2 x multiply-adds; attention over the cache and
  the source not counted). fraction = FLOPs/token x tokens/s / matmul rate.
* floor: greedy decoding (the same loop, argmax, no sampling) of the same
  rows, as time per generated token and per row-step; as the translator
  decodes them (the N identical rows of a verse share one model row:
  `compaction`) and with every row decoded ("greedy_unshared"). A
  row-step is one row through one step of a loop that runs every row
  until the call's longest sample ends (sampled rows end at different
  steps, greedy rows of one verse together); the translator drops ended
  rows and shares prefixes, so its model runs fewer row-steps than that.
  `floor_utilisation`: tokens / the row-steps of a loop that drops each
  ended row after its step but never runs fewer rows than the compacted
  loop's least (`Compaction.min_rows`): what the spread of the samples'
  lengths costs at best.
* roofline fraction with prefix sharing: the FLOPs are counted per
  generated token as if every sample ran the model; shared prefixes run
  it once, so the fraction counts the work saved as work done.

Prints one JSON object and a one-line summary; with --out the JSON is
appended to that file.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

EOS = 1


def _verses(count):
  from arithmetic_apps.translation.data import load_split  # pylint: disable=g-import-not-at-top
  test = load_split("test")
  picks = np.linspace(0, len(test) - 1, count).round().astype(int)
  return [test[int(i)].source for i in picks]


def _steps(tokens: np.ndarray) -> np.ndarray:
  """[..., L] -> the loop steps each row took (up to and including EOS)."""
  is_eos = tokens == EOS
  return np.where(is_eos.any(-1), is_eos.argmax(-1) + 1, tokens.shape[-1])


def floor_row_steps(steps: np.ndarray, least: int) -> int:
  """Row-steps of a loop that drops every ended row after each step but
  never runs fewer than `least` rows (nor more than it has): a lower bound
  on what the compacted loop runs (it drops rows every few steps and
  rounds the count up).

  >>> floor_row_steps(np.array([1, 3, 3, 5]), 2)  # live 4, 3, 3, 1, 1 -> run 4, 3, 3, 2, 2
  14
  """
  steps = np.asarray(steps).reshape(-1)
  live = (steps[None, :] >= np.arange(1, steps.max() + 1)[:, None]).sum(1)
  return int(np.minimum(steps.size, np.maximum(least, live)).sum())


def run_workload(args) -> dict:
  """Decodes the workload twice; times the second. Also saves the samples
  of the timed run to args.samples (npz) for the identity check."""
  import jax  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.translation.translate import Translator  # pylint: disable=g-import-not-at-top
  translator = Translator.load()
  if args.rounding != "geometric":  # the translator's default
    import dataclasses  # pylint: disable=g-import-not-at-top
    translator = dataclasses.replace(translator, compaction=dataclasses.replace(
        translator.compaction, geometric=False))
  verses = _verses(args.verses)
  # The compacted loop's least rows (a baseline without it: every row).
  least = getattr(getattr(translator, "compaction", None), "min_rows",
                  args.max_rows)
  per_call = max(1, args.max_rows // args.n)
  calls = []
  for t in args.temperatures:
    for method in ("arithmetic", "ancestral", "greedy", "greedy_unshared"):
      sources = [v for v in verses for _ in range(args.repeats)]
      for i in range(0, len(sources), per_call):
        calls.append((t, method, i // per_call, sources[i:i + per_call]))
  # Greedy ignores T: once is enough. "greedy_unshared": every row decoded
  # (no prefix sharing; only where the translator shares prefixes).
  shares = getattr(getattr(translator, "compaction", None), "share_prefixes",
                   False)
  calls = [c for c in calls if not c[1].startswith("greedy") or
           (c[0] == args.temperatures[0] and
            (c[1] == "greedy" or shares))]

  def decode(call):
    t, method, i, chunk = call
    key = jax.random.fold_in(jax.random.PRNGKey(int(t * 1000)), i)
    if method.startswith("greedy"):
      tokens, scores = greedy_rows(translator, chunk, args.n,
                                   share=method == "greedy")
    else:
      rows = translator.sample(chunk, args.n, t, key, method)
      tokens = np.array([[s.tokens for s in row] for row in rows])
      scores = np.array([[s.log_prob for s in row] for row in rows])
    return tokens, scores

  start = time.perf_counter()
  for call in calls:  # compile every program the timed pass will run
    decode(call)
  first_pass = time.perf_counter() - start
  results = {}
  samples = {}
  for call in calls:
    start = time.perf_counter()
    tokens, scores = decode(call)
    seconds = time.perf_counter() - start
    t, method = call[0], call[1]
    steps = _steps(tokens)
    r = results.setdefault(f"{method} T={t}" if not method.startswith("greedy")
                           else method, {"seconds": 0.0, "tokens": 0,
                                           "row_steps": 0, "rows": 0,
                                           "floor_row_steps": 0})
    r["seconds"] += seconds
    r["tokens"] += int(steps.sum())
    r["row_steps"] += int(steps.max()) * int(steps.size)  # the loop's
    r["rows"] += int(steps.size)
    r["floor_row_steps"] += floor_row_steps(steps, least)
    samples[f"{method}_{t}_{call[2]}_tokens"] = tokens
    samples[f"{method}_{t}_{call[2]}_scores"] = scores
  np.savez(args.samples, **samples)
  import jax as _jax  # pylint: disable=g-import-not-at-top
  return {"configs": results, "first_pass_seconds": round(first_pass, 1),
          "backend": _jax.default_backend(),
          "device": str(_jax.devices()[0].device_kind)}


def greedy_rows(translator, chunk, n, share=True):
  """Greedy decoding of each source's n rows (the same argmax n times), as
  the experiments' calls would hold them: (tokens [B, n, L], scores).
  `share=False`: every row decoded (no prefix sharing)."""
  import jax  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.translation import translate  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.codes import CodeScheme  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.methods import Method  # pylint: disable=g-import-not-at-top
  tokens = translator.encode(chunk)
  if not share:
    import dataclasses  # pylint: disable=g-import-not-at-top
    translator = dataclasses.replace(translator, compaction=dataclasses.replace(
        translator.compaction, share_prefixes=False))
  if hasattr(translator, "_sample"):  # the translator's own decode path
    out = translator._sample(  # pylint: disable=protected-access
        tokens, jax.random.PRNGKey(0), 0.0, None, Method.GREEDY, n,
        CodeScheme.SHIFTED_LATTICE)
  else:  # older checkouts (the baseline)
    out = translate._decode(  # pylint: disable=protected-access
        translator.params, tokens, jax.random.PRNGKey(0), None, None,
        model=translator.model, method=Method.GREEDY, num_decodes=n,
        length=translator.max_decode_len)
  return np.asarray(out[0]), np.asarray(out[1])


def matmul_roofline(rows: int, repeats: int = 20) -> dict:
  """float32 matmul FLOP/s at the decoder's shapes, weighted by their share
  of one generated token's FLOPs; and those FLOPs per token."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.translation.translate import Translator  # pylint: disable=g-import-not-at-top
  cfg = Translator.load().model.config
  d, f, v, layers = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.num_decoder_layers
  hk = cfg.num_heads * cfg.d_kv
  # (k, n, count per token): self-attention q, k, v, o; cross-attention q,
  # o (its keys/values are per input); gated MLP in x2, out; logits.
  shapes = [(d, hk, 4 * layers), (hk, d, 2 * layers), (d, f, 2 * layers),
            (f, d, layers), (d, v, 1)]
  total_flops, total_seconds = 0.0, 0.0
  parts = []
  for k, n, count in shapes:
    x = jax.random.normal(jax.random.PRNGKey(0), (rows, k), jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(1), (k, n), jnp.float32)
    mm = jax.jit(lambda x, w: x @ w)
    mm(x, w).block_until_ready()
    best = float("inf")
    for _ in range(5):  # the best of 5 runs of `repeats` products
      start = time.perf_counter()
      for _ in range(repeats):
        y = mm(x, w)
      y.block_until_ready()
      best = min(best, (time.perf_counter() - start) / repeats)
    flops = 2.0 * rows * k * n
    parts.append({"shape": [rows, k, n], "per_token": count,
                  "gflops": round(flops / best / 1e9, 1)})
    total_flops += count * flops
    total_seconds += count * best
  return {"flops_per_token": total_flops / rows,
          "matmul_gflops": total_flops / total_seconds / 1e9,
          "shapes": parts}


def _totals(configs: dict, prefix: str) -> dict:
  picked = [r for name, r in configs.items()
            if name.startswith(prefix) and
            (not name.startswith("greedy") or name == prefix)]
  seconds = sum(r["seconds"] for r in picked)
  tokens = sum(r["tokens"] for r in picked)
  row_steps = sum(r["row_steps"] for r in picked)
  floor = sum(r.get("floor_row_steps", 0) for r in picked)
  return {"seconds": round(seconds, 3), "tokens": tokens,
          "tokens_per_s": round(tokens / seconds, 1),
          "us_per_token": round(1e6 * seconds / tokens, 2),
          "us_per_row_step": round(1e6 * seconds / row_steps, 2),
          "row_utilisation": round(tokens / row_steps, 3),
          # tokens / row-steps of a loop that drops ended rows at once
          # down to the compacted loop's least rows
          "floor_utilisation": round(tokens / floor, 3) if floor else None}


def _worker(args, code_dir: str, samples: str, after: bool = True) -> dict:
  """The workload in a subprocess importing the code in `code_dir`."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([code_dir, os.path.join(code_dir, "apps")])
  command = [sys.executable, os.path.abspath(__file__), "--worker",
             "--samples", samples, "--verses", str(args.verses),
             "--repeats", str(args.repeats), "--n", str(args.n),
             "--max-rows", str(args.max_rows), "--temperatures",
             *map(str, args.temperatures)]
  if after:
    command += ["--rounding", args.rounding]
  out = subprocess.run(command, env=env, cwd=code_dir, check=True,
                       stdout=subprocess.PIPE, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def summarize(result: dict) -> dict:
  methods = {m: _totals(result["configs"], m)
             for m in ("arithmetic", "ancestral", "greedy", "greedy_unshared")
             if any(name.split()[0] == m for name in result["configs"])}
  samplers = _totals(result["configs"], "a")  # arithmetic + ancestral
  per_config = {name: round(r["tokens"] / r["seconds"], 1)
                for name, r in result["configs"].items()}
  return {"samplers": samplers, **methods, "tokens_per_s_by_config":
          per_config,
          # the untimed first pass: the same decodes plus their compiles
          "first_pass_seconds": result.get("first_pass_seconds")}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--verses", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--n", type=int, default=64)
  parser.add_argument("--temperatures", type=float, nargs="+",
                      default=[0.1, 0.2, 0.5])
  parser.add_argument("--max-rows", type=int, default=512)
  parser.add_argument("--rounding", choices=("geometric", "multiple"),
                      default="geometric",
                      help="rows kept between segments: 8, 16, 32, ... "
                      "(the translator's default) or any multiple of 8 "
                      "(`Compaction.geometric`)")
  parser.add_argument("--baseline", default="1488335",
                      help="git commit of the 'before' code, or 'none'")
  parser.add_argument("--out", default=None)
  parser.add_argument("--worker", action="store_true",
                      help=argparse.SUPPRESS)
  parser.add_argument("--samples", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(json.dumps(run_workload(args)))
    return 0
  root = pathlib.Path(__file__).resolve().parent.parent
  head = subprocess.run(["git", "-C", str(root), "describe", "--always",
                         "--dirty"], stdout=subprocess.PIPE, text=True,
                        check=False).stdout.strip()
  record = {"commit": head,
            "workload": {"verses": args.verses, "repeats": args.repeats,
                         "n": args.n, "temperatures": args.temperatures,
                         "max_rows": args.max_rows},
            "rounding": args.rounding,
            "roofline": matmul_roofline(args.max_rows)}
  from experiments_paper import host_cpu  # pylint: disable=g-import-not-at-top
  record["host"] = host_cpu()  # the samples' last bits are the CPU's
  with tempfile.TemporaryDirectory() as tmp:
    after = _worker(args, str(root), os.path.join(tmp, "after.npz"))
    record["after"] = summarize(after)
    record["backend"], record["device"] = after["backend"], after["device"]
    if args.baseline != "none":
      tree = os.path.join(tmp, "baseline")
      subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach",
                      tree, args.baseline], check=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      try:
        before = _worker(args, tree, os.path.join(tmp, "before.npz"),
                         after=False)
      finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove",
                        "--force", tree], check=False)
      record["before"] = summarize(before)
      record["baseline"] = args.baseline
      a, b = (np.load(os.path.join(tmp, f)) for f in ("after.npz",
                                                      "before.npz"))
      # Every sample of the baseline's, and greedy decoded with and
      # without prefix sharing, bit for bit.
      unshared = [k for k in a if k.startswith("greedy_unshared")]
      record["identical"] = (set(b) <= set(a) and all(
          np.array_equal(a[k], b[k], equal_nan=True) for k in b) and all(
              np.array_equal(a[k], a[k.replace("greedy_unshared", "greedy")])
              for k in unshared))
      record["samples_compared"] = int(sum(b[k].size for k in b
                                           if k.endswith("_scores")))
  flops = record["roofline"]["flops_per_token"]
  rate = record["roofline"]["matmul_gflops"] * 1e9
  for version in ("before", "after"):
    if version in record:
      s = record[version]["samplers"]
      s["roofline_fraction"] = round(flops * s["tokens_per_s"] / rate, 4)
  aft = record["after"]
  record["arithmetic_vs_greedy_token"] = round(
      aft["arithmetic"]["us_per_token"] / aft["greedy"]["us_per_token"], 3)
  record["arithmetic_vs_greedy_row_step"] = round(
      aft["arithmetic"]["us_per_row_step"] / aft["greedy"]["us_per_row_step"],
      3)
  if "greedy_unshared" in aft:
    record["arithmetic_vs_greedy_unshared_token"] = round(
        aft["arithmetic"]["us_per_token"] /
        aft["greedy_unshared"]["us_per_token"], 3)
  if "before" in record:
    record["speedup"] = round(aft["samplers"]["tokens_per_s"] /
                              record["before"]["samplers"]["tokens_per_s"], 2)
  print(json.dumps(record))
  if args.out:
    from arithmetic_apps import jsonl  # pylint: disable=g-import-not-at-top
    jsonl.append(args.out, record)
  before = record.get("before", {}).get("samplers", {})
  print(f"bench_experiments: {aft['samplers']['tokens_per_s']:.0f} tokens/s "
        f"({100 * aft['samplers']['roofline_fraction']:.1f} % of the "
        f"{record['roofline']['matmul_gflops']:.0f} GFLOP/s matmul roofline)"
        + (f", before {before['tokens_per_s']:.0f} tokens/s "
           f"({100 * before['roofline_fraction']:.1f} %): "
           f"{record['speedup']:.2f}x; samples identical: "
           f"{record['identical']}" if before else "")
        + f"; arithmetic / greedy per generated token "
        f"{record['arithmetic_vs_greedy_token']:.2f}"
        + (f" (greedy decoding every row: "
           f"{record['arithmetic_vs_greedy_unshared_token']:.2f})"
           if "arithmetic_vs_greedy_unshared_token" in record else "")
        + f"; "
        f"{record['backend']} ({record['device']}, {record['host']})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
