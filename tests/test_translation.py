"""The embedded English->French model: data, tokenizer, checkpoints,
training (resumable), the packaged model, and a tiny experiment run."""

import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_encode, arithmetic_sample
from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_apps.translation import checkpoint, data, train
from arithmetic_apps.translation.tokenizer import (ASSETS, EOS_ID,
                                                       Tokenizer)
from helpers import teacher_forced_log_probs

ROOT = pathlib.Path(__file__).parent.parent
MODEL_DIR = ASSETS
HAS_MODEL = (MODEL_DIR / "params.msgpack").exists()


def test_splits_are_whole_disjoint_books():
  splits = {name: data.load_split(name) for name in ("train", "dev", "test")}
  assert sum(len(v) for v in splits.values()) == 31_102
  books = {name: {v.book for v in verses} for name, verses in splits.items()}
  assert not books["train"] & books["test"]
  assert not books["train"] & books["dev"]
  assert not books["dev"] & books["test"]
  names = {name: {v.name for v in verses} for name, verses in splits.items()}
  assert not (names["train"] & names["test"]) and not (
      names["train"] & names["dev"])
  assert len(splits["test"]) >= 300 and len(splits["dev"]) >= 200
  assert all(len(v.references) == 2 and all(v.references)
             for v in splits["test"])
  # Parallel books stay together in train: synoptic gospels, Samuel-Kings-
  # Chronicles, 2 Peter / Jude.
  for group in ({40, 41, 42}, {9, 10, 11, 12, 13, 14}, {61, 65}):
    assert group <= books["train"]
  assert len(data.training_pairs(splits["dev"][:3])) == 12


def test_tokenizer_round_trip():
  tok = Tokenizer.load()
  assert tok.vocab_size == 8000
  assert (tok.processor.pad_id(), tok.processor.eos_id(),
          tok.processor.unk_id(), tok.processor.bos_id()) == (0, 1, 2, -1)
  for verse in data.load_split("test")[:50]:
    for text in verse.sources + verse.references:
      ids = tok.encode(text)
      assert ids[-1] == EOS_ID and 0 not in ids
      assert tok.decode(ids + [0, 0]) == text
  batch = tok.encode_batch(["a b", "c"], 8)
  assert batch.shape == (2, 8) and batch[1, -1] == 0
  with pytest.raises(ValueError, match="length"):
    tok.encode_batch(["word " * 40], 8)


def test_checkpoint_round_trip_gives_bitwise_equal_logits(tmp_path):
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(3))
  checkpoint.save_model(tmp_path, model.config, params)
  config, loaded = checkpoint.load_model(tmp_path)
  assert config == model.config
  tokens = jnp.array([[5, 6, 7, 1], [8, 9, 1, 0]], jnp.int32)
  before = model.logits(params, tokens, tokens)
  after = EncoderDecoderModel(config).logits(loaded, tokens, tokens)
  np.testing.assert_array_equal(np.asarray(before), np.asarray(after))


def _tiny_train_config(steps):
  model = preset("tiny").replace(vocab_size=32)
  return train.TrainConfig(model=model, buckets=(8,), tokens_per_batch=16,
                           max_steps=steps, checkpoint_every=2, log_every=1,
                           warmup_steps=2)


def _pairs(count=20):
  rng = np.random.default_rng(0)
  return [(list(rng.integers(3, 32, 5)) + [1], list(rng.integers(3, 32, 6)) +
           [1]) for _ in range(count)]


