"""Real `python -m t5x.infer` runs with our gin files, on the embedded
English->French model exported as a T5X checkpoint.

Checks the written inference files: N decodes per input in ascending score
order; the same decodes and scores as our library produces from the same
checkpoint, inputs and key; the lattice property of arithmetic sampling
(each distinct decode appears floor(pN) or ceil(pN) times), which T5X's own
temperature_sample breaks on the same inputs; a gin seed that changes the
samples; and beam search through gin.
"""

import pytest

pytest.importorskip("t5x", reason="T5X is not installed; run `make test-t5x`")


import math

import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample, beam_search
from arithmetic_decoding.models import EncoderDecoderModel
from arithmetic_decoding.models.t5x_checkpoint import (
    load_t5x_checkpoint, save_t5x_checkpoint, t5x_model_gin)
from arithmetic_apps.translation.checkpoint import load_model
from arithmetic_apps.translation.tokenizer import ASSETS, SPM_PATH
from infer_runs import (BATCH, INPUT_LENGTH, TARGET_LENGTH, first_batch_key,
                        run_gin, t5x_infer)

NUM_DECODES, TEMPERATURE = 8, 0.3
T5_1_1 = ["t5x/examples/t5/t5_1_1/base.gin", "t5x/configs/runs/infer.gin"]


