"""What the LLM path's batch invariance rests on, on the real models here:
a row's logits at a decode step are bitwise the same at any place among 64,
80, 128, 160 or 256 rows (counts the LLM entry points keep), with 64 or 160
cache positions (`docs/engine.md`). Where
this fails, a prompt's samples may differ in a rare token between batches
(and the sampling server's load independence fails with it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_apps import llms
from arithmetic_decoding.models.decoder_only import DecoderOnly


@pytest.mark.parametrize("name", sorted(llms.MODELS))
def test_a_rows_logits_do_not_depend_on_its_batch(name):
  llm = llms.load(name, verbose=False)
  model, cfg = llm.model, llm.config
  step = jax.jit(lambda p, tok, idx, cache: model.module.apply(
      {"params": p}, tok, idx, cache, method=DecoderOnly.decode_step)[0])
  heads, width = cfg.num_kv_heads, cfg.head_dim
  mine = jax.random.normal(jax.random.PRNGKey(4), (heads, width, 64)) * 0.3
  results = []
  for rows, slots, at in [(64, 64, 0), (64, 64, 63), (80, 64, 71),
                          (128, 160, 77), (160, 160, 130), (256, 64, 200)]:
    others = jax.random.normal(jax.random.PRNGKey(rows + slots),
                               (rows, heads, width, slots)) * 0.3
    keys = others.at[at].set(jnp.pad(mine, ((0, 0), (0, 0),
                                            (0, slots - 64))))
    cache = {f"layer_{i}": {"key": keys, "value": keys * 0.5}
             for i in range(cfg.num_layers)}
    token = (jnp.arange(rows)[:, None] % 97 + 3).at[at].set(5)
    index = jnp.full((rows,), 17).at[at].set(20)
    results.append(np.asarray(step(llm.params, token, index, cache))[at])
  for other in results[1:]:
    np.testing.assert_array_equal(other, results[0])
