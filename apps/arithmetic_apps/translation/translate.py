"""Translating text with the embedded English->French model.

`Translator.load()` reads the packaged model (`assets/en_fr/`: config,
parameters, SentencePiece vocabulary) and decodes text with the library's
own decode functions (`methods.Method`): `sample` (arithmetic or ancestral
sampling, N per input), `beam` and `greedy`, all through one
`jax.jit(static_argnames=...)` program per (method, N, batch, lengths),
with parameters as arguments.

    translator = Translator.load()
    samples = translator.sample(["In the beginning God created the heavens."],
                                num_decodes=4, temperature=0.5,
                                key=jax.random.PRNGKey(0))
    samples[0][0].text, samples[0][0].log_prob
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding.codes import CodeScheme
from arithmetic_decoding.compaction import Compaction, run_compacted
from arithmetic_decoding.engine import for_row_model
from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import EncoderDecoderModel
from arithmetic_apps.translation import checkpoint
from arithmetic_apps.translation.tokenizer import (ASSETS, EOS_ID,
                                                       Tokenizer)

PyTree = Any


# One compiled program per static configuration (the model object, method,
# N, length, code scheme, alpha) and input shape; parameters are arguments.
@functools.partial(jax.jit, static_argnames=(
    "model", "method", "num_decodes", "length", "code_scheme", "alpha",
    "grow_cache"))
def _decode(params, tokens, key, temperature, codes, *,
            model: EncoderDecoderModel, method: Method, num_decodes: int,
            length: int, code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE,
            alpha: float = 0.6, grow_cache: bool = True):
  """-> (tokens int32 [B, N, length], scores float32 [B, N]), ascending,
  and for the sampling methods each sample's code [B, N] (zeros for
  ancestral sampling).

  Every row starts at slot 0 (`lockstep`), and the loop methods decode
  over a growing cache (`model.cache_growth()`): the same tokens and
  scores as per-row writes over the full cache, bit for bit."""
  inputs, cache, step = model.decode_inputs(params, tokens, length,
                                            num_decodes, lockstep=True)
  growth = (model.cache_growth() if grow_cache and method is not Method.BEAM
            else None)
  return method.decode(inputs, cache, step, EOS_ID, key,
                       num_decodes=num_decodes, temperature=temperature,
                       topk=0, codes=codes, code_scheme=code_scheme,
                       alpha=alpha, cache_growth=growth,
                       return_codes=method in Method.sampling())


@dataclasses.dataclass(frozen=True)
class Sample:
  """One decoded translation: its text, tokens and log-probability, and
  the code it was decoded from (arithmetic sampling; None otherwise)."""

  text: str
  tokens: tuple
  log_prob: float
  code: Optional[float] = None


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


@dataclasses.dataclass(frozen=True, eq=False)
class Translator:
  """The model, its parameters and tokenizer; decoding on text.

  Attributes:
    model: the encoder-decoder.
    params: its parameters.
    tokenizer: the SentencePiece vocabulary.
    max_decode_len: decoded positions (French verses of the corpus take at
      most 145 tokens; 99 % at most 81).
    compaction: `sample` and `greedy` drop ended rows between segments of
      the loop (`compaction.run_compacted`: the same samples, bit for
      bit); None decodes every row to the last step in one program.
  """

  model: EncoderDecoderModel
  params: PyTree
  tokenizer: Tokenizer
  max_decode_len: int = 160
  compaction: Optional[Compaction] = Compaction()

  @classmethod
  def load(cls, directory: pathlib.Path | str = ASSETS) -> "Translator":
    config, params = checkpoint.load_model(directory)
    # The time-minor decode cache: the same samples, faster on CPU
    # (docs/benchmarks.md).
    return cls(EncoderDecoderModel(config, time_minor=True),
               jax.device_put(params),
               Tokenizer.load(pathlib.Path(directory) / "spm.model"))

  def encode(self, texts: Sequence[str]) -> jax.Array:
    """Texts -> int32 [B, S], S a multiple of 32 (fewer compiled shapes)."""
    length = max(len(self.tokenizer.encode(t)) for t in texts)
    return jnp.asarray(self.tokenizer.encode_batch(texts,
                                                   _round_up(length, 32)))

  def _texts(self, tokens: np.ndarray, scores: np.ndarray,
             codes: Optional[np.ndarray] = None) -> List[List[Sample]]:
    """[B, N, L] tokens, [B, N] scores (and codes) -> samples, best first
    per input."""
    out = []
    for b, (row_tokens, row_scores) in enumerate(zip(tokens, scores)):
      row = [Sample(self.tokenizer.decode(t), tuple(int(x) for x in t),
                    float(s), None if codes is None else float(codes[b, j]))
             for j, (t, s) in enumerate(zip(row_tokens, row_scores))]
      out.append(row[::-1])  # the decode functions sort ascending
    return out

  def sample(self, texts: Sequence[str], num_decodes: int,
             temperature: float, key: jax.Array,
             method: Method | str = Method.ARITHMETIC,
             codes: Optional[jax.Array] = None,
             code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE
             ) -> List[List[Sample]]:
    """N samples per text (best first), by arithmetic or ancestral sampling.

    `codes` [B, N] (arithmetic only) decodes given codes; otherwise they are
    made from `key` with `code_scheme`. Arithmetic samples carry their code
    (`Sample.code`).
    """
    method = Method.of(method)
    if method not in Method.sampling():
      raise ValueError(f"method must be one of "
                       f"{[m.value for m in Method.sampling()]}; got "
                       f"{method.value!r}.")
    tokens, scores, codes = self._sample(
        self.encode(texts), key, temperature, codes, method, num_decodes,
        CodeScheme(code_scheme))
    return self._texts(np.asarray(tokens), np.asarray(scores),
                       np.asarray(codes) if method is Method.ARITHMETIC
                       else None)

  def _sample(self, tokens, key, temperature, codes, method: Method,
              num_decodes: int, code_scheme: CodeScheme):
    """Sampling-method decode of encoded texts [B, S] -> (tokens [B, N, L],
    scores [B, N], codes [B, N]), each input's samples ascending."""
    if self.compaction is None:
      return _decode(self.params, tokens, key, jnp.float32(temperature),
                     codes, model=self.model, method=method,
                     num_decodes=num_decodes, length=self.max_decode_len,
                     code_scheme=code_scheme)
    request, layout = for_row_model(
        self.model, self.params, tokens, method, eos_id=EOS_ID, key=key,
        num_decodes=num_decodes, max_decode_len=self.max_decode_len,
        temperature=temperature, codes=codes, code_scheme=code_scheme)
    return run_compacted(request, layout, self.compaction)

  def beam(self, texts: Sequence[str], beams: int = 4,
           alpha: float = 0.6) -> List[List[Sample]]:
    """Beam search: `beams` finished translations per text, best first."""
    tokens, scores = _decode(
        self.params, self.encode(texts), None, None, None, model=self.model,
        method=Method.BEAM, num_decodes=beams, length=self.max_decode_len,
        alpha=alpha)
    return self._texts(np.asarray(tokens), np.asarray(scores))

  def greedy(self, texts: Sequence[str]) -> List[str]:
    """The argmax translation of each text."""
    tokens, scores, _ = self._sample(
        self.encode(texts), jax.random.PRNGKey(0), 0.0, None, Method.GREEDY,
        1, CodeScheme.SHIFTED_LATTICE)
    return [row[0].text for row in self._texts(np.asarray(tokens),
                                               np.asarray(scores))]
