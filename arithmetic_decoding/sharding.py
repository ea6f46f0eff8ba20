"""Sharded decoding (pjit: `jax.jit` over `NamedSharding`s) on a data x model mesh.

The partitioning (`partitioning.LOGICAL_AXIS_RULES`, the one table from
logical axis names to the mesh axes `data` and `model`, and the placement
helpers) lives in `partitioning`: the samples (rows = batch x num_decodes)
go over `data`; heads, the feed-forward width and the vocabulary over
`model`; everything else is replicated.

This is the mesh scheduler of the engine: the decode is one
`request.DecodeRequest`, built once (`request.build`), and each device runs
the request's own loop (`rows.decode_rows`) on its rows. Arithmetic,
ancestral and greedy decoding run under `shard_map` over `data`: each
device decodes its own rows with its own `while_loop`, so on a data-only
mesh the compiled loop has no collective at all, its stopping test
included (under plain `jit` a global `all(ended)` over a sharded array is
an all-reduce every step), and each device stops when its rows have ended.
The `model` axis, where there is one, stays automatic (GSPMD) inside; the
step's model then has collectives over `model` (and the chooser over a
vocabulary split over `model`), which every device of the program must
reach, so with a model axis the loops of all shards run the same number of
steps: until no row of any shard is decoding (one scalar all-reduce over
`data` per step, `loop.loop_fns`'s `stop_together`). A row's sample depends
only on its code and its global row index (`choosers.Noise`), never on the
device it lands on, so the samples do not change with the topology.

Any model works that gives its per-input decode start and a step function
over rows (`RowModel`; `models.EncoderDecoderModel` and the decoder-only
`models.DecoderOnlyModel` are two):

  decode_start(params, encoder_tokens, max_decode_len)
      -> inputs [B, L], cache [B, ...], context [B, ...]
  start_index(encoder_tokens) -> initial_index [B] or None
  row_context(params, context, row_ids [R], num_decodes) -> context_rows
  step_fn(params, context_rows) -> tokens_to_logits over R rows
  decode_inputs(params, encoder_tokens, max_decode_len, num_decodes)
      -> inputs, cache and tokens_to_logits over all B*N rows (beam search)

The decode start (the encoder) runs once per device on the whole batch,
replicated (in its own `shard_map`, so it has no collective and its outputs
are bitwise those of one device). Each device then derives, from the
context of the inputs, what its own rows read (row r belongs to input
r // N), never the whole N-fold expansion. For `EncoderDecoderModel` with
per-input cross-attention keys/values (`models.CrossKV`), a device holding
R rows projects the keys/values of the inputs of its gcd(N, R)-row groups:
once per input when its rows hold whole inputs (R a multiple of N), once per
group of R rows when the N samples of an input span several devices (each
of them then projects that input: no communication, N / R copies over the
devices instead of N).

Beam search cannot work that way: choosing the K best extensions of an
input needs all of its beams, so with the beams split over `data` every step
gathers them (the compiled loop's collectives are counted in the tests).

    mesh = jax.make_mesh((4, 1), ("data", "model"))
    decode = make_sharded_decode(model, mesh, DecodeSetup(
        method=Method.ARITHMETIC, num_decodes=16, max_decode_len=32))
    decodes, scores = decode(shard_params(params, model, mesh), tokens, key)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Protocol, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from arithmetic_decoding import validation
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.codes import CodeScheme, SchemeLike, as_code_scheme
from arithmetic_decoding.methods import Method
# The partitioning helpers, re-exported: sharded decoding's users place
# parameters with them.
from arithmetic_decoding.partitioning import (  # noqa: F401
    LOGICAL_AXIS_RULES, logical_rules, logical_to_sharding, param_shardings,
    rules_without_data, shard_params, to_global)
from arithmetic_decoding.protocol import ContextStep, map_batched
from arithmetic_decoding.request import build
from arithmetic_decoding.rows import Rows, decode_rows, sort_samples

PyTree = Any

__all__ = ["DecodeSetup", "LOGICAL_AXIS_RULES", "Method", "RowModel",
           "logical_rules", "logical_to_sharding", "make_sharded_decode",
           "param_shardings", "shard_params", "to_global"]


class RowModel(Protocol):
  """What `make_sharded_decode` needs of a model (duck-typed)."""

  def param_logical_axes(self) -> PyTree:
    """Logical PartitionSpecs of the parameters (`LOGICAL_AXIS_RULES`)."""

  def decode_start(self, params, encoder_tokens, max_decode_len: int):
    """-> inputs int32 [B, L], cache [B, ...], context pytree [B, ...]."""

  def start_index(self, encoder_tokens):
    """-> int32 [B], each row's `initial_index` (a decoder-only model's
    prefilled prompt), or None (decoding starts at slot 0)."""

  def row_context(self, params, context, row_ids, num_decodes: int) -> PyTree:
    """-> what `step_fn` reads for the rows `row_ids` int [R] (a device's
    consecutive rows, starting at a multiple of R), from `context` [B, ...]."""

  def step_fn(self, params, context_rows) -> Callable:
    """-> tokens_to_logits over the rows of `row_context`'s result."""

  def decode_inputs(self, params, encoder_tokens, max_decode_len: int,
                    num_decodes: int):
    """-> (inputs int32 [B, L], cache [B, ...], tokens_to_logits over the
    B*N rows): the T5X-protocol arguments of a decode function, for beam
    search, which sees all rows at once."""

