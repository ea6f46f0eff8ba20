"""The decoder-only family (Llama-style, Gemma 3) and its T5X-protocol decoding.

Checked against an independent float64 numpy forward pass written from the
architectures' definitions (RoPE as complex rotations, grouped-query
attention by repeating key/value heads), then: prefilled decoding equals
recomputing every prefix, a prompt's samples do not depend on its batch
neighbours or on the prefill, several stop tokens end a row at the first of
them, greedy through the protocol equals the argmax of recomputed logits.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import Method, arithmetic_sample
from arithmetic_decoding.models.decoder_config import TINY, DecoderConfig
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from arithmetic_decoding.models.decoder_only import init_cache
from helpers import one_fast

ARCHS = sorted(TINY)


def _rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def _rope(x, pos, base, scale, style):
  """x [T, heads, K] at positions [T], as complex rotations."""
  k = x.shape[-1]
  freq = base ** (-np.arange(0, k, 2) / k)  # [K/2]
  turn = np.exp(1j * (pos[:, None] / scale) * freq)[:, None, :]  # [T, 1, K/2]
  if style == "interleaved":
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * turn
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out
  z = (x[..., :k // 2] + 1j * x[..., k // 2:]) * turn
  return np.concatenate([z.real, z.imag], -1)


def reference_logits(cfg: DecoderConfig, params, tokens):
  """float64 logits [T, V] of one sequence, from the definitions."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  t = len(tokens)
  pos = np.arange(t, dtype=np.float64)
  x = p["embedding"][np.asarray(tokens)] * cfg.embed_scale
  gelu = lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                          (v + 0.044715 * v ** 3)))
  silu = lambda v: v / (1 + np.exp(-v))
  for i, kind in enumerate(cfg.layer_kinds):
    lp = p[f"layer_{i}"]
    a = lp["attention"]
    h = _rms(x, lp["attention_norm"], cfg.norm_eps)
    q = np.einsum("td,dhk->thk", h, a["query"])
    k = np.einsum("td,dhk->thk", h, a["key"])
    v = np.einsum("td,dhk->thk", h, a["value"])
    if cfg.qk_norm:
      q = _rms(q, a["query_norm"], cfg.norm_eps)
      k = _rms(k, a["key_norm"], cfg.norm_eps)
    local = kind == "sliding"
    base = cfg.rope_base_local if local else cfg.rope_base
    scale = 1.0 if local else cfg.rope_scale
    q = _rope(q, pos, base, scale, cfg.rope_style)
    k = _rope(k, pos, base, scale, cfg.rope_style)
    k = np.repeat(k, cfg.heads_per_kv, axis=1)  # [T, H, K]
    v = np.repeat(v, cfg.heads_per_kv, axis=1)
    scores = np.einsum("qhk,shk->hqs", q, k) * cfg.query_scale
    dist = pos[:, None] - pos[None, :]
    ok = dist >= 0
    if local:
      ok &= dist < cfg.sliding_window
    scores = np.where(ok[None], scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum("hqs,shk->qhk", w, v)
    o = np.einsum("thk,hkd->td", o, a["out"])
    if cfg.post_norms:
      o = _rms(o, lp["post_attention_norm"], cfg.norm_eps)
    x = x + o
    h = _rms(x, lp["mlp_norm"], cfg.norm_eps)
    m = lp["mlp"]
    act = silu if cfg.activation == "silu" else gelu
    f = (act(h @ m["gate"]) * (h @ m["up"])) @ m["down"]
    if cfg.post_norms:
      f = _rms(f, lp["post_mlp_norm"], cfg.norm_eps)
    x = x + f
  x = _rms(x, p["final_norm"], cfg.norm_eps)
  out = p["embedding"].T if cfg.tied_embedding else p["output"]
  return x @ out


@functools.lru_cache(maxsize=None)
def _model(arch, seed=0):
  """(model, params) of TINY[arch], made once per process (arrays are
  immutable: tests share them)."""
  model = DecoderOnlyModel(TINY[arch])
  params = model.init(jax.random.PRNGKey(seed))
  # Norm scales away from 1, so that a norm applied to the wrong tensor shows.
  leaves, tree = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
  new = [x * 2.0 * jax.random.uniform(k, x.shape) if "norm" in str(path) else
         x * 4.0 for (path, x), k in zip(leaves, keys)]
  return model, jax.tree_util.tree_unflatten(tree, new)


def _prompts():
  # Three prompts of lengths 5, 2, 7 (zeros after: the pad).
  rows = [[5, 9, 3, 12, 7], [33, 2], [8, 8, 8, 40, 41, 42, 43]]
  out = np.zeros((3, 7), np.int32)
  for b, r in enumerate(rows):
    out[b, :len(r)] = r
  return out


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_independent_reference(arch):
  model, params = _model(arch)
  tokens = jnp.array([[3, 17, 5, 60, 2, 2, 9, 31, 12]])
  ours = np.asarray(jax.jit(model.logits)(params, tokens))[0]
  ref = reference_logits(model.config, params, tokens[0])
  assert np.abs(ref).max() > 1.0  # not a degenerate model
  np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_bfloat16_parameters_stay_close(arch):
  model, params = _model(arch)
  cfg16 = dataclasses.replace(model.config, dtype="bfloat16")
  m16 = DecoderOnlyModel(cfg16)
  p16 = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), params)
  tokens = jnp.array([[3, 17, 5, 60, 2]])
  ours = np.asarray(jax.jit(m16.logits)(p16, tokens))[0]
  ref = reference_logits(model.config, params, tokens[0])
  # bfloat16 keeps 8 bits of mantissa: a few percent of the logit scale.
  assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()
  assert ours.dtype == np.float32


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_prefill_then_steps_equal_full_recompute(arch):
  """Each decode step's logits (prefilled cache, own position per row) equal
  the full forward pass over that row's prefix."""
  model, params = _model(arch)
  prompts = _prompts()
  length = 12
  inputs, cache, t2l = _decode_inputs(model, params, prompts, length)
  t2l = jax.jit(t2l)
  index = np.asarray(model.start_index(jnp.asarray(prompts)))
  assert index.tolist() == [5, 2, 7]
  seqs = [list(r[r != 0]) for r in prompts]
  from arithmetic_decoding.protocol import DecodingState
  for step in range(3):
    cur = index + step
    tokens = np.array([[s[-1]] for s in seqs], np.int32)
    state = DecodingState(cur_index=jnp.asarray(cur), sequences=inputs,
                          cur_token=jnp.asarray(tokens), cache=cache)
    logits, cache = t2l(state)
    for b, s in enumerate(seqs):
      ref = reference_logits(model.config, params, np.array(s))[-1]
      np.testing.assert_allclose(np.asarray(logits[b]), ref, rtol=0,
                                 atol=2e-4 * np.abs(ref).max())
    for b, s in enumerate(seqs):
      s.append(int(np.argmax(np.asarray(logits[b]))) or 1)


