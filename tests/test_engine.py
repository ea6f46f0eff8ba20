"""One decode engine: a request built once, its schedulers agree, one seed.

- The fused and the compacted scheduler of one LLM request return the same
  samples, token for token and log-prob for log-prob, for every sampling
  method (the T5 translator's requests: `test_throughput.py`; the mesh
  scheduler: `test_sharding.py`).
- A prompt's samples through `llm.generate` are a function of (seed,
  prompt id, N, method, settings) alone: the same decoded alone or among
  other prompts of other lengths, and the same through
  `rollouts.group_rollouts` (one seed policy, `seeds`).
- What that rests on, checked on this machine: a row's logits do not
  depend on how many rows the step runs (from 64 up) or how many cache
  positions it has (from 64 up), and a prompt's prefill does not depend on
  the cache it is written into.
- `compaction` and `sharding` hold no method dispatch, no options building
  and no loop of their own: they run the request they are given.
"""

import dataclasses
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import llm as llm_lib
from arithmetic_decoding.llm import generate
from arithmetic_decoding.models.decoder_config import TINY
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from arithmetic_decoding.models.decoder_only import DecoderOnly
from arithmetic_decoding.request import SamplingParams
from arithmetic_decoding.rollouts import group_rollouts
from helpers import one_fast
from llm_models import MID, mid_llm

ROOT = pathlib.Path(__file__).parent.parent
METHODS = ["arithmetic", "ancestral", "greedy"]
PROMPTS = {"llama": ["hehe he", "h", "he eh hehe ehe h", "eh"],
           "gemma3": ["ab", "b", "a ab b ba ab", "ba"]}


class _LazyLLMs(dict):
  """arch -> its LLM, made at first use (the fast tier uses one)."""

  def __init__(self, make):
    super().__init__()
    self._make = make

  def __missing__(self, arch):
    self[arch] = self._make(arch)
    return self[arch]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """Per architecture: a decoder of the real model's shapes with a tiny
  tokenizer (`llm_models.mid_llm`)."""
  return _LazyLLMs(lambda arch: mid_llm(tmp_path_factory.mktemp(arch), arch))


def _ids(llm, texts):
  return [llm.encode(t) for t in texts]


@pytest.mark.parametrize("arch", one_fast(sorted(TINY), "llama"))
@pytest.mark.parametrize("method", one_fast(METHODS, "arithmetic"))
def test_fused_and_compacted_schedulers_agree(tiny, arch, method):
  """4 prompts x 16 samples (64 rows): every token and log-prob equal."""
  llm = tiny[arch]
  sampling = SamplingParams(n=16, method=method, temperature=1.0,
                            max_new_tokens=10, seed=3)
  ids = _ids(llm, PROMPTS[arch])
  stats = {}
  compacted = llm_lib.decode(llm, ids, sampling, stats=stats)
  fused = llm_lib.decode(llm, ids, sampling, scheduler="fused")
  for a, b in zip(fused, compacted):
    np.testing.assert_array_equal(a, b)
  # The compacted scheduler decoded fewer sample rows than the fused one
  # (rows end at different steps), and the model ran at most one row per
  # sample row and step.
  steps = int((fused[0] != 0).sum(-1).max())
  assert stats["row_steps"] <= max(stats["sample_row_steps"], 64 * steps)
  if method == "greedy":  # every sample of a prompt on one model row
    assert stats["row_steps"] <= 64 * steps


@pytest.mark.parametrize("arch", one_fast(sorted(TINY), "llama"))
@pytest.mark.parametrize("method", one_fast(METHODS, "ancestral"))
def test_a_prompt_samples_the_same_alone_and_in_any_batch(tiny, arch,
                                                          method):
  llm = tiny[arch]
  a, *others = PROMPTS[arch]
  kw = dict(method=method, temperature=1.0, seed=5, max_new_tokens=8)
  alone = generate(llm, a, 4, prompt_ids=[9], **kw)
  batch = generate(llm, [others[1], a, others[0]], 4, prompt_ids=[2, 9, 4],
                   **kw)
  assert alone.tokens[0] == batch.tokens[1]
  assert alone.log_probs[0].tobytes() == batch.log_probs[1].tobytes()
  np.testing.assert_array_equal(alone.codes[0], batch.codes[1])
  # Another id is another sample set (a sampling method draws anew).
  moved = generate(llm, a, 4, prompt_ids=[10], **kw)
  if method != "greedy":
    assert moved.tokens[0] != alone.tokens[0]


