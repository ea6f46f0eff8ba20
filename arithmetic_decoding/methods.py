"""The decode methods, named once: greedy, ancestral, arithmetic, beam.

Every entry point, application and script takes its method from `Method`;
a new method is added here and nowhere else. Each member knows its token
chooser, what it does to the step distribution and its defaults:

  >>> Method.of("arithmetic") is Method.ARITHMETIC
  True
  >>> [m.value for m in Method.sampling()]
  ['arithmetic', 'ancestral']
  >>> Method.ARITHMETIC.default_code_resolution(16)
  0.0625
  >>> Method.GREEDY.distribution(0.7, 40, 0.0)   # greedy: temperature 0
  (0.0, 0, 0.0)
  >>> Method.of("nucleus")
  Traceback (most recent call last):
  ...
  ValueError: method must be one of ['greedy', 'ancestral', 'arithmetic', 'beam']; got 'nucleus'.

`decode` runs a method on T5X-protocol arguments (one `request.
DecodeRequest`, run by the fused scheduler of `engine`) and returns
(decodes [B, N, L], scores [B, N]) for all four, sorted by increasing score
as T5X returns them: log-probabilities for the samplers, beam search's
length-normalised scores for beams.
"""

from __future__ import annotations

import enum
from typing import Optional, Tuple

import jax

from arithmetic_decoding import validation
from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.choosers import Ancestral, Arithmetic, Chooser, Greedy
from arithmetic_decoding.codes import CodeScheme, SchemeLike


def lattice_resolution(num_decodes: int) -> float:
  """1/N, but no finer than float32's `CODE_RESOLUTION` (2**-22).

  At this depth a code keeps the lattice's stratification (below a width of
  1/N no two of an input's N lattice codes share an interval) and its
  sample no longer depends on the last bits of the logits.

  >>> lattice_resolution(4), lattice_resolution(2**30) == 2.0**-22
  (0.25, True)
  """
  return max(CODE_RESOLUTION, 1.0 / num_decodes)


class Method(enum.Enum):
  """How the N decodes of an input are made.

  GREEDY      the argmax at every step (N identical rows)
  ANCESTRAL   N independent samples, each row from its own key
  ARITHMETIC  N samples decoded from N codes (a shifted lattice by default)
  BEAM        the N best sequences of beam search
  """

  GREEDY = "greedy"
  ANCESTRAL = "ancestral"
  ARITHMETIC = "arithmetic"
  BEAM = "beam"

  @classmethod
  def of(cls, value) -> "Method":
    """A `Method` or its name -> the `Method` (ValueError naming the choices)."""
    return validation.check_member("method", cls, value)

  @classmethod
  def sampling(cls) -> Tuple["Method", ...]:
    """The methods that draw random samples: arithmetic sampling, then its
    baseline."""
    return (cls.ARITHMETIC, cls.ANCESTRAL)

  def default_code_resolution(self, num_decodes: int) -> float:
    """The code resolution used where none is given and samples must not
    depend on the last bits of the logits (sharded decoding): 1/N."""
    return lattice_resolution(num_decodes)

  def chooser(self, code_resolution: float = CODE_RESOLUTION,
              code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE
              ) -> Chooser:
    """The token chooser of a loop method (not BEAM, which has no chooser)."""
    if self is Method.GREEDY:
      return Greedy()
    if self is Method.ANCESTRAL:
      return Ancestral()
    if self is Method.ARITHMETIC:
      return Arithmetic(code_resolution, code_scheme)
    raise ValueError("method 'beam' has no token chooser: beam search keeps "
                     "the best extensions of all beams (`engine.decode`, "
                     "`beam_search`).")

  def distribution(self, temperature, topk, topp):
    """(temperature, topk, topp) this method decodes with: greedy decodes
    at temperature 0 with no cuts (T5X's rule: temperature <= 1e-4 is the
    argmax); the others as given."""
    if self is Method.GREEDY:
      return 0.0, 0, 0.0
    return temperature, topk, topp

  def decode(self, inputs, cache, tokens_to_logits, eos_id: int,
             rng: Optional[jax.Array], *, num_decodes: int,
             temperature=1.0, topk=0, topp=0.0, alpha: float = 0.6,
             codes=None, code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
             code_resolution: float = CODE_RESOLUTION,
             max_decode_steps=None, initial_index=None, cache_offset: int = 0,
             return_codes: bool = False,
             row_ids=None, cache_growth=None) -> Tuple[jax.Array, ...]:
    """(decodes int32 [B, N, L], scores float32 [B, N]) by this method,
    and the codes [B, N] with `return_codes` (zeros but for arithmetic
    sampling's; beam search has none).

    The arguments mean what they mean for `arithmetic_sample`; each method
    uses the ones that apply to it (`alpha` beam search only; `codes`,
    `code_scheme`, `code_resolution` arithmetic only; `distribution` says
    what greedy does with `temperature`, `topk` and `topp`). Beam search
    takes one `eos_id` and no `max_decode_steps` or `cache_growth`.
    """
    from arithmetic_decoding import engine  # engine builds on Method
    return engine.decode(
        self, inputs, cache, tokens_to_logits, eos_id, rng,
        num_decodes=num_decodes, temperature=temperature, topk=topk,
        topp=topp, alpha=alpha, codes=codes, code_scheme=code_scheme,
        code_resolution=code_resolution, max_decode_steps=max_decode_steps,
        initial_index=initial_index, cache_offset=cache_offset,
        return_codes=return_codes, row_ids=row_ids, cache_growth=cache_growth)
