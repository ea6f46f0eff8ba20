"""One decode request: every entry point builds one, every scheduler runs one.

A `DecodeRequest` is everything a decode needs, validated once: the method
(its token chooser and what it does to the distribution, from
`methods.Method`), the per-row distribution (temperature, top-k, top-p),
the code settings (scheme, resolution, given codes, row ids), the stop ids,
the step limits, the key, and the model side (its step function and
callbacks). Entry points build it with `build` (the T5X drop-ins through
`from_t5x`, which keeps T5X's long signature at the boundary); schedulers
(`engine`: the fused loop; `compaction`: host-driven segments that drop
ended rows and share prefixes; `sharding`: the rows split over a mesh) only
run it. Nothing downstream re-derives a chooser, greedy or step options.

A request is a pytree: its arrays are leaves (traced under jit) and its
static configuration (`loop.DecodeOptions`, the model functions) is
metadata, so `jax.jit` of a function taking a request recompiles exactly
when the static part changes.

  >>> import jax.numpy as jnp
  >>> from arithmetic_decoding.methods import Method
  >>> from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel
  >>> toy = ToyLanguageModel()
  >>> r = build(Method.GREEDY, inputs=jnp.zeros((2, 4), jnp.int32),
  ...           cache=toy.init_cache(jnp.array([0, 1])),
  ...           tokens_to_logits=toy.tokens_to_logits, eos_id=EOS_ID,
  ...           key=jax.random.PRNGKey(0), num_decodes=3, temperature=0.8)
  >>> r.batch, r.num_decodes, float(r.temperature), type(r.options.chooser).__name__
  (2, 3, 0.0, 'Greedy')

`jit_or_trace` runs a core taking records: through its own `jax.jit` when
called with concrete arrays, or inline when already inside a trace (T5X's
pjit'ed `predict_batch`, a user's `jax.jit`), where the outer compile
covers it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional, Tuple, Union

import jax
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.choosers import Arithmetic, Chooser, Noise
from arithmetic_decoding.codes import CodeScheme, SchemeLike, as_code_scheme
from arithmetic_decoding.loop import DecodeOptions, ModelFns
from arithmetic_decoding.methods import Method
from arithmetic_decoding.rows import make_rows

PyTree = Any


@dataclasses.dataclass(frozen=True)
class DecodeRequest:
  """One validated decode: arrays (pytree leaves) and static metadata.

  Attributes:
    inputs: int32 [B, L]; prompts (BOS 0 first).
    cache: the model's cache for B rows.
    rng: the decode's PRNG key; it splits into (codes key, loop key).
    temperature: float32 [] or [B].
    topk: int32 [] when traced, else None (the static value is in `options`).
    topp: float32 [] when traced, else None.
    initial_index: int32 [B] or None.
    max_decode_steps: int32 [] or [B] (clipped to the hard limit) or None.
    codes: float32 [B, N] codes to decode, or None (made from `rng`).
    targets: int32 [B, N, L] sequences to encode, or None.
    row_ids: int32 [B, N] ids selecting each row's noise, or None (the
      global row index b*N + j).
    context: arrays the step function reads besides the loop state (the
      parameters, per-input context), or None. With a context the step
      function is static, `tokens_to_logits(context, decoding_state)`, so
      a scheduler can compile it once and call it from several programs
      (`model_fns` binds the two inside a trace).
    fns: (static) the model's step function and callbacks.
    options: (static) everything that changes the compiled program: the
      chooser, N, stop ids, static cuts, the noise policy.
  """

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
  context: PyTree
  fns: ModelFns
  options: DecodeOptions

  @property
  def batch(self) -> int:
    """B, the number of inputs."""
    return self.inputs.shape[0]

  @property
  def num_decodes(self) -> int:
    """N, decodes per input."""
    return self.options.num_decodes

  def rows(self, with_cache: bool = True):
    """The request's B*N rows (`rows.make_rows`); without the N-fold
    expanded cache (None) when not `with_cache` (a scheduler that lays the
    cache out itself)."""
    return make_rows(self.options, self.inputs,
                     self.cache if with_cache else None, self.rng,
                     self.temperature, initial_index=self.initial_index,
                     max_decode_steps=self.max_decode_steps, codes=self.codes,
                     targets=self.targets, row_ids=self.row_ids)

  def model_fns(self) -> ModelFns:
    """`fns` with the context bound: tokens_to_logits(decoding_state)."""
    if self.context is None:
      return self.fns
    return dataclasses.replace(self.fns, tokens_to_logits=functools.partial(
        self.fns.tokens_to_logits, self.context))


jax.tree_util.register_dataclass(
    DecodeRequest,
    data_fields=["inputs", "cache", "rng", "temperature", "topk", "topp",
                 "initial_index", "max_decode_steps", "codes", "targets",
                 "row_ids", "context"],
    meta_fields=["fns", "options"])


def build(method: Union[Method, Chooser], *, inputs, cache, tokens_to_logits,
          eos_id, key, num_decodes: int = 1, temperature=1.0, topk=0,
          topp=0.0, codes=None,
          code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
          code_resolution: float = CODE_RESOLUTION, row_ids=None,
          initial_index=None, max_decode_steps=None,
          max_decode_steps_hard_limit=None, cache_offset: int = 0,
          rescale_log_probs: bool = True, state_callback_fn=None,
          logit_callback_fn=None, cache_growth=None, targets=None,
          noise: Noise = Noise.LOOP_STEP, context=None) -> DecodeRequest:
  """Checks every argument (ValueError / TypeError naming it) ->
  `DecodeRequest`.

  Args:
    method: a `Method` (not BEAM: beam search keeps beams, not rows; see
      `engine.decode`), or a `Chooser` directly (`arithmetic_encode`'s
      `TeacherForced`). A `Method` gives the chooser (`Method.chooser`,
      with `code_resolution` and `code_scheme`) and the distribution
      (`Method.distribution`: greedy decodes at temperature 0).
    inputs: int [B, L]; cache: the model's cache for B rows;
      tokens_to_logits: T5X's step function over the B*N rows (called
      `tokens_to_logits(context, decoding_state)` when `context` is given);
      eos_id: an id or a sequence of ids, any of which ends a row.
    key: the decode's PRNG key (a `jax.random.PRNGKey`).
    num_decodes: N >= 1 (from `targets` when encoding).
    temperature: float >= 0, or float [B]; topk: int >= 0; topp: float in
      [0, 1] (at most one of them non-zero; each may be traced).
    codes: float [B, N] in [0, 1) to decode (arithmetic sampling only), or
      None (the chooser makes them from `key`).
    row_ids: int [B, N] naming each row's noise, or None (b*N + j).
    initial_index, max_decode_steps, max_decode_steps_hard_limit,
      cache_offset, rescale_log_probs, state_callback_fn,
      logit_callback_fn, cache_growth: as for `arithmetic_sample`.
    targets: int [B, N, L] sequences to force (encoding); sets N.
    noise: where each row's random numbers come from (`choosers.Noise`).
    context: arrays passed to a static `tokens_to_logits` (see
      `DecodeRequest.context`), or None.
  """
  if isinstance(method, Method):
    chooser = method.chooser(validation.check_code_resolution(code_resolution)
                             if method is Method.ARITHMETIC else
                             CODE_RESOLUTION, code_scheme)
    temperature, topk, topp = method.distribution(temperature, topk, topp)
  elif isinstance(method, Chooser):
    chooser = method
  else:
    raise TypeError(f"method must be a Method or a Chooser; got "
                    f"{type(method).__name__}.")
  if codes is not None and not isinstance(chooser, Arithmetic):
    raise ValueError("codes apply to arithmetic sampling only; got method "
                     f"{getattr(method, 'value', type(chooser).__name__)!r}.")
  if not isinstance(noise, Noise):
    raise TypeError(f"noise must be a choosers.Noise; got {noise!r}.")
  inputs = validation.check_inputs(inputs)
  batch, length = inputs.shape
  validation.check_callable("tokens_to_logits", tokens_to_logits)
  validation.check_callable("state_callback_fn", state_callback_fn,
                            optional=True)
  validation.check_callable("logit_callback_fn", logit_callback_fn,
                            optional=True)
  num_decodes = validation.check_int("num_decodes", num_decodes, minimum=1)
  if targets is not None:
    targets = validation.check_sequences(targets, batch, length)
    num_decodes = targets.shape[1]
  temperature = validation.check_temperature(temperature, batch)
  topk = validation.check_topk(topk)
  topp = validation.check_topp(topp)
  validation.check_topk_topp(topk, topp)
  initial_index = validation.check_initial_index(initial_index, batch,
                                                 length)
  options = DecodeOptions(
      eos_id=validation.check_eos_id(eos_id),
      num_decodes=num_decodes,
      chooser=chooser,
      cache_offset=validation.check_int("cache_offset", cache_offset,
                                        minimum=0),
      rescale_log_probs=bool(rescale_log_probs),
      topk=topk if isinstance(topk, int) else None,
      topp=topp if isinstance(topp, float) else None,
      per_row_temperature=temperature.ndim == 1,
      expand_cache_index=initial_index is not None,
      noise=noise)
  return DecodeRequest(
      inputs=inputs, cache=cache, rng=validation.check_rng(key),
      temperature=temperature,
      topk=None if options.topk is not None else topk,
      topp=None if options.topp is not None else topp,
      initial_index=initial_index,
      max_decode_steps=validation.check_max_decode_steps(
          max_decode_steps, max_decode_steps_hard_limit, batch, length),
      codes=validation.check_codes(codes, batch, num_decodes),
      targets=targets,
      row_ids=validation.check_row_ids(row_ids, batch, num_decodes),
      context=context,
      fns=ModelFns(tokens_to_logits, state_callback_fn, logit_callback_fn,
                   validation.check_cache_growth(cache_growth,
                                                 initial_index)),
      options=options)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """What to sample for each prompt: the one record that `llm.generate`,
  `rollouts.group_rollouts` and the sampling server share (as vLLM's
  `SamplingParams` is shared by its offline API and its server).
  Validated on construction (ValueError / TypeError naming the field).

  >>> SamplingParams(n=8, temperature=0.7).method
  <Method.ARITHMETIC: 'arithmetic'>
  >>> SamplingParams(n=0)
  Traceback (most recent call last):
  ...
  ValueError: n must be an int >= 1; got 0.

  Attributes:
    n: samples per prompt (beams for beam search).
    method: a `Method` or its name.
    temperature: >= 0 (greedy and beam search ignore it).
    topk: keep the k most likely tokens (0: all).
    topp: keep the smallest set of mass >= topp (0: off); at most one of
      topk / topp is non-zero.
    max_new_tokens: >= 1 tokens per completion at most.
    seed, step: ints in [0, 2**32): the codes and keys of every sample
      derive from (seed, step, prompt id) (`seeds`); `step` is an RL
      training step (a fresh group per step), 0 otherwise.
    code_scheme: the codes of a prompt's N samples (arithmetic sampling):
      "shifted_lattice", "van_der_corput" or "iid".
    code_resolution: how deep a code decides its sample, in [2**-22, 1]
      (`choosers.Arithmetic`); None: 2**-22, all of float32.
    stop_ids: token ids that end a completion besides the model's own
      stop tokens (e.g. a newline for one-line answers).
    alpha: beam search's brevity penalty exponent.
  """

  n: int = 1
  method: Method = Method.ARITHMETIC
  temperature: float = 1.0
  topk: int = 0
  topp: float = 0.0
  max_new_tokens: int = 64
  seed: int = 0
  step: int = 0
  code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE
  code_resolution: Optional[float] = None
  stop_ids: Tuple[int, ...] = ()
  alpha: float = 0.6

  def __post_init__(self):
    set_ = functools.partial(object.__setattr__, self)
    set_("method", Method.of(self.method))
    validation.check_int("n", self.n, minimum=1)
    validation.check_int("max_new_tokens", self.max_new_tokens, minimum=1)
    for name in ("seed", "step"):
      set_(name, validation.check_seed(getattr(self, name)))
      if getattr(self, name) is None:
        raise TypeError(f"{name} must be an int in [0, 2**32); got None.")
    set_("temperature", float(validation.check_temperature(
        self.temperature, 1)))
    set_("topk", validation.check_topk(self.topk))
    set_("topp", validation.check_topp(self.topp))
    validation.check_topk_topp(self.topk, self.topp)
    set_("code_scheme", as_code_scheme(self.code_scheme))
    if self.code_resolution is not None:
      set_("code_resolution",
           validation.check_code_resolution(self.code_resolution))
    if isinstance(self.stop_ids, (str, bytes)) or not all(
        isinstance(t, (int, np.integer)) and not isinstance(t, bool)
        for t in np.ravel(np.asarray(self.stop_ids, dtype=object))):
      raise TypeError(f"stop_ids must be a sequence of ints; got "
                      f"{self.stop_ids!r}.")
    set_("stop_ids", tuple(validation.check_int("stop_ids", int(t), 1)
                           for t in self.stop_ids))
    set_("alpha", validation.check_alpha(self.alpha))

  @property
  def resolution(self) -> float:
    """The code resolution used: `code_resolution`, or 2**-22."""
    return (CODE_RESOLUTION if self.code_resolution is None else
            self.code_resolution)


@dataclasses.dataclass(frozen=True)
class T5XArgs:
  """The arguments of T5X's `temperature_sample`, as the caller gave them.

  Field names, order and defaults are T5X's; see `decoding.arithmetic_sample`
  for their meaning. Nothing here is checked yet (`from_t5x` does that).
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


