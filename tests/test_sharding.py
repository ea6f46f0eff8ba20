"""Sharded decoding on emulated CPU devices (subprocesses: XLA_FLAGS must be
set before jax starts) and on two processes (jax.distributed, gloo)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_decoding.sharding import (LOGICAL_AXIS_RULES, DecodeSetup,
                                          Method, make_sharded_decode,
                                          param_shardings)
from arithmetic_apps.topology import (available_topologies, load_topology,
                                          make_mesh)
from helpers import teacher_forced_log_probs

ROOT = pathlib.Path(__file__).parent.parent
WORKER = ROOT / "tests" / "multidevice_worker.py"
# Data meshes: local batches of 4 and 1 inputs, identical samples asserted
# (the model meshes hold 2, 4 and 8 inputs per device). The 4x1 mesh of
# `scripts/sharding_report.py` (2 inputs per device) is left out: five
# fewer compiles of the slow tier.
DATA_MESHES = ("2x1", "8x1")
MODEL_MESHES = ("4x2", "2x4", "1x8")
EOS = 1


def _run_worker(tmp_path, scenario, *extra, suffix=".npz"):
  out = tmp_path / f"{scenario}{suffix}"
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run([sys.executable, str(WORKER), str(out), scenario, *extra],
                        env=env, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return out


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
  path = _run_worker(tmp_path_factory.mktemp("meshes"), "meshes",
                     json.dumps(DATA_MESHES + MODEL_MESHES))
  return dict(np.load(path))


def _close_log_probs(a, b):
  # Identical tokens; log-probs summed over up to 12 tokens agree to 1e-5
  # relative (XLA rounds a row's logits differently with a different local
  # batch or a model split: see README).
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("method", [m.value for m in Method])
def test_data_parallel_meshes_give_identical_samples(meshes, method):
  ref_tokens = meshes[f"{method}/1x1/tokens"]
  ref_scores = meshes[f"{method}/1x1/scores"]
  assert ref_tokens.shape == (8, 16, 12)
  for shape in DATA_MESHES:
    np.testing.assert_array_equal(meshes[f"{method}/{shape}/tokens"],
                                  ref_tokens, err_msg=shape)
    _close_log_probs(meshes[f"{method}/{shape}/scores"], ref_scores)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["arithmetic", "ancestral"])
def test_model_parallel_samples_are_valid_and_match(meshes, method):
  ref = meshes[f"{method}/1x1/tokens"]
  for shape in MODEL_MESHES:
    tokens = meshes[f"{method}/{shape}/tokens"]
    scores = meshes[f"{method}/{shape}/scores"]
    agree = float(np.mean(tokens == ref))
    assert agree >= 0.99, f"{method} {shape}: {agree:.2%} of tokens agree"
    # Valid: in the vocabulary, padding only after EOS, and the reported
    # log-probs are the model's own (recomputed on one device).
    assert tokens.min() >= 0 and tokens.max() < 64
    eos_seen = np.cumsum(tokens == EOS, axis=-1) - (tokens == EOS) > 0
    assert np.all(tokens[eos_seen] == 0)
    model = EncoderDecoderModel(preset("tiny"))
    expected = teacher_forced_log_probs(
        model, model.init(jax.random.PRNGKey(0)), meshes["encoder_tokens"],
        tokens, EOS)
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_model_parallel_beam_search_matches(meshes):
  ref = meshes["beam/1x1/tokens"]
  for shape in MODEL_MESHES:
    agree = float(np.mean(meshes[f"beam/{shape}/tokens"] == ref))
    assert agree >= 0.99, f"beam {shape}: {agree:.2%} of tokens agree"


@pytest.mark.slow
def test_full_resolution_codes_are_mesh_sensitive(meshes):
  """Why the sharded default is code_resolution = 1/N: with every float32 bit
  of the code in use, a sample's tail depends on the last bits of the
  logits, which differ across meshes. Recorded, not hidden: the first
  tokens still agree on every mesh, later ones do not on the meshes that
  split the model, whose all-reduces sum a row's logits in another order
  than one device does. (A data split changes only the local batch; whether
  that moves the last bits depends on the machine's kernels, so it is not
  asserted.)"""
  ref = meshes["fullcode/1x1/tokens"]
  for shape in DATA_MESHES + MODEL_MESHES:
    tokens = meshes[f"fullcode/{shape}/tokens"]
    # Each input's first tokens (decided by the top bits of its codes) are
    # the same multiset; samples come sorted by log-prob, which may reorder.
    np.testing.assert_array_equal(np.sort(tokens[..., 0], axis=1),
                                  np.sort(ref[..., 0], axis=1))
    if shape in MODEL_MESHES:
      assert np.mean(tokens == ref) < 0.9, shape


@pytest.fixture(scope="module")
def hlo_report(tmp_path_factory):
  path = _run_worker(tmp_path_factory.mktemp("hlo"), "hlo", suffix=".json")
  return json.loads(path.read_text())


def _decode_loop(loops):
  """The while loop that runs the model (the one with matmuls)."""
  with_model = [loop for loop in loops if loop["dots"] > 0]
  assert len(with_model) == 1, loops
  return with_model[0]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["greedy", "arithmetic", "ancestral"])
def test_data_parallel_sampling_loop_has_no_collectives(hlo_report, method):
  report = hlo_report[method]
  for loop in report["loops"]:
    collectives = {k: v for k, v in loop.items() if k != "dots"}
    assert not collectives, f"{method} loop has collectives: {collectives}"
  assert _decode_loop(report["loops"])["dots"] > 0
  # Outside the loop only the results are gathered (decodes, log-probs,
  # codes: sharded rows -> replicated outputs); the encoder, replicated on
  # every device, gathers nothing.
  assert set(report["outside"]) <= {"all-gather"}, report["outside"]
  assert report["outside"].get("all-gather", 0) <= 3, report["outside"]


@pytest.mark.slow
def test_per_step_cross_projection_is_hoisted_in_t5x_layout(hlo_report):
  """T5X's layout projects cross-attention keys/values from its per-sample
  copy at every step; the projection is loop-invariant and XLA hoists it,
  so both layouts' decode loops run the same matmuls (README, "Cross-
  attention keys and values")."""
  ours = _decode_loop(hlo_report["arithmetic"]["loops"])["dots"]
  t5x = _decode_loop(hlo_report["arithmetic_per_sample"]["loops"])["dots"]
  assert ours == t5x == 27, (ours, t5x)


