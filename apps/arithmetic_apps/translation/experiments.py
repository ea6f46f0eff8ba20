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
(its run time: docs/translation.md; the paper: the whole WMT test
set, T = 0.1 ... 0.8, N up to 64, 100 repeats over 100 sentences); pass a
bigger `Budget` where there is more compute.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import Dict, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_apps.metrics import (SampleSetStats, SentenceBleu,
                                     macro_average, sentence_bleu)
from arithmetic_decoding.methods import Method
from arithmetic_apps.translation.data import Verse
from arithmetic_apps.translation.translate import Sample, Translator

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


# --- The paper's power: nested sample sets -------------------------------
#
# Fig. 4 at the paper's size (100 verses x 100 repeats x N = 2 ... 64) costs
# 126 samples per repeat when every N is drawn afresh. `nested_samples`
# draws 64 once and takes each smaller N from them, exactly:
#
# * arithmetic: the 64 codes are a shifted lattice (i + u) / 64; for N | 64
#   the codes i = j, j + 64/N, j + 2*64/N, ... are k/N + (j + u)/64, a
#   lattice of N points whose shift (j + u)/64 is uniform on [0, 1/N) when
#   j is uniform on 0 ... 64/N - 1 (drawn per repeat, independently of the
#   samples): an exact shifted lattice of N codes.
# * i.i.d. (the baseline): N of the 64 i.i.d. samples at positions drawn
#   uniformly without replacement, independently of the samples: N i.i.d.
#   samples.
#
# The i.i.d. baseline decodes one independent uniform code per sample
# (`IID`): inverse-CDF ancestral sampling, the same distribution as
# `Method.ANCESTRAL`'s Gumbel-max draws (its per-row random bits for the
# whole vocabulary at every step cost it 2x the time here) and the same
# decoder as the lattice, so the two differ in their codes only.
#
# Each N's R estimates are then R independent draws of that N's estimator,
# as in the paper; estimates of different N in one repeat share samples,
# which correlates the curves' noise across N but leaves every N's standard
# deviation an honest one.


def lattice(shifts: np.ndarray, n: int) -> np.ndarray:
  """Shifted lattices (i + u) / n, i < n, ascending: shifts [R] -> float32
  codes [R, n] in [0, 1).

  >>> lattice(np.array([0.5]), 4).tolist()
  [[0.125, 0.375, 0.625, 0.875]]
  """
  codes = (np.arange(n)[None, :] + np.asarray(shifts, np.float64)[:, None]) / n
  return np.minimum(codes, np.nextafter(np.float32(1), np.float32(0))
                    ).astype(np.float32)