def _decode_inputs(model, params, prompts, length):
  """`model.decode_inputs` with its prefill compiled as one program (run op
  by op, every operation of the forward pass is a compile of its own)."""
  inputs, cache, context = jax.jit(model.decode_start, static_argnums=2)(
      params, jnp.asarray(prompts), length)
  return inputs, cache, model.step_fn(params, context)


def _sample(model, params, prompts, method, n=4, length=14, eos=1, steps=None,
            key=3, **kw):
  prompts = jnp.asarray(prompts)
  inputs, cache, t2l = _decode_inputs(model, params, prompts, length)
  return Method.of(method).decode(
      inputs, cache, t2l, eos, jax.random.PRNGKey(key), num_decodes=n,
      initial_index=model.start_index(prompts), max_decode_steps=steps, **kw)


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_greedy_equals_argmax_of_recomputed_logits(arch):
  model, params = _model(arch)
  prompts = _prompts()
  decodes, _ = _sample(model, params, prompts, "greedy", n=1, eos=63, steps=5)
  for b, row in enumerate(prompts):
    seq = list(row[row != 0])
    n = len(seq)
    got = np.asarray(decodes[b, 0])
    assert got[:n].tolist() == seq
    for i in range(5):
      ref = reference_logits(model.config, params, np.array(seq))[-1]
      seq.append(int(np.argmax(ref)))
    assert got[n:n + 5].tolist() == seq[n:]
    assert np.all(got[n + 5:] == 0)  # max_decode_steps = 5 per row


