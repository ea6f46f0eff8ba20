"""`arithmetic_sample`: T5X's `temperature_sample`, drawing with codes.

The public entry points with T5X's signature, defaults and returns. Each
gathers its arguments (`request.T5XArgs`), builds one validated
`request.DecodeRequest` for its method (`request.from_t5x`) and runs it
with the fused scheduler (`engine.run_fused`): expand to B*N rows (`rows`),
run T5X's loop (`loop`) with the method's chooser (`choosers`), sort each
input's samples by increasing log-prob.

  arithmetic_sample   `Method.ARITHMETIC`: each sample decodes its code
  ancestral_sample    `Method.ANCESTRAL`: each row draws from its own key
                      (the baseline, in the same loop)

Shapes: B inputs, N = num_decodes samples each, L = inputs.shape[1];
results are [B, N, L] and [B, N].
"""

from __future__ import annotations

from typing import Mapping, Optional, Union

import jax

from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.codes import CodeScheme, SchemeLike
from arithmetic_decoding.engine import run_fused
from arithmetic_decoding.loop import (CacheGrowth, LogitCallbackFn,
                                     StateCallbackFn, TokensToLogits)
from arithmetic_decoding.methods import Method
from arithmetic_decoding.request import T5XArgs, from_t5x


def arithmetic_sample(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    decode_rng: Optional[jax.Array] = None,
    num_decodes: int = 1,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    rescale_log_probs: bool = True,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
    *,
    codes: Optional[jax.Array] = None,
    code_scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
    code_resolution: float = CODE_RESOLUTION,
    return_codes: bool = False,
    seed: Optional[int] = None,
    row_ids: Optional[jax.Array] = None,
    cache_growth: Optional[CacheGrowth] = None,
):
  """Arithmetic sampling with the signature, defaults and returns of T5X's
  `decoding.temperature_sample`.

  Every argument means what it means there; see the module docstring for the
  loop. Sample j of input b decodes code `codes[b, j]`; by default the N codes
  of each input are a randomly shifted lattice, so the N samples are exact
  model samples, stratified over the model's distribution.

  Args:
    inputs: int [B, L]; non-zero entries are a teacher-forced prompt; position
      0 is BOS (0) unless `initial_index` says where to start.
    cache: the model's autoregressive cache (dict or FrozenDict).
    tokens_to_logits: (DecodingState) -> (logits [B*N, V], new cache).
    eos_id: end-of-sequence token id, or a sequence of ids (any ends a row).
    decode_rng: PRNG key for the codes; None means PRNGKey(0), as in T5X.
    num_decodes: N, samples per input (static).
    temperature: float >= 0, or float [B] per input; <= 1e-4 is greedy.
    topk: keep the k most likely tokens (0: all). T5X's default 1 is greedy;
      set topk=0 to sample from the full distribution. May be traced.
    topp: keep the smallest most-likely set of mass >= topp (0: off). May be
      traced. At most one of topk/topp may be non-zero.
    cache_offset: batch axis of cache arrays (1 with scanned layers).
    initial_index: int [B]; positions to start from (prefilled cache).
    max_decode_steps: int or int [B]; steps after the prompt, at most L.
    max_decode_steps_hard_limit: static int cap on max_decode_steps.
    rescale_log_probs: return log-probs under the transformed distribution.
    state_callback_fn: (SamplingLoopState) -> SamplingLoopState, each step.
    logit_callback_fn: (logits, SamplingLoopState) -> logits, each step.
    codes: keyword-only; float [B, N] in [0, 1) to decode instead of making
      codes from `decode_rng`.
    code_scheme: keyword-only; a `CodeScheme` (or its string value) used when
      `codes` is None.
    code_resolution: keyword-only; float in [2**-22, 1]: a code decides its
      sample until the decoded tokens' probability falls below this, then a
      fresh per-row uniform takes over (see `choosers.Arithmetic`). The default
      uses all of float32; 1 / num_decodes keeps the lattice's
      stratification and makes samples robust to tiny logit differences.
    return_codes: keyword-only; also return the codes [B, N], in the same
      order as the samples.
    seed: keyword-only; an int folded into `decode_rng` (None: not). `t5x
      infer` passes the same keys on every run; bind
      `arithmetic_sample.seed` in gin to draw a different sample set.
    row_ids: keyword-only; int [B, N] naming each row's noise (the fresh
      uniforms after a spent code, `choosers.Noise`); default the
      global row index b*N + j. With ids that name the sample rather than
      its place (`rollouts.noise_ids`), a (code, id) pair decodes to the
      same tokens in any batch.
    cache_growth: keyword-only; decode over a cache that grows with the
      rows (`loop.CacheGrowth`, e.g. `EncoderDecoderModel.cache_growth()`):
      the same samples, less attention over empty slots. None: the cache
      as given at every step.

  Returns:
    decodes: int32 [B, N, L], each input's samples sorted by increasing
      log-prob; log_probs: float32 [B, N]; and codes [B, N] if `return_codes`.
    A row whose logits hold NaN (or +inf, or no finite value) at a step it
    must draw from ends there: it is padded with 0 from that position and
    its log-prob is NaN (sorted last). Nothing is sampled from NaN.

  Example (a model that always prefers token 2 with probability 0.6):

    decodes, log_probs = arithmetic_sample(
        jnp.zeros((1, 3), jnp.int32), {}, tokens_to_logits, eos_id=1,
        decode_rng=jax.random.PRNGKey(0), num_decodes=4, topk=0)
  """
  request = from_t5x(T5XArgs.of(locals()), Method.ARITHMETIC, seed=seed,
                     codes=codes, code_scheme=code_scheme,
                     code_resolution=code_resolution, row_ids=row_ids,
                     cache_growth=cache_growth)
  decodes, log_probs, sorted_codes = run_fused(request)
  if return_codes:
    return decodes, log_probs, sorted_codes
  return decodes, log_probs


def ancestral_sample(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    decode_rng: Optional[jax.Array] = None,
    num_decodes: int = 1,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    rescale_log_probs: bool = True,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
    *,
    seed: Optional[int] = None,
    cache_growth: Optional[CacheGrowth] = None,
):
  """Ordinary ancestral sampling in the same loop: T5X's `temperature_sample`.

  Same signature, defaults and returns as `arithmetic_sample` (without the
  code arguments) and the same loop; each token is drawn with
  `jax.random.categorical` instead of from a code. The one difference from
  T5X: every row draws from its own key, `fold_in(step_key, row)`
  (`choosers.row_keys`), where T5X draws the whole batch from one step key, so a
  row's sample does not depend on the batch or on the sharding around it.
  The baseline that arithmetic sampling is measured against. `seed` and
  `cache_growth` (keyword-only) are as in `arithmetic_sample`.
  """
  request = from_t5x(T5XArgs.of(locals()), Method.ANCESTRAL, seed=seed,
                     cache_growth=cache_growth)
  return run_fused(request)[:2]
