"""Quality and diversity of a set of samples (the paper's Section 5 metrics).

BLEU comes from `sacrebleu` (its default 13a tokenisation and, for single
sentences, its default exponential smoothing); nothing here re-implements
it. Diversity follows Kool et al. (2019), as the paper does: for a set of
samples, d_n = (distinct n-grams) / (total n-grams) over all samples
together, and d = d_1 + d_2 + d_3 + d_4 (so 0 < d <= 4; 4 means no n-gram
repeats anywhere in the set). N-grams are over sacrebleu's 13a tokens.

  >>> round(ngram_diversity(["a b c", "a b d"]), 4)   # 4/6 + 3/4 + 2/2 + 0/0
  2.4167
  >>> duplicate_rate(["x", "x", "y", "x"])
  0.5
  >>> round(sentence_bleu("le chat est assis", ["le chat est assis"]), 6)
  100.0
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, List, Sequence

import numpy as np


@functools.lru_cache(maxsize=1)
def _tokenizer():
  from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a  # pylint: disable=g-import-not-at-top
  return Tokenizer13a()


def words(text: str) -> List[str]:
  """sacrebleu's 13a tokens of `text` (what BLEU counts)."""
  return _tokenizer()(text.strip()).split()


def ngram_diversity(samples: Sequence[str], max_n: int = 4) -> float:
  """d = sum over n = 1..max_n of distinct / total n-grams in the set.

  An order with no n-gram at all (every sample shorter than n) adds 0.
  """
  tokenised = [words(s) for s in samples]
  total = 0.0
  for n in range(1, max_n + 1):
    grams = [tuple(t[i:i + n]) for t in tokenised for i in range(len(t) - n + 1)]
    if grams:
      total += len(set(grams)) / len(grams)
  return total


def duplicate_rate(samples: Sequence[str]) -> float:
  """Share of samples that repeat an earlier one: 1 - distinct / N."""
  return 1.0 - len(set(samples)) / len(samples)


def sentence_bleu(hypothesis: str, references: Sequence[str]) -> float:
  """sacrebleu's sentence BLEU (0-100) against all `references`."""
  import sacrebleu  # pylint: disable=g-import-not-at-top
  return float(sacrebleu.sentence_bleu(hypothesis, list(references)).score)


class SentenceBleu:
  """`sentence_bleu` against fixed references, their n-grams counted once.

  The same sacrebleu metric and code path as `sentence_bleu` (13a
  tokenization, exponential smoothing, effective order), so the same
  scores, bit for bit (`tests/test_metrics.py`), at about a quarter of
  the time when one verse's references score many hypotheses.

  >>> score = SentenceBleu(["le chat est noir ."])
  >>> score("le chat est noir .") == sentence_bleu("le chat est noir .",
  ...                                              ["le chat est noir ."])
  True
  """

  def __init__(self, references: Sequence[str]):
    from sacrebleu.metrics.bleu import BLEU  # pylint: disable=g-import-not-at-top
    self._metric = BLEU(effective_order=True)
    # One segment whose references are `references` (sacrebleu's layout:
    # one stream per reference).
    self._refs = self._metric._cache_references(  # pylint: disable=protected-access
        [[r] for r in references])[0]

  def __call__(self, hypothesis: str) -> float:
    m = self._metric
    stats = m._compute_segment_statistics(  # pylint: disable=protected-access
        m._preprocess_segment(hypothesis), self._refs)  # pylint: disable=protected-access
    return float(m._aggregate_and_compute([stats]).score)  # pylint: disable=protected-access


def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[Sequence[str]]) -> float:
  """sacrebleu's corpus BLEU; `references[i]` are sentence i's references
  (every sentence must have the same number)."""
  import sacrebleu  # pylint: disable=g-import-not-at-top
  streams = [list(r) for r in zip(*references)]  # [num_refs][num_sentences]
  return float(sacrebleu.corpus_bleu(list(hypotheses), streams).score)


@dataclasses.dataclass(frozen=True)
class SampleSetStats:
  """One input's N samples, scored (the per-sentence point of Fig. 2).

  Attributes:
    mean_bleu, min_bleu, max_bleu: sentence BLEU over the N samples; max is
      the oracle (best-of-N) BLEU.
    diversity: `ngram_diversity` of the set.
    duplicates: `duplicate_rate` of the set.
  """

  mean_bleu: float
  min_bleu: float
  max_bleu: float
  diversity: float
  duplicates: float

  @classmethod
  def of(cls, samples: Sequence[str],
         references: Sequence[str]) -> "SampleSetStats":
    bleu = np.array([sentence_bleu(s, references) for s in samples])
    return cls(float(bleu.mean()), float(bleu.min()), float(bleu.max()),
               ngram_diversity(samples), duplicate_rate(samples))


def macro_average(stats: Sequence[SampleSetStats]) -> Dict[str, float]:
  """Field-wise mean over inputs (the paper's macro average)."""
  return {f.name: float(np.mean([getattr(s, f.name) for s in stats]))
          for f in dataclasses.fields(SampleSetStats)}
