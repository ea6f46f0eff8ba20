"""The llama.cpp peer of the LLM benchmarks: N samples of each prompt with
llama.cpp's batched decoding, in the benchmark's own environment.

  .venv-llamacpp/bin/python scripts/llamacpp_peer.py JOB.json

Runs with llama-cpp-python's low-level API (`make bench-peer-env`; never in
CI, never imported by the library). JOB.json: {"gguf": path, "prompts":
[[token ids], ...] (our tokenizer's, chat template applied), "n": N,
"temperature": T, "max_new_tokens": 64, "threads": 2, "seed": 0}. Each
prompt is evaluated once, its cache copied to N sequences, and the N
sequences decoded together, one batch of live sequences per step, each
drawing from its own sampler (temperature, then a seeded draw) until an
end-of-generation token or max_new_tokens: llama.cpp's "batched" way of
parallel sampling. Prints one JSON object: seconds (prompts included,
model load excluded), generated tokens (the end token included),
tokens/s.
"""

import json
import sys
import time

import llama_cpp as L  # the peer's environment only


def main(path):
  job = json.load(open(path))
  n, steps = job["n"], job["max_new_tokens"]
  L.llama_backend_init()
  model = L.llama_model_load_from_file(job["gguf"].encode(),
                                       L.llama_model_default_params())
  vocab = L.llama_model_get_vocab(model)
  longest = max(len(p) for p in job["prompts"])
  params = L.llama_context_default_params()
  params.n_ctx = n * (longest + steps + 1) + 16
  params.n_batch = max(longest, n)
  params.n_ubatch = params.n_batch
  params.n_seq_max = n
  params.n_threads = params.n_threads_batch = job["threads"]
  ctx = L.llama_init_from_model(model, params)
  memory = L.llama_get_memory(ctx)
  batch = L.llama_batch_init(max(longest, n), 0, n)

  def put(i, token, pos, seq, logits):
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq
    batch.logits[i] = logits

  tokens_out = 0
  start = time.perf_counter()
  for k, prompt in enumerate(job["prompts"]):
    L.llama_memory_clear(memory, True)
    for i, t in enumerate(prompt):
      put(i, t, i, 0, i == len(prompt) - 1)
    batch.n_tokens = len(prompt)
    if L.llama_decode(ctx, batch) != 0:
      raise SystemExit("llama_decode failed on a prompt")
    for s in range(1, n):
      L.llama_memory_seq_cp(memory, 0, s, -1, -1)
    samplers = []
    for s in range(n):
      chain = L.llama_sampler_chain_init(
          L.llama_sampler_chain_default_params())
      L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(
          job["temperature"]))
      L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(
          job["seed"] + k * n + s))
      samplers.append(chain)
    index = {s: len(prompt) - 1 for s in range(n)}  # where each reads
    live = list(range(n))
    pos = len(prompt)
    for _ in range(steps):
      chosen = []
      for s in live:
        token = L.llama_sampler_sample(samplers[s], ctx, index[s])
        tokens_out += 1
        if not L.llama_vocab_is_eog(vocab, token):
          chosen.append((s, token))
      live = [s for s, _ in chosen]
      if not live or pos >= longest + steps:
        break
      for i, (s, token) in enumerate(chosen):
        put(i, token, pos, s, True)
        index[s] = i
      batch.n_tokens = len(chosen)
      if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")
      pos += 1
    for chain in samplers:
      L.llama_sampler_free(chain)
  seconds = time.perf_counter() - start
  L.llama_batch_free(batch)
  L.llama_free(ctx)
  L.llama_model_free(model)
  print(json.dumps({"seconds": round(seconds, 3), "tokens": tokens_out,
                    "tokens_per_second": round(tokens_out / seconds, 1)}))


if __name__ == "__main__":
  main(sys.argv[1])
