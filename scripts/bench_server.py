"""Benchmark: the sampling server under load, against offline `generate`
and llama.cpp's server, on loopback.

    python scripts/bench_server.py                       # ours + offline
    python scripts/bench_server.py --peer                # and llama.cpp
    python scripts/bench_server.py --clients 1 4 16 --requests 16
    python scripts/bench_server.py --peer --no_ours   # llama.cpp, offline

The workload: `--requests` chat requests, each a prompt of a mixed set (16
prompts of 3 to 60 words) asking n = 8 completions of at most 64 tokens at
temperature 1.0 with its own seed. C clients (--clients: 1, 4, 16) share
them, each sending its next request when the last is answered; the run
stops when all are answered. It is bounded and local: it talks to the
servers it starts itself, on 127.0.0.1 only.

* ours: `python -m arithmetic_apps.server --model smollm2-135m` in a
  subprocess (float32). The whole 16-client workload runs once untimed
  first, so that the programs the timed runs need are compiled.
* offline: `llm.generate` of the same requests in this process, one call
  per request in a loop and all requests in one call (16 prompts x 8).
* peer (--peer): llama-cpp-python's server (`llama_cpp.server`, built in
  the benchmark's own environment .venv-llamacpp, never in CI: `make
  bench-peer-env`), 2 threads, twice: on the same GGUF file, quantized as
  the file is (Q4_1 for SmolLM2), and on a float32 copy of it (the
  precision we compute in; `bench_llm_engine.f32_copy`). It serves one
  request at a time and returns one completion per request, so each of our
  requests is n = 1 requests there; its throughput does not depend on the
  clients, so it runs at --peer_clients (16) only.

Per configuration: generated tokens/s over the wall time, p50 / p99
request latency, failed requests. Appends one JSON record per
configuration to --out, prints a table and a one-line summary.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

from host import commit as head_commit, cpu_name  # scripts/host.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "llm" / "bench_server.jsonl"
PEER_PYTHON = ROOT / ".venv-llamacpp" / "bin" / "python"
WORDS = ("the sea and the sky and the long road home through hills where "
         "old stories wait for someone to tell them again in the evening "
         "light").split()
PROMPTS = [
    "Name a fruit.", "What is 12 times 7?", "Write a haiku about rain.",
    "List three colours.", "Explain gravity to a child in two sentences.",
    "Give me a word that rhymes with cat.",
    "Describe a sunset over the ocean in one paragraph.",
    "What is the capital of France? Answer and explain briefly.",
] + [f"Continue this story: {' '.join(WORDS[:k])}" for k in
     (4, 8, 12, 16, 20, 24, 26, 28)]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _wait_up(url: str, proc, seconds: float = 600) -> None:
  import httpx  # pylint: disable=g-import-not-at-top
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise SystemExit(f"the server exited ({proc.returncode})")
    try:
      if httpx.get(url, timeout=2).status_code < 500:
        return
    except httpx.HTTPError:
      pass
    time.sleep(1)
  raise SystemExit(f"no server at {url}")


def _requests(count: int):
  return [(PROMPTS[i % len(PROMPTS)], i) for i in range(count)]


def run_load(base_url: str, model: str, clients: int, requests, n: int,
             tokens: int, split_n: bool) -> dict:
  """Sends `requests` [(prompt, seed)] from `clients` threads; returns
  tokens/s, latencies and failures."""
  import openai  # pylint: disable=g-import-not-at-top
  client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0,
                         timeout=3600)
  queue = list(requests)
  latencies, counts, failures = [], [], 0

  def one(prompt, seed):
    start = time.perf_counter()
    total = 0
    for part in range(n if split_n else 1):
      r = client.chat.completions.create(
          model=model, messages=[{"role": "user", "content": prompt}],
          n=1 if split_n else n, max_tokens=tokens, temperature=1.0,
          seed=seed * n + part)
      total += r.usage.completion_tokens
    return time.perf_counter() - start, total

  def worker(index):
    nonlocal failures
    mine = queue[index::clients]
    for prompt, seed in mine:
      try:
        seconds, total = one(prompt, seed)
        latencies.append(seconds)
        counts.append(total)
      except Exception as e:  # pylint: disable=broad-except
        print(f"request failed: {type(e).__name__}: {e}", file=sys.stderr)
        failures += 1

  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    list(pool.map(worker, range(clients)))
  wall = time.perf_counter() - start
  return dict(clients=clients, requests=len(queue), seconds=round(wall, 2),
              tokens=int(sum(counts)),
              tokens_per_second=round(sum(counts) / wall, 1),
              p50_s=round(float(np.percentile(latencies, 50)), 2)
              if latencies else None,
              p99_s=round(float(np.percentile(latencies, 99)), 2)
              if latencies else None,
              failed=failures)


def offline(count: int, n: int, tokens: int) -> list:
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.llm import generate  # pylint: disable=g-import-not-at-top
  llm = llms.load("smollm2-135m", verbose=False)
  asked = _requests(count)

  def count_tokens(out):
    return sum(len(t) + int(s >= 0) for row, srow in zip(out.tokens,
                                                          out.stop_tokens)
               for t, s in zip(row, srow))

  records = []
  for kind in ("one call per request", "one call for all"):
    for timed in (False, True):  # the first pass compiles
      start = time.perf_counter()
      total = 0
      if kind == "one call for all":
        out = generate(llm, [p for p, _ in asked], n, seed=0,
                       max_new_tokens=tokens, chat=True, temperature=1.0)
        total = count_tokens(out)
      else:  # untimed: the first request compiles what the rest need
        for prompt, seed in (asked if timed else asked[:1]):
          total += count_tokens(generate(llm, prompt, n, seed=seed,
                                         max_new_tokens=tokens, chat=True,
                                         temperature=1.0))
      wall = time.perf_counter() - start
    records.append(dict(server="offline generate", kind=kind,
                        requests=count, seconds=round(wall, 2), tokens=total,
                        tokens_per_second=round(total / wall, 1)))
  return records


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--clients", nargs="+", type=int, default=[1, 4, 16])
  parser.add_argument("--requests", type=int, default=16)
  parser.add_argument("--n", type=int, default=8)
  parser.add_argument("--max_tokens", type=int, default=64)
  parser.add_argument("--peer", action="store_true")
  parser.add_argument("--peer_clients", nargs="+", type=int, default=[16],
                      help="llama.cpp serves one request at a time: its "
                      "throughput does not depend on the clients")
  parser.add_argument("--no_ours", action="store_true",
                      help="only the peer and offline (ours as recorded)")
  parser.add_argument("--no_offline", action="store_true")
  parser.add_argument("--out", default=str(OUT))
  args = parser.parse_args(argv)
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  records = []
  commit = head_commit()
  common = dict(n=args.n, max_tokens=args.max_tokens, host=cpu_name(),
                commit=commit)

  def keep(record):  # appended as it comes: a kill loses one configuration
    records.append(record)
    print(json.dumps(record), flush=True)
    with open(args.out, "a") as f:
      f.write(json.dumps(record) + "\n")

  env = dict(os.environ, JAX_PLATFORMS="cpu")
  servers = [] if args.no_ours else [
      ("ours (float32)", [sys.executable, "-m", "arithmetic_apps.server",
                          "--model", "smollm2-135m", "--max-n", str(args.n)],
       "smollm2-135m", False)]
  scratch = tempfile.TemporaryDirectory()
  if args.peer:
    if not PEER_PYTHON.exists():
      raise SystemExit(f"--peer needs {PEER_PYTHON} (make bench-peer-env)")
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_llm_engine import f32_copy  # pylint: disable=g-import-not-at-top
    quantized = llms.gguf_path("smollm2-135m")
    full = os.path.join(scratch.name, "smollm2-135m-f32.gguf")
    f32_copy(quantized, full)
    for label, path in (("Q4_1", quantized), ("float32", full)):
      servers.append((f"llama.cpp server ({label})", [
          str(PEER_PYTHON), "-m", "llama_cpp.server", "--model", path,
          "--n_ctx", "4096", "--n_threads", "2", "--n_threads_batch", "2",
          "--model_alias", "smollm2-135m"], "smollm2-135m", True))
  for name, command, model, split in servers:
    port = _free_port()
    proc = subprocess.Popen(command + ["--port", str(port), "--host",
                                       "127.0.0.1"], env=env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
      _wait_up(url + "/v1/models", proc)
      # Warm-up: ours compiles what the timed runs need (the whole load);
      # llama.cpp compiles nothing (one request).
      run_load(url + "/v1", model, max(args.clients), _requests(
          1 if split else args.requests), args.n, args.max_tokens, split)
      if proc.poll() is not None:
        raise SystemExit(f"{name} exited ({proc.returncode}) during the "
                         "warm-up")
      for clients in (args.peer_clients if split else args.clients):
        keep(dict(server=name, **run_load(
            url + "/v1", model, clients, _requests(args.requests), args.n,
            args.max_tokens, split), **common))
    finally:
      proc.terminate()
      proc.wait(60)
  for record in ([] if args.no_offline else
                 offline(args.requests, args.n, args.max_tokens)):
    keep(dict(record, **common))
  print(f"{'server':28} {'clients':>7} {'tok/s':>8} {'p50 s':>7} "
        f"{'p99 s':>7} {'failed':>6}")
  for r in records:
    print(f"{r['server'] + (' / ' + r['kind'] if 'kind' in r else ''):28} "
          f"{r.get('clients', '-'):>7} {r['tokens_per_second']:8.1f} "
          f"{r.get('p50_s') or '-':>7} {r.get('p99_s') or '-':>7} "
          f"{r.get('failed', 0):>6}")
  ours = {r["clients"]: r for r in records if r["server"].startswith("ours")}
  offline_tps = [r["tokens_per_second"] for r in records
                 if r["server"] == "offline generate"]
  if not ours or not offline_tps:
    return
  best_offline = max(offline_tps)
  top = max(ours)
  print(f"ours at {top} clients: {ours[top]['tokens_per_second']} tok/s = "
        f"{ours[top]['tokens_per_second'] / best_offline:.0%} of offline "
        f"generate's best ({best_offline}), "
        f"{sum(r['failed'] for r in ours.values())} failed")


if __name__ == "__main__":
  main()
