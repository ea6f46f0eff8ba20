"""Benchmark: LLM sampling through the engine, before and after, on this CPU.

    python scripts/bench_llm_engine.py                    # before vs after
    python scripts/bench_llm_engine.py --baseline none    # after only
    python scripts/bench_llm_engine.py --models smollm2-135m --n 16
    python scripts/bench_llm_engine.py --peer_only --temperatures 0.8

The workload (the same call in both checkouts): 8 chat prompts x N samples
(--n: 16, 64) at each temperature (--temperatures: 0.4, 0.8, 1.0), by
arithmetic and ancestral sampling, `llm.generate(..., max_new_tokens=64)`
with the model's stop tokens honoured, seed 0, float32, for each model
(--models: SmolLM2-135M, Gemma 3 270M). Each configuration runs in a
process of its own, twice in a row: the first call compiles what it needs
(its seconds are kept as `first_seconds`), the second is timed warm; the
code before, the code after and (--peer) llama.cpp run one configuration
each in turn, so the two sides of a row are measured minutes apart, not an
hour (`protocol: "warm-alone"`). Older records: `"warm"` ran one model's
configurations in one process per checkout (all of "before", then all of
"after"; its peak memory includes the configurations run before it); no
protocol: each (N, method) ran once untimed at the first temperature only,
so a later temperature's timed run compiled the shapes that the first had
not met inside its time: a handicap for the compacted scheduler, whose
shapes depend on when samples end (the fused loop of the code before is
one program at every temperature).

* after: this checkout's HEAD (the compacted scheduler: ended rows
  dropped, a prompt prefilled once for its samples, prefixes shared).
  before: the code at --baseline (a git commit). Each runs from a
  temporary `git worktree` of its commit, so edits made while the
  benchmark runs do not reach it.
  The two draw different samples (the seed policy changed: `docs/
  engine.md`), so they are compared by rate, not token for token.
* tokens: generated tokens, the stop token included; tokens/s over the
  timed run.
* row-steps per token: model rows x loop steps the decode ran, per
  generated token. before: the fused loop runs all B x N rows until the
  longest sample ends (B x N x its steps); after: the compacted
  scheduler's count (`stats["row_steps"]`).
* peak memory: the resident set's peak of the process that ran the
  configuration (its model loaded, the call made twice).
* peer (--peer): llama.cpp on the same prompts (our tokenizer's ids, chat
  template applied), N samples each by its batched decoding
  (`scripts/llamacpp_peer.py` in .venv-llamacpp: `make bench-peer-env`),
  2 threads, the same temperature and token limit, once warm-up and once
  timed per configuration, right after our own two runs of it
  (arithmetic sampling has no llama.cpp counterpart: one record per
  (N, T)). Twice: on the GGUF file as pip ships it (quantized: Q4_1 for
  SmolLM2, Q4_K_M for Gemma 3), and on a float32 copy of it (the weights
  we compute with: the same precision).

Records are appended to --out as they finish (one per checkout, model,
configuration, protocol and kind of CPU) and a rerun skips those present
on this kind of CPU under this protocol, so a killed run resumes; a
configuration whose "after" is measured anew (a new commit) has its
"before" measured again beside it (--again: the code before again even
so; the latest record of each side counts). Speeds
are compared only between records of one kind of CPU (the table here:
this machine's, the latest "after" record of each configuration whatever
its commit; docs/engine.md: one table per kind).
Prints a table of before/after per configuration and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from host import cpu_name  # scripts/host.py

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "llm" / "bench_engine.jsonl"
PROMPTS = ["Name a fruit.", "Write a short poem about the sea.",
           "What is the capital of France?", "Explain gravity to a child.",
           "List three colours.", "What is 12 times 7?",
           "Give me a word that rhymes with cat.", "Describe a sunset."]
METHODS = ("arithmetic", "ancestral")
PROTOCOL = "warm-alone"  # see the module docstring


def _key(record) -> tuple:
  """A configuration measured on one kind of CPU under one protocol: a rerun
  on another kind, or under a new protocol, measures it again (speeds are
  compared on one host only)."""
  return (record["version"], record["commit"], record["model"], record["n"],
          record["temperature"], record["method"], record.get("host"),
          record.get("protocol"))


def worker(args) -> None:
  """Runs the configurations it is given in this process (the checkout on
  sys.path; the orchestrator gives one); appends each record to args.out."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding import llm as llm_lib  # pylint: disable=g-import-not-at-top
  llm = llms.load(args.model)
  done = _done(args.out)
  new_api = hasattr(llm_lib, "decode") and hasattr(llm_lib, "SamplingParams")

  def run(n, temperature, method):
    stats = {}
    start = time.perf_counter()
    if new_api:
      sampling = llm_lib.SamplingParams(
          n=n, method=method, temperature=temperature, max_new_tokens=64)
      texts, ids, _ = llm_lib.prepare_prompts(llm, PROMPTS, 64, True)
      arrays = llm_lib.decode(llm, ids, sampling, stats=stats)
      out = llm_lib.collect(llm, sampling.method, texts, ids, 64, arrays)
    else:
      out = llm_lib.generate(llm, PROMPTS, n, method=method,
                             temperature=temperature, seed=0,
                             max_new_tokens=64, chat=True)
    seconds = time.perf_counter() - start
    lengths = np.array([[len(t) + int(s >= 0) for t, s in zip(row, srow)]
                        for row, srow in zip(out.tokens, out.stop_tokens)])
    row_steps = (stats["row_steps"] if stats else
                 int(lengths.size * lengths.max()))
    return seconds, int(lengths.sum()), row_steps

  for n in args.n:
    for method in args.methods:
      for temperature in args.temperatures:
        record = dict(version=args.version, commit=args.commit,
                      model=args.model, n=n, temperature=temperature,
                      method=method, host=cpu_name(), protocol=PROTOCOL)
        if _key(record) in done and not args.again:
          continue
        # The same call twice: the first compiles what it needs (the
        # compacted scheduler's shapes depend on when samples end), the
        # second is timed warm.
        first = run(n, temperature, method)[0]
        seconds, tokens, row_steps = run(n, temperature, method)
        record.update(
            first_seconds=round(first, 3),
            prompts=len(PROMPTS), max_new_tokens=64, seconds=round(seconds, 3),
            tokens=tokens, tokens_per_second=round(tokens / seconds, 1),
            row_steps=row_steps,
            row_steps_per_token=round(row_steps / tokens, 3),
            peak_mib=round(resource.getrusage(
                resource.RUSAGE_SELF).ru_maxrss / 1024),
            host=cpu_name())
        with open(args.out, "a") as f:
          f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


