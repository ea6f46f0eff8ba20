"""`arithmetic_encode`: where given sequences sit in code space.

The inverse of `arithmetic_sample`: the same loop (`loop`) with the
`TeacherForced` chooser, which forces each given token and narrows the
row's code interval to it. The interval of a sequence is as wide as its
probability under the sampling transform, and every code in it decodes
back to the sequence.

  >>> import jax.numpy as jnp
  >>> from arithmetic_decoding import arithmetic_sample
  >>> from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel
  >>> model = ToyLanguageModel()
  >>> inputs, cache = jnp.zeros((1, 4), jnp.int32), model.init_cache([0])
  >>> sequences = jnp.array([[[2, 1, 0, 0], [3, 1, 0, 0]]])
  >>> low, log_width = arithmetic_encode(inputs, cache, model.tokens_to_logits,
  ...                                    EOS_ID, sequences, topk=0)
  >>> mid = low + jnp.exp(log_width) / 2        # a code inside each interval
  >>> decodes, _ = arithmetic_sample(inputs, cache, model.tokens_to_logits,
  ...                                EOS_ID, num_decodes=2, topk=0, codes=mid)
  >>> sorted(map(tuple, decodes[0].tolist())) == sorted(
  ...     map(tuple, sequences[0].tolist()))
  True
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple, Union

import jax

from arithmetic_decoding.choosers import TeacherForced
from arithmetic_decoding.loop import LogitCallbackFn, StateCallbackFn, TokensToLogits
from arithmetic_decoding.request import (DecodeRequest, T5XArgs, from_t5x,
                                         jit_or_trace)
from arithmetic_decoding.rows import run_rows


def encode_core(request: DecodeRequest) -> Tuple[jax.Array, jax.Array]:
  """A request with targets -> (low [B, N], log_width [B, N])."""
  batch, n = request.batch, request.num_decodes
  final = run_rows(request.rows(), request.topk, request.topp,
                   request.model_fns(), request.options)
  return (final.chooser_state.low.reshape(batch, n),
          final.log_prob.reshape(batch, n))


_encode_core_jit = jax.jit(encode_core)


def arithmetic_encode(
    inputs: jax.Array,
    cache: Mapping[str, jax.Array],
    tokens_to_logits: TokensToLogits,
    eos_id: int,
    sequences: jax.Array,
    decode_rng: Optional[jax.Array] = None,
    *,
    temperature: Union[float, jax.Array] = 1.0,
    topk: int = 1,
    topp: float = 0.0,
    cache_offset: int = 0,
    initial_index: Optional[jax.Array] = None,
    max_decode_steps: Optional[Union[int, jax.Array]] = None,
    max_decode_steps_hard_limit: Optional[int] = None,
    state_callback_fn: Optional[StateCallbackFn] = None,
    logit_callback_fn: Optional[LogitCallbackFn] = None,
) -> Tuple[jax.Array, jax.Array]:
  """The code interval of each given sequence: the inverse of sampling.

  Runs the decode loop with `sequences` teacher-forced and returns where each
  one sits in code space. With the same model inputs and the same
  temperature/topk/topp, `arithmetic_sample` decodes every code in
  [low, low + exp(log_width)) to that sequence; in particular its midpoint
  `low + exp(log_width) / 2` decodes back to it (for sequences of probability
  >= ~1e-5; below that float32 cannot place the interval).

  The defaults are `arithmetic_sample`'s (topk=1 is greedy: every sequence
  but the greedy one then has width 0); pass the settings you sample with.

  Args:
    inputs, cache, tokens_to_logits, eos_id, temperature, topk, topp,
    cache_offset, initial_index, max_decode_steps, max_decode_steps_hard_limit,
    state_callback_fn, logit_callback_fn: as for `arithmetic_sample`.
    decode_rng: nothing is drawn when encoding; this key only seeds the loop
      state's `rng` field for callbacks that read it (None: PRNGKey(0)).
    sequences: int [B, N, L]; N sequences per input in the layout
      `arithmetic_sample` returns (prompt included, padding after EOS).
      Prompt positions are read from `inputs`; tokens after a sequence's end
      (its first decoded EOS, or its length limit) are ignored.

  Returns:
    low: float32 [B, N]; lower end of each sequence's code interval.
    log_width: float32 [B, N]; log of its width, i.e. the sequence's
      log-probability under the temperature/topk/topp transform (-inf for a
      sequence the transformed model cannot produce; NaN if the model's
      logits were NaN on its path).
  """
  # No rescale_log_probs here: widths are always under the transform.
  request = from_t5x(T5XArgs.of(locals()), TeacherForced(),
                     targets=sequences)
  return jit_or_trace(encode_core, _encode_core_jit, request)
