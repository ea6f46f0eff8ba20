"""Group rollouts: codes from (seed, step, prompt id), samples independent of
how they are batched, per-token log-probs equal to an independent reference.

On the tiny Llama- and Gemma-style models written as GGUF files (as in
test_llm.py):
- codes: a lattice per prompt, independent of the other prompts; van der
  Corput and iid groups are prefixes of larger ones; a new step, a new shift.
- a sample (prompt, code) has the same tokens and log-probs, bit for bit,
  decoded alone, inside a batch of other prompts (of other lengths), as
  part of a larger group, and spread over 8 devices (subprocess, slow);
- every first token is the token whose interval of the exact float64
  codebook holds the code (the inverse-CDF rule, iid codes included);
- per-token log-probs equal the float64 reference's, and sum to the
  decode loop's log-probs.
"""

import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from arithmetic_decoding.llm import LLM
from arithmetic_decoding.models.decoder_config import TINY
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from arithmetic_decoding.rollouts import (group_advantages, group_codes,
                                          group_rollouts, noise_ids)
from gguf_files import vocab_size, write_tiny
from test_decoder_only import reference_logits

KW = dict(max_new_tokens=6, rows_per_call=4, temperature=1.0)


def _config(arch):
  return dataclasses.replace(TINY[arch], vocab_size=vocab_size(arch))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  out = {}
  for arch in sorted(TINY):
    model = DecoderOnlyModel(_config(arch))
    params = jax.tree_util.tree_map(lambda x: np.asarray(x) * 4.0,
                                    model.init(jax.random.PRNGKey(0)))
    path = write_tiny(tmp_path_factory.mktemp(arch) / "f32.gguf",
                      _config(arch), params,
                      sliding_pattern=3 if arch == "gemma3" else None)
    out[arch] = (LLM.from_gguf(path, verbose=False), params, str(path))
  return out


def test_codes_are_per_prompt_lattices_and_prefixes():
  codes = group_codes(0, 5, [3, 8, 1], 8)
  for row in codes:
    np.testing.assert_allclose(np.diff(np.sort(row)), 1 / 8, atol=1e-6)
  alone = group_codes(0, 5, [8], 8)
  assert np.array_equal(alone[0], codes[1])
  assert not np.array_equal(group_codes(0, 6, [8], 8), alone)  # a new step
  assert not np.array_equal(group_codes(1, 5, [8], 8), alone)  # a new seed
  for scheme in ("van_der_corput", "iid"):
    small = group_codes(0, 5, [8], 4, scheme)
    large = group_codes(0, 5, [8], 16, scheme)
    assert np.array_equal(small[0], large[0, :4])
  vdc = group_codes(0, 5, [8], 16, "van_der_corput")[0]
  np.testing.assert_allclose(np.diff(np.sort(vdc[:4])), 1 / 4, atol=1e-6)
  with pytest.raises(ValueError, match="per-prompt codes"):
    group_codes(0, 0, [1], 4, "lattice")  # not random: biased


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_sample_does_not_depend_on_its_batch(tiny, arch):
  llm = tiny[arch][0]
  a, other, short = (("hehe he", "h", "he eh hehe ehe h") if arch == "llama"
                     else ("ab", "b", "a ab b ba ab"))
  alone = group_rollouts(llm, a, 4, prompt_ids=[7], seed=1, step=2,
                         scheme="van_der_corput", **KW)
  batch = group_rollouts(llm, [other, a, short], 4, prompt_ids=[3, 7, 9],
                         seed=1, step=2, scheme="van_der_corput", **KW)
  larger = group_rollouts(llm, [a, other], 8, prompt_ids=[7, 3], seed=1,
                          step=2, scheme="van_der_corput", **KW)
  np.testing.assert_array_equal(alone.codes[0], batch.codes[1])
  np.testing.assert_array_equal(alone.codes[0], larger.codes[0, :4])
  for other_run, rows in ((batch, (1, slice(0, 4))),
                          (larger, (0, slice(0, 4)))):
    np.testing.assert_array_equal(alone.tokens[0], other_run.tokens[rows])
    assert alone.log_probs[0].tobytes() == other_run.log_probs[rows].tobytes()
    assert (alone.token_log_probs[0].tobytes() ==
            other_run.token_log_probs[rows].tobytes())
  # Samples were long enough for spent codes: noise ids, not places, decide.
  assert alone.log_probs.min() < np.log(2.0 ** -22)
  # The same codes under another row id are another sample.
  moved = group_rollouts(llm, a, 4, prompt_ids=[8], seed=1, step=2,
                         codes=alone.codes, **KW)
  assert not np.array_equal(moved.tokens, alone.tokens)


