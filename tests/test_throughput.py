"""The speedups of the decoder change no sample.

* The cache layout [B, H, K, T], its one-slice write (`lockstep` position)
  and decoding over a growing cache (`loop.CacheGrowth`) give the same
  tokens and log-probabilities, bit for bit, as the per-row write and the
  full cache.
* Decoding that drops ended rows between segments (`compaction`) gives the
  same samples as decoding every row to the end, and decodes fewer
  row-steps.
* Experiment runs recomputed now equal what the code before the speedups
  computed for them.
* The nested sample sets of the paper-power experiments are exact: a
  sub-lattice of a shifted lattice is a shifted lattice with a uniform
  shift; the samples come back in code order.
"""

import itertools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.compaction import (Compaction, assign_model_rows,
                                            copy_rows, keep_rows,
                                            run_compacted, same_input_runs)
from arithmetic_decoding.engine import for_row_model
from arithmetic_decoding.loop import CacheGrowth, cache_slots, resize_cache
from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import T5
from arithmetic_decoding.models.encoder_decoder import init_cache
from arithmetic_apps.translation import experiments as ex
from arithmetic_apps.translation.data import load_split
from arithmetic_apps.translation.translate import Translator, _decode

ROOT = pathlib.Path(__file__).parent.parent


def sample_compacted(model, params, tokens, *, method, eos_id, key,
                     num_decodes, max_decode_len, temperature,
                     compaction=Compaction(), stats=None):
  """The request of the T5 model, run by the compacted scheduler."""
  request, layout = for_row_model(
      model, params, tokens, method, eos_id=eos_id, key=key,
      num_decodes=num_decodes, max_decode_len=max_decode_len,
      temperature=temperature)
  return run_compacted(request, layout, compaction, stats)


@pytest.fixture(scope="module")
def translator():
  return Translator.load()


_WHOLE = {}


def whole_decode(translator, sources, first, n, temperature, method):
  """The one-program decode of every row over the full cache (the
  reference of the growing cache and of compaction), computed once per
  (verses, N, T, method) in a test run: several tests compare against the
  same one."""
  key = (tuple(sources), first, n, float(temperature), method)
  if key not in _WHOLE:
    tokens = translator.encode(list(sources))
    _WHOLE[key] = [np.asarray(a) for a in _decode(
        translator.params, tokens, jax.random.PRNGKey(first),
        jnp.float32(temperature), None, model=translator.model,
        method=method, num_decodes=n, length=translator.max_decode_len,
        grow_cache=False)]
  return _WHOLE[key]


@pytest.mark.slow
@pytest.mark.parametrize("first,inputs,n,temperature,method", [
    (40, 8, 8, 1.0, Method.ARITHMETIC),      # 64 rows, mixed verses
    (40, 8, 8, 1.0, Method.ANCESTRAL),
    (115, 1, 64, 0.2, Method.ARITHMETIC),    # one verse x 64
    (115, 1, 64, 0.2, Method.ANCESTRAL),
    # 128 rows. Cache growth is the model's, not the method's (both methods
    # above): one method here, on the verses the first compaction case
    # below compares with the same full-cache decode.
    (0, 8, 16, 0.5, Method.ARITHMETIC),
])
def test_growing_cache_gives_the_same_bits(translator, first, inputs, n,
                                           temperature, method):
  """Tokens and log-probabilities (the scores: any difference in a row's
  logits shows in them, whichever method chose the tokens) equal to the
  full-cache decode's, bit for bit."""
  test = load_split("test")
  sources = [v.source for v in test[first:first + inputs]]
  tokens = translator.encode(sources)
  key = jax.random.PRNGKey(first)
  out = [whole_decode(translator, sources, first, n, temperature, method),
         _decode(translator.params, tokens, key, jnp.float32(temperature),
                 None, model=translator.model, method=method, num_decodes=n,
                 length=translator.max_decode_len, grow_cache=True)]
  np.testing.assert_array_equal(out[0][0], out[1][0])
  np.testing.assert_array_equal(out[0][1], out[1][1])
  # The decodes are long enough to cross segment boundaries.
  assert int((np.asarray(out[0][0]) != 0).sum(-1).max()) > 32


