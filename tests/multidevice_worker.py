"""Runs sharded decodes in a fresh process with emulated CPU devices.

Multi-device JAX needs XLA_FLAGS before jax starts, so the tests and
`scripts/sharding_report.py` launch this script as a subprocess:

  python tests/multidevice_worker.py OUT.npz SCENARIO [PROCESS_ID PORT]

Scenarios:
  meshes       every method on data-parallel and model-parallel meshes
               (all of MESHES, or those given as JSON: ["2x1", "4x2", ...];
               the one-device reference always)
  hlo          collectives inside and outside the compiled decode loops
               (JSON in OUT)
  multihost    one of two processes (4 devices each) of the 2x2x2 topology
  crosskv      per-input vs per-sample cross-attention keys/values, every
               method, for the cases given as JSON: [[preset, [data, model],
               batch, N, length, temperature], ...]
  decoder      the tiny decoder-only models (Llama-style, Gemma 3) with
               prompts of different lengths, every method, on data and
               model meshes
"""

import json
import os
import re
import sys

OUT, SCENARIO = sys.argv[1], sys.argv[2]
DEVICES = 4 if SCENARIO == "multihost" else 8
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count={DEVICES}")
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
if SCENARIO == "multihost":
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"127.0.0.1:{sys.argv[4]}", num_processes=2,
                             process_id=int(sys.argv[3]))

from arithmetic_decoding.models import (CrossKV,  # noqa: E402
                                        EncoderDecoderModel, preset)
from arithmetic_decoding.sharding import (DecodeSetup, Method,  # noqa: E402
                                          make_sharded_decode, shard_params,
                                          to_global)
from arithmetic_apps.topology import load_topology, make_mesh  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

MODEL = EncoderDecoderModel(preset("tiny"))
BATCH, SOURCE_LEN, N, LENGTH = 8, 7, 16, 12
MESHES = [("v4-1x1x1", (1, 1)), ("v4-1x2x1", (2, 1)), ("v4-2x2x1", (4, 1)),
          ("v4-2x2x2", (8, 1)), ("v4-2x2x2", (4, 2)), ("v4-2x2x2", (2, 4)),
          ("v4-2x2x2", (1, 8))]


def inputs():
  params = MODEL.init(jax.random.PRNGKey(0))
  tokens = np.array(jax.random.randint(jax.random.PRNGKey(1),
                                         (BATCH, SOURCE_LEN), 1, 64))
  tokens[2, 4:] = 0  # some padding
  return params, tokens, np.asarray(jax.random.PRNGKey(7))


def decode(mesh, method, params, tokens, key, model=MODEL, n=N,
           length=LENGTH, **kw):
  setup = DecodeSetup(method=method, num_decodes=n, max_decode_len=length,
                      **kw)
  fn = make_sharded_decode(model, mesh, setup)
  replicated = NamedSharding(mesh, P())
  args = (shard_params(params, model, mesh), to_global(tokens, replicated),
          to_global(key, replicated))
  return fn, args


def run_meshes():
  params, tokens, key = inputs()
  results = {}
  wanted = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
  for name, shape in MESHES:
    if wanted is not None and shape != (1, 1) and (
        f"{shape[0]}x{shape[1]}" not in wanted):
      continue
    mesh = make_mesh(load_topology(name), shape)
    for method in Method:
      fn, args = decode(mesh, method, params, tokens, key)
      out, scores = fn(*args)
      tag = f"{method.value}/{shape[0]}x{shape[1]}"
      results[tag + "/tokens"] = np.asarray(out)
      results[tag + "/scores"] = np.asarray(scores)
    fn, args = decode(mesh, Method.ARITHMETIC, params, tokens, key,
                      code_resolution=2.0**-22)
    out, scores = fn(*args)
    results[f"fullcode/{shape[0]}x{shape[1]}/tokens"] = np.asarray(out)
  results["encoder_tokens"] = tokens
  np.savez(OUT, **results)


