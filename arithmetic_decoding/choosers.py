"""How one decode step picks each row's token: small strategy objects.

The decode loop (`loop.py`) is the same for every method; what differs is
how a token is drawn from the step's logits. Each way is a frozen dataclass
(hashable, so it is part of the compiled program's static configuration)
with one method,

  choose(raw [R, V] float32, state, step, dist) -> Choice,

in the style of gemma's `SamplingMethod`. A chooser that needs per-row
state of its own keeps it in the loop state's one `chooser_state` field: it
makes it (`init_state`) and returns the next one in its `Choice`; the loop
never asks which chooser it holds.


  Arithmetic    decode the token from the row's residual code (the method)
  Ancestral     draw it with `jax.random.categorical` from a per-row key
  TeacherForced force a given token and move the row's code interval to it
                (`arithmetic_encode`: the inverse of `Arithmetic`)
  Greedy        the argmax of the raw logits

`choose` is the sampling branch. At temperature <= 1e-4 every method is
greedy (T5X's rule): `choose_token` then runs `Greedy` and lets the method
adapt its result (`from_greedy`: pass-through for the samplers; the forced
token and a width of 1 or 0 for `TeacherForced`).

Shapes: R rows (= B*N), V vocabulary, L sequence length.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding.ancestral import categorical_rows
from arithmetic_decoding.categorical import (CODE_RESOLUTION, arithmetic_step,
                                             refresh_residual, token_interval)
from arithmetic_decoding.codes import CodeScheme, as_code_scheme, make_codes
from arithmetic_decoding.protocol import SamplingLoopState
from arithmetic_decoding.transforms import MIN_TEMPERATURE, scale, truncate


@dataclasses.dataclass(frozen=True)
class Distribution:
  """The step's distribution: temperature, then top-k, then top-p.

  Attributes:
    temperature: float32 [] or [R].
    topk: a Python int (static; 0 = off) or an int32 [] array (traced).
    topp: a Python float (static; 0.0 = off) or a float32 [] array (traced).
  """

  temperature: jax.Array
  topk: Union[int, jax.Array]
  topp: Union[float, jax.Array]

  def transform(self, raw: jax.Array) -> jax.Array:
    """[R, V] float32 logits -> scaled, top-k/top-p-masked (-inf) logits."""
    temperature = jnp.broadcast_to(self.temperature, raw.shape[:1])  # [R]
    return truncate(scale(raw, temperature), self.topk, self.topp)


class Noise(enum.Enum):
  """Where a row's random numbers at a step come from (static).

  LOOP_STEP  fold_in(the step's key, row id): the loop splits its key once
             per step, as T5X's loop does, and every row folds in its id.
             A row's noise depends on the loop step, so rows must start
             together (one decode call); the T5X drop-ins use it.
  POSITION   fold_in(fold_in(the decode's key, row id), position): a row's
             noise is a function of its id and the position it writes,
             whatever step of whatever loop it is decoded in, so rows may
             join a running batch at any step (`engine`'s LLM requests).

  >>> key, ids = jax.random.PRNGKey(0), jnp.array([3, 3])
  >>> k = Noise.POSITION.row_keys(key, key, ids, jnp.array([5, 6]))
  >>> bool((k[0] == k[1]).all())
  False
  """

  LOOP_STEP = "loop_step"
  POSITION = "position"

  def row_keys(self, step_key: jax.Array, decode_key: jax.Array,
               row_ids: jax.Array, position: jax.Array) -> jax.Array:
    """[R] keys, one per row, for this step (`step_key`: the loop's key of
    the step; `decode_key`: the decode's key, the same at every step;
    row_ids, position: int32 [R])."""
    if self is Noise.LOOP_STEP:
      return row_keys(step_key, row_ids)
    # [R] keys -> [R] keys
    return jax.vmap(jax.random.fold_in)(row_keys(decode_key, row_ids),
                                        position)


@dataclasses.dataclass(frozen=True)
class Step:
  """Per-step inputs a chooser may need.

  Attributes:
    keys: [R] PRNG keys, one per row (`Noise.row_keys`): a row's draw
      depends on its own key only, never on the other rows.
    position: int32 [R]; the output position being written.
    targets: int32 [R, L] tokens to force (`TeacherForced` only), else None.
  """

  keys: jax.Array
  position: jax.Array
  targets: Optional[jax.Array] = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CodeState:
  """Arithmetic sampling's per-row state.

  Attributes:
    residual: float32 [R]; each row's residual code in [0, 1): what is left
      of its code after the tokens decoded so far (see `categorical`).
    log_width: float32 [R]; log-probability of the tokens decoded from the
      current code since it was last replaced (0 at the start). When it
      falls below log(code_resolution) the code is spent and replaced by a
      fresh per-row uniform (see `Arithmetic`).
  """

  residual: jax.Array
  log_width: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class IntervalState:
  """Encoding's per-row state.

  Attributes:
    low: float32 [R]; the lower end of each forced prefix's code interval
      (its width is exp(log_prob) of the loop state).
  """

  low: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Choice:
  """A chooser's result for one step.

  Attributes:
    token: int32 [R]; the chosen token (-1 where `valid` is False).
    log_prob: float32 [R]; its log-probability under the step's distribution.
    valid: bool [R]; False where the logits admit no sample (NaN/+inf, or no
      finite logit).
    state: the chooser's state after this step (`SamplingLoopState.
      chooser_state` of the rows that drew a token).
  """

  token: jax.Array
  log_prob: jax.Array
  valid: jax.Array
  state: Any

  @classmethod
  def keeping_state(cls, state: SamplingLoopState, token, log_prob,
                    valid) -> "Choice":
    """A choice that leaves the chooser's state as it is."""
    return cls(token, log_prob, valid, state.chooser_state)


def _check_shared(raw, rows, dist: Distribution) -> None:
  """With shared logits [P, V], the temperature is [] or [P]."""
  if rows is not None and jnp.shape(dist.temperature) not in (
      (), raw.shape[:1]):
    raise ValueError("choose_rows with shared logits [P, V] needs a "
                     "temperature of shape [] or [P]; got "
                     f"{jnp.shape(dist.temperature)} for P = {raw.shape[0]}.")


def row_keys(key: jax.Array, row_ids: jax.Array) -> jax.Array:
  """One PRNG key per row: fold_in(key, global row index).

  A row's randomness then depends on its global index only, never on how
  the rows are batched or sharded (as in levanter's engine).
  """
  # [] key, [R] -> [R] keys
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row_ids)


def uniform_rows(keys: jax.Array) -> jax.Array:
  """float32 [R] uniform in [0, 1), one per row key [R]."""
  return jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)


class Chooser:
  """Base of the strategies: `choose` (sampling), `choose_rows` (the same
  over logits that rows share), `from_greedy`, `initial_codes` (the codes a
  row starts from when the caller gives none), `init_state` (the chooser's
  own loop state; None by default) and `on_one_device` (the variant for
  rows that all sit on one device)."""

  def init_state(self, codes: jax.Array) -> Any:
    """The chooser's state before the first step, from the rows' codes [R]."""
    del codes
    return None

  def initial_codes(self, rng: jax.Array, batch: int,
                    num_decodes: int) -> jax.Array:
    """float32 [batch, num_decodes]; zeros for choosers that decode no code."""
    del rng
    return jnp.zeros((batch, num_decodes), jnp.float32)

  def choose(self, raw: jax.Array, state: SamplingLoopState, step: Step,
             dist: Distribution) -> Choice:
    raise NotImplementedError

  def choose_rows(self, raw: jax.Array, rows: Optional[jax.Array],
                  state: SamplingLoopState, step: Step,
                  dist: Distribution) -> Choice:
    """`choose` where row r reads the logits raw[rows[r]]: `raw` [P, V]
    holds logits that rows share (`compaction`'s prefix sharing); None:
    raw is [R, V], one per row. By default the rows' logits are gathered;
    a chooser may run its per-logit passes once per shared row instead."""
    if rows is not None:
      raw = jnp.take(raw, rows, axis=0)  # [P, V] -> [R, V]
    return self.choose(raw, state, step, dist)

  def from_greedy(self, greedy: Choice, state: SamplingLoopState,
                  step: Step) -> Choice:
    """This method's choice at temperature <= 1e-4, given Greedy's."""
    del state, step
    return greedy

  def on_one_device(self) -> "Chooser":
    """The same choices, bit for bit, computed for rows that all sit on one
    device (a scheduler that does not split a step's rows over devices
    asks for it); itself by default."""
    return self


@dataclasses.dataclass(frozen=True)
class Greedy(Chooser):
  """The argmax of the raw logits; it owns all of [0, 1), so codes pass."""

  def choose(self, raw, state, step, dist):
    return self.choose_rows(raw, None, state, step, dist)

  def choose_rows(self, raw, rows, state, step, dist):
    del step, dist
    token = jnp.argmax(raw, axis=-1).astype(jnp.int32)  # [P, V] -> [P]
    valid = jnp.isfinite(jnp.max(raw, axis=-1))
    if rows is not None:  # [P] -> [R]
      token, valid = jnp.take(token, rows), jnp.take(valid, rows)
    return Choice.keeping_state(state, token, jnp.zeros_like(state.log_prob),
                                valid)


@dataclasses.dataclass(frozen=True)
class Arithmetic(Chooser):
  """Decodes each row's token from its residual code (`categorical`).

  Attributes:
    code_resolution: how deep a code decides its sample. Once the tokens
      decoded from a code have probability below it, the code is spent and
      the row continues from a fresh uniform drawn from its own key (exact in
      distribution: the unused part of a uniform code is itself uniform and
      independent of the tokens so far). 2**-22 (default) is float32's
      limit. Larger values make samples robust to tiny differences in the
      logits (a difference d moves a code's sample once its prefix has
      probability ~d), e.g. across compilers and shardings; 1/N keeps the
      lattice's stratification, since below that width no two of an
      input's N lattice codes share an interval.
    code_scheme: how the codes are made when the caller gives none
      (`codes.make_codes`; a `CodeScheme` or its string value).
  """

  code_resolution: float = CODE_RESOLUTION
  code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE

  def __post_init__(self):
    object.__setattr__(self, "code_scheme", as_code_scheme(self.code_scheme))

  def initial_codes(self, rng, batch, num_decodes):
    """[batch, num_decodes] codes of `code_scheme`, made from `rng`."""
    return make_codes(rng, batch, num_decodes, self.code_scheme)

  def init_state(self, codes):
    """Each row starts from its whole code."""
    return CodeState(residual=codes, log_width=jnp.zeros_like(codes))

  def choose(self, raw, state, step, dist):
    return self.choose_rows(raw, None, state, step, dist)

  def choose_rows(self, raw, rows, state, step, dist) -> Choice:
    """`choose` where row r's logits are raw[rows[r]]: `raw` [P, V] holds
    logits shared by the rows (`arithmetic_step`'s `rows`; None: [R, V],
    one per row). The distribution's temperature is then a scalar or one
    per row of `raw`."""
    _check_shared(raw, rows, dist)
    code = state.chooser_state
    # [R or P, V] -> [R]
    decoded = arithmetic_step(dist.transform(raw), code.residual, rows)
    fresh = uniform_rows(step.keys)
    residual = refresh_residual(decoded.residual, decoded.log_prob, fresh)
    log_width = code.log_width + decoded.log_prob
    # A spent code is replaced by the row's fresh uniform.
    spent = log_width < jnp.log(jnp.float32(self.code_resolution))
    return Choice(decoded.token, decoded.log_prob, decoded.valid,
                  CodeState(residual=jnp.where(spent, fresh, residual),
                            log_width=jnp.where(spent, 0.0, log_width)))


@dataclasses.dataclass(frozen=True)
class Ancestral(Chooser):
  """Ordinary ancestral sampling: each row draws from its own key.

  Attributes:
    pruned: draw Gumbel noise only for the tokens that can win
      (`ancestral.categorical_rows`): the same tokens, bit for bit, at a
      fraction of the cost where the distribution is peaked. It pools the
      candidates of all rows of the step, so under an automatic (GSPMD)
      partitioning of the rows it would add collectives. A scheduler whose
      step's rows are on one device turns it on (`on_one_device`: the
      compacted scheduler does; so could each shard of a `shard_map`).
  """

  pruned: bool = False

  def on_one_device(self):
    """`pruned`: the same tokens, candidates pooled over the step's rows."""
    return dataclasses.replace(self, pruned=True)

  def choose(self, raw, state, step, dist):
    return self.choose_rows(raw, None, state, step, dist)

  def choose_rows(self, raw, rows, state, step, dist) -> Choice:
    """`choose` where row r's logits are raw[rows[r]] (`raw` [P, V] shared
    by the rows; None: [R, V], one per row): each row draws from its own
    key; the passes that do not need the key run once per row of `raw`
    (`pruned` only; a temperature per row of `raw`, or a scalar)."""
    if rows is not None and not self.pruned:
      raise ValueError("choose_rows with shared logits needs pruned=True.")
    _check_shared(raw, rows, dist)
    gather = ((lambda a: a) if rows is None else
              (lambda a: jnp.take(a, rows, axis=0)))  # [P, ...] -> [R, ...]
    x = dist.transform(raw)  # [P, V]
    # NaN anywhere, +inf, or nothing finite: no distribution to draw from.
    valid = jnp.isfinite(jnp.max(x, axis=-1)) & ~jnp.any(jnp.isnan(x), axis=-1)
    safe = jnp.where(valid[:, None], x, 0.0)
    keys = step.keys
    # [R] keys, [P, V] -> [R]
    if self.pruned:
      token = categorical_rows(keys, lax.optimization_barrier(safe),
                               rows=rows)
    else:
      token = jax.vmap(jax.random.categorical)(keys, safe).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(safe, axis=-1)  # [P, V]
    if rows is None:  # [R, V] at [R] -> [R]
      log_prob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    else:  # [P, V] at ([R], [R]) -> [R]
      log_prob = log_probs[rows, token]
    valid = gather(valid)
    return Choice.keeping_state(state, jnp.where(valid, token, -1),
                                jnp.where(valid, log_prob, jnp.nan), valid)


@dataclasses.dataclass(frozen=True)
class TeacherForced(Chooser):
  """Forces `step.targets` and narrows each row's code interval to them.

  The prefix's interval [low, low + W), W = exp(log-prob of the prefix),
  narrows to [low + W * token_low, ...) where token_low is the forced
  token's lower end in its own codebook (`categorical.token_interval`).
  """

  def init_state(self, codes):
    """Every prefix starts as all of [0, 1)."""
    return IntervalState(low=jnp.zeros_like(codes))

  def target(self, step: Step) -> jax.Array:
    """[R, L] at each row's position -> [R] (clamped for the spare slot)."""
    length = step.targets.shape[1]
    at = (jnp.arange(length, dtype=jnp.int32)[None, :] ==
          jnp.minimum(step.position, length - 1)[:, None])  # [R, L]
    return jnp.sum(jnp.where(at, step.targets, 0), axis=1)

  def choose(self, raw, state, step, dist):
    target = self.target(step)
    interval = token_interval(dist.transform(raw), target)
    low = state.chooser_state.low + jnp.exp(state.log_prob) * interval.low
    return Choice(target, interval.log_prob, interval.valid,
                  IntervalState(low=low))

  def from_greedy(self, greedy, state, step):
    # The argmax owns all of [0, 1) (width 1, low unchanged), others nothing.
    target = self.target(step)
    log_prob = jnp.where(target == greedy.token, 0.0, -jnp.inf)
    return dataclasses.replace(greedy, token=target,
                               log_prob=log_prob.astype(jnp.float32))


def choose_token(chooser: Chooser, raw: jax.Array, state: SamplingLoopState,
                 step: Step, dist: Distribution,
                 per_row_temperature: bool) -> Choice:
  """`chooser`'s choice, or its greedy form where temperature <= 1e-4.

  A scalar temperature runs one branch (`lax.cond`, as T5X does); a per-row
  temperature runs one branch when all rows agree, else both, selected per
  row.
  """

  def sample():
    return chooser.choose(raw, state, step, dist)

  def greedy():
    return chooser.from_greedy(Greedy().choose(raw, state, step, dist), state,
                               step)

  if not per_row_temperature:
    return lax.cond(dist.temperature > MIN_TEMPERATURE, sample, greedy)
  is_greedy = dist.temperature <= MIN_TEMPERATURE  # [R]

  def mixed():
    return jax.tree_util.tree_map(lambda g, s: jnp.where(is_greedy, g, s),
                                  greedy(), sample())

  # Both branches only when the rows disagree (the same choices per row).
  which = jnp.where(jnp.all(is_greedy), 1, jnp.where(jnp.any(is_greedy), 2,
                                                     0))
  return lax.switch(which, [sample, greedy, mixed])