def f32_copy(src: str, dst: str) -> None:
  """A GGUF file with every tensor of `src` dequantized to float32 and the
  same metadata (file type: all F32)."""
  import gguf  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  reader = gguf.GGUFReader(src)
  arch = reader.fields["general.architecture"].contents()
  writer = gguf.GGUFWriter(dst, arch)
  for name, field in reader.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
      continue
    value = field.contents()
    if name == "general.file_type":
      value = int(gguf.LlamaFileType.ALL_F32)
    kind = field.types[0]
    sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
    writer.add_key_value(name, value, kind, sub_type=sub)
  for t in reader.tensors:
    writer.add_tensor(t.name, np.asarray(gguf.quants.dequantize(
        t.data, t.tensor_type), np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


def peer(model: str, n: int, temperature: float, args, tmp: str) -> None:
  """llama.cpp's records of one configuration (see the module docstring),
  on the quantized file and on its float32 copy, appended to args.out."""
  from arithmetic_apps import llms  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding import llm as llm_lib  # pylint: disable=g-import-not-at-top
  python = ROOT / ".venv-llamacpp" / "bin" / "python"
  if not python.exists():
    raise SystemExit(f"--peer needs {python} (make bench-peer-env)")
  done = _done(args.out)
  records = [dict(version=f"llama.cpp {label}", commit="peer", model=model,
                  n=n, temperature=temperature, method="ancestral",
                  host=cpu_name(), protocol=PROTOCOL)
             for label in ("quantized", "float32")]
  if all(_key(r) in done for r in records):
    return
  llm = llms.load(model, verbose=False)
  ids = llm_lib.prepare_prompts(llm, PROMPTS, 64, True)[1]
  del llm
  quantized = llms.gguf_path(model)
  full = os.path.join(tmp, f"{model}-f32.gguf")
  for record, path in zip(records, (quantized, full)):
    if _key(record) in done:
      continue
    if path == full and not os.path.exists(full):
      f32_copy(quantized, full)
    job = os.path.join(tmp, "job.json")
    json.dump(dict(gguf=path, prompts=ids, n=n, temperature=temperature,
                   max_new_tokens=64, threads=2, seed=0), open(job, "w"))
    out = [json.loads(subprocess.run(
        [str(python), str(ROOT / "scripts" / "llamacpp_peer.py"), job],
        capture_output=True, text=True,
        check=True).stdout.strip().splitlines()[-1])
           for _ in range(2)][-1]  # warm-up, then timed
    record.update(prompts=len(PROMPTS), max_new_tokens=64,
                  seconds=out["seconds"], tokens=out["tokens"],
                  tokens_per_second=out["tokens_per_second"])
    with open(args.out, "a") as f:
      f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def _done(path) -> set:
  if not os.path.exists(path):
    return set()
  keys = set()
  for line in open(path):
    line = line.strip()
    if line:
      try:
        keys.add(_key(json.loads(line)))
      except (ValueError, KeyError):
        continue  # a torn last line: its configuration runs again
  return keys


def _commit(ref: str, cwd=ROOT) -> str:
  return subprocess.run(["git", "rev-parse", "--short", ref], cwd=cwd,
                        capture_output=True, text=True,
                        check=True).stdout.strip()


def _spawn(checkout: pathlib.Path, version: str, commit: str, model: str,
           n: int, method: str, temperature: float, args,
           again: bool = False) -> None:
  """One configuration of one checkout in a fresh process, unless done
  (`again`: even so)."""
  record = dict(version=version, commit=commit, model=model, n=n,
                temperature=temperature, method=method, host=cpu_name(),
                protocol=PROTOCOL)
  if _key(record) in _done(args.out) and not again:
    return
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(checkout), str(checkout / "apps")]))
  cmd = [sys.executable, str(ROOT / "scripts" / "bench_llm_engine.py"),
         "--worker", "--version", version, "--commit", commit, "--model",
         model, "--out", str(args.out), "--n", str(n), "--methods", method,
         "--temperatures", str(temperature)] + (["--again"] if again else [])
  subprocess.run(cmd, env=env, check=True)