def run_cross_kv():
  results = {}
  for name, shape, batch, n, length, temperature in json.loads(sys.argv[3]):
    models = {c.value: EncoderDecoderModel(preset(name), cross_kv=c)
              for c in CrossKV}
    params = models["per_input"].init(jax.random.PRNGKey(0))
    vocab = preset(name).vocab_size
    tokens = np.array(jax.random.randint(jax.random.PRNGKey(1), (batch, 7), 2,
                                         min(vocab, 1000)))
    tokens[0, 5:] = 0
    results[f"{name}/{shape[0]}x{shape[1]}/b{batch}/n{n}/encoder_tokens"] = tokens
    key = np.asarray(jax.random.PRNGKey(3))
    mesh = make_mesh(load_topology("v4-1x1x1" if shape == [1, 1] else
                                   "v4-2x2x2"), tuple(shape))
    for method in (Method.ARITHMETIC, Method.ANCESTRAL, Method.BEAM):
      for cross, model in models.items():
        fn, args = decode(mesh, method, params, tokens, key, model=model, n=n,
                          length=length, temperature=temperature)
        out, scores = fn(*args)
        tag = f"{name}/{shape[0]}x{shape[1]}/b{batch}/n{n}/{method.value}/{cross}"
        results[tag + "/tokens"] = np.asarray(out)
        results[tag + "/scores"] = np.asarray(scores)
  np.savez(OUT, **results)