@pytest.mark.slow
def test_below_min_rows_the_growing_cache_is_the_full_cache(translator):
  """Fewer rows than `min_rows` (48: 24 verses x 2) decode over the full
  cache: the program asked for a growing cache is, op for op, the one
  without it; at `min_rows` (64) it is not (it grows)."""
  sources = [v.source for v in load_split("test")[200:224]]
  for (inputs, n, same), method in itertools.product(
      [(24, 2, True), (8, 8, False)], [Method.ARITHMETIC, Method.ANCESTRAL]):
    tokens = translator.encode(sources[:inputs])
    text = [_decode.lower(translator.params, tokens, jax.random.PRNGKey(0),
                          jnp.float32(0.8), None, model=translator.model,
                          method=method, num_decodes=n,
                          length=translator.max_decode_len,
                          grow_cache=grow).as_text()
            for grow in (False, True)]
    assert (text[0] == text[1]) == same, (inputs * n, method)
  assert translator.model.cache_growth().min_rows == 64


@pytest.mark.slow
def test_one_position_write_equals_per_row_write(translator):
  """decode_step at one position [] (slice update, one bias) == at the same
  position per row [B] (scatter, per-row bias): logits and cache."""
  model, params = translator.model, translator.params
  rows, groups, source = 64, 4, 32
  encoded = jax.random.normal(jax.random.PRNGKey(0), (groups, source, 256))
  cross = model.module.apply({"params": params}, encoded, method=T5.cross_kv)
  mask = jnp.ones((groups, source), bool).at[:, 20:].set(False)
  cache = init_cache(model.config, rows, 64, time_minor=True)
  cache = jax.tree_util.tree_map(
      lambda x: x.at[..., :9].set(jax.random.normal(jax.random.PRNGKey(1),
                                                    x[..., :9].shape)), cache)
  token = jax.random.randint(jax.random.PRNGKey(2), (rows, 1), 2, 8000)
  step = jax.jit(lambda index: model.module.apply(
      {"params": params}, cross, mask, token, index, cache,
      method=T5.decode_step))
  per_row = step(jnp.full((rows,), 9, jnp.int32))
  shared = step(jnp.int32(9))
  for a, b in zip(jax.tree_util.tree_leaves(per_row),
                  jax.tree_util.tree_leaves(shared)):
    np.testing.assert_array_equal(a, b)


def test_resize_cache_keeps_what_was_written():
  cache = {"layer_0": {"key": jnp.arange(24.).reshape(1, 2, 3, 4),
                       "value": jnp.ones((1, 2, 3, 4))}}
  grown = resize_cache(cache, 6)
  assert cache_slots(grown) == 6
  np.testing.assert_array_equal(grown["layer_0"]["key"][..., :4],
                                cache["layer_0"]["key"])
  assert float(jnp.abs(grown["layer_0"]["key"][..., 4:]).sum()) == 0.0
  np.testing.assert_array_equal(resize_cache(grown, 4)["layer_0"]["key"],
                                cache["layer_0"]["key"])


def test_cache_growth_arguments_are_checked():
  with pytest.raises(ValueError, match="slots"):
    CacheGrowth(0, resize_cache, cache_slots)
  growth = CacheGrowth(2, resize_cache, cache_slots)
  step = lambda state: (jnp.zeros((state.cur_token.shape[0], 3)), state.cache)
  inputs = jnp.zeros((1, 4), jnp.int32)
  with pytest.raises(ValueError, match="initial_index"):
    arithmetic_sample(inputs, {}, step, 1, topk=0, cache_growth=growth,
                      initial_index=jnp.array([1]))
  with pytest.raises(TypeError, match="cache_growth"):
    arithmetic_sample(inputs, {}, step, 1, topk=0, cache_growth=2)


RUNS = [("quality", 5, 0.2, "arithmetic", -1), ("beam", 5, 0.0, "beam", -1)]


