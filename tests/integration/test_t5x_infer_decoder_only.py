"""A real `python -m t5x.infer` run of a decoder-only model (T5X's
models.DecoderOnlyModel) with gin/arithmetic_sample_decoder_only.gin: the
task's English inputs are the prompt, prefilled by T5X and handed to
arithmetic_sample through `initial_index`."""

import pytest

pytest.importorskip("t5x", reason="T5X is not installed; run `make test-t5x`")


import functools
import math

import jax
import numpy as np
import pytest
import seqio
from t5x import adafactor, checkpoints, models, partitioning, utils

import t5x_tasks
from arithmetic_decoding import arithmetic_sample
from decoder_only_lm import HistoryLM
from infer_runs import (BATCH, INPUT_LENGTH, TARGET_LENGTH, TASK,
                        first_batch_key, run_gin, t5x_infer)
from test_t5x_infer import _lattice_violations, _tokens

NUM_DECODES, TEMPERATURE = 8, 0.5
DECODER_LENGTH = INPUT_LENGTH + TARGET_LENGTH  # prefix LM: inputs + targets
MODEL_GIN = '''
from __gin__ import dynamic_registration
import seqio
import decoder_only_lm
from t5x import adafactor
from t5x import decoding
from t5x import models

MODEL = @models.DecoderOnlyModel()
models.DecoderOnlyModel:
  module = @decoder_only_lm.HistoryLM()
  vocabulary = @seqio.SentencePieceVocabulary()
  optimizer_def = @adafactor.Adafactor()
  decode_fn = @decoding.temperature_sample  # as T5X's base gin; ours overrides
'''


def _t5x_model(decode_fn=None):
  kwargs = {} if decode_fn is None else {"decode_fn": decode_fn}
  return models.DecoderOnlyModel(
      module=HistoryLM(), vocabulary=t5x_tasks.VOCABULARY,
      optimizer_def=adafactor.Adafactor(), **kwargs)


@pytest.fixture(scope="module")
def decoder_only(tmp_path_factory):
  """A HistoryLM checkpoint written by T5X, and two infer runs on it: full
  code resolution, and 1/N (exactly reproducible, see test_t5x_infer)."""
  workdir = tmp_path_factory.mktemp("decoder_only")
  partitioner = partitioning.PjitPartitioner(num_partitions=1)
  shapes = {"decoder_input_tokens": (BATCH, DECODER_LENGTH),
            "decoder_target_tokens": (BATCH, DECODER_LENGTH)}
  state = utils.TrainStateInitializer(
      optimizer_def=None, init_fn=_t5x_model().get_initial_variables,
      input_shapes=shapes, input_types={k: np.int32 for k in shapes},
      partitioner=partitioner).from_scratch(jax.random.PRNGKey(0))
  checkpoints.Checkpointer(state, partitioner, str(workdir)).save(state)
  (workdir / "model.gin").write_text(MODEL_GIN)
  run = functools.partial(
      t5x_infer, workdir,
      gin_files=["t5x/configs/runs/infer.gin", str(workdir / "model.gin"),
                 "arithmetic_sample_decoder_only.gin", "paper_sweep.gin"],
      checkpoint=str(workdir / "checkpoint_0"), run_gin_text=run_gin(""))
  bindings = {"NUM_DECODES": str(NUM_DECODES), "TEMPERATURE": str(TEMPERATURE)}
  full = run(name="decoder_only", bindings=bindings)
  coarse = run(name="decoder_only_resolution", bindings=dict(bindings, **{
      "arithmetic_decoding.arithmetic_sample.code_resolution":
      str(1.0 / NUM_DECODES)}))
  return state.params, full, coarse


def _task_batch():
  """The batch T5X's infer builds: the task through DecoderFeatureConverter."""
  lengths = {"inputs": INPUT_LENGTH, "targets": TARGET_LENGTH}
  ds = seqio.get_mixture_or_task(TASK).get_dataset(lengths, split="test",
                                                   shuffle=False)
  ds = seqio.DecoderFeatureConverter(pack=False)(ds, lengths)
  return next(ds.batch(BATCH).as_numpy_iterator())


def test_decoder_only_infer(decoder_only):
  params, records, coarse_records = decoder_only
  decodes, scores = _tokens(records)
  assert decodes.shape == (BATCH, NUM_DECODES, DECODER_LENGTH)
  assert np.all(np.diff(scores, axis=1) >= 0)
  assert _lattice_violations(decodes, scores) == []
  batch = _task_batch()
  prompt_lengths = batch["decoder_causal_attention"].sum(axis=1) - 1
  assert np.all(prompt_lengths > 5)
  # Our arithmetic_sample with the prompt through initial_index, called by
  # T5X's DecoderOnlyModel op by op (no outer jit), gives the infer run's
  # samples: all of them at code_resolution 1/N; at full resolution the
  # probable ones (this random model has none above 1e-4: see test_t5x_infer
  # for why improbable ones may differ).
  for run_records, resolution in ((records, None),
                                  (coarse_records, 1.0 / NUM_DECODES)):
    decodes, scores = _tokens(run_records)
    extra = {} if resolution is None else {"code_resolution": resolution}
    model = _t5x_model(functools.partial(
        arithmetic_sample, topk=0, temperature=TEMPERATURE, **extra))
    ours, aux = model.predict_batch_with_aux(
        params, batch, first_batch_key(), num_decodes=NUM_DECODES,
        return_all_decodes=True)
    same = np.all(decodes == np.asarray(ours), axis=2)
    if resolution is None:
      assert np.all(same[scores >= math.log(1e-4)])
      continue
    np.testing.assert_array_equal(decodes, ours)
    np.testing.assert_allclose(scores, aux["scores"], atol=1e-4, rtol=1e-4)
    # The continuation only: T5X removed the prompt; samples differ.
    assert len({tuple(d) for d in decodes[0]}) > 1
    # Each score is the tempered log-prob of the continuation given the
    # prompt, recomputed here by teacher forcing the whole sequence.
    for b in range(BATCH):
      prompt = batch["decoder_target_tokens"][b, :prompt_lengths[b]]
      for n in range(NUM_DECODES):
        # Target-aligned: the continuation fills the rest of the sequence.
        continuation = decodes[b, n, :DECODER_LENGTH - len(prompt)]
        np.testing.assert_allclose(
            _teacher_forced(params, prompt, continuation), scores[b, n],
            rtol=1e-4, atol=1e-3)


def _teacher_forced(params, prompt, continuation):
  """log p(continuation | prompt) at TEMPERATURE, up to and with its EOS."""
  ends = np.flatnonzero(continuation == 1)
  continuation = continuation[:ends[0] + 1] if len(ends) else continuation
  targets = np.concatenate([prompt, continuation])
  inputs = np.concatenate([[0], targets[:-1]])[None, :]
  logits = HistoryLM().apply({"params": params}, inputs, inputs,
                             enable_dropout=False)[0]
  log_probs = jax.nn.log_softmax(logits / TEMPERATURE, axis=-1)
  # Logits at position i (fed targets[i - 1]) predict targets[i].
  positions = np.arange(len(prompt), len(targets))
  return float(np.sum(np.asarray(log_probs)[positions, targets[positions]]))