def summary(path, commits) -> dict:
  """before/after per configuration (the latest record of each, on this
  kind of CPU)."""
  latest = {}
  for line in open(path):
    if line.strip():
      r = json.loads(line)
      # The latest "after" of each configuration, whatever its commit (a
      # commit that changed only scripts or docs does not void it).
      if ((r["version"] != "before" or r["commit"] in commits) and
          r.get("host") == cpu_name()):
        latest[(r["version"], r["model"], r["n"], r["temperature"],
                r["method"])] = r
  rows = []
  for (version, model, n, t, method), after in sorted(latest.items()):
    if version != "after":
      continue
    before = latest.get(("before", model, n, t, method))
    rows.append(dict(
        model=model, n=n, temperature=t, method=method,
        after_tok_s=after["tokens_per_second"],
        before_tok_s=before and before["tokens_per_second"],
        speedup=before and round(after["tokens_per_second"] /
                                 before["tokens_per_second"], 2),
        after_row_steps_per_token=after["row_steps_per_token"],
        before_row_steps_per_token=before and before["row_steps_per_token"],
        after_peak_mib=after["peak_mib"],
        before_peak_mib=before and before["peak_mib"]))
  # Arithmetic vs ancestral, seconds per generated token, after.
  for row in rows:
    if row["method"] == "arithmetic":
      twin = next((r for r in rows if r["method"] == "ancestral" and
                   (r["model"], r["n"], r["temperature"]) ==
                   (row["model"], row["n"], row["temperature"])), None)
      if twin:
        row["arithmetic_over_ancestral_s_per_token"] = round(
            twin["after_tok_s"] / row["after_tok_s"], 3)
  return {"rows": rows}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--baseline", default="d698328",
                      help="git commit of the code before, or 'none'")
  parser.add_argument("--models", nargs="+",
                      default=["smollm2-135m", "gemma3-270m"])
  parser.add_argument("--n", nargs="+", type=int, default=[16, 64])
  parser.add_argument("--temperatures", nargs="+", type=float,
                      default=[0.4, 0.8, 1.0])
  parser.add_argument("--out", default=str(OUT))
  parser.add_argument("--report_only", action="store_true")
  parser.add_argument("--peer", action="store_true",
                      help="also llama.cpp on the same workload")
  parser.add_argument("--peer_only", action="store_true",
                      help="only llama.cpp (our records stay as they are)")
  parser.add_argument("--methods", nargs="+", default=list(METHODS),
                      choices=METHODS)
  parser.add_argument("--again", action="store_true",
                      help="measure the code before again where it is "
                      "recorded (the latest record of a side counts)")
  parser.add_argument("--worker", action="store_true")
  parser.add_argument("--version")
  parser.add_argument("--commit")
  parser.add_argument("--model")
  args = parser.parse_args(argv)
  if args.worker:
    worker(args)
    return
  versions = [("after", _commit("HEAD"))]
  if args.baseline != "none":
    versions.insert(0, ("before", _commit(args.baseline)))
  commits = {commit for _, commit in versions}
  run_ours = not (args.report_only or args.peer_only)
  run_peer = (args.peer or args.peer_only) and not args.report_only
  with tempfile.TemporaryDirectory() as tmp:
    checkouts = []
    try:
      for version, commit in versions if run_ours else []:
        tree = pathlib.Path(tmp) / version
        subprocess.run(["git", "worktree", "add", "--detach", str(tree),
                        commit], cwd=ROOT, check=True, capture_output=True)
        checkouts.append(tree)
      # Configuration by configuration: before, after, then the peer, so
      # the sides of a row are measured minutes apart.
      for model in args.models:
        for n in args.n:
          for method in args.methods:
            for temperature in args.temperatures:
              # A new "after" measures "before" again beside it (the
              # summary takes the latest record of each side).
              after = dict(version="after", commit=versions[-1][1],
                           model=model, n=n, temperature=temperature,
                           method=method, host=cpu_name(), protocol=PROTOCOL)
              again = args.again or _key(after) not in _done(args.out)
              for (version, commit), tree in zip(versions, checkouts):
                _spawn(tree, version, commit, model, n, method, temperature,
                       args, again=again and version == "before")
              if run_peer and method == "ancestral":
                peer(model, n, temperature, args, tmp)
    finally:
      for tree in checkouts:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                       cwd=ROOT, check=False)
  report = summary(args.out, commits)
  print(f"{'model':14} {'N':>3} {'T':>4} {'method':10} {'before':>8} "
        f"{'after':>8} {'x':>6} {'rs/tok b':>8} {'rs/tok a':>8}")
  for r in report["rows"]:
    print(f"{r['model']:14} {r['n']:3d} {r['temperature']:4.1f} "
          f"{r['method']:10} {r['before_tok_s'] or 0:8.1f} "
          f"{r['after_tok_s']:8.1f} {r['speedup'] or 0:6.2f} "
          f"{r['before_row_steps_per_token'] or 0:8.2f} "
          f"{r['after_row_steps_per_token']:8.2f}")
  print(json.dumps(report))
  speedups = [r["speedup"] for r in report["rows"] if r["speedup"]]
  ratios = [r["arithmetic_over_ancestral_s_per_token"] for r in report["rows"]
            if "arithmetic_over_ancestral_s_per_token" in r]
  if speedups:
    print(f"speedup after/before: {min(speedups):.2f}x-{max(speedups):.2f}x "
          f"over {len(speedups)} configurations; arithmetic/ancestral time "
          f"per token {min(ratios or [0]):.2f}-{max(ratios or [0]):.2f}")


if __name__ == "__main__":
  main()
