"""Cross-attention keys/values projected once per input (`CrossKV.PER_INPUT`)
against T5X's layout (`PER_SAMPLE`): the same samples, beams and log-probs,
on one device through the T5X protocol and on 8 emulated devices through
`make_sharded_decode`, with less memory."""

import functools
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import ancestral_sample, arithmetic_sample
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.models import CrossKV, EncoderDecoderModel, preset
from arithmetic_decoding.models.encoder_decoder import group_size
from helpers import teacher_forced_log_probs

ROOT = pathlib.Path(__file__).parent.parent
WORKER = ROOT / "tests" / "multidevice_worker.py"
# (preset, mesh, batch, N, length, temperature): rows per device 16 (one
# whole input), 4, 3 and 1 (an input's samples split over devices: groups
# of gcd(N, rows) rows), and 32 (two whole inputs) with the model split 4
# ways. On 8 devices only: one device is
# `test_protocol_path_gives_t5x_style_outputs` (and the 1x1 mesh of
# `test_sharding.py`). The layouts' sharding is the model's code at any
# size: the tiny preset here; mT5-small's layouts are compared on one
# device.
CROSS_KV_CASES = [("tiny", (8, 1), 8, 16, 10, 1.0),
                  ("tiny", (8, 1), 4, 6, 10, 1.0),
                  ("tiny", (2, 4), 4, 16, 10, 1.0),
                  ("tiny", (8, 1), 2, 4, 5, 0.2)]

# A score sums L per-token log-probs; its float32 rounding grows with its
# size (mT5's 250k-way vocabulary: ~12 per token). Both layouts round
# differently: 1.1e-5 apart on a beam score of -41.8 (2.7e-7 relative),
# measured on a machine other than the one these tests were written on.
RTOL = 1e-6


def _models(name):
  return {c: EncoderDecoderModel(preset(name), cross_kv=c) for c in CrossKV}


@functools.lru_cache(maxsize=None)
def _params(name):
  """The random parameters of preset `name` (both layouts read the same
  tree), made once per test process: mT5-small's 300M take seconds."""
  return EncoderDecoderModel(preset(name)).init(jax.random.PRNGKey(0))


def _decode(model, params, tokens, method, n, length, temperature=1.0):
  inputs, cache, fn = model.decode_inputs(params, tokens, length, n)
  key = jax.random.PRNGKey(5)
  if method == "arithmetic":
    return arithmetic_sample(inputs, cache, fn, 1, key, num_decodes=n, topk=0,
                             code_resolution=1.0 / n, temperature=temperature)
  if method == "ancestral":
    return ancestral_sample(inputs, cache, fn, 1, key, num_decodes=n, topk=0,
                            temperature=temperature)
  return beam_search(inputs, cache, fn, 1, num_decodes=n, alpha=0.6)


# Random-weight mT5-small is nearly flat over its 250,112 tokens: at T = 1
# a token holds ~4e-6 of probability, about the float32 rounding of the
# logits, which any two XLA programs round differently. An arithmetic code
# that falls that close to a token boundary may pick the neighbour in
# either layout (as between T5X and us: README), and the rest of its sample
# differs. So on mT5-small arithmetic samples are checked as samples of the
# same model (their log-probs are the T5X-style model's own), not token for
# token; tiny (64 tokens) and the other methods are checked token for token.
@pytest.mark.slow
@pytest.mark.parametrize("name,n,length,temperature",
                         [("tiny", 8, 10, 1.0), ("small", 4, 5, 0.2)])
@pytest.mark.parametrize("method", ["arithmetic", "ancestral", "beam"])
def test_protocol_path_gives_t5x_style_outputs(name, n, length, temperature,
                                               method):
  models = _models(name)
  params = _params(name)
  tokens = np.array(jax.random.randint(jax.random.PRNGKey(1), (3, 9), 2, 60))
  tokens[1, 6:] = 0  # padding must stay invisible in both layouts
  out = {c: jax.jit(lambda p, t, m=m: _decode(m, p, t, method, n, length,
                                               temperature))(params, tokens)
         for c, m in models.items()}
  shared, t5x = out[CrossKV.PER_INPUT], out[CrossKV.PER_SAMPLE]
  # Log-probs within 1e-5 at T = 1; tempered log-probs scale the logits'
  # rounding by 1 / T. Plus RTOL relative to the score (see RTOL).
  atol = 1e-5 / (1.0 if method == "beam" else temperature)
  if name == "small" and method == "arithmetic":
    _check_samples_of(models[CrossKV.PER_SAMPLE], params, tokens, shared,
                      temperature, atol)
  else:
    np.testing.assert_array_equal(shared[0], t5x[0])
    np.testing.assert_allclose(shared[1], t5x[1], rtol=RTOL, atol=atol)
  # Not a vacuous comparison: the samples differ from each other.
  assert len({tuple(r) for r in np.asarray(t5x[0]).reshape(-1, length)}) > 3


def _check_samples_of(model, params, encoder_tokens, out, temperature, atol):
  """The decodes' scores are `model`'s teacher-forced log-probs of them."""
  tokens, scores = np.asarray(out[0]), np.asarray(out[1])
  expected = teacher_forced_log_probs(model, params, encoder_tokens, tokens,
                                      temperature=temperature)
  np.testing.assert_allclose(scores, expected, rtol=0, atol=2 * atol)