@pytest.mark.slow
def test_beam_search_and_plain_jit_loops_communicate(hlo_report):
  beam = _decode_loop(hlo_report["beam"]["loops"])
  assert sum(v for k, v in beam.items() if k.startswith("body:")) > 0, beam
  assert sum(v for k, v in beam.items() if k.startswith("condition:")) > 0, beam
  # The same arithmetic loop under plain jit (no shard_map) all-reduces its
  # stopping test every step.
  gspmd = _decode_loop(hlo_report["arithmetic_gspmd"]["loops"])
  assert gspmd.get("condition:all-reduce", 0) >= 1, gspmd


@pytest.mark.slow
def test_two_processes_equal_one_process_with_eight_devices(tmp_path, meshes):
  """Two processes of 4 devices each (gloo) decode what one process of 8
  devices decodes on the same 8x1 mesh of the 2x2x2 topology (the
  `meshes` run's, which equals one device's)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  outs = [tmp_path / f"host{i}.npz" for i in range(2)]
  procs = [subprocess.Popen([sys.executable, str(WORKER), str(outs[i]),
                             "multihost", str(i), port], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True) for i in range(2)]
  for proc in procs:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-4000:]
  for out in outs:
    host = np.load(out)
    assert (int(host["process_count"]), int(host["device_count"]),
            int(host["local_device_count"])) == (2, 8, 4)
    for method in ("arithmetic", "ancestral"):
      np.testing.assert_array_equal(host[f"{method}/tokens"],
                                    meshes[f"{method}/8x1/tokens"])
      np.testing.assert_allclose(host[f"{method}/scores"],
                                 meshes[f"{method}/8x1/scores"], rtol=1e-6)


# --- In-process checks (one CPU device) ----------------------------------


def test_topology_files():
  assert available_topologies() == ("v4-1x1x1", "v4-1x2x1", "v4-2x2x1",
                                    "v4-2x2x2")
  expected = {"v4-1x1x1": (1, 1, "v4-8", (1, 1, 1)),
              "v4-1x2x1": (2, 1, "v4-8", (1, 2, 1)),
              "v4-2x2x1": (4, 1, "v4-8", (2, 2, 1)),
              "v4-2x2x2": (8, 2, "v4-16", (2, 2, 1))}
  for name, (chips, hosts, accel, bounds) in expected.items():
    topo = load_topology(name)
    assert (topo.chips, topo.hosts, topo.accelerator_type,
            topo.chips_per_host_bounds) == (chips, hosts, accel, bounds)
    assert topo.hbm_bytes_per_chip == 32 * 2**30
    assert all(d * m == chips for d, m in topo.mesh_shapes)
    assert topo.mesh_shapes[0] == (chips, 1)
    sub_host = chips < 4
    assert bool(topo.environment) == sub_host
    if sub_host:
      assert topo.environment["TPU_CHIPS_PER_PROCESS_BOUNDS"] == ",".join(
          map(str, bounds))
      assert len(topo.environment["TPU_VISIBLE_CHIPS"].split(",")) == chips


def test_mesh_builder_checks_devices_and_shapes():
  topo = load_topology("v4-1x1x1")
  mesh = make_mesh(topo)
  assert mesh.axis_names == ("data", "model") and mesh.devices.shape == (1, 1)
  with pytest.raises(ValueError, match="mesh_shape"):
    make_mesh(topo, (2, 1))
  with pytest.raises(ValueError, match="needs 8 devices"):
    make_mesh(load_topology("v4-2x2x2"))
  with pytest.raises(ValueError, match="topology must be one of"):
    load_topology("v5-2x2")


def test_parameter_shardings_follow_the_rules_table():
  model = EncoderDecoderModel(preset("tiny"))
  mesh = make_mesh(load_topology("v4-1x1x1"))
  shardings = param_shardings(model, mesh)
  rules = dict(LOGICAL_AXIS_RULES)
  assert shardings["token_embedder"].spec == jax.sharding.PartitionSpec(
      rules["vocab"], rules["embed"])
  assert shardings["decoder_0"]["mlp"]["wi_0"].spec == (
      jax.sharding.PartitionSpec(None, "model"))
  assert rules["batch"] == "data" and rules["heads"] == "model"


@pytest.mark.slow
def test_one_device_equals_arithmetic_sample_at_resolution_one_over_n():
  """The sharded path is `arithmetic_sample` with code_resolution = 1/N."""
  model = EncoderDecoderModel(preset("tiny"))
  params = model.init(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 6), 1, 64)
  key, n, length = jax.random.PRNGKey(5), 4, 8
  decode = make_sharded_decode(model, make_mesh(load_topology("v4-1x1x1")),
                               DecodeSetup(num_decodes=n,
                                           max_decode_len=length,
                                           temperature=0.8))
  sharded, sharded_scores = decode(params, tokens, key)
  inputs, cache, step = model.decode_inputs(params, tokens, length, n)
  plain, plain_scores = arithmetic_sample(inputs, cache, step, EOS, key,
                                          num_decodes=n, topk=0,
                                          temperature=0.8,
                                          code_resolution=1.0 / n)
  np.testing.assert_array_equal(sharded, plain)
  np.testing.assert_allclose(sharded_scores, plain_scores, rtol=1e-6)


def test_setup_and_call_validation():
  model = EncoderDecoderModel(preset("tiny"))
  mesh = make_mesh(load_topology("v4-1x1x1"))
  with pytest.raises(ValueError, match="method"):
    DecodeSetup(method="nucleus")
  with pytest.raises(ValueError, match="num_decodes"):
    DecodeSetup(num_decodes=0)
  with pytest.raises(ValueError, match="code_resolution"):
    DecodeSetup(code_resolution=2.0)
  with pytest.raises(ValueError, match="alpha"):
    DecodeSetup(alpha=-1.0)
  bad_mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1),
                               ("x", "y"))
  with pytest.raises(ValueError, match="mesh axes"):
    make_sharded_decode(model, bad_mesh, DecodeSetup())
  decode = make_sharded_decode(model, mesh, DecodeSetup(num_decodes=2,
                                                        max_decode_len=4))
  params = model.init(jax.random.PRNGKey(0))
  out, scores = decode(params, jnp.ones((3, 5), jnp.int32),
                       jax.random.PRNGKey(1))
  assert out.shape == (3, 2, 4) and scores.shape == (3, 2)
  assert np.all(np.diff(np.asarray(scores), axis=1) >= 0)


@pytest.fixture(scope="module")
def decoder_meshes(tmp_path_factory):
  path = _run_worker(tmp_path_factory.mktemp("decoder"), "decoder")
  return dict(np.load(path))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma3", "llama"])
@pytest.mark.parametrize("method", [m.value for m in Method])
def test_decoder_only_samples_identical_on_every_mesh(decoder_meshes, arch,
                                                      method):
  """Prompts of different lengths, prefilled and decoded from their own
  initial_index: the same samples on data meshes of 1 and 8 devices (two
  rows of an input's four on each);
  with a model axis (2x2, 4x2, 2x4: heads, feed-forward and vocabulary
  split; Gemma's one key/value head replicated) at least 99% of tokens
  agree, for every method. With a model axis the shards' loops run the
  same number of steps (`loop.loop_fns`'s `stop_together`); before, a
  shard that finished first left the others waiting in a collective of
  the next step, and arithmetic sampling stopped XLA:CPU with a
  rendezvous timeout."""
  ref = decoder_meshes[f"{arch}/{method}/1x1/tokens"]
  prompts = decoder_meshes["prompts"]
  lengths = (prompts != 0).sum(1)
  scores = decoder_meshes[f"{arch}/{method}/1x1/scores"]
  for b, n in enumerate(lengths):
    # Every result starts with its prompt (beam search may return fewer
    # than K beams: the rest are empty, scored -1e7, as in T5X).
    real = scores[b] > -1e6
    assert real.any() and np.all(ref[b][real][:, :n] == prompts[b, :n])
  for shape in ("8x1",):
    np.testing.assert_array_equal(
        decoder_meshes[f"{arch}/{method}/{shape}/tokens"], ref, err_msg=shape)
    _close_log_probs(decoder_meshes[f"{arch}/{method}/{shape}/scores"],
                     decoder_meshes[f"{arch}/{method}/1x1/scores"])
  for shape in ("2x2", "4x2", "2x4"):
    agree = np.mean(decoder_meshes[f"{arch}/{method}/{shape}/tokens"] == ref)
    assert agree >= 0.99, f"{arch} {method} {shape}: {agree:.2%}"