@pytest.mark.parametrize("scheme", [
    "shifted_lattice", pytest.param("iid", marks=pytest.mark.slow)])
def test_first_tokens_and_token_log_probs_match_the_reference(tiny, scheme):
  llm, params, _ = tiny["llama"]
  out = group_rollouts(llm, ["hehe he", "eh"], 8, prompt_ids=[0, 1], seed=4,
                       scheme=scheme, **KW)
  for b, prompt in enumerate(["hehe he", "eh"]):
    ids = llm.encode(prompt)
    first = reference_logits(llm.config, params, np.array(ids))[-1]
    p = np.exp(first - first.max())
    p /= p.sum()
    upper = np.cumsum(p)
    for j in range(8):
      code = out.codes[b, j]
      assert out.tokens[b, j, 0] == np.searchsorted(upper, code, side="right")
      n = int(out.mask[b, j].sum())
      seq = ids + out.tokens[b, j, :n].tolist()
      logits = reference_logits(llm.config, params, np.array(seq))
      logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
      ref = [logp[len(ids) + i - 1, seq[len(ids) + i]] for i in range(n)]
      np.testing.assert_allclose(out.token_log_probs[b, j, :n], ref,
                                 rtol=1e-4, atol=1e-4)
      assert np.all(out.token_log_probs[b, j, n:] == 0)
      np.testing.assert_allclose(out.token_log_probs[b, j].sum(),
                                 out.log_probs[b, j], rtol=1e-4, atol=1e-4)
  if scheme == "shifted_lattice":
    np.testing.assert_allclose(np.diff(np.sort(out.codes, axis=1), axis=1),
                               1 / 8, atol=1e-6)


def test_group_advantages_and_errors(tiny):
  adv = group_advantages([[1, 0, 0, 0], [2, 2, 2, 2]], normalize=False)
  np.testing.assert_allclose(adv, [[0.75, -0.25, -0.25, -0.25], [0, 0, 0, 0]])
  norm = group_advantages([[1, 0, 0, 0]])
  np.testing.assert_allclose(norm, [[0.75, -0.25, -0.25, -0.25]] /
                             (np.sqrt(3) / 4 + 1e-6))
  llm = tiny["llama"][0]
  with pytest.raises(ValueError, match="distinct"):
    group_rollouts(llm, ["h", "e"], 2, prompt_ids=[1, 1], **KW)
  with pytest.raises(ValueError, match="one id per prompt"):
    group_rollouts(llm, ["h", "e"], 2, prompt_ids=[1], **KW)
  with pytest.raises(ValueError, match="group_size"):
    group_rollouts(llm, "h", 0, **KW)
  with pytest.raises(TypeError, match="prompt_ids"):
    noise_ids(0, 0, [[1]], np.zeros((1, 1), np.float32))
  with pytest.raises(ValueError, match="codes"):
    group_rollouts(llm, "h", 2, codes=np.array([[0.5, 1.5]]), **KW)


_DEVICES = """
import numpy as np, jax
from arithmetic_decoding.llm import LLM
from arithmetic_decoding.rollouts import group_rollouts
llm = LLM.from_gguf({path!r}, verbose=False)
assert len(jax.devices()) == 8
kw = dict(prompt_ids=[5, 6, 7], seed=2, step=1, max_new_tokens=6,
          rows_per_call=4)
one = group_rollouts(llm, ["hehe", "h", "eh he"], 8, **kw)
eight = group_rollouts(llm, ["hehe", "h", "eh he"], 8, devices=jax.devices(),
                       **kw)
print(np.array_equal(one.tokens, eight.tokens),
      one.log_probs.tobytes() == eight.log_probs.tobytes(),
      one.token_log_probs.tobytes() == eight.token_log_probs.tobytes())
"""


@pytest.mark.slow
def test_same_samples_on_one_or_eight_devices(tiny):
  env = dict(os.environ,
             XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  done = subprocess.run(
      [sys.executable, "-c", textwrap.dedent(_DEVICES.format(
          path=tiny["llama"][2]))], capture_output=True, text=True, env=env,
      timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-3:] == ["True", "True", "True"]
