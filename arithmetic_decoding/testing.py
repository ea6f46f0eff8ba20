"""Exact references for tests: enumeration of the toy model, in numpy.

Independent of the library's JAX code: float64 numpy, T5X's transform
written out directly. With a handful of tokens and a few positions every
sequence the toy model can decode is listed with its exact probability.

  >>> from arithmetic_decoding.toy import ToyLanguageModel
  >>> dist = enumerate_sequences(ToyLanguageModel(), 0, 3)
  >>> round(float(sum(p for _, p in dist)), 12)
  1.0
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from arithmetic_decoding.toy import EOS_ID, PAD_ID, ToyLanguageModel


def next_probs(model: ToyLanguageModel, source: int, prefix: Sequence[int],
               temperature: float = 1.0, topk: int = 0,
               topp: float = 0.0) -> np.ndarray:
  """float64 [vocab] next-token probabilities under the T5X transform."""
  return transformed_probs(model.next_logits(source, prefix), temperature,
                           topk, topp)


def enumerate_sequences(model: ToyLanguageModel, source: int, length: int, *,
                        prompt=(), temperature: float = 1.0, topk: int = 0,
                        topp: float = 0.0
                        ) -> List[Tuple[Tuple[int, ...], float]]:
  """Every sequence the model can decode, with its exact probability.

  Sequences are in the decoder's output layout: `prompt`, then the decoded
  tokens up to and including EOS (or until `length`), padded with 0 to
  `length`. They come in dictionary (= code) order.
  """
  out: List[Tuple[Tuple[int, ...], float]] = []

  def walk(prefix: Tuple[int, ...], prob: float):
    if len(prefix) >= length:
      out.append((prefix[:length], prob))
      return
    probs = next_probs(model, source, prefix, temperature, topk, topp)
    for token in range(model.vocab_size):
      if probs[token] <= 0.0:
        continue
      if token == EOS_ID:
        done = prefix + (token,)
        out.append((done + (PAD_ID,) * (length - len(done)),
                    prob * probs[token]))
      else:
        walk(prefix + (token,), prob * probs[token])

  walk(tuple(int(t) for t in prompt), 1.0)
  return out


def transformed_probs(logits: np.ndarray, temperature: float = 1.0, topk: int = 0,
                      topp: float = 0.0) -> np.ndarray:
  """T5X's temperature / top-k / top-p transform, in float64 numpy.

  Greedy (temperature <= 1e-4) puts all mass on the first argmax.
  """
  logits = np.asarray(logits, np.float64)
  if temperature <= 1e-4:
    probs = np.zeros_like(logits)
    probs[int(np.argmax(logits))] = 1.0
    return probs
  x = logits / temperature
  if topk:
    kth = np.sort(x)[::-1][topk - 1]
    x = np.where(x >= kth, x, -np.inf)
  probs = np.exp(x - np.max(x))
  probs /= probs.sum()
  if topp:
    ordered = np.sort(probs)[::-1]
    needed = int(np.searchsorted(np.cumsum(ordered), topp - 1e-12)) + 1
    cut = ordered[min(needed, len(ordered)) - 1]
    probs = np.where(probs >= cut, probs, 0.0)
    probs /= probs.sum()
  return probs

