"""Translating text with the embedded English->French model.

`Translator.load()` reads the packaged model (`assets/en_fr/`: config,
parameters, SentencePiece vocabulary) and decodes text with the library's
own decode functions: `sample` (arithmetic or ancestral sampling, N per
input), `beam` and `greedy`. Each compiled program is cached per
(method, N, batch, lengths), with parameters as arguments.

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

from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.codes import CodeScheme
from arithmetic_decoding.decoding import ancestral_sample, arithmetic_sample
from arithmetic_decoding.models import EncoderDecoderModel
from arithmetic_decoding.translation import checkpoint
from arithmetic_decoding.translation.tokenizer import (ASSETS, EOS_ID,
                                                       Tokenizer)

PyTree = Any
METHODS = ("arithmetic", "ancestral")


@dataclasses.dataclass(frozen=True)
class Sample:
  """One decoded translation: its text, tokens and log-probability."""

  text: str
  tokens: tuple
  log_prob: float


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
  """

  model: EncoderDecoderModel
  params: PyTree
  tokenizer: Tokenizer
  max_decode_len: int = 160

  @classmethod
  def load(cls, directory: pathlib.Path | str = ASSETS) -> "Translator":
    config, params = checkpoint.load_model(directory)
    return cls(EncoderDecoderModel(config), jax.device_put(params),
               Tokenizer.load(pathlib.Path(directory) / "spm.model"))

  def encode(self, texts: Sequence[str]) -> jax.Array:
    """Texts -> int32 [B, S], S a multiple of 32 (fewer compiled shapes)."""
    length = max(len(self.tokenizer.encode(t)) for t in texts)
    return jnp.asarray(self.tokenizer.encode_batch(texts,
                                                   _round_up(length, 32)))

  def _texts(self, tokens: np.ndarray, scores: np.ndarray
             ) -> List[List[Sample]]:
    """[B, N, L] tokens, [B, N] scores -> samples, best first per input."""
    out = []
    for row_tokens, row_scores in zip(tokens, scores):
      row = [Sample(self.tokenizer.decode(t), tuple(int(x) for x in t),
                    float(s)) for t, s in zip(row_tokens, row_scores)]
      out.append(row[::-1])  # the decode functions sort ascending
    return out

  @functools.cached_property
  def _compiled(self):
    return {}

  def _program(self, name: str, build):
    if name not in self._compiled:
      self._compiled[name] = jax.jit(build())
    return self._compiled[name]

  def sample(self, texts: Sequence[str], num_decodes: int,
             temperature: float, key: jax.Array, method: str = "arithmetic",
             codes: Optional[jax.Array] = None,
             code_scheme: CodeScheme = CodeScheme.SHIFTED_LATTICE
             ) -> List[List[Sample]]:
    """N samples per text (best first), by arithmetic or ancestral sampling.

    `codes` [B, N] (arithmetic only) decodes given codes; otherwise they are
    made from `key` with `code_scheme`.
    """
    if method not in METHODS:
      raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
    n, length = num_decodes, self.max_decode_len
    scheme = CodeScheme(code_scheme)

    def build():
      def run(params, tokens, key, temperature, codes):
        inputs, cache, step = self.model.decode_inputs(params, tokens,
                                                       length, n)
        if method == "ancestral":
          return ancestral_sample(inputs, cache, step, EOS_ID, key,
                                  num_decodes=n, temperature=temperature,
                                  topk=0)
        return arithmetic_sample(inputs, cache, step, EOS_ID, key,
                                 num_decodes=n, temperature=temperature,
                                 topk=0, codes=codes, code_scheme=scheme)
      return run

    name = f"{method}/{n}/{scheme.value}/{codes is None}"
    tokens, scores = self._program(name, build)(
        self.params, self.encode(texts), key, jnp.float32(temperature), codes)
    return self._texts(np.asarray(tokens), np.asarray(scores))

  def beam(self, texts: Sequence[str], beams: int = 4,
           alpha: float = 0.6) -> List[List[Sample]]:
    """Beam search: `beams` finished translations per text, best first."""
    length = self.max_decode_len

    def build():
      def run(params, tokens):
        inputs, cache, step = self.model.decode_inputs(params, tokens,
                                                       length, beams)
        return beam_search(inputs, cache, step, EOS_ID, num_decodes=beams,
                           alpha=alpha)
      return run

    tokens, scores = self._program(f"beam/{beams}/{alpha}", build)(
        self.params, self.encode(texts))
    return self._texts(np.asarray(tokens), np.asarray(scores))

  def greedy(self, texts: Sequence[str]) -> List[str]:
    """The argmax translation of each text."""
    samples = self.sample(texts, 1, 0.0, jax.random.PRNGKey(0))
    return [row[0].text for row in samples]
