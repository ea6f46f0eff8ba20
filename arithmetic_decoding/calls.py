"""From T5X's long signature to one validated record, and how it is run.

The public decode functions keep T5X's `temperature_sample` signature for
drop-in use. Their arguments are gathered once into `T5XArgs` (as given),
validated once by `validate` into a `DecodeCall`, and from there on every
internal function takes that one record. A `DecodeCall` is a pytree: its
arrays are leaves (traced under jit) and its static configuration
(`DecodeOptions`, the model functions) is metadata, so `jax.jit` of a core
taking a `DecodeCall` recompiles exactly when the static part changes.

`jit_or_trace` runs such a core: through its own `jax.jit` when called with
concrete arrays, or inline when already inside a trace (T5X's pjit'ed
`predict_batch`, a user's `jax.jit`), where the outer compile covers it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax

from arithmetic_decoding import validation
from arithmetic_decoding.choosers import Chooser
from arithmetic_decoding.loop import DecodeOptions, ModelFns
from arithmetic_decoding.rows import make_rows

PyTree = Any


@dataclasses.dataclass(frozen=True)
class T5XArgs:
  """The arguments of T5X's `temperature_sample`, as the caller gave them.

  Field names, order and defaults are T5X's; see `decoding.arithmetic_sample`
  for their meaning. Nothing here is checked yet (`validate` does that).
  """

  inputs: Any
  cache: Any
  tokens_to_logits: Any
  eos_id: Any
  decode_rng: Any = None
  num_decodes: Any = 1
  temperature: Any = 1.0
  topk: Any = 1
  topp: Any = 0.0
  cache_offset: Any = 0
  initial_index: Any = None
  max_decode_steps: Any = None
  max_decode_steps_hard_limit: Any = None
  rescale_log_probs: Any = True
  state_callback_fn: Any = None
  logit_callback_fn: Any = None

  @classmethod
  def of(cls, names: Mapping[str, Any]) -> "T5XArgs":
    """Picks the fields by name from `names` (a public function's locals()).

    >>> T5XArgs.of(dict(inputs=1, cache={}, tokens_to_logits=len, eos_id=1,
    ...                 codes=None)).topk
    1
    """
    return cls(**{f.name: names[f.name] for f in dataclasses.fields(cls)
                  if f.name in names})


@dataclasses.dataclass(frozen=True)
class DecodeCall:
  """One validated decode: arrays (pytree leaves) and static metadata.

  Attributes:
    inputs: int32 [B, L]; prompts (BOS 0 first).
    cache: the model's cache for B rows.
    rng: the PRNG key (T5X's default PRNGKey(0) when none was given).
    temperature: float32 [] or [B].
    topk: int32 [] when traced, else None (the static value is in `options`).
    topp: float32 [] when traced, else None.
    initial_index: int32 [B] or None.
    max_decode_steps: int32 [] or [B] (clipped to the hard limit) or None.
    codes: float32 [B, N] codes to decode, or None (made from `rng`).
    targets: int32 [B, N, L] sequences to encode, or None.
    row_ids: int32 [B, N] ids selecting each row's noise, or None.
    fns: (static) the model's step function and callbacks.
    options: (static) everything that changes the compiled program.
  """

  def rows(self):
    """The call's B*N rows (`rows.make_rows`)."""
    return make_rows(self.options, self.inputs, self.cache, self.rng,
                     self.temperature, initial_index=self.initial_index,
                     max_decode_steps=self.max_decode_steps, codes=self.codes,
                     targets=self.targets, row_ids=self.row_ids)

  inputs: jax.Array
  cache: PyTree
  rng: jax.Array
  temperature: jax.Array
  topk: Optional[jax.Array]
  topp: Optional[jax.Array]
  initial_index: Optional[jax.Array]
  max_decode_steps: Optional[jax.Array]
  codes: Optional[jax.Array]
  targets: Optional[jax.Array]
  row_ids: Optional[jax.Array]
  fns: ModelFns
  options: DecodeOptions


jax.tree_util.register_dataclass(
    DecodeCall,
    data_fields=["inputs", "cache", "rng", "temperature", "topk", "topp",
                 "initial_index", "max_decode_steps", "codes", "targets",
                 "row_ids"],
    meta_fields=["fns", "options"])


def default_key(decode_rng, seed=None):
  """The validated key; None means PRNGKey(0), T5X's default (for drop-in
  parity only: pass your own key). A `seed` is folded in: `t5x infer` passes
  the same keys on every run, so a gin-bound seed is how a user draws a
  fresh sample set.

  >>> key = jax.random.PRNGKey(3)
  >>> bool((default_key(key) == key).all())
  True
  >>> bool((default_key(key, seed=7) == jax.random.fold_in(key, 7)).all())
  True
  """
  decode_rng = validation.check_rng(decode_rng)
  seed = validation.check_seed(seed)
  key = jax.random.PRNGKey(0) if decode_rng is None else decode_rng
  return key if seed is None else jax.random.fold_in(key, seed)


def validate(args: T5XArgs, chooser: Chooser, *, codes=None, targets=None,
             seed=None, row_ids=None, cache_growth=None) -> DecodeCall:
  """Checks every argument (ValueError / TypeError naming it) -> DecodeCall.

  `targets` (int [B, N, L], encoding) sets N from its shape; otherwise N is
  `args.num_decodes` and `codes`, if given, must be [B, N].
  """
  inputs = validation.check_inputs(args.inputs)
  batch, length = inputs.shape
  validation.check_callable("tokens_to_logits", args.tokens_to_logits)
  for name in ("state_callback_fn", "logit_callback_fn"):
    validation.check_callable(name, getattr(args, name), optional=True)
  num_decodes = validation.check_int("num_decodes", args.num_decodes, minimum=1)
  if targets is not None:
    targets = validation.check_sequences(targets, batch, length)
    num_decodes = targets.shape[1]
  temperature = validation.check_temperature(args.temperature, batch)
  topk = validation.check_topk(args.topk)
  topp = validation.check_topp(args.topp)
  validation.check_topk_topp(topk, topp)
  initial_index = validation.check_initial_index(args.initial_index, batch,
                                                 length)
  options = DecodeOptions(
      eos_id=validation.check_eos_id(args.eos_id),
      num_decodes=num_decodes,
      chooser=chooser,
      cache_offset=validation.check_int("cache_offset", args.cache_offset,
                                        minimum=0),
      rescale_log_probs=bool(args.rescale_log_probs),
      topk=topk if isinstance(topk, int) else None,
      topp=topp if isinstance(topp, float) else None,
      per_row_temperature=temperature.ndim == 1,
      expand_cache_index=initial_index is not None)
  return DecodeCall(
      inputs=inputs, cache=args.cache, rng=default_key(args.decode_rng, seed),
      temperature=temperature,
      topk=None if options.topk is not None else topk,
      topp=None if options.topp is not None else topp,
      initial_index=initial_index,
      max_decode_steps=validation.check_max_decode_steps(
          args.max_decode_steps, args.max_decode_steps_hard_limit, batch,
          length),
      codes=validation.check_codes(codes, batch, num_decodes),
      targets=targets,
      row_ids=validation.check_row_ids(row_ids, batch, num_decodes),
      fns=ModelFns(args.tokens_to_logits, args.state_callback_fn,
                   args.logit_callback_fn,
                   validation.check_cache_growth(cache_growth,
                                                 initial_index)),
      options=options)


def jit_or_trace(core: Callable, jitted: Callable, *records):
  """`jitted(*records)`, or `core(*records)` when inside a trace.

  Inside an outer `jax.jit` the outer compile covers everything. Outside
  one, the jitted core compiles once per static configuration; its cache is
  keyed by the records' metadata, which holds the model functions by
  identity: reuse the same function objects to reuse the program. Metadata
  that cannot be hashed (an unhashable callable) runs the core unjitted.
  """
  leaves = jax.tree_util.tree_leaves(records)
  if any(validation.is_traced(x) for x in leaves):
    return core(*records)
  try:
    hash(jax.tree_util.tree_structure(records))
  except TypeError:
    return core(*records)
  return jitted(*records)