def t5x_key(decode_rng, seed=None):
  """The key of a T5X drop-in: `decode_rng`, None meaning PRNGKey(0),
  T5X's default (for drop-in parity only: pass your own key). A `seed` is
  folded in: `t5x infer` passes the same keys on every run, so a gin-bound
  seed is how a user draws a fresh sample set.

  >>> key = jax.random.PRNGKey(3)
  >>> bool((t5x_key(key) == key).all())
  True
  >>> bool((t5x_key(key, seed=7) == jax.random.fold_in(key, 7)).all())
  True
  """
  decode_rng = validation.check_rng(decode_rng)
  seed = validation.check_seed(seed)
  key = jax.random.PRNGKey(0) if decode_rng is None else decode_rng
  return key if seed is None else jax.random.fold_in(key, seed)


def from_t5x(args: T5XArgs, method: Union[Method, Chooser], *, seed=None,
             **keywords) -> DecodeRequest:
  """The request of a T5X drop-in: T5X's arguments as given, the key from
  `decode_rng` and `seed` (`t5x_key`), and the keyword-only additions
  (`codes`, `code_scheme`, `code_resolution`, `row_ids`, `cache_growth`,
  `targets`) passed on to `build`."""
  return build(
      method, inputs=args.inputs, cache=args.cache,
      tokens_to_logits=args.tokens_to_logits, eos_id=args.eos_id,
      key=t5x_key(args.decode_rng, seed), num_decodes=args.num_decodes,
      temperature=args.temperature, topk=args.topk, topp=args.topp,
      cache_offset=args.cache_offset, initial_index=args.initial_index,
      max_decode_steps=args.max_decode_steps,
      max_decode_steps_hard_limit=args.max_decode_steps_hard_limit,
      rescale_log_probs=args.rescale_log_probs,
      state_callback_fn=args.state_callback_fn,
      logit_callback_fn=args.logit_callback_fn, **keywords)


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
