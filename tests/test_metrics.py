"""Metrics on hand-computed cases."""

import math

import numpy as np
import pytest

from arithmetic_apps.metrics import (SampleSetStats, corpus_bleu,
                                         duplicate_rate, macro_average,
                                         ngram_diversity, sentence_bleu)

HYP = "the cat sat on the mat"
REF = "the cat sat on a mat"
# By hand: matched n-grams 5/6, 3/5, 2/4, 1/3; same length, so no brevity
# penalty: BLEU = 100 * (5/6 * 3/5 * 2/4 * 1/3) ** (1/4).
HAND_BLEU = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25


def test_sentence_and_corpus_bleu_match_the_hand_computation():
  assert sentence_bleu(HYP, [REF]) == pytest.approx(HAND_BLEU, abs=1e-9)
  assert corpus_bleu([HYP], [[REF]]) == pytest.approx(HAND_BLEU, abs=1e-9)
  # A second reference that matches exactly wins.
  assert sentence_bleu(HYP, [REF, HYP]) == pytest.approx(100.0)
  # Brevity penalty: "the cat sat on" (4 words) vs 6: exp(1 - 6/4).
  short = corpus_bleu(["the cat sat on"], [[REF]])
  assert short == pytest.approx(100 * math.exp(1 - 6 / 4), abs=1e-9)


def test_ngram_diversity_by_hand():
  # unigrams 4/6, bigrams 3/4, trigrams 2/2, no 4-gram
  assert ngram_diversity(["a b c", "a b d"]) == pytest.approx(
      4 / 6 + 3 / 4 + 2 / 2)
  # Two identical samples: every n-gram is there twice.
  assert ngram_diversity(["x y z w", "x y z w"]) == pytest.approx(4 * 0.5)
  # Punctuation is a token (13a): "a." -> "a", ".".
  assert ngram_diversity(["a."]) == pytest.approx(1 + 1)


def test_duplicates_and_stats():
  assert duplicate_rate(["a", "b", "c"]) == 0.0
  assert duplicate_rate(["a", "a", "a", "a"]) == 0.75
  stats = SampleSetStats.of([HYP, REF], [REF])
  assert stats.max_bleu == pytest.approx(100.0)
  assert stats.min_bleu == pytest.approx(HAND_BLEU)
  assert stats.mean_bleu == pytest.approx((100.0 + HAND_BLEU) / 2)
  assert stats.duplicates == 0.0
  other = SampleSetStats.of([REF, REF], [REF])
  avg = macro_average([stats, other])
  assert avg["max_bleu"] == pytest.approx(100.0)
  assert avg["duplicates"] == pytest.approx(0.25)
  assert avg["diversity"] == pytest.approx(
      np.mean([stats.diversity, other.diversity]))


def test_sentence_bleu_with_cached_references_is_sacrebleus():
  from arithmetic_apps.metrics import SentenceBleu, sentence_bleu
  from arithmetic_apps.translation.data import load_split
  test = load_split("test")
  for verse in test[:5]:
    score = SentenceBleu(verse.references)
    hyps = ([v.references[0] for v in test[:60]] + [""] +
            [verse.references[1][:k] for k in range(0, 90, 7)] +
            [verse.references[0] + " ."])
    for h in hyps:
      assert score(h) == sentence_bleu(h, verse.references), h