@pytest.mark.slow
def test_row_context_groups_rows_by_input():
  model = EncoderDecoderModel(preset("tiny"))
  cfg = model.config
  params = model.init(jax.random.PRNGKey(0))
  tokens = jnp.array([[5, 6, 7, 0], [8, 9, 1, 0], [4, 4, 4, 4]])
  _, _, context = model.decode_start(params, tokens, 3)
  # A device holding rows 4..7 of N = 6 samples per input: groups of
  # gcd(6, 4) = 2 rows; rows 4, 5 decode input 0, rows 6, 7 input 1.
  rows = model.row_context(params, context, jnp.arange(4, 8), 6)
  assert set(rows) == {"cross", "mask"}
  np.testing.assert_array_equal(rows["mask"], np.asarray(tokens[:2] > 0))
  layer = rows["cross"]["layer_1"]
  assert layer["key"].shape == (2, 4, cfg.num_heads, cfg.d_kv)
  expected = model.module.apply({"params": params}, context["encoded"][:2],
                                method=model.module.cross_kv)["layer_1"]
  np.testing.assert_array_equal(layer["value"], expected["value"])
  # Whole inputs on the device: one projection per input, none per sample.
  rows = model.row_context(params, context, jnp.arange(12, 18), 6)
  assert rows["cross"]["layer_0"]["key"].shape[0] == 1
  np.testing.assert_array_equal(rows["mask"], np.asarray(tokens[2:] > 0))
  assert [group_size(n, r) for n, r in [(6, 4), (6, 12), (16, 4), (1, 8)]] == [
      2, 6, 4, 1]


@pytest.mark.slow
def test_per_sample_layout_holds_what_per_input_does_not():
  """The compiled T5X-style program holds the keys/values of every row (its
  temporaries exceed the per-input program's by at least that N-fold copy)."""
  n, batch, source, length = 32, 2, 64, 8
  cfg = preset("tiny")
  models = _models("tiny")
  params = _params("tiny")
  tokens = jnp.ones((batch, source), jnp.int32) * 3
  temp = {}
  for c, m in models.items():
    fn = jax.jit(lambda p, t, m=m: _decode(m, p, t, "arithmetic", n, length))
    temp[c] = fn.lower(params, tokens).compile().memory_analysis(
    ).temp_size_in_bytes
  kv_per_row = (cfg.num_decoder_layers * 2 * source * cfg.num_heads *
                cfg.d_kv * 4)
  assert temp[CrossKV.PER_SAMPLE] - temp[CrossKV.PER_INPUT] >= (
      (n - 1) * batch * kv_per_row)


@pytest.mark.slow
def test_bad_options_are_refused():
  with pytest.raises(ValueError, match="cross_kv must be one of"):
    EncoderDecoderModel(preset("tiny"), cross_kv="shared")
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  _, cache, context = model.decode_start(params, jnp.ones((2, 4), jnp.int32), 3)
  rows = model.row_context(params, context, jnp.arange(4), 2)  # 2 groups
  from arithmetic_decoding.models.encoder_decoder import init_cache
  from arithmetic_decoding.protocol import DecodingState
  state = DecodingState(cur_index=jnp.zeros(3, jnp.int32),
                        sequences=jnp.zeros((3, 3), jnp.int32),
                        cur_token=jnp.zeros((3, 1), jnp.int32),
                        cache=init_cache(model.config, 3, 3))
  with pytest.raises(ValueError, match="rows do not form groups"):
    model.step_fn(params, rows)(state)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
  out = tmp_path_factory.mktemp("crosskv") / "crosskv.npz"
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run([sys.executable, str(WORKER), str(out), "crosskv",
                         json.dumps(CROSS_KV_CASES)],
                        env=env, capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return dict(np.load(out))


def _by_tokens(tokens, scores):
  """Each input's samples in lexicographic order of their tokens: outputs
  come sorted by log-prob, and two samples whose log-probs are equal to the
  last bits may come in either order."""
  order = np.array([np.lexsort(row.T[::-1]) for row in tokens])
  return (np.take_along_axis(tokens, order[:, :, None], 1),
          np.take_along_axis(scores, order, 1))


@pytest.mark.slow
@pytest.mark.parametrize("case", CROSS_KV_CASES,
                         ids=lambda c: f"{c[0]}-{c[1][0]}x{c[1][1]}-b{c[2]}-n{c[3]}")
@pytest.mark.parametrize("method", ["arithmetic", "ancestral", "beam"])
def test_sharded_decodes_match_t5x_style(sharded, case, method):
  name, shape, batch, n, length, temperature = case
  tag = f"{name}/{shape[0]}x{shape[1]}/b{batch}/n{n}/{method}"
  shared, shared_scores = _by_tokens(sharded[f"{tag}/per_input/tokens"],
                                     sharded[f"{tag}/per_input/scores"])
  t5x, t5x_scores = _by_tokens(sharded[f"{tag}/per_sample/tokens"],
                               sharded[f"{tag}/per_sample/scores"])
  assert shared.shape == (batch, n, length)
  atol = 1e-5 / (1.0 if method == "beam" else temperature)
  np.testing.assert_array_equal(shared, t5x)
  np.testing.assert_allclose(shared_scores, t5x_scores, rtol=RTOL, atol=atol)
  distinct = len({tuple(r) for r in t5x.reshape(-1, length)})
  assert distinct >= min(batch * n, 8) // 2, distinct