@pytest.mark.slow
def test_training_resumes_exactly_and_learns(tmp_path):
  straight = train.train(_tiny_train_config(6), _pairs(), tmp_path / "a",
                         progress=False)
  # Stopped at step 4 (as a kill after its checkpoint would), then resumed.
  train.train(_tiny_train_config(4), _pairs(), tmp_path / "b", progress=False)
  resumed = train.train(_tiny_train_config(6), _pairs(), tmp_path / "b",
                        progress=False)
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  log = [json.loads(l) for l in (tmp_path / "a" / "log.jsonl").open()]
  assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
  # Two pairs make one batch: the same batch every step, so it must fit.
  train.train(_tiny_train_config(6), _pairs(2), tmp_path / "c",
              progress=False)
  log = [json.loads(l) for l in (tmp_path / "c" / "log.jsonl").open()]
  assert log[-1]["loss"] < log[0]["loss"] - 0.5
  config, params = checkpoint.load_model(tmp_path / "b" / "final")
  assert config.vocab_size == 32
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_loss_ignores_padding():
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  src = jnp.array([[5, 6, 1, 0]], jnp.int32)
  tgt = jnp.array([[7, 8, 1, 0]], jnp.int32)
  loss, count = train.loss_fn(model, params, src, tgt)
  assert float(count) == 3.0
  expected = -teacher_forced_log_probs(model, params, src, tgt[:, None, :],
                                       EOS_ID)[0, 0] / 3
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MODEL, reason="no packaged model in assets/en_fr")
def test_packaged_model_translates_and_reports_its_log_probs():
  from arithmetic_apps.translation.translate import Translator
  translator = Translator.load()
  verse = data.load_split("test")[0]
  samples = translator.sample([verse.source], 4, 0.5, jax.random.PRNGKey(0))[0]
  assert len(samples) == 4
  assert all(s.text and s.tokens.count(EOS_ID) >= 1 for s in samples)
  # Reported log-probs (temperature 0.5, rescaled) are the model's own:
  # recompute them from one teacher-forced pass of the scaled logits.
  tokens = jnp.asarray([[s.tokens for s in samples]], jnp.int32)  # [1, 4, L]
  source = translator.encode([verse.source])
  inputs, cache, step = translator.model.decode_inputs(
      translator.params, source, translator.max_decode_len, 4)
  low, log_width = arithmetic_encode(inputs, cache, step, EOS_ID, tokens,
                                     temperature=0.5, topk=0)
  np.testing.assert_allclose(np.asarray(log_width[0]),
                             [s.log_prob for s in samples], atol=2e-3)
  # Interval midpoints decode back to their translation where float32 can
  # place the interval (probability >~ 1e-5, see `arithmetic_encode`):
  # checked at temperature 0.1, where whole-verse samples are that likely.
  cold = translator.sample([verse.source], 4, 0.1, jax.random.PRNGKey(1))[0]
  tokens = jnp.asarray([[s.tokens for s in cold]], jnp.int32)
  low, log_width = arithmetic_encode(inputs, cache, step, EOS_ID, tokens,
                                     temperature=0.1, topk=0)
  wide = np.asarray(log_width[0]) > np.log(1e-4)
  assert wide.any(), np.asarray(log_width)
  mid = low + jnp.exp(log_width) / 2
  back, _, codes = arithmetic_sample(inputs, cache, step, EOS_ID,
                                     num_decodes=4, temperature=0.1, topk=0,
                                     codes=mid, return_codes=True)
  by_code = {float(c): tuple(t) for c, t in zip(np.asarray(codes[0]),
                                                np.asarray(back[0]).tolist())}
  for i in np.flatnonzero(wide):
    assert by_code[float(mid[0, i])] == tuple(np.asarray(tokens[0, i]).tolist())


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MODEL, reason="no packaged model in assets/en_fr")
def test_experiments_quick_run(tmp_path):
  """End to end on the packaged model (resuming is `test_jsonl`'s)."""
  cmd = [sys.executable, str(ROOT / "scripts" / "experiments.py"), "--quick",
         "--out", str(tmp_path)]
  first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert first.returncode == 0, first.stderr[-3000:]
  runs = (tmp_path / "runs.jsonl").read_text().splitlines()
  # quality: 1 N x 1 T x 2 methods + 1 beam; estimator: 2 verses x 2 N x 2.
  assert len(runs) == 3 + 8
  summary = json.loads((tmp_path / "summary.json").read_text())
  for q in summary["quality"]:
    assert 0 <= q["min_bleu"] <= q["mean_bleu"] <= q["max_bleu"] <= 100
    assert 0 < q["diversity"] <= 4
  for name in ("fig2.png", "fig3.png", "fig4.png", "experiments.md"):
    assert (tmp_path / name).stat().st_size > 0
