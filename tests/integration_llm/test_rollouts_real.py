"""Group rollouts of the real SmolLM2-135M are independent of batching, and
their per-token log-probs agree with transformers' (the independent
runtime) on the same tokens.

A prompt's 4 van der Corput codes decoded alone, inside a batch with two
prompts of other lengths, and as the first half of a group of 8: the same
tokens and log-probs bit for bit; and on 8 emulated devices (subprocess).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from arithmetic_apps import llms

pytest.importorskip("torch")
pytest.importorskip("transformers")
import runtime  # noqa: E402  (tests/integration_llm/runtime.py)

PROMPT = "Write a haiku about the sea."
OTHERS = ["Hi", "What is the capital of France? Answer in one word, then "
          "explain the history of the city in detail."]
KW = dict(seed=3, step=2, scheme="van_der_corput", max_new_tokens=24,
          chat=True, rows_per_call=8, temperature=1.0)


@pytest.fixture(scope="module")
def smollm2():
  return llms.load("smollm2-135m")


def test_rollouts_do_not_depend_on_the_batch(smollm2):
  from arithmetic_decoding.rollouts import group_rollouts
  alone = group_rollouts(smollm2, PROMPT, 4, prompt_ids=[7], **KW)
  batch = group_rollouts(smollm2, [OTHERS[0], PROMPT, OTHERS[1]], 4,
                         prompt_ids=[1, 7, 2], **KW)
  larger = group_rollouts(smollm2, PROMPT, 8, prompt_ids=[7], **KW)
  for other, rows in ((batch, (1, slice(0, 4))), (larger, (0, slice(0, 4)))):
    np.testing.assert_array_equal(alone.tokens[0], other.tokens[rows])
    assert alone.log_probs[0].tobytes() == other.log_probs[rows].tobytes()
  assert alone.log_probs.min() < np.log(2.0 ** -22)  # codes were spent
  # transformers' log-probs of the same tokens (temperature 1).
  model, _ = runtime.hf(llms.gguf_path("smollm2-135m"))
  prompt_ids = smollm2.encode(smollm2.chat_prompt(PROMPT))
  for j in range(4):
    n = int(alone.mask[0, j].sum())
    seq = prompt_ids + alone.tokens[0, j, :n].tolist()
    logits = runtime.hf_logits(model, seq).astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    ref = [logp[len(prompt_ids) + i - 1, seq[len(prompt_ids) + i]]
           for i in range(n)]
    np.testing.assert_allclose(alone.token_log_probs[0, j, :n], ref,
                               atol=2e-3, rtol=1e-3)


_DEVICES = """
import numpy as np, jax
from arithmetic_apps import llms
from arithmetic_decoding.rollouts import group_rollouts
llm = llms.load("smollm2-135m")
kw = dict(prompt_ids=[1, 7, 2], seed=3, step=2, max_new_tokens=16, chat=True,
          rows_per_call=8)
prompts = {prompts!r}
one = group_rollouts(llm, prompts, 8, **kw)
eight = group_rollouts(llm, prompts, 8, devices=jax.devices(), **kw)
print(np.array_equal(one.tokens, eight.tokens),
      one.log_probs.tobytes() == eight.log_probs.tobytes())
"""


def test_rollouts_on_one_or_eight_devices():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  code = _DEVICES.format(prompts=[OTHERS[0], PROMPT, OTHERS[1]])
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, env=env, timeout=900, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-2:] == ["True", "True"]