@dataclasses.dataclass(frozen=True)
class DecodeSetup:
  """A sharded decode's static configuration (every field recompiles).

  Attributes:
    method: a `methods.Method` (or its name): greedy, ancestral,
      arithmetic, or beam search.
    num_decodes: samples (or beams) per input, N.
    max_decode_len: decoded positions, L.
    eos_id: end-of-sequence id.
    temperature: sampling temperature (>= 0; <= 1e-4 is greedy).
    topk: keep the k most likely tokens (0: all).
    topp: keep the smallest set of mass >= topp (0: off).
    alpha: beam search's brevity penalty exponent.
    code_scheme: arithmetic sampling's codes.
    code_resolution: how deep a code decides its sample (see
      `choosers.Arithmetic`). None (default): 1 / N, the
      lattice spacing. The N samples of an input are then as stratified and
      as distinct as with the full code, and a sample no longer depends on
      the last bits of the logits, which XLA computes differently on
      different meshes (a logit difference d changes a code's sample once
      its prefix has probability ~d): samples are the same on every mesh.
      2**-22 uses all of float32, as `arithmetic_sample` does by default.
  """

  method: Method = Method.ARITHMETIC
  num_decodes: int = 1
  max_decode_len: int = 32
  eos_id: int = 1
  temperature: float = 1.0
  topk: int = 0
  topp: float = 0.0
  alpha: float = 0.6
  code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE
  code_resolution: Optional[float] = None

  def __post_init__(self):
    object.__setattr__(self, "method", Method.of(self.method))
    validation.check_int("num_decodes", self.num_decodes, minimum=1)
    validation.check_int("max_decode_len", self.max_decode_len, minimum=1)
    validation.check_int("eos_id", self.eos_id, minimum=0)
    validation.check_temperature(self.temperature, 1)
    validation.check_topk_topp(validation.check_topk(self.topk),
                               validation.check_topp(self.topp))
    validation.check_alpha(self.alpha)
    object.__setattr__(self, "code_scheme", as_code_scheme(self.code_scheme))
    if self.code_resolution is not None:
      validation.check_code_resolution(self.code_resolution)


def _row_specs(rows: Rows) -> Rows:
  """PartitionSpecs of `Rows`: per-row arrays over `data`, the rest replicated."""
  data = P("data")
  per_row = lambda x: None if x is None else (data if jnp.ndim(x) >= 1 else P())
  cache = map_batched(lambda x: data, rows.cache, 0, rows.initial_index is not None)
  cache = jax.tree_util.tree_map(lambda s: s if isinstance(s, P) else P(), cache,
                                 is_leaf=lambda s: isinstance(s, P))
  return Rows(inputs=data, cache=cache, initial_index=per_row(rows.initial_index),
              temperature=per_row(rows.temperature),
              max_decode_len=per_row(rows.max_decode_len), codes=data,
              row_ids=data, rng=P(), targets=None)