@pytest.mark.slow
def test_the_compacted_programs_do_not_depend_on_n(tiny):
  """A batch of independent rows is padded with ended rows to
  `compaction.sample_rows` (8, 16, then four counts per doubling, at
  least multiples of 16, for the LLM entry points: 32, 48, 64, 80, ...,
  128, 160, ...): N = 8, 5 and 3 samples of a prompt run the segment
  programs compiled for N = 8 (none compiled anew), and N = 5 samples of
  a prompt alone (8 rows) are those it samples among others (15 rows, 16
  with padding)."""
  from arithmetic_decoding import compaction
  llm = tiny["llama"]
  ids = _ids(llm, PROMPTS["llama"][2:3])
  programs = None
  for n in (8, 5, 3):
    sampling = SamplingParams(n=n, temperature=1.0, max_new_tokens=12,
                              seed=2)
    stats = {}
    llm_lib.decode(llm, ids, sampling, stats=stats)
    assert stats["sample_row_steps"] % 8 == 0  # 8 rows per step
    if programs is None:
      programs = compaction._segment._cache_size()  # pylint: disable=protected-access
    assert compaction._segment._cache_size() == programs  # pylint: disable=protected-access
  kw = dict(method="arithmetic", temperature=1.0, seed=2, max_new_tokens=12)
  alone = generate(llm, PROMPTS["llama"][2], 5, **kw)
  assert compaction._segment._cache_size() == programs  # pylint: disable=protected-access
  among = generate(llm, PROMPTS["llama"][:3], 5, prompt_ids=[1, 2, 0], **kw)
  assert alone.tokens[0] == among.tokens[2]
  assert alone.log_probs[0].tobytes() == among.log_probs[2].tobytes()
  c = llm_lib.LLM_COMPACTION
  assert [compaction.sample_rows(n, c.multiple, 0, c.geometric, c.per_octave)
          for n in (1, 8, 9, 17, 33, 64, 65, 130, 300)] == [
              8, 8, 16, 32, 48, 64, 80, 160, 320]


@pytest.mark.slow
def test_generate_and_rollouts_share_the_seed_policy(tiny):
  llm = tiny["llama"]
  for scheme in ("shifted_lattice", "iid"):
    gen = generate(llm, ["hehe he", "eh"], 8, temperature=1.0, seed=7,
                   max_new_tokens=6, prompt_ids=[31, 4], code_scheme=scheme)
    out = group_rollouts(llm, ["hehe he", "eh"], 8, seed=7, step=0,
                         max_new_tokens=6, prompt_ids=[31, 4], scheme=scheme,
                         token_log_probs=False)
    for b in range(2):
      order = np.argsort(out.codes[b], kind="stable")  # generate: by code
      np.testing.assert_array_equal(gen.codes[b], out.codes[b][order])
      for i, j in enumerate(order):
        n = int(out.mask[b, j].sum()) - int(out.finished[b, j])
        assert gen.tokens[b][i] == out.tokens[b, j, :n].tolist()
      assert gen.log_probs[b].tobytes() == out.log_probs[b][order].tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(MID))
def test_a_rows_logits_do_not_depend_on_rows_or_cache_size(arch):
  """The preconditions of batch invariance, on this machine: one row's
  logits at a decode step are bitwise the same among 64, 96 or 200 rows,
  in any place among them, with 64, 100 or 300 cache positions, and a
  prompt's prefill is the same in any cache it is written into
  (`llm.prompt_caches`)."""
  model = DecoderOnlyModel(dataclasses.replace(MID[arch], vocab_size=8192,
                                               context_length=512))
  params = model.init(jax.random.PRNGKey(0))
  prompt = np.zeros((1, 32), np.int32)
  prompt[0, :27] = np.arange(1, 28) * 37
  step = jax.jit(lambda p, tok, idx, cache: model.module.apply(
      {"params": p}, tok, idx, cache, method=DecoderOnly.decode_step)[0])
  base = llm_lib._prefill(params, jnp.asarray(prompt), model=model,  # pylint: disable=protected-access
                          slots=64)
  results = []
  for rows, slots, at in [(64, 64, 0), (96, 100, 95), (200, 300, 57),
                          (64, 300, 60)]:
    cache = llm_lib.resize_cache(base, slots, axis=-1)
    cache = jax.tree_util.tree_map(lambda x: jnp.repeat(x, rows, 0), cache)
    token = jnp.arange(rows)[:, None] % 300 + 2  # others feed other tokens
    token = token.at[at].set(5)
    results.append(np.asarray(step(params, token, jnp.full((rows,), 27),
                                   cache))[at])
  for other in results[1:]:
    np.testing.assert_array_equal(other, results[0])
  big = llm_lib._prefill(params, jnp.asarray(prompt), model=model,  # pylint: disable=protected-access
                         slots=192)
  for a, b in zip(jax.tree_util.tree_leaves(base),
                  jax.tree_util.tree_leaves(big)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[..., :64])