@pytest.mark.parametrize("arch", [
    "llama", pytest.param("gemma3", marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", ["arithmetic",
                                    pytest.param("ancestral",
                                                 marks=pytest.mark.slow)])
def test_samples_do_not_depend_on_batch_neighbours(arch, method):
  """Prompt 0 decodes the same with a short or a long neighbour (the other
  prompt changes the width, the padding and the cache length)."""
  model, params = _model(arch)
  p = _prompts()
  short = np.zeros((2, 5), np.int32)
  short[0], short[1, :2] = p[0, :5], [4, 4]
  long = np.zeros((2, 9), np.int32)
  long[0, :5], long[1] = p[0, :5], np.arange(10, 19)
  kw = dict(temperature=1.3, code_resolution=1 / 8)
  a, la = _sample(model, params, short, method, n=8, length=5 + 1 + 6, steps=6, **kw)
  b, lb = _sample(model, params, long, method, n=8, length=9 + 1 + 6, steps=6, **kw)
  np.testing.assert_array_equal(np.asarray(a[0, :, :11]), np.asarray(b[0, :, :11]))
  np.testing.assert_allclose(np.asarray(la[0]), np.asarray(lb[0]), rtol=1e-5)


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_prefill_equals_teacher_forcing_through_the_loop(arch):
  """initial_index + prefilled cache, or the prompt forced token by token
  from slot 0 through an empty cache: the same greedy decodes, and the same
  first sampled token for every code. (Later tokens of a 1/N-resolution
  code use the loop's step keys, which advance once per loop step, prompt
  steps included: the two paths draw different refresh noise.)"""
  model, params = _model(arch)
  prompts = jnp.asarray(_prompts())
  starts = np.asarray(model.start_index(prompts))
  length, n, key = 14, 8, jax.random.PRNGKey(5)
  inputs, cache, t2l = _decode_inputs(model, params, prompts, length)
  inputs0, cache0 = model.empty_start(prompts, length)
  for temperature in (0.0, 1.0):
    kw = dict(num_decodes=n, temperature=temperature, topk=0,
              code_resolution=1 / n, return_codes=True)
    a, la, ca = arithmetic_sample(inputs, cache, t2l, 1, key,
                                  initial_index=model.start_index(prompts),
                                  **kw)
    b, lb, cb = arithmetic_sample(inputs0, cache0, t2l, 1, key, **kw)
    a, b, ca, cb = map(np.asarray, (a, b, ca, cb))
    if temperature == 0.0:
      np.testing.assert_array_equal(a, b)
      np.testing.assert_allclose(np.asarray(la), np.asarray(lb), rtol=1e-5)
      continue
    for row in range(3):
      first_a = dict(zip(ca[row], a[row, :, starts[row]]))
      first_b = dict(zip(cb[row], b[row, :, starts[row]]))
      assert first_a == first_b
      assert len(set(first_a.values())) > 1


def test_several_stop_tokens_end_a_row_at_the_first():
  model, params = _model("llama")
  prompts = _prompts()
  kw = dict(temperature=2.0, code_resolution=1 / 16, return_codes=True)
  one, _, c1 = _sample(model, params, prompts, "arithmetic", n=16, length=20,
                       eos=7, **kw)
  both, _, c2 = _sample(model, params, prompts, "arithmetic", n=16, length=20,
                        eos=(7, 9), **kw)
  # Each input's samples come sorted by log-prob: align them by code.
  one = np.take_along_axis(np.asarray(one),
                           np.argsort(np.asarray(c1), 1)[:, :, None], 1)
  both = np.take_along_axis(np.asarray(both),
                            np.argsort(np.asarray(c2), 1)[:, :, None], 1)
  starts = (prompts != 0).sum(1)
  cut_rows = 0
  for b in range(3):
    for j in range(16):
      new_one, new_both = one[b, j, starts[b]:], both[b, j, starts[b]:]
      stop = next((i for i, t in enumerate(new_both) if t in (7, 9)), None)
      if stop is None:
        continue
      # Up to and including the first stop token, the same tokens.
      np.testing.assert_array_equal(new_both[:stop + 1], new_one[:stop + 1])
      assert np.all(new_both[stop + 1:] == 0)
      cut_rows += new_both[stop] == 9 and np.any(new_one[stop + 1:] != 0)
  assert cut_rows > 0  # some row did end at 9 and would have gone on


def _reference_log_prob(model, params, seq, start, eos=1):
  """log p(seq[start:] | seq[:start]) to the first EOS (or the end)."""
  end = next((i for i in range(start, len(seq)) if seq[i] == eos),
             len(seq) - 1)
  logits = reference_logits(model.config, params, np.array(seq[:end + 1]))
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return sum(logp[i - 1, seq[i]] for i in range(start, end + 1))


def test_beam_search_from_prefilled_prompts():
  """Beam search through the same protocol (initial_index): each beam
  starts with its prompt, its score (alpha = 0) is the reference
  log-probability of its tokens, and the beams are distinct and sorted."""
  model, params = _model("gemma3")
  prompts = _prompts()
  beams, scores = _sample(model, params, prompts, "beam", n=4, length=12,
                          alpha=0.0)
  beams, scores = np.asarray(beams), np.asarray(scores)
  for b, row in enumerate(prompts):
    n = int((row != 0).sum())
    assert len({tuple(x) for x in beams[b]}) == 4
    assert np.all(np.diff(scores[b]) >= 0)
    for k in range(4):
      assert beams[b, k, :n].tolist() == row[:n].tolist()
      ref = _reference_log_prob(model, params, beams[b, k].tolist(), n)
      np.testing.assert_allclose(scores[b, k], ref, rtol=1e-4, atol=1e-3)


def test_cache_and_config_validation():
  with pytest.raises(ValueError, match="num_heads"):
    DecoderConfig(architecture="llama", vocab_size=8, d_model=8, num_layers=1,
                  num_heads=3, num_kv_heads=2, head_dim=4, d_ff=8)
  with pytest.raises(ValueError, match="sliding_window"):
    DecoderConfig(architecture="gemma3", vocab_size=8, d_model=8, num_layers=1,
                  num_heads=2, num_kv_heads=1, head_dim=4, d_ff=8,
                  layer_kinds=("sliding",))
  with pytest.raises(ValueError, match="architecture"):
    DecoderConfig(architecture="gpt", vocab_size=8, d_model=8, num_layers=1,
                  num_heads=2, num_kv_heads=1, head_dim=4, d_ff=8)
  model, params = _model("llama")
  with pytest.raises(ValueError, match="max_decode_len"):
    model.decode_inputs(params, jnp.ones((1, 6), jnp.int32), 6)
  cache = init_cache(TINY["gemma3"], 2, 5)
  assert cache["layer_0"]["key"].shape == (2, 1, 8, 5)


def test_num_params_counts_the_tree():
  for arch in ARCHS:
    model = DecoderOnlyModel(TINY[arch])
    params = model.init(jax.random.PRNGKey(0))
    assert (sum(x.size for x in jax.tree_util.tree_leaves(params)) ==
            TINY[arch].num_params())