def _sample(params, encoder_tokens, rng, *, model: RowModel, mesh: Mesh,
            setup: DecodeSetup):
  """Arithmetic, ancestral or greedy decoding: one request, its rows
  decoded per `data` shard."""
  n = setup.num_decodes

  def start(params, encoder_tokens):
    # The whole batch on every device (manual over `data`, inputs and
    # outputs replicated): no collective, and the same bits as one device.
    with nn.logical_axis_rules(rules_without_data()):
      return model.decode_start(params, encoder_tokens, setup.max_decode_len)

  inputs, cache, context = jax.shard_map(
      start, mesh=mesh, in_specs=(P(), P()), out_specs=P(),
      axis_names={"data"}, check_vma=False)(params, encoder_tokens)
  request = build(
      setup.method, inputs=inputs, cache=cache,
      tokens_to_logits=ContextStep(model.step_fn),
      context={"params": params, "rows": context}, eos_id=setup.eos_id,
      key=rng, num_decodes=n, temperature=setup.temperature, topk=setup.topk,
      topp=setup.topp, code_scheme=setup.code_scheme,
      code_resolution=(setup.method.default_code_resolution(n)
                       if setup.code_resolution is None else
                       setup.code_resolution),
      initial_index=model.start_index(encoder_tokens))
  rows = request.rows()
  # With a model axis every shard steps until the last row of all ends.
  stop_together = "data" if mesh.shape["model"] > 1 else None

  def local(params, rows, context):
    # One device's rows (manual over `data`; `model`, if any, automatic).
    with nn.logical_axis_rules(rules_without_data()):
      # [B, ...] -> what the R_local rows read of their inputs.
      shard = dataclasses.replace(request, context={
          "params": params,
          "rows": model.row_context(params, context, rows.row_ids, n)})
      return decode_rows(rows, request.topk, request.topp,
                         shard.model_fns(), request.options, stop_together)

  data = P("data")
  decodes, log_probs, codes = jax.shard_map(
      local, mesh=mesh, in_specs=(P(), _row_specs(rows), P()),
      out_specs=(data, data, data), axis_names={"data"},
      check_vma=False)(params, rows, context)
  decodes, log_probs, _ = sort_samples(decodes, log_probs, codes,
                                       request.batch, n)
  return decodes, log_probs


def _beam(params, encoder_tokens, rng, *, model, mesh: Mesh,
          setup: DecodeSetup):
  """Beam search under GSPMD with the B*K beam rows split over `data`."""
  del rng
  k = setup.num_decodes
  with logical_rules(mesh):
    inputs, cache, tokens_to_logits = model.decode_inputs(
        params, encoder_tokens, setup.max_decode_len, k)
    return beam_search(inputs, cache, tokens_to_logits, setup.eos_id,
                       num_decodes=k, alpha=setup.alpha,
                       initial_index=model.start_index(encoder_tokens))


def make_sharded_decode(model: RowModel, mesh: Mesh, setup: DecodeSetup
                        ) -> Callable[[PyTree, jax.Array, jax.Array],
                                      Tuple[jax.Array, jax.Array]]:
  """The jitted decode of `setup` on `mesh`.

  Returns:
    decode(params, encoder_tokens [B, S], rng) -> (decodes int32 [B, N, L],
    scores float32 [B, N]): samples sorted by increasing log-prob, or beams
    by increasing score. Parameters go in with `param_shardings` (place them
    with `shard_params`); tokens, key and results are replicated.

  Raises:
    ValueError (when called): B * N is not a multiple of the mesh's `data`
      size (every device must get the same number of rows).
  """
  if tuple(mesh.axis_names) != ("data", "model"):
    raise ValueError(f"mesh axes must be ('data', 'model'); got "
                     f"{tuple(mesh.axis_names)}.")
  body = _beam if setup.method is Method.BEAM else _sample
  fn = functools.partial(body, model=model, mesh=mesh, setup=setup)
  replicated = NamedSharding(mesh, P())
  jitted = jax.jit(fn, in_shardings=(param_shardings(model, mesh), replicated,
                                     replicated),
                   out_shardings=(replicated, replicated))

  def check(encoder_tokens):
    shape = getattr(encoder_tokens, "shape", None)
    dtype = getattr(encoder_tokens, "dtype", None)
    if (shape is None or len(shape) != 2 or dtype is None or
        not jnp.issubdtype(dtype, jnp.integer)):
      raise TypeError("encoder_tokens must be an integer array [batch, "
                      f"length]; got {type(encoder_tokens).__name__} "
                      f"{shape} {dtype}.")
    batch = encoder_tokens.shape[0]
    rows = batch * setup.num_decodes
    if rows % mesh.shape["data"]:
      raise ValueError(
          f"batch * num_decodes = {batch} * {setup.num_decodes} = {rows} must "
          f"be a multiple of the mesh's data size {mesh.shape['data']}.")

  def decode(params, encoder_tokens, rng):
    check(encoder_tokens)
    return jitted(params, encoder_tokens, rng)

  def lower(params, encoder_tokens, rng):
    check(encoder_tokens)
    return jitted.lower(params, encoder_tokens, rng)

  decode.lower = lower
  return decode