@pytest.mark.slow
def test_experiment_runs_are_the_same_without_the_speedups(tmp_path):
  """Runs of the small grid (the quality point of arithmetic sampling at
  N = 5, T = 0.2, and beam search; over the first 8 of its 24 verses)
  computed twice on this machine, by the translator as it is (compacted scheduler,
  time-minor cache, cache growth) and as before the speedups (the fused
  loop over every row, T5X's cache layout): the records, functions of the
  sampled texts and their order, are equal. (Against the records of
  another machine they need not be: XLA:CPU compiles for the host's CPU,
  and samples follow the logits' last bits; `scripts/experiments.py
  --verify` compares with the committed runs.)"""
  sys.path.insert(0, str(ROOT / "scripts"))
  import experiments as script  # pylint: disable=g-import-not-at-top
  import dataclasses  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.models import EncoderDecoderModel  # pylint: disable=g-import-not-at-top
  now = Translator.load()
  before = dataclasses.replace(
      now, model=EncoderDecoderModel(now.model.config, time_minor=False),
      compaction=None)
  committed = ROOT / "results" / "experiments" / "runs.jsonl"
  records = []
  for translator in (now, before):
    fresh = tmp_path / f"{len(records)}.jsonl"
    script.verify(committed, ex.Budget(quality_verses=8), seed=0, only=RUNS,
                  fresh_path=str(fresh), translator=translator)
    records.append([json.loads(line)
                    for line in fresh.read_text().splitlines()])
  assert len(records[0]) == 2 and records[0] == records[1]


def test_sub_lattices_are_shifted_lattices_with_uniform_shifts():
  n_max = 64
  grid = (np.arange(50) + 0.5) / 50  # shifts u of the 64-point lattice
  for n in (2, 4, 8, 16, 32):
    m = n_max // n
    shifts = []
    for u in grid:
      codes = ex.lattice(np.array([u]), n_max)[0].astype(np.float64)
      for j in range(m):
        sub = codes[ex.sub_lattice(n_max, n, j)]
        shift = (j + u) / m  # the sub-lattice's shift in [0, 1)
        np.testing.assert_allclose(sub, (np.arange(n) + shift) / n,
                                   atol=1e-7)
        shifts.append(shift)
    # j uniform and u uniform: the shifts tile [0, 1) evenly.
    np.testing.assert_allclose(np.sort(shifts),
                               (np.arange(m * len(grid)) + 0.5) /
                               (m * len(grid)), atol=1e-12)


@pytest.mark.slow
def test_nested_samples_come_back_in_code_order(translator):
  test = load_split("test")
  key = jax.random.PRNGKey(5)
  rows = ex.nested_samples(translator, [test[3].source] * 2, 8, 0.5,
                           "arithmetic", key, max_rows=16)
  shifts = np.asarray(jax.random.uniform(jax.random.fold_in(key, 2**30),
                                         (2,)), np.float64)
  codes = ex.lattice(shifts, 8)
  assert [[s.code for s in row] for row in rows] == codes.tolist()
  iid = ex.nested_samples(translator, [test[3].source], 8, 0.5, ex.IID, key,
                          max_rows=16)
  assert len(iid[0]) == 8 and len({s.code for s in iid[0]}) == 8