def _code(path: str) -> str:
  """A module's source without docstrings and comments."""
  text = (ROOT / path).read_text()
  text = re.sub(r'"""(.|\n)*?"""', "", text)
  return re.sub(r"#.*", "", text)


@pytest.mark.parametrize("path", ["arithmetic_decoding/compaction.py",
                                  "arithmetic_decoding/sharding.py"])
def test_schedulers_run_the_request_they_are_given(path):
  code = _code(path)
  # No method dispatch (beam search, which has no rows, aside), no greedy
  # rule, no chooser or options built here.
  assert not re.search(r"is (not )?Method\.(?!BEAM)", code)
  assert "GREEDY" not in code and ".chooser(" not in code
  assert "DecodeOptions(" not in code and "validate(" not in code
  # No loop of their own: the loop is `loop`'s.
  assert "while_loop" not in code and "loop_fns" not in code
  assert "protected-access" not in code


@pytest.mark.slow
def test_requests_that_join_a_running_batch_sample_what_they_would_alone(
    tiny):
  """Continuous batching: a request joining a batch after its first
  segments, another with other settings, both equal their runs alone."""
  from arithmetic_decoding.compaction import Compacted
  llm = tiny["llama"]
  first = SamplingParams(n=16, temperature=1.0, max_new_tokens=12, seed=1)
  second = SamplingParams(n=4, method="ancestral", temperature=0.7,
                          max_new_tokens=6, seed=9)
  ids = _ids(llm, PROMPTS["llama"])
  alone = [llm_lib.decode(llm, ids[:2], first),
           llm_lib.decode(llm, ids[2:], second)]
  request, layout = llm_lib.llm_request(llm, ids[:2], first)
  joined = llm_lib.llm_request(llm, ids[2:], second)[0]
  with pytest.raises(ValueError, match="another program"):
    Compacted(request, layout, llm_lib.LLM_COMPACTION).join("b", joined)
  late = llm_lib.llm_request(
      llm, ids[2:], dataclasses.replace(second, method="arithmetic"))[0]
  alone[1] = llm_lib.decode(llm, ids[2:], dataclasses.replace(
      second, method="arithmetic"))
  batch = Compacted(request, layout, llm_lib.LLM_COMPACTION, key="a")
  results = {}
  for segment in range(100):
    if segment == 1:
      batch.join("b", late)
    for key in batch.step():
      results[key] = [np.asarray(x) for x in batch.pop(key)]
    if not batch.keys():
      break
  for key, want in zip("ab", alone):
    for got, ref in zip(results[key], want):
      np.testing.assert_array_equal(got, ref)



def _run_batch(llm, first, joins, ends=None):
  """Drives one `Compacted` batch of `first` = (key, ids, sampling): before
  segment s, `ends[s]` = [(key, rows)] are ended, then `joins[s]` =
  [(key, ids, sampling)] join. Returns {key: (tokens, log_probs, codes)}
  unsorted, and the segments run."""
  from arithmetic_decoding.compaction import Compacted
  key, ids, sampling = first
  request, layout = llm_lib.llm_request(llm, ids, sampling)
  batch = Compacted(request, layout, llm_lib.LLM_COMPACTION, key=key)
  results = {}
  for segment in range(60):
    for k, rows in (ends or {}).get(segment, []):
      batch.end(k, rows)
    for k, i, s in joins.get(segment, []):
      batch.join(k, llm_lib.llm_request(llm, i, s)[0])
    for k in batch.step():
      results[k] = [np.asarray(x) for x in batch.pop(k, sort=False)]
    if not batch.keys() and segment >= max(joins, default=0):
      break
  assert not batch.keys()
  return results