def run_decoder():
  from arithmetic_decoding.models.decoder_config import TINY
  from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
  results = {}
  prompts = np.zeros((4, 6), np.int32)
  for b, row in enumerate([[5, 9, 3], [33, 2, 8, 8, 40, 41], [7], [12, 13]]):
    prompts[b, :len(row)] = row
  results["prompts"] = prompts
  key = np.asarray(jax.random.PRNGKey(11))
  for arch, config in TINY.items():
    model = DecoderOnlyModel(config)
    params = model.init(jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(lambda x: x * 4.0, params)
    for name, shape in [("v4-1x1x1", (1, 1)), ("v4-2x2x2", (8, 1)),
                        ("v4-2x2x1", (2, 2)), ("v4-2x2x2", (4, 2)),
                        ("v4-2x2x2", (2, 4))]:
      mesh = make_mesh(load_topology(name), shape)
      for method in Method:
        fn, args = decode(mesh, method, params, prompts, key, model=model,
                          n=4, length=16, temperature=1.0)
        out, scores = fn(*args)
        tag = f"{arch}/{method.value}/{shape[0]}x{shape[1]}"
        results[tag + "/tokens"] = np.asarray(out)
        results[tag + "/scores"] = np.asarray(scores)
  np.savez(OUT, **results)


_COLLECTIVE = re.compile(
    r"\b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)"
    r"(-start)?\(")


def _computations(hlo: str):
  """Optimised HLO text -> {computation name: its lines}."""
  bodies, name = {}, None
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
    if head and not line.startswith(" "):
      name = head.group(1)
      bodies[name] = []
    elif name is not None:
      bodies[name].append(line)
  return bodies


def _reachable(bodies, root):
  """`root` and every computation it calls, transitively."""
  callee = re.compile(
      r"(?:condition|body|to_apply|calls|branch_computations)=\{?%?([\w.\-]+)")
  seen, stack = set(), [root]
  while stack:
    comp = stack.pop()
    if comp in seen or comp not in bodies:
      continue
    seen.add(comp)
    for line in bodies[comp]:
      stack.extend(m.group(1) for m in callee.finditer(line))
      for extra in re.findall(r"branch_computations=\{([^}]*)\}", line):
        stack.extend(x.strip().lstrip("%") for x in extra.split(","))
  return seen


def _count(bodies, computations, prefix, counts):
  for c in computations:
    for line in bodies[c]:
      m = _COLLECTIVE.search(line)
      if m:
        key = f"{prefix}{m.group(1)}"
        counts[key] = counts.get(key, 0) + 1
  return counts


def collectives(hlo: str):
  """Collective ops per while loop (body and condition, with everything
  they call; "dots" counts the loop's matmuls, so the decode loop is the
  one with the model) and in the rest of the program ("outside")."""
  bodies = _computations(hlo)
  loops, in_loops = [], set()
  for lines in list(bodies.values()):
    for line in lines:
      if " while(" not in line:
        continue
      cond = _reachable(bodies, re.search(r"condition=%?([\w.\-]+)",
                                          line).group(1))
      body = _reachable(bodies, re.search(r"body=%?([\w.\-]+)",
                                          line).group(1))
      in_loops |= cond | body
      counts = {"dots": sum(1 for c in body for l in bodies[c]
                            if re.search(r"\b(dot|convolution)\(", l))}
      _count(bodies, body, "body:", counts)
      loops.append(_count(bodies, cond, "condition:", counts))
  outside = _count(bodies, set(bodies) - in_loops, "", {})
  return {"loops": loops, "outside": outside}


def run_hlo():
  params, tokens, key = inputs()
  report = {}
  mesh = make_mesh(load_topology("v4-2x2x2"), (8, 1))
  for method in Method:
    fn, args = decode(mesh, method, params, tokens, key)
    hlo = fn.lower(*args).compile().as_text()
    report[method.value] = collectives(hlo)
  # T5X's cross-attention layout: its per-step projection of the keys and
  # values is loop-invariant, so XLA may hoist it (compare the loops' dots).
  per_sample = EncoderDecoderModel(preset("tiny"), cross_kv=CrossKV.PER_SAMPLE)
  fn, args = decode(mesh, Method.ARITHMETIC, params, tokens, key,
                    model=per_sample)
  report["arithmetic_per_sample"] = collectives(
      fn.lower(*args).compile().as_text())
  # For contrast: the same arithmetic loop under plain jit (GSPMD), rows
  # sharded over data: its global stopping test is an all-reduce per step.
  from arithmetic_decoding import arithmetic_sample
  from arithmetic_decoding.sharding import logical_rules, param_shardings

  def gspmd(params, tokens, key):
    with logical_rules(mesh):
      inp, cache, fn = MODEL.decode_inputs(params, tokens, LENGTH, N)
      return arithmetic_sample(inp, cache, fn, 1, key, num_decodes=N, topk=0)

  replicated = NamedSharding(mesh, P())
  jitted = jax.jit(gspmd, in_shardings=(param_shardings(MODEL, mesh),
                                        replicated, replicated))
  hlo = jitted.lower(shard_params(params, MODEL, mesh), tokens,
                     key).compile().as_text()
  report["arithmetic_gspmd"] = collectives(hlo)
  with open(OUT, "w") as f:
    json.dump(report, f)


def run_hosts():
  params, tokens, key = inputs()
  mesh = make_mesh(load_topology("v4-2x2x2"), (8, 1))
  results = {"process_count": np.asarray(jax.process_count()),
             "device_count": np.asarray(jax.device_count()),
             "local_device_count": np.asarray(jax.local_device_count())}
  for method in (Method.ARITHMETIC, Method.ANCESTRAL):
    fn, args = decode(mesh, method, params, tokens, key)
    out, scores = fn(*args)
    # Replicated outputs: every process holds the whole result.
    results[f"{method.value}/tokens"] = np.asarray(
        out.addressable_shards[0].data)
    results[f"{method.value}/scores"] = np.asarray(
        scores.addressable_shards[0].data)
  np.savez(OUT, **results)


if __name__ == "__main__":
  {"meshes": run_meshes, "hlo": run_hlo, "multihost": run_hosts,
   "crosskv": run_cross_kv,
   "decoder": run_decoder}[SCENARIO]()
  if SCENARIO == "multihost":
    jax.distributed.shutdown()