def _model_gin(workdir):
  return T5_1_1 + [str(workdir / "model.gin")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """The embedded model as a T5X checkpoint with its model.gin, as
  scripts/export_t5x.py writes them, and the run gin."""
  workdir = tmp_path_factory.mktemp("infer")
  config, params = load_model(ASSETS)
  path = save_t5x_checkpoint(str(workdir / "checkpoint_2800"), config, params,
                             step=2800)
  (workdir / "model.gin").write_text(t5x_model_gin(config, str(SPM_PATH)))
  return workdir, path, run_gin("")


def _arithmetic_run(exported, name, **bindings):
  workdir, path, gin_text = exported
  return t5x_infer(workdir, name,
                   _model_gin(workdir) + ["arithmetic_sample.gin",
                                          "paper_sweep.gin"],
                   {"NUM_DECODES": str(NUM_DECODES),
                    "TEMPERATURE": str(TEMPERATURE), **bindings},
                   path, gin_text)


@pytest.fixture(scope="module")
def arithmetic_records(exported):
  return _arithmetic_run(exported, "arithmetic")


def _tokens(records):
  """int [B, N, L] decodes and float [B, N] scores from the JSON lines."""
  decodes = np.array([r["prediction_tokens"] for r in records])
  scores = np.array([r["aux"]["scores"] for r in records])
  return decodes, scores


def _our_inputs(records):
  """The encoder tokens T5X fed its model: the task's ids, padded."""
  tokens = np.zeros((len(records), INPUT_LENGTH), np.int32)
  for row, record in enumerate(records):
    ids = record["inputs"]["inputs"]
    tokens[row, :len(ids)] = ids
  return jnp.asarray(tokens)


def _ours(exported, records, decode_fn, num_decodes, **kwargs):
  config, params = load_t5x_checkpoint(exported[1], expected=None)
  # T5X's layout, compared with T5X's own (ours per input: test_cross_kv).
  model = EncoderDecoderModel(config, cross_kv="per_sample")
  inputs, cache, tokens_to_logits = model.decode_inputs(
      params, _our_inputs(records), TARGET_LENGTH, num_decodes)
  return decode_fn(inputs, cache, tokens_to_logits, 1,
                   num_decodes=num_decodes, **kwargs)


def _lattice_violations(decodes, scores):
  """Inputs where some distinct decode's count is not floor/ceil(p N)."""
  bad = []
  for b in range(decodes.shape[0]):
    seen = {}
    for seq, score in zip(map(tuple, decodes[b]), scores[b]):
      seen.setdefault(seq, [0, math.exp(score)])[0] += 1
    n = decodes.shape[1]
    for count, p in seen.values():
      if not math.floor(p * n - 1e-3) <= count <= math.ceil(p * n + 1e-3):
        bad.append((b, count, p * n))
  return bad


def test_infer_writes_n_sorted_decodes_per_input(arithmetic_records):
  decodes, scores = _tokens(arithmetic_records)
  assert decodes.shape == (BATCH, NUM_DECODES, TARGET_LENGTH)
  assert np.all(np.diff(scores, axis=1) >= 0)
  assert all(len(r["prediction"]) == NUM_DECODES for r in arithmetic_records)
  assert "inputs_pretokenized" in arithmetic_records[0]["inputs"]
  # A trained model: the samples are French, and they end (EOS) in time.
  assert np.all((decodes == 1).any(axis=2))


def test_infer_decodes_equal_our_library(exported, arithmetic_records):
  # T5X compiles encoder and decode loop as one program, we compile ours:
  # the logits agree to the last bits only most of the time. A code decides
  # its sample to full float32 resolution, so where a sample's prefix is
  # improbable (a narrow interval, the residual code magnified by 1/p) a
  # last-bit difference in the CDF can flip a late token. Every decode with
  # probability >= 1e-4 must be identical; improbable ones may differ from
  # the first such token on (measured: 3 of 48, all p < 1e-5, from token 11).
  decodes, scores = _tokens(arithmetic_records)
  ours, our_scores = _ours(exported, arithmetic_records, arithmetic_sample,
                           NUM_DECODES, decode_rng=first_batch_key(),
                           temperature=TEMPERATURE, topk=0)
  same = np.all(decodes == np.asarray(ours), axis=2)
  probable = scores >= math.log(1e-4)
  assert np.all(same[probable]), np.argwhere(probable & ~same)
  assert same.mean() >= 0.9
  np.testing.assert_allclose(scores[same], np.asarray(our_scores)[same],
                             atol=1e-4, rtol=1e-4)


def test_infer_decodes_equal_our_library_at_resolution_one_over_n(exported):
  # code_resolution = 1/N: the code decides the sample while it stratifies
  # (prefix probability >= 1/N), then per-row draws take over; these do not
  # hinge on last bits, so every decode is identical.
  resolution = 1.0 / NUM_DECODES
  records = _arithmetic_run(
      exported, "arithmetic_resolution",
      **{"arithmetic_decoding.arithmetic_sample.code_resolution":
         str(resolution)})
  decodes, scores = _tokens(records)
  ours, our_scores = _ours(exported, records, arithmetic_sample, NUM_DECODES,
                           decode_rng=first_batch_key(),
                           temperature=TEMPERATURE, topk=0,
                           code_resolution=resolution)
  np.testing.assert_array_equal(decodes, ours)
  np.testing.assert_allclose(scores, our_scores, atol=1e-4, rtol=1e-4)


def test_lattice_property_holds_for_arithmetic_not_for_t5x_sampling(exported):
  # At a low temperature a few translations carry most of the mass: there
  # the N lattice codes must hit each one floor(pN) or ceil(pN) times, while
  # N independent samples scatter binomially around pN.
  n, temperature = 16, 0.1
  workdir, path, gin_text = exported
  records = _arithmetic_run(exported, "lattice", NUM_DECODES=str(n),
                            TEMPERATURE=str(temperature))
  decodes, scores = _tokens(records)
  assert _lattice_violations(decodes, scores) == []
  counts = [max(np.unique(row, axis=0, return_counts=True)[1]) for row in decodes]
  assert max(counts) > 1 and min(len(np.unique(r, axis=0)) for r in decodes) < n
  records = t5x_infer(
      workdir, "t5x_temperature_sample",
      _model_gin(workdir) + ["arithmetic_sample.gin"],
      {"NUM_DECODES": str(n),
       "models.EncoderDecoderModel.decode_fn": "@decoding.temperature_sample",
       "decoding.temperature_sample.temperature": str(temperature)},
      path, gin_text)
  iid_decodes, iid_scores = _tokens(records)
  assert _lattice_violations(iid_decodes, iid_scores) != []


def test_gin_seed_draws_a_new_sample_set(exported, arithmetic_records):
  records = _arithmetic_run(exported, "arithmetic_seed_1", SEED="1")
  decodes, scores = _tokens(records)
  assert not np.array_equal(decodes, _tokens(arithmetic_records)[0])
  # The seed is folded into T5X's key: the probable samples are ours.
  ours, _ = _ours(exported, records, arithmetic_sample, NUM_DECODES,
                  decode_rng=first_batch_key(), seed=1,
                  temperature=TEMPERATURE, topk=0)
  same = np.all(decodes == np.asarray(ours), axis=2)
  assert np.all(same[scores >= math.log(1e-4)])


def test_beam_search_gin(exported):
  workdir, path, gin_text = exported
  records = t5x_infer(workdir, "beam", _model_gin(workdir) + ["beam_search.gin"],
                      {"NUM_DECODES": "4"}, path, gin_text)
  decodes, scores = _tokens(records)
  assert decodes.shape == (BATCH, 4, TARGET_LENGTH)
  ours, our_scores = _ours(exported, records, beam_search, 4, alpha=0.6)
  np.testing.assert_array_equal(decodes, ours)
  np.testing.assert_allclose(scores, our_scores, atol=1e-4, rtol=1e-4)


def test_seqio_reads_the_committed_tokenizer():
  # The SentencePiece file a T5X user loads with seqio is ours, id for id.
  import seqio  # pylint: disable=g-import-not-at-top
  from arithmetic_apps.translation.tokenizer import Tokenizer
  vocabulary = seqio.SentencePieceVocabulary(str(SPM_PATH))
  ours = Tokenizer.load()
  assert (vocabulary.vocab_size, vocabulary.eos_id, vocabulary.pad_id,
          vocabulary.unk_id) == (ours.vocab_size, 1, 0, 2)
  for line in open(t5x_tasks_tsv(), encoding="utf-8"):
    for text in line.rstrip("\n").split("\t"):
      ids = ours.encode(text)
      assert list(vocabulary.encode(text)) + [1] == ids
      assert vocabulary.decode(ids[:-1]) == ours.decode(ids)


def t5x_tasks_tsv():
  import t5x_tasks  # pylint: disable=g-import-not-at-top
  return t5x_tasks.TSV