@pytest.mark.slow
def test_a_running_batch_survives_ends_pops_and_idle_joins(tiny):
  """Continuous batching's bookkeeping, each case once a defect: rows
  ended and a request joining before the next segment (the join's repack
  dropped the ended rows uncollected: the request never finished); a
  request joining after another was popped (it took the popped one's row
  ids, and its rows' results); a request of three prompts joining a batch
  whose rows had all ended (its prompts shared model rows); greedy
  requests joining (a scalar temperature failed the merge and left the
  request in the batch). Every request equals its decode alone; the one
  with ended rows, in its other rows."""
  llm = tiny["llama"]
  one = lambda text: [llm.encode(text)]
  sp = lambda n, tokens, seed, **kw: SamplingParams(
      n=n, temperature=1.0, max_new_tokens=tokens, seed=seed, **kw)
  a = ("a", one("hehe he"), sp(3, 40, 1))
  b = ("b", one("eh"), sp(4, 2, 2))  # ends (and is popped) at once
  c = ("c", one("he eh hehe"), sp(2, 20, 3))
  d = ("d", one("h"), sp(2, 10, 4))
  e = ("e", _ids(llm, PROMPTS["llama"][1:]), sp(4, 12, 5))
  got = _run_batch(llm, a, {1: [b], 3: [c], 4: [d], 40: [e]},
                   ends={4: [("a", [0])]})
  for key, ids, sampling in (a, b, c, d, e):
    want = llm_lib.decode(llm, ids, sampling)  # sorted by log-prob
    rows = got[key][0].shape[0] * got[key][0].shape[1]
    mine = {(tuple(t), lp.tobytes()) for t, lp in zip(
        got[key][0].reshape(rows, -1), got[key][1].reshape(-1))}
    theirs = {(tuple(t), lp.tobytes()) for t, lp in zip(
        want[0].reshape(rows, -1), want[1].reshape(-1))}
    if key == "a":  # row 0 was ended: the other two as alone
      assert len(mine & theirs) >= 2
      # it drew nothing after its end (before segment 4: 32 steps)
      assert (got[key][0][0, 0] != 0).sum() <= len(ids[0]) + 32
    else:
      assert mine == theirs, key
  greedy = dict(method="greedy")
  got = _run_batch(llm, ("g", one("hehe he"), sp(4, 10, 1, **greedy)),
                   {1: [("h", one("eh"), sp(2, 10, 2, **greedy))]})
  for key, text, n in (("g", "hehe he", 4), ("h", "eh", 2)):
    want = llm_lib.decode(llm, one(text), sp(n, 10, 0, **greedy))
    np.testing.assert_array_equal(got[key][0], want[0])


@pytest.mark.slow
def test_a_joining_request_may_need_more_cache_and_model_rows(tiny):
  """The first request: one short prompt, 8 rows (padded to 64 model rows,
  a 64-slot cache). The request that joins has a prompt long enough to need
  more cache slots, and 64 rows that diverge: the batch then needs more
  model rows and slots than the first request's. (It once capped both at
  the first request's, so that no step fit and the batch stepped zero
  steps forever, and shared the joined rows' model rows as if all its
  prompts were equal.) Both requests sample what they would alone."""
  from arithmetic_decoding.compaction import Compacted
  llm = tiny["llama"]
  first = SamplingParams(n=8, temperature=1.0, max_new_tokens=24, seed=3)
  second = SamplingParams(n=16, temperature=1.0, max_new_tokens=40, seed=4)
  ids_a = _ids(llm, ["h"])
  ids_b = _ids(llm, PROMPTS["llama"][:3] + ["he eh hehe ehe h " * 3])
  request, layout = llm_lib.llm_request(llm, ids_a, first)
  late = llm_lib.llm_request(llm, ids_b, second)[0]
  size = layout.growth.size_of
  assert size(late.cache) > size(request.cache)  # the cases under test
  batch = Compacted(request, layout, llm_lib.LLM_COMPACTION, key="a")
  results, most = {}, 0
  for segment in range(40):
    if segment == 1:
      batch.join("b", late)
    for key in batch.step():
      results[key] = [np.asarray(x) for x in batch.pop(key)]
    most = max(most, batch.rows_m if batch.live is not None else 0)
    if not batch.keys():
      break
  assert sorted(results) == ["a", "b"]
  assert most > 64
  for key, ids, sampling in (("a", ids_a, first), ("b", ids_b, second)):
    want = llm_lib.decode(llm, ids, sampling)
    for got, ref in zip(results[key], want):
      np.testing.assert_array_equal(got, ref)
  # Some row of the long prompt (its tokens and the prompt's: decodes hold
  # both) wrote past the first request's cache.
  written = (results["b"][0][3] != 0).sum(axis=-1)
  assert written.max() > size(request.cache)
