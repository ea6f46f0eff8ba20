"""Helpers of the decode benchmarks (`scripts/bench_decode.py`,
`scripts/bench_cross_kv.py`): jitted decodes of every `Method`, compiling,
alternating timing, and counting steps and tokens.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.methods import Method

EOS = 1


def memory(compiled) -> dict:
  """A compiled program's argument / output / temporary MiB (XLA's
  `memory_analysis`; empty where the backend gives none)."""
  stats = compiled.memory_analysis()
  if stats is None:
    return {}
  return {"argument_mb": round(stats.argument_size_in_bytes / 2**20, 2),
          "output_mb": round(stats.output_size_in_bytes / 2**20, 2),
          "temp_mb": round(stats.temp_size_in_bytes / 2**20, 2)}


def make_decode(model, method, n: int, length: int,
                code_resolution: float = CODE_RESOLUTION):
  """jit(params, encoder_tokens, key) -> (tokens [B, N, L], scores [B, N])
  by `method` (a `Method` or its name; greedy is the same loop as the
  samplers, with the argmax of the logits: the physical floor)."""
  method = Method.of(method)

  def decode(params, encoder_tokens, key):
    inputs, cache, fn = model.decode_inputs(params, encoder_tokens, length, n)
    return method.decode(inputs, cache, fn, EOS, key, num_decodes=n, topk=0,
                         code_resolution=code_resolution)

  return jax.jit(decode)


def loop_steps(tokens: np.ndarray) -> int:
  """Steps a sampling loop ran: until its longest row ended."""
  is_eos = tokens == EOS
  ends = np.where(is_eos.any(-1), is_eos.argmax(-1) + 1, tokens.shape[-1])
  return int(ends.max())


def decoded_tokens(tokens: np.ndarray) -> int:
  """Tokens produced (up to and including EOS) over all rows."""
  is_eos = tokens == EOS
  ends = np.where(is_eos.any(-1), is_eos.argmax(-1) + 1, tokens.shape[-1])
  return int(ends.sum())


def compile_all(jitted: dict, args: tuple):
  """Compiles each jitted function for `args` and runs it once: its compiled
  function, outputs and memory, each a dict by name."""
  fns, outs, mems = {}, {}, {}
  for name, fn in jitted.items():
    fns[name] = fn.lower(*args).compile()
    mems[name] = memory(fns[name])
    outs[name] = jax.block_until_ready(fns[name](*args))
  return fns, outs, mems


def time_alternately(fns: dict, args: tuple, repeats: int, reference: str
                     ) -> dict:
  """{name: [seconds per call] * repeats} for compiled functions called on
  the same `args`, timed in turn so that drifts hit all alike."""
  # Calls per timing sample: enough for ~50 ms (timed on `reference`), so
  # fast decodes are not dominated by timer and dispatch noise.
  start = time.perf_counter()
  jax.block_until_ready(fns[reference](*args))
  inner = max(1, int(0.05 / (time.perf_counter() - start)))
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      for _ in range(inner):
        out = fn(*args)
      jax.block_until_ready(out)
      times[name].append((time.perf_counter() - start) / inner)
  return times


