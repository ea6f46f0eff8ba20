"""LLM decoding speed on this CPU: ours (JAX) against transformers (PyTorch).

SmolLM2-135M-Instruct, float32 on both sides, the same GGUF file. For B
chat prompts (1 or 8) x N samples each (1, 8, 32), `--new_tokens` tokens per
sample (no early stop: our stop token is a vocabulary id no sample draws,
transformers gets min_new_tokens), it times

  prefill   the prompts' forward pass filling the KV cache (tokens/s =
            prompt tokens / s)
  decode    the rest of the generation (tokens/s = B * N * new_tokens / s)

for greedy, ancestral and arithmetic sampling (ours) and for greedy and
multinomial sampling (transformers' `generate(num_return_sequences=N)`),
compiled / warmed up, best of `--repeats`. Each runtime runs in its own
subprocess, whose peak resident memory is reported. Prints a table, one
JSON object, and a one-line summary; `--out` appends the JSON.

  python scripts/bench_llm.py [--new_tokens 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

PROMPTS = ["Name a fruit.", "Write a short poem about the sea.",
           "What is the capital of France?", "Explain gravity to a child.",
           "List three colours.", "What is 12 times 7?",
           "Give me a word that rhymes with cat.", "Describe a sunset."]
BATCHES = (1, 8)
SAMPLES = (1, 8, 32)


def _peak_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _best(fn, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def _record(runtime, method, batch, n, new_tokens, prompt_tokens, t_prefill,
            total, **extra):
  """One timed configuration: rates from the prefill and whole-run times."""
  tokens = batch * n * new_tokens
  record = {"runtime": runtime, "method": method, "batch": batch, "n": n,
            "new_tokens": tokens, **extra, "prompt_tokens": prompt_tokens,
            "prefill_s": t_prefill, "total_s": total,
            "decode_s": total - t_prefill,
            "prefill_tok_s": prompt_tokens / t_prefill,
            "decode_tok_s": tokens / (total - t_prefill)}
  print(json.dumps(record), file=sys.stderr)
  return record


def run_ours(args):
  import jax
  import jax.numpy as jnp
  import numpy as np
  from arithmetic_decoding import Method
  from arithmetic_apps import llms

  llm = llms.load("smollm2-135m", verbose=False)
  model, params = llm.model, llm.params
  never = llm.config.vocab_size - 1  # a token no sample draws
  results = []
  for batch in BATCHES:
    ids = [llm.encode(llm.chat_prompt(p)) for p in PROMPTS[:batch]]
    width = max(len(r) for r in ids)
    prompts = np.zeros((batch, width), np.int32)
    for b, r in enumerate(ids):
      prompts[b, :len(r)] = r
    prompts = jnp.asarray(prompts)
    prompt_tokens = sum(len(r) for r in ids)
    length = width + 1 + args.new_tokens
    prefill = jax.jit(lambda p, x: model.decode_start(p, x, length)[1])
    jax.block_until_ready(prefill(params, prompts))
    t_prefill = _best(lambda: jax.block_until_ready(prefill(params, prompts)),
                      args.repeats)
    for n in SAMPLES:
      for method in (Method.GREEDY, Method.ANCESTRAL, Method.ARITHMETIC):
        if method is Method.GREEDY and n > 1:
          continue

        @jax.jit
        def decode(params, prompts, key):
          inputs, cache, t2l = model.decode_inputs(params, prompts, length)
          return method.decode(inputs, cache, t2l, never, key, num_decodes=n,
                               temperature=1.0,
                               initial_index=model.start_index(prompts),
                               max_decode_steps=args.new_tokens)

        key = jax.random.PRNGKey(0)
        out = jax.block_until_ready(decode(params, prompts, key))
        produced = int(sum(
            (np.asarray(out[0])[b, :, len(ids[b]):] != 0).sum()
            for b in range(batch)))
        total = _best(lambda: jax.block_until_ready(
            decode(params, prompts, key)), args.repeats)
        results.append(_record("ours (jax)", method.value, batch, n,
                               args.new_tokens, prompt_tokens, t_prefill,
                               total, produced_nonzero=produced))
  return results


def run_hf(args):
  import torch
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests",
                                  "integration_llm"))
  import runtime
  from arithmetic_apps import llms

  torch.manual_seed(0)
  model, tokenizer = runtime.hf(llms.gguf_path("smollm2-135m"))
  ours = llms.load("smollm2-135m", verbose=False)
  results = []
  for batch in BATCHES:
    ids = [ours.encode(ours.chat_prompt(p)) for p in PROMPTS[:batch]]
    width = max(len(r) for r in ids)
    pad = tokenizer.pad_token_id or 0
    x = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for b, r in enumerate(ids):
      x[b, width - len(r):] = torch.tensor(r)
      mask[b, width - len(r):] = 1
    prompt_tokens = sum(len(r) for r in ids)

    def prefill():
      with torch.no_grad():
        model(input_ids=x, attention_mask=mask, use_cache=True)

    prefill()
    t_prefill = _best(prefill, args.repeats)
    for n in SAMPLES:
      for method in ("greedy", "sampling"):
        if method == "greedy" and n > 1:
          continue

        def gen():
          with torch.no_grad():
            return model.generate(
                input_ids=x, attention_mask=mask, do_sample=method != "greedy",
                temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, pad_token_id=pad)

        out = gen()
        assert out.shape[1] == width + args.new_tokens
        total = _best(gen, args.repeats)
        results.append(_record("transformers (torch)", method, batch, n,
                               args.new_tokens, prompt_tokens, t_prefill,
                               total))
  return results


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--new_tokens", type=int, default=32)
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--worker", choices=["ours", "hf"], default=None)
  p.add_argument("--runtimes", nargs="+", default=["ours", "hf"])
  p.add_argument("--out", default="results/llm/bench_llm.jsonl")
  args = p.parse_args(argv)
  if args.worker:
    results = run_ours(args) if args.worker == "ours" else run_hf(args)
    print(json.dumps({"results": results, "peak_rss_mib": _peak_mib()}))
    return 0
  rows, memory = [], {}
  for worker in args.runtimes:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", worker, "--new_tokens",
         str(args.new_tokens), "--repeats", str(args.repeats)],
        env=env, capture_output=True, text=True)
    if proc.returncode:
      print(proc.stderr[-3000:], file=sys.stderr)
      return proc.returncode
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    rows += report["results"]
    memory[worker] = report["peak_rss_mib"]
  print(f"{'runtime':22s} {'method':10s} {'B':>2s} {'N':>3s} "
        f"{'prefill tok/s':>13s} {'decode tok/s':>12s}")
  for r in rows:
    print(f"{r['runtime']:22s} {r['method']:10s} {r['batch']:2d} {r['n']:3d} "
          f"{r['prefill_tok_s']:13.0f} {r['decode_tok_s']:12.0f}")
  print("peak resident memory (MiB): " +
        ", ".join(f"{k} {v:.0f}" for k, v in memory.items()))
  record = {"model": "smollm2-135m", "dtype": "float32",
            "new_tokens": args.new_tokens, "rows": rows,
            "peak_rss_mib": memory, "cpus": os.cpu_count()}
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "a") as f:
    f.write(json.dumps(record) + "\n")
  print(json.dumps(record))
  get = lambda rt, m, b, n: next((r for r in rows if r["runtime"].startswith(rt)
                                  and r["method"] == m and r["batch"] == b
                                  and r["n"] == n), None)
  parts = []
  for b in BATCHES:
    for n in SAMPLES:
      a, h = get("ours", "arithmetic", b, n), get("transformers", "sampling", b, n)
      if a and h:
        parts.append(f"B{b}xN{n} {a['decode_tok_s']:.0f} vs "
                     f"{h['decode_tok_s']:.0f}")
  ratio = [get("ours", "arithmetic", b, 1)["decode_s"] /
           get("ours", "greedy", b, 1)["decode_s"] for b in BATCHES
           if get("ours", "greedy", b, 1)]
  print("decode tok/s, ours arithmetic vs transformers sampling: " +
        "; ".join(parts) + "; arithmetic/greedy time per step at N=1: " +
        ", ".join(f"{x:.3f}" for x in ratio))
  return 0


if __name__ == "__main__":
  sys.exit(main())
