"""The engine: one decode request, run by one of its schedulers.

Every entry point builds a `request.DecodeRequest` and hands it to a
scheduler; a scheduler decides how the request's B*N rows are stepped, never
what a step does (that is `loop`'s, with the request's chooser):

  fused      one jit program: T5X's loop over all rows until the last one
             ends (`run_fused`; the T5X drop-ins `arithmetic_sample` /
             `ancestral_sample`, and inside any user's jit)
  compacted  host-driven segments of the same loop that drop ended rows and
             run the model once per distinct prefix (`compaction.
             run_compacted`; the translator, `llm.generate`, rollouts)
  mesh       the rows split over the `data` axis of a device mesh, each
             shard running the fused loop on its rows, the model axis
             automatic (`sharding.make_sharded_decode`)

They return the same samples: the schedulers of one request are checked
against each other token for token (`tests/test_engine.py`). Compacted on a
data mesh does not compose: the compacted scheduler's bookkeeping runs on
the host for all rows, so it serves one device (or one host's worth of
calls spread over devices, as `rollouts` does).

  request = build(Method.ARITHMETIC, inputs=..., cache=..., ...)
  decodes, log_probs, codes = run_fused(request)   # [B, N, L], [B, N], [B, N]

`decode` is `Method.decode`: a request from T5X-protocol arguments, run
fused (beam search: `beam_search`, which keeps beams rather than rows).
`for_row_model` is the request of one of the library's models (a
`sharding.RowModel`: the T5 encoder-decoder, the decoder-only LLMs) with its
`compaction.RowLayout`, for any scheduler.
"""

from __future__ import annotations

import enum
import functools
from typing import Optional, Tuple

import jax
import numpy as np

from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.choosers import Noise
from arithmetic_decoding.codes import CodeScheme, SchemeLike
from arithmetic_decoding.compaction import RowLayout, same_input_runs
from arithmetic_decoding.methods import Method
from arithmetic_decoding.request import DecodeRequest, build, jit_or_trace
from arithmetic_decoding import validation
from arithmetic_decoding.rows import decode_rows, sort_samples


class Scheduler(enum.Enum):
  """How a request's rows are stepped, for the entry points that offer a
  choice (`llm.generate`, the translator): FUSED (`run_fused`) or
  COMPACTED (`compaction.run_compacted`). The mesh scheduler is
  `sharding.make_sharded_decode`."""

  FUSED = "fused"
  COMPACTED = "compacted"

  @classmethod
  def of(cls, value) -> "Scheduler":
    return validation.check_member("scheduler", cls, value)


def sample_core(request: DecodeRequest):
  """A request -> sorted (decodes [B, N, L], log_probs [B, N], codes [B, N]):
  every row stepped until the last has ended, in one program."""
  decodes, log_probs, codes = decode_rows(request.rows(), request.topk,
                                          request.topp, request.model_fns(),
                                          request.options)
  return sort_samples(decodes, log_probs, codes, request.batch,
                      request.num_decodes)


_sample_core_jit = jax.jit(sample_core)


def run_fused(request: DecodeRequest) -> Tuple[jax.Array, jax.Array,
                                               jax.Array]:
  """The fused scheduler: (decodes int32 [B, N, L], log_probs float32 [B, N],
  codes float32 [B, N]), each input's samples by increasing log-prob; one
  compiled program per static configuration, or inline inside a trace."""
  return jit_or_trace(sample_core, _sample_core_jit, request)


def decode(method: Method, inputs, cache, tokens_to_logits, eos_id,
           rng: Optional[jax.Array], *, num_decodes: int, temperature=1.0,
           topk=0, topp=0.0, alpha: float = 0.6, codes=None,
           code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
           code_resolution: float = CODE_RESOLUTION, max_decode_steps=None,
           initial_index=None, cache_offset: int = 0,
           return_codes: bool = False, row_ids=None,
           cache_growth=None) -> Tuple[jax.Array, ...]:
  """`Method.decode`: (decodes [B, N, L], scores [B, N]) and, with
  `return_codes`, the codes [B, N] (zeros but for arithmetic sampling)."""
  method = Method.of(method)
  if method is Method.BEAM:
    if max_decode_steps is not None:
      raise ValueError("beam search takes no max_decode_steps.")
    if cache_growth is not None:
      raise ValueError("beam search takes no cache_growth.")
    if return_codes:
      raise ValueError("beam search has no codes (return_codes=False).")
    return beam_search(inputs, cache, tokens_to_logits, eos_id,
                       num_decodes=num_decodes, alpha=alpha,
                       cache_offset=cache_offset, initial_index=initial_index)
  request = build(
      method, inputs=inputs, cache=cache, tokens_to_logits=tokens_to_logits,
      eos_id=eos_id, key=jax.random.PRNGKey(0) if rng is None else rng,
      num_decodes=num_decodes, temperature=temperature, topk=topk, topp=topp,
      codes=codes, code_scheme=code_scheme, code_resolution=code_resolution,
      row_ids=row_ids, initial_index=initial_index,
      max_decode_steps=max_decode_steps, cache_offset=cache_offset,
      cache_growth=cache_growth)
  out = run_fused(request)
  return out if return_codes else out[:2]


@functools.partial(jax.jit, static_argnames=("model", "max_decode_len",
                                             "num_decodes"))
def _row_model_start(params, encoder_tokens, *, model, max_decode_len,
                     num_decodes):
  """(inputs [B, L], cache [B, ...], what the B*N rows read of their
  inputs): the model's decode start (its encoder, or its prefill)."""
  inputs, cache, context = model.decode_start(params, encoder_tokens,
                                              max_decode_len)
  rows = encoder_tokens.shape[0] * num_decodes
  return inputs, cache, model.row_context(
      params, context, jax.numpy.arange(rows), num_decodes)


def for_row_model(model, params, encoder_tokens, method, *, eos_id, key,
                  num_decodes: int, max_decode_len: int, temperature=1.0,
                  topk=0, topp=0.0, codes=None,
                  code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
                  code_resolution: float = CODE_RESOLUTION, row_ids=None,
                  max_decode_steps=None, noise: Noise = Noise.LOOP_STEP
                  ) -> Tuple[DecodeRequest, RowLayout]:
  """The request to decode `encoder_tokens` [B, S] with a `RowModel`, and
  the layout of its rows.

  The model's start runs here (one compiled program per shape); the
  request's step is the model's static `row_step` over its parameters and
  row context, so every scheduler can run it: `run_fused(request)`,
  `compaction.run_compacted(request, layout)`. The other arguments are
  `request.build`'s.
  """
  method = Method.of(method)
  inputs, cache, rows = _row_model_start(
      params, encoder_tokens, model=model, max_decode_len=max_decode_len,
      num_decodes=num_decodes)
  request = build(
      method, inputs=inputs, cache=cache,
      tokens_to_logits=model.row_step(num_decodes),
      context={"params": params, "rows": rows}, eos_id=eos_id, key=key,
      num_decodes=num_decodes, temperature=temperature, topk=topk, topp=topp,
      codes=codes, code_scheme=code_scheme, code_resolution=code_resolution,
      row_ids=row_ids, initial_index=model.start_index(encoder_tokens),
      max_decode_steps=max_decode_steps, noise=noise)
  batch = encoder_tokens.shape[0]
  layout = RowLayout(model.cache_growth(),
                     groups=model.row_groups(batch, num_decodes),
                     classes=same_input_runs(np.asarray(encoder_tokens)))
  return request, layout