@pytest.mark.slow
def test_stratified_depth_counts_prefixes_above_one_over_n(translator):
  """The depth's teacher-forced prefix log-probabilities end at each
  sample's own tempered log-probability (the decoder's), and the
  depth for N counts the prefixes of probability >= 1/N: brute force over
  the same prefixes."""
  verse = load_split("test")[7]
  samples = translator.sample([verse.source], 16, 0.5,
                              jax.random.PRNGKey(2))[0]
  tokens = np.array([s.tokens for s in samples])
  padded = -(-np.count_nonzero(tokens, axis=1).max() // 32) * 32
  tokens = tokens[:, :padded]  # as stratified_depth pads them
  prefix = np.asarray(ex._prefix_log_probs(  # pylint: disable=protected-access
      translator.params, translator.encode([verse.source]),
      jnp.asarray(tokens), 0.5, model=translator.model))
  np.testing.assert_allclose(prefix[:, -1], [s.log_prob for s in samples],
                             rtol=0, atol=2e-4)
  depth = ex.stratified_depth(translator, verse.source, samples, 0.5,
                              (2, 16))
  for n in (2, 16):
    counts = [sum(1 for l, t in enumerate(row) if t and p[l] >= -np.log(n))
              for row, p in zip(tokens, prefix)]
    assert depth[n] == round(float(np.mean(counts)), 3)


def test_subset_positions():
  rng = np.random.default_rng(0)
  for _ in range(20):
    lat = ex.subset_positions("arithmetic", 64, 8, rng)
    assert len(set(lat % 8)) == 1 and np.all(np.diff(lat) == 8)
    iid = ex.subset_positions(ex.IID, 64, 8, rng)
    assert len(set(iid.tolist())) == 8 and iid.max() < 64


@pytest.mark.slow
def test_experiments_paper_quick_run(tmp_path):
  """The paper-power script end to end on a tiny budget: every run, the
  report, the plots; estimates per N as many as repeats."""
  import subprocess  # pylint: disable=g-import-not-at-top
  cmd = [sys.executable, str(ROOT / "scripts" / "experiments_paper.py"),
         "--quick", "--out", str(tmp_path)]
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  records = [json.loads(line) for line in
             (tmp_path / "runs.jsonl").read_text().splitlines()]
  # Fig. 4: 3 verses x 1 T x 2 methods; Fig. 2: 1 T x 2; beam: 2 N.
  assert sorted(r["kind"] for r in records) == (["beam"] * 2 + ["fig2"] * 2 +
                                                ["fig4"] * 6)
  for r in records:
    if r["kind"] == "fig4":
      assert sorted(r["estimates"]) == ["2", "4"]
      assert all(len(e) == 4 for e in r["estimates"].values())
      assert all(1 <= r["distinct"][n] <= int(n) for n in r["distinct"])
      depth = r["stratified_depth"]
      assert 0 <= depth["2"] <= depth["4"]
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["fig4"]["T=0.5"]["verses"] == 3
  assert summary["runs"] == {"done": 10, "planned": 10}
  for name in ("fig2.png", "fig3.png", "fig4.png", "experiments.md"):
    assert (tmp_path / name).stat().st_size > 0
  # --verify recomputes runs (the first among them) and finds them equal
  # to their records, but for one record changed here: it fails.
  lines = (tmp_path / "runs.jsonl").read_text().splitlines()
  first = json.loads(lines[0])
  first["tokens"] += 1
  (tmp_path / "runs.jsonl").write_text(
      "\n".join([json.dumps(first)] + lines[1:]) + "\n")
  verify = subprocess.run(cmd + ["--verify", "3"], capture_output=True,
                          text=True, timeout=900)
  assert verify.returncode == 1, verify.stderr[-3000:]
  checked = [json.loads(line) for line in verify.stdout.splitlines()
             if line.startswith('{"run"')]
  assert [c["identical"] for c in checked] == [False, True, True]
  assert checked[0]["run"] == [first[k] for k in ("kind", "verse",
                                                 "temperature", "method")]
  assert "2 of 3 recomputed runs identical" in verify.stdout
  assert "(stratified depth identical in 3)" in verify.stdout


@pytest.mark.slow
def test_time_minor_cache_equals_t5x_layout(translator):
  """The default T5X-layout cache (select write, full cache) and the
  translator's time-minor cache (slice write, growing cache) decode the
  same tokens and log-probabilities, bit for bit. Compared with the
  translator's full-cache decode of a growing-cache case above (8 verses x
  8 at T = 1), which that case shows equal to its growing cache. The
  layout is the model's: a difference in any row's logits shows in the
  log-probabilities whichever method chose the tokens, so one method."""
  from arithmetic_decoding.models import EncoderDecoderModel  # pylint: disable=g-import-not-at-top
  t5x_layout = EncoderDecoderModel(translator.model.config)
  sources = [v.source for v in load_split("test")[40:48]]
  tokens = translator.encode(sources)
  out = [_decode(translator.params, tokens, jax.random.PRNGKey(40),
                 jnp.float32(1.0), None, model=t5x_layout,
                 method=Method.ARITHMETIC, num_decodes=8,
                 length=translator.max_decode_len),
         whole_decode(translator, sources, 40, 8, 1.0, Method.ARITHMETIC)]
  np.testing.assert_array_equal(out[0][0], out[1][0])
  np.testing.assert_array_equal(out[0][1], out[1][1])


UNSHARED = Compaction(share_prefixes=False)


def _rows_must_drop(steps: np.ndarray, classes: int,
                    compaction: Compaction) -> bool:
  """Whether the rows of `steps` int [B, N] (tokens up to EOS per row),
  decoded in `classes` runs of rows, must lose rows a segment before the
  longest ends: at some step every run's rows still decoding, rounded up
  to `multiple` x 2^k or to a multiple of it (`geometric` or not), at
  least its share of `min_rows`, are fewer than the run has."""
  per_class = steps.reshape(classes, -1)
  least = -(-compaction.min_rows // classes)
  longest = int(steps.max())
  for step in range(longest):
    live = int((per_class > step).sum(axis=1).max())
    kept = compaction.multiple
    while kept < live:
      kept = (2 * kept if compaction.geometric else
              kept + compaction.multiple)
    if max(kept, least) < per_class.shape[1]:
      return step + compaction.segment_steps + 1 < longest
  return False


@pytest.mark.slow
@pytest.mark.parametrize("first,inputs,n,temperature,method,compaction", [
    (0, 8, 16, 0.5, Method.ARITHMETIC, Compaction()),  # 128 rows -> 64
    (30, 4, 32, 0.5, Method.ANCESTRAL, Compaction(4, 4, share_prefixes=False)),
    (30, 4, 32, 0.5, Method.ANCESTRAL, Compaction(4, 4)),
    (10, 16, 8, 0.0, Method.GREEDY, Compaction()),
    (200, 24, 2, 0.8, Method.ARITHMETIC, Compaction()),  # 48 rows: none
    (7, -4, 32, 0.2, Method.ARITHMETIC, Compaction()),  # one verse x 4
    # Rows in multiples of 8, not 8 x 2^k: one run of 128 rows (one verse
    # x 4 x 32) whose live rows fall between 64 and 128 (at 8 prompts x 16
    # the runs of 16 rows round alike either way).
    (7, -4, 32, 0.2, Method.ARITHMETIC, Compaction(geometric=False)),
    # Peaked: the pruned Gumbel draw pools few candidates per row.
    (7, -4, 32, 0.1, Method.ANCESTRAL, Compaction()),
    (90, 8, 20, 0.3, Method.ARITHMETIC, UNSHARED),  # groups of 20
    (90, 8, 20, 0.3, Method.ARITHMETIC, Compaction()),
    (7, 1, 128, 0.1, Method.ARITHMETIC, Compaction(16, 8)),  # one group
    (115, -4, 32, 0.1, Method.ARITHMETIC, Compaction()),  # one verse x 4
    (115, -4, 32, 0.5, Method.ANCESTRAL, Compaction()),
])
def test_compacted_sampling_gives_the_same_bits(translator, first, inputs, n,
                                                temperature, method,
                                                compaction):
  """Against the one-program decode of every row over the full cache
  (`inputs` < 0: one verse repeated -inputs times, as Figs. 3-4 call)."""
  test = load_split("test")
  sources = ([test[first].source] * -inputs if inputs < 0 else
             [v.source for v in test[first:first + inputs]])
  inputs = len(sources)
  tokens = translator.encode(sources)
  key = jax.random.PRNGKey(first)
  whole = whole_decode(translator, sources, first, n, temperature, method)
  stats = {}
  dropped = sample_compacted(
      translator.model, translator.params, tokens, method=method, eos_id=1,
      key=key, num_decodes=n, max_decode_len=translator.max_decode_len,
      temperature=temperature, compaction=compaction, stats=stats)
  for a, b in zip(whole, dropped):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  steps = np.asarray(whole[0]).shape[-1] - np.sum(
      np.asarray(whole[0]) == 0, axis=-1)  # tokens up to EOS, [B, N]
  longest = int(steps.max())
  # The loop without compaction steps every row until the longest ends.
  rows = inputs * n
  sample_steps = stats.get("sample_row_steps", stats["row_steps"])
  classes = (same_input_runs(np.asarray(tokens)) if compaction.share_prefixes
             else inputs)
  if rows >= compaction.min_rows and _rows_must_drop(steps, classes,
                                                     compaction):
    assert sample_steps < rows * longest
  assert sample_steps >= int(steps.sum())
  if compaction.share_prefixes and rows >= compaction.min_rows:
    # the model runs once per distinct prefix: never more than per sample
    assert stats["row_steps"] <= sample_steps


@pytest.mark.slow
def test_prefix_sharing_runs_the_model_once_per_prefix(translator):
  """One verse x 8 x 64 samples at T = 0.1: the model's row-steps are a
  fraction of the samples' (they share most prefixes), and at least the
  distinct prefixes the samples hold (counted here from the tokens)."""
  tokens = translator.encode([load_split("test")[7].source] * 8)
  stats = {}
  out = sample_compacted(
      translator.model, translator.params, tokens, method="arithmetic",
      eos_id=1, key=jax.random.PRNGKey(3), num_decodes=64,
      max_decode_len=translator.max_decode_len, temperature=0.1,
      stats=stats)
  samples = np.asarray(out[0]).reshape(512, -1)
  prefixes = set()
  for row in samples:
    end = int(np.argmax(row == 1)) + 1 if (row == 1).any() else row.size
    prefixes.update(tuple(row[:t]) for t in range(end))  # fed at step t
  assert stats["row_steps"] >= len(prefixes)
  assert stats["row_steps"] * 3 < stats["sample_row_steps"]


def _assign_reference(owner, token, ended, groups, model_rows):
  """assign_model_rows in plain Python: rows of one (model row, token)
  share; the first of each keeps going; the first per model row keeps it;
  others take the lowest free model rows of their group, in row order."""
  per, m = owner.size // groups, model_rows // groups
  new_owner, need, splits = owner.copy(), [], []
  for g in range(groups):
    rows = range(g * per, (g + 1) * per)
    leaders, kept = {}, set()
    for r in rows:
      if not ended[r] and (owner[r], token[r]) not in leaders:
        leaders[owner[r], token[r]] = r
    keepers = {}
    for (o, _), r in sorted(leaders.items(), key=lambda kv: kv[1]):
      keepers.setdefault(o, r)
    kept = set(keepers)
    free = [x for x in range(g * m, (g + 1) * m) if x not in kept]
    row_of = {}
    for key, r in sorted(leaders.items(), key=lambda kv: kv[1]):
      if keepers[key[0]] == r:
        row_of[key] = key[0]
      else:
        row_of[key] = free.pop(0)
        splits.append((row_of[key], key[0]))
    for r in rows:
      if not ended[r]:
        new_owner[r] = row_of[owner[r], token[r]]
    need.append(len(leaders))
  return new_owner, need, splits


@pytest.mark.slow
def test_assign_model_rows_matches_a_reference():
  # 60 random cases over five shapes (each shape is one compile, as inside
  # the compacted segment: run op by op, each shape would compile every
  # operation): one group of one row, groups with spare model rows or
  # none, up to 11 rows each.
  assign = jax.jit(assign_model_rows, static_argnums=(3, 4))
  rng = np.random.RandomState(0)
  shapes = [(1, 1, 0), (1, 11, 2), (2, 7, 0), (3, 5, 1), (3, 11, 2)]
  for case in range(60):
    groups, per, spare = shapes[case % len(shapes)]
    m = per + spare
    owner = (rng.randint(0, max(1, m // 2), groups * per) +
             np.repeat(np.arange(groups) * m, per))
    token = rng.randint(1, 4, groups * per)
    ended = rng.rand(groups * per) < 0.3
    new, need, (to, frm, count) = assign(
        jnp.asarray(owner), jnp.asarray(token), jnp.asarray(ended), groups,
        groups * m)
    ref_owner, ref_need, ref_splits = _assign_reference(
        owner, token, ended, groups, groups * m)
    live = ~ended
    np.testing.assert_array_equal(np.asarray(new)[live], ref_owner[live])
    assert np.asarray(need).tolist() == ref_need
    got = list(zip(np.asarray(to)[:int(count)].tolist(),
                   np.asarray(frm)[:int(count)].tolist()))
    assert sorted(got) == sorted(ref_splits)


def test_copy_rows_copies_only_the_listed_rows():
  cache = {"a": jnp.arange(40.0).reshape(20, 2)}
  to = jnp.array([3, 7, 19, 0, 0, 0, 0, 0, 0, 0, 5, 0], jnp.int32)
  frm = jnp.array([1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 4, 0], jnp.int32)
  for count in (0, 3, 11):
    out = np.asarray(copy_rows(cache, to, frm, jnp.int32(count))["a"])
    want = np.arange(40.0).reshape(20, 2)
    for t, f in list(zip(to.tolist(), frm.tolist()))[:count]:
      want[t] = np.arange(40.0).reshape(20, 2)[f]
    np.testing.assert_array_equal(out, want)


def test_keep_rows_keeps_every_decoding_row():
  rng = np.random.RandomState(0)
  for _ in range(200):
    groups, per_group = rng.randint(1, 6), rng.randint(1, 40)
    ended = rng.rand(groups * per_group) < rng.rand()
    multiple, least = rng.randint(1, 9), rng.randint(1, per_group + 1)
    geometric = bool(rng.rand() < 0.5)
    per_octave = 0 if geometric else int(rng.choice([0, 0, 1, 2, 4]))
    if per_octave:
      multiple = int(rng.choice([1, 2, 4, 8]))
    take = keep_rows(ended, groups, multiple, least, geometric, per_octave)
    keep = take.size // groups
    assert take.size == groups * keep and least <= keep <= per_group
    # the group with most rows decoding, rounded up to a count allowed
    need = int((~ended).reshape(groups, per_group).sum(axis=1).max())
    counts = ([multiple * 2**j for j in range(8)] if geometric else
              range(0, per_group + multiple, multiple))
    if per_octave:  # s allowed: a multiple of max(multiple, 2^j / k) for
      # the 2^j < s <= 2^(j+1), found by search rather than bit_length
      def step(s):
        j = 0
        while 2 ** (j + 1) < s:
          j += 1
        return max(multiple, 2 ** j // per_octave)
      counts = [s for s in range(1, 2 * per_group + 16) if s % step(s) == 0]
    rounded = min(k for k in counts if k >= need)
    assert keep == min(per_group, max(least, rounded))
    # every decoding row is kept, each in its own group, in order
    assert set(np.flatnonzero(~ended)) <= set(take.tolist())
    assert (take.reshape(groups, keep) // per_group ==
            np.arange(groups)[:, None]).all()
    assert len(set(take.tolist())) == take.size


def test_bench_floor_row_steps_equals_a_step_by_step_count():
  """`scripts/bench_experiments.py`'s lower bound on the compacted loop's
  row-steps: each step runs its live rows, at least `least`, at most all."""
  sys.path.insert(0, str(ROOT / "scripts"))
  from bench_experiments import floor_row_steps  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(0)
  for _ in range(100):
    steps = rng.randint(1, 30, size=rng.randint(1, 50))
    least = int(rng.randint(1, 60))
    want = 0
    for step in range(1, int(steps.max()) + 1):
      live = sum(1 for s in steps.tolist() if s >= step)
      want += min(steps.size, max(least, live))
    assert floor_row_steps(steps, least) == want
  assert floor_row_steps(np.array([4, 4]), 64) == 8  # never more than all


@pytest.mark.slow
def test_compaction_arguments_are_checked(translator):
  with pytest.raises(ValueError, match="segment_steps"):
    Compaction(segment_steps=0)
  with pytest.raises(ValueError, match="multiple"):
    Compaction(multiple=-1)
  with pytest.raises(ValueError, match="per_octave"):
    Compaction(per_octave=-1, geometric=False)
  with pytest.raises(ValueError, match="per_octave needs geometric=False"):
    Compaction(per_octave=4)  # geometric is the default
  tokens = translator.encode(["In the beginning."])
  common = dict(eos_id=1, key=jax.random.PRNGKey(0), num_decodes=2,
                max_decode_len=8, temperature=0.5)
  with pytest.raises(TypeError, match="compaction"):
    sample_compacted(translator.model, translator.params, tokens,
                     method="arithmetic", compaction=8, **common)
  with pytest.raises(ValueError, match="method"):
    sample_compacted(translator.model, translator.params, tokens,
                     method="beam", **common)