def sub_lattice(n_max: int, n: int, offset: int) -> np.ndarray:
  """Positions offset, offset + n_max/n, ... of a lattice of n_max codes.

  >>> sub_lattice(8, 2, 1).tolist()
  [1, 5]
  """
  if n_max % n:
    raise ValueError(f"n must divide {n_max}; got {n}.")
  return offset + np.arange(n) * (n_max // n)


IID = "iid"
NESTED_METHODS = (Method.ARITHMETIC.value, IID)


def subset_positions(method: str, n_max: int, n: int,
                     rng: np.random.Generator) -> np.ndarray:
  """The positions (in lattice order, or any order for i.i.d. samples) of
  one N-sample set drawn from n_max (see the comment above)."""
  if method == Method.ARITHMETIC.value:
    return sub_lattice(n_max, n, int(rng.integers(0, n_max // n)))
  return np.sort(rng.choice(n_max, n, replace=False))


def nested_samples(translator: Translator, sources: Sequence[str],
                   n_max: int, temperature: float, method: str,
                   key: jax.Array, max_rows: int) -> List[List[Sample]]:
  """n_max samples per source, in code order: arithmetic sampling of the
  source's lattice (i + u) / n_max, i = 0 ... n_max - 1, u from `key`; or
  (`IID`) of n_max independent uniform codes; or ancestral sampling
  (`Method.ANCESTRAL`, the decoder's order). Calls of <= max_rows rows."""
  per_call = max(1, max_rows // n_max)
  code_key = jax.random.fold_in(key, 2**30)
  if method == IID:
    uniforms = np.asarray(jax.random.uniform(code_key, (len(sources), n_max)))
  else:
    uniforms = np.asarray(jax.random.uniform(code_key, (len(sources),)),
                          np.float64)
  out: List[List[Sample]] = []
  for i, start in enumerate(range(0, len(sources), per_call)):
    chunk = list(sources[start:start + per_call])
    call_key = jax.random.fold_in(key, i)
    if method in NESTED_METHODS:
      part = uniforms[start:start + len(chunk)]
      codes = (lattice(part, n_max) if method != IID else
               np.minimum(part, np.nextafter(np.float32(1), np.float32(0))
                          ).astype(np.float32))
      rows = translator.sample(chunk, n_max, temperature, call_key,
                               Method.ARITHMETIC, codes=jnp.asarray(codes))
      for row_codes, row in zip(codes, rows):
        # Positions by code (i.i.d. float32 codes may repeat: 2**-23 grid).
        at: Dict[float, List[int]] = {}
        for j, c in enumerate(row_codes):
          at.setdefault(float(c), []).append(j)
        ordered = [None] * n_max
        for sample in row:
          ordered[at[sample.code].pop()] = sample
        out.append(ordered)
    else:
      out.extend(translator.sample(chunk, n_max, temperature, call_key,
                                   method))
  return out


def generated_tokens(rows: Sequence[Sequence[Sample]]) -> int:
  """Tokens the decoder generated for these samples, EOS included (the
  padding after it excluded)."""
  return sum(int(np.count_nonzero(s.tokens)) for row in rows for s in row)


@functools.partial(jax.jit, static_argnames=("model", "temperature"))
def _prefix_log_probs(params, encoder_tokens, tokens, temperature, *, model):
  """int [1, S] source, int [M, L] samples (0 after EOS) -> float [M, L]:
  each sample's log-probability of its first l + 1 tokens under the
  tempered model, teacher-forced (0 added past the sample's end)."""
  decoder_inputs = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)))  # BOS 0 first
  enc = jnp.repeat(encoder_tokens, tokens.shape[0], axis=0)
  logits = model.logits(params, enc, decoder_inputs)  # [M, L, V]
  log_probs = jax.nn.log_softmax(logits / temperature, axis=-1)
  picked = jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
  return jnp.cumsum(jnp.where(tokens != 0, picked, 0.0), axis=1)


def stratified_depth(translator: Translator, source: str,
                     samples: Sequence[Sample], temperature: float,
                     ns: Sequence[int]) -> Dict[int, float]:
  """How many leading tokens a lattice of N codes stratifies, per N.

  A prefix of probability p >= 1/N (under the tempered distribution the
  samples are drawn from) holds floor(Np) or ceil(Np) of the N lattice
  codes: the lattice spreads its samples over such prefixes exactly in
  proportion. Past the first token whose prefix falls below 1/N each code
  is alone in its interval and continues like an independent sample. For
  each sample the number of tokens before that point is its stratified
  depth; returns the mean over `samples` for each N.
  """
  tokens = np.array([s.tokens for s in samples])  # [M, L]
  length = int(max(1, np.count_nonzero(tokens, axis=1).max()))
  # Padded to a multiple of 32 positions (the decoder is causal: the pad
  # does not reach the positions before it), so one compiled program
  # serves every length up to it.
  padded = min(-(-length // 32) * 32, tokens.shape[1])
  prefix = np.asarray(_prefix_log_probs(
      translator.params, translator.encode([source]),
      jnp.asarray(tokens[:, :padded]), temperature, model=translator.model))
  live = tokens[:, :padded] != 0
  return {n: round(float(np.mean(np.sum(live & (prefix >= -np.log(n)),
                                         axis=1))), 3) for n in ns}


class BleuMemo:
  """Sentence BLEU of texts against one verse's references, each distinct
  text scored once (low temperatures repeat the same few texts)."""

  def __init__(self, references: Sequence[str]):
    self.score = SentenceBleu(references)
    self.scores: Dict[str, float] = {}

  def __call__(self, text: str) -> float:
    if text not in self.scores:
      self.scores[text] = self.score(text)
    return self.scores[text]


def nested_estimator_runs(translator: Translator, verse: Verse,
                          ns: Sequence[int], temperature: float, method: str,
                          repeats: int, key: jax.Array,
                          max_rows: int) -> Dict:
  """Figs. 3-4 for one (verse, T, method): R estimates of the verse's
  expected sentence BLEU for every N in `ns`, from R sets of max(ns)
  samples (`nested_samples`; every N must divide max(ns)).

  Returns {"estimates": {N: [R floats]}, "distinct": {N: mean distinct
  samples per set}, "tokens": generated tokens, "texts": distinct texts,
  "stratified_depth": {N: mean over repeat 0's samples}}.
  """
  n_max = max(ns)
  samples = nested_samples(translator, [verse.source] * repeats, n_max,
                           temperature, method, key, max_rows)
  texts = [[s.text for s in row] for row in samples]
  bleu = BleuMemo(verse.references)
  values = np.array([[bleu(t) for t in row] for row in texts])  # [R, n_max]
  rng = np.random.default_rng(np.asarray(key).tolist())
  estimates, distinct = {}, {}
  for n in ns:
    picks = [subset_positions(method, n_max, n, rng) for _ in range(repeats)]
    estimates[n] = [round(float(values[r, p].mean()), 4)
                    for r, p in enumerate(picks)]
    distinct[n] = float(np.mean([len({texts[r][j] for j in p})
                                 for r, p in enumerate(picks)]))
  return {"estimates": estimates, "distinct": distinct,
          "tokens": generated_tokens(samples), "texts": len(bleu.scores),
          "stratified_depth": stratified_depth(
              translator, verse.source, samples[0], temperature, ns)}


def nested_quality_point(translator: Translator, verses: Sequence[Verse],
                         ns: Sequence[int], temperature: float, method: str,
                         key: jax.Array, max_rows: int) -> Dict:
  """Fig. 2 for one (T, method): per verse, one set of max(ns) samples and
  its nested N-sample subsets; each N's set statistics per verse and
  macro-averaged."""
  n_max = max(ns)
  samples = nested_samples(translator, [v.source for v in verses], n_max,
                           temperature, method, key, max_rows)
  texts = [[s.text for s in row] for row in samples]
  rng = np.random.default_rng(zlib.crc32(repr((temperature, method)).encode()))
  out = {}
  for n in ns:
    stats = [SampleSetStats.of([row[j] for j in subset_positions(
        method, n_max, n, rng)], v.references) for row, v in zip(texts, verses)]
    out[n] = {"macro": macro_average(stats),
              "per_verse": [{k: round(x, 4) for k, x in
                             dataclasses.asdict(s).items()} for s in stats]}
  return {"by_n": out, "tokens": generated_tokens(samples)}
