"""The paper's quality experiments (Figs. 2-4) on the embedded model.

Two kinds of runs, each one JSON record, appended to a JSON-lines file as
it finishes (so a killed run resumes where it stopped):

* `quality_point` (Fig. 2): for N samples per test verse at temperature T,
  each verse's mean / min / max (oracle) sentence BLEU and n-gram
  diversity, macro-averaged over the verses; arithmetic vs ancestral, and
  beam search with N beams for reference (`beam_point`).
* `estimator_runs` (Figs. 3-4): for one verse, the estimate of its expected
  sentence BLEU from N samples (their mean), repeated R times with fresh
  randomness (a new random shift for the lattice, new draws for ancestral
  sampling). Fig. 3 shows the spread of the R estimates for a few verses;
  Fig. 4 the standard deviation over R, averaged over verses.

`Budget` fixes the sizes. The defaults are a subset of the paper's grid
that runs in about 20 minutes on 2 CPU cores (the paper: the whole WMT test
set, T = 0.1 ... 0.8, N up to 64, 100 repeats over 100 sentences); pass a
bigger `Budget` where there is more compute.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import jax
import numpy as np

from arithmetic_apps.metrics import SampleSetStats, macro_average, sentence_bleu
from arithmetic_decoding.methods import Method
from arithmetic_apps.translation.data import Verse
from arithmetic_apps.translation.translate import Translator

METHODS = tuple(m.value for m in Method.sampling())


@dataclasses.dataclass(frozen=True)
class Budget:
  """Experiment sizes.

  Attributes:
    quality_verses: test verses for Fig. 2 (the first ones of the split).
    quality_n: samples per verse, N, for Fig. 2.
    quality_temperatures: temperatures for Fig. 2.
    estimator_verses: verses for Fig. 4 (the first four also make Fig. 3),
      spread evenly over the test split.
    estimator_repeats: repetitions R of each estimate.
    estimator_n: N for Figs. 3-4.
    estimator_temperatures: temperatures for Figs. 3-4.
    max_rows: rows (verses x samples) per decode call.
  """

  quality_verses: int = 24
  quality_n: Tuple[int, ...] = (5, 10, 20)
  quality_temperatures: Tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
  estimator_verses: int = 4
  estimator_repeats: int = 16
  estimator_n: Tuple[int, ...] = (2, 4, 8, 16)
  estimator_temperatures: Tuple[float, ...] = (0.1, 0.2, 0.5)
  max_rows: int = 512


def _chunks(items: Sequence, size: int) -> List[Sequence]:
  return [items[i:i + size] for i in range(0, len(items), size)]


def sample_texts(translator: Translator, sources: Sequence[str], n: int,
                 temperature: float, method: str, key: jax.Array,
                 max_rows: int) -> List[List[str]]:
  """N sample texts per source, decoded in calls of <= max_rows rows.

  Each call gets its own key (fold_in of the chunk index), so repeated
  sources get independent randomness: fresh shifts for the lattice.
  """
  per_call = max(1, max_rows // n)
  out = []
  for i, chunk in enumerate(_chunks(list(sources), per_call)):
    samples = translator.sample(chunk, n, temperature,
                                jax.random.fold_in(key, i), method)
    out.extend([s.text for s in row] for row in samples)
  return out


def quality_point(translator: Translator, verses: Sequence[Verse], n: int,
                  temperature: float, method: str, key: jax.Array,
                  max_rows: int) -> Dict:
  """Fig. 2's point for one (N, T, method): macro-averaged set statistics."""
  texts = sample_texts(translator, [v.source for v in verses], n, temperature,
                       method, key, max_rows)
  stats = [SampleSetStats.of(t, v.references) for t, v in zip(texts, verses)]
  return {"macro": macro_average(stats),
          "per_verse": [dataclasses.asdict(s) for s in stats]}


def beam_point(translator: Translator, verses: Sequence[Verse],
               beams: int) -> Dict:
  """Beam search's N outputs per verse, scored like a sample set."""
  stats = []
  for chunk in _chunks(list(verses), 8):
    rows = translator.beam([v.source for v in chunk], beams=beams)
    stats += [SampleSetStats.of([s.text for s in row], v.references)
              for row, v in zip(rows, chunk)]
  return {"macro": macro_average(stats),
          "per_verse": [dataclasses.asdict(s) for s in stats]}


def estimator_runs(translator: Translator, verse: Verse, n: int,
                   temperature: float, method: str, repeats: int,
                   key: jax.Array, max_rows: int) -> Dict:
  """R estimates of the verse's expected sentence BLEU, each from N samples.

  Returns {"estimates": [R floats], "distinct": mean distinct samples}.
  """
  texts = sample_texts(translator, [verse.source] * repeats, n, temperature,
                       method, key, max_rows)
  estimates = [float(np.mean([sentence_bleu(t, verse.references)
                              for t in row])) for row in texts]
  return {"estimates": estimates,
          "distinct": float(np.mean([len(set(row)) for row in texts]))}


def estimator_verses(verses: Sequence[Verse], count: int) -> List[int]:
  """Indices of `count` verses spread evenly over the split."""
  return [int(i) for i in np.linspace(0, len(verses) - 1, count).round()]


def bootstrap_ratio(numerator: np.ndarray, denominator: np.ndarray,
                    draws: int = 2000, seed: int = 0) -> Tuple[float, ...]:
  """mean(numerator) / mean(denominator) over paired items, with a 95 %
  bootstrap interval (items resampled with replacement).

  >>> bootstrap_ratio(np.array([1., 1.]), np.array([2., 2.]))
  (0.5, 0.5, 0.5)
  """
  rng = np.random.default_rng(seed)
  ratio = float(numerator.mean() / denominator.mean())
  picks = rng.integers(0, len(numerator), (draws, len(numerator)))
  boot = numerator[picks].mean(1) / denominator[picks].mean(1)
  return ratio, float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def experiment_parser(description: str, default_out: str):
  """The command line every experiment script shares."""
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--out", default=default_out)
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--report_only", action="store_true")
  parser.add_argument("--seed", type=int, default=0)
  return parser


def run_plan(path: str, runs: Sequence, key_of, run_one, *, report_only: bool,
             desc: str) -> Dict:
  """The finished runs by key: loaded from `path` only (`report_only`), or
  with the missing ones run on the embedded model (`run_one(translator,
  run)`), each appended to `path` as it finishes."""
  from arithmetic_apps import jsonl  # pylint: disable=g-import-not-at-top
  if report_only:
    return jsonl.load(path, key=key_of)
  translator = Translator.load()
  return jsonl.run_missing(path, runs, key_of,
                           lambda run: run_one(translator, run), desc)
