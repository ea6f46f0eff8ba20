"""Beam search in T5X's protocol, with T5X's `beam_search` semantics.

K = num_decodes beams per input. Each step scores every one-token extension
of every live beam, keeps the 2K best (so that K stay live even if K of them
end at once), moves those that just produced EOS into the finished set
(scored by log-prob / brevity penalty) and keeps the K best of the rest live.
The search stops at the length limit, or when no live beam, even with the
largest brevity penalty still to come, can beat the worst finished one.

Layout: sequences carry a dummy BOS 0 at position 0, so position i of a beam
lines up with `inputs[:, i]` (T5X's shifted-right prompt): non-zero prompt
tokens are forced, with log-prob 0 and a single live beam, until the prompt
ends. Results drop the dummy: [B, K, max_decode_len], sorted by increasing
score (the best beam last), as T5X returns them.

Brevity penalty (Wu et al., 2016): ((5 + length) / 6) ** alpha, with length
counting every position written (prompt included). alpha = 0 ranks by raw
log-probability.

An input with no finished beam at the end returns its live beams, scored
by unpenalised log-prob (T5X does the same).

Two choices that differ from T5X where inputs start at different positions
(`initial_index` with uneven prompts; checked against T5X's source):

- `cur_index`. T5X hands `tokens_to_logits` a scalar `cur_index`, its loop
  counter. Without `initial_index` every row is at that position and we pass
  the same scalar (so models that use it as a slice index work unchanged).
  With `initial_index` we pass each row's own position, int32 [B*K], as
  `temperature_sample` does: a single counter is no row's position there.
- Steps. T5X runs `max_decode_len - min(initial_index)` steps for every
  input, so an input's result depends on the other prompts in its batch.
  Here each input decodes from its own `initial_index` to the end, exactly
  as T5X does for that input alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding import validation
from arithmetic_decoding.request import jit_or_trace
from arithmetic_decoding.wide_topk import wide_top_k
from arithmetic_decoding.protocol import (DecodingState, call_model,
                                          expand_rows, map_batched)

PyTree = Any
# T5X's stand-in for -inf: finite, so sums and top-k stay well ordered.
NEG_INF = -1.0e7


def brevity_penalty(alpha: float, length: jax.Array) -> jax.Array:
  """((5 + length) / 6) ** alpha.

  >>> float(brevity_penalty(0.6, jnp.array(1)))
  1.0
  """
  return jnp.power((5.0 + length.astype(jnp.float32)) / 6.0, alpha)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BeamState:
  """The beam-search loop state.

  Attributes:
    cur_index: int32 [B]; the position fed at this step, per input (the
      loop counter for all inputs unless they start at `initial_index`).
    live_log_probs: float32 [B, K]; log-probs of the live beams, ascending.
    finished_scores: float32 [B, K]; scores of finished beams, ascending
      (NEG_INF in empty slots).
    live_seqs: int32 [B, K, T + 1]; live beams (dummy BOS first).
    finished_seqs: int32 [B, K, T + 1]; finished beams.
    finished_flags: bool [B, K]; the slot holds a finished beam.
    cache: the model cache for B*K rows.
  """

  cur_index: jax.Array
  live_log_probs: jax.Array
  finished_scores: jax.Array
  live_seqs: jax.Array
  finished_seqs: jax.Array
  finished_flags: jax.Array
  cache: PyTree


def _gather(x: jax.Array, indices: jax.Array) -> jax.Array:
  """Picks beams: x [B, K_old, ...], indices [B, K_new] -> [B, K_new, ...].

  >>> _gather(jnp.array([[10, 11, 12], [20, 21, 22]]),
  ...         jnp.array([[2, 0], [1, 1]])).tolist()
  [[12, 10], [21, 21]]
  """
  return jax.vmap(lambda row, idx: row[idx])(x, indices)


def _top(scores: jax.Array, k: int):
  """The k best of scores [B, M], ascending: (values [B, k], indices)."""
  values, indices = lax.top_k(scores, k)
  return jnp.flip(values, axis=1), jnp.flip(indices, axis=1)


def _gather_cache(cache: PyTree, beam_indices: jax.Array, offset: int,
                  with_cache_index: bool) -> PyTree:
  """Reorders the B*K cache rows: row b*K + k takes row b*K + beam[b, k]."""
  batch, beams = beam_indices.shape
  # [B, K] -> [B*K]: flat source rows.
  flat = (jnp.arange(batch, dtype=jnp.int32)[:, None] * beams +
          beam_indices).reshape(batch * beams)
  return map_batched(lambda x: jnp.take(x, flat, axis=offset), cache, offset,
                     with_cache_index)


@dataclasses.dataclass(frozen=True)
class BeamCall:
  """One validated beam search: arrays (pytree leaves) and static metadata.

  Attributes:
    inputs: int32 [B, L]; BOS 0 first, non-zero entries a forced prompt.
    cache: the model cache for B rows.
    initial_index: int32 [B] or None.
    tokens_to_logits: (static) the model's step function.
    eos_id, beams, alpha, max_decode_len, cache_offset: (static) as in
      `beam_search` (beams = its num_decodes, K).
  """

  inputs: jax.Array
  cache: PyTree
  initial_index: Optional[jax.Array]
  tokens_to_logits: Any
  eos_id: int
  beams: int
  alpha: float
  max_decode_len: int
  cache_offset: int

  @property
  def length(self) -> int:
    """Positions in beam space: the decoded ones plus the dummy BOS."""
    return self.max_decode_len + 1

  @property
  def with_cache_index(self) -> bool:
    return self.initial_index is not None


jax.tree_util.register_dataclass(
    BeamCall, data_fields=["inputs", "cache", "initial_index"],
    meta_fields=["tokens_to_logits", "eos_id", "beams", "alpha",
                 "max_decode_len", "cache_offset"])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Candidates:
  """The 2K best one-token extensions of an input's live beams.

  Attributes:
    log_probs: float32 [B, 2K]; log-prob of each extension, best first.
    beams: int32 [B, 2K]; the live beam each extends.
    seqs: int32 [B, 2K, T + 1]; the extended sequences.
    ended: bool [B, 2K]; the new token is EOS.
  """

  log_probs: jax.Array
  beams: jax.Array
  seqs: jax.Array
  ended: jax.Array


def _prompt(call: BeamCall) -> jax.Array:
  """[B, L] -> [B, T + 1]: the prompt in beam position space."""
  batch = call.inputs.shape[0]
  width = min(call.inputs.shape[1], call.length)
  return jnp.zeros((batch, call.length), jnp.int32).at[:, :width].set(
      call.inputs[:, :width])


def _initial_state(call: BeamCall) -> BeamState:
  batch, beams = call.inputs.shape[0], call.beams
  # [B, K]: one live beam (log-prob 0); the others can never be picked.
  live0 = jnp.where(jnp.arange(beams)[None, :] == beams - 1, 0.0, NEG_INF)
  start = (jnp.zeros((batch,), jnp.int32) if call.initial_index is None else
           call.initial_index)
  return BeamState(
      cur_index=start,
      live_log_probs=jnp.broadcast_to(live0, (batch, beams)).astype(jnp.float32),
      finished_scores=jnp.full((batch, beams), NEG_INF, jnp.float32),
      live_seqs=jnp.broadcast_to(_prompt(call)[:, None, :],
                                 (batch, beams, call.length)),
      finished_seqs=jnp.zeros((batch, beams, call.length), jnp.int32),
      finished_flags=jnp.zeros((batch, beams), bool),
      cache=map_batched(lambda x: expand_rows(x, beams, axis=call.cache_offset),
                        call.cache, call.cache_offset, call.with_cache_index))


def _model_step(call: BeamCall, state: BeamState):
  """Runs the model on every live beam: (log-probs [B, K, V], new cache)."""
  batch, beams = call.inputs.shape[0], call.beams
  i = state.cur_index  # [B]
  at_i = jnp.arange(call.length)[None, :] == i[:, None]  # [B, T + 1]
  # [B, K, T + 1] -> [B*K, 1]: the token at position i of every beam.
  cur_token = jnp.sum(jnp.where(at_i[:, None, :], state.live_seqs, 0), axis=2)
  # T5X's scalar loop counter where every row is at it; else per row.
  cur_index = i[0] if call.initial_index is None else expand_rows(i, beams)
  logits, new_cache = call_model(call.tokens_to_logits, DecodingState(
      cur_index=cur_index,
      sequences=state.live_seqs.reshape(batch * beams, call.length),
      cur_token=cur_token.reshape(batch * beams, 1),
      cache=state.cache))
  # [B*K, V] -> [B, K, V]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return log_probs.reshape(batch, beams, -1), new_cache


def _extend(call: BeamCall, state: BeamState, log_probs: jax.Array
            ) -> Candidates:
  """The 2K best extensions over all of an input's beams."""
  batch, beams, vocab = log_probs.shape
  # [B, K, V] -> [B, K*V] -> [B, 2K]
  flat = (log_probs + state.live_log_probs[:, :, None]).reshape(
      batch, beams * vocab)
  top_log_probs, top_indices = wide_top_k(flat, 2 * beams)
  top_beams, top_tokens = top_indices // vocab, top_indices % vocab
  at_next = (jnp.arange(call.length)[None, :] ==
             (state.cur_index + 1)[:, None])  # [B, T + 1]
  top_log_probs, top_tokens = _force_prompt(call, at_next, top_log_probs,
                                            top_tokens)
  # [B, 2K, T + 1]: the candidates with their new token at i + 1.
  seqs = jnp.where(at_next[:, None, :], top_tokens[:, :, None],
                   _gather(state.live_seqs, top_beams))
  return Candidates(top_log_probs, top_beams, seqs, top_tokens == call.eos_id)


def _force_prompt(call: BeamCall, at_next, top_log_probs, top_tokens):
  """Inside the prompt: one candidate, the prompt token, log-prob 0.

  `at_next` bool [B, T + 1] marks the position being written.
  """
  forced = jnp.sum(jnp.where(at_next, _prompt(call), 0), axis=1)  # [B]
  in_prompt = (forced != 0)[:, None]  # [B, 1]
  only_first = jnp.where(jnp.arange(2 * call.beams)[None, :] == 0, 0.0,
                         NEG_INF)
  return (jnp.where(in_prompt, only_first, top_log_probs),
          jnp.where(in_prompt, forced[:, None], top_tokens))


def _update_live(call: BeamCall, candidates: Candidates, new_cache):
  """The K best candidates that did not just end, and their cache rows."""
  scores = candidates.log_probs + jnp.where(candidates.ended, NEG_INF, 0.0)
  live_log_probs, keep = _top(scores, call.beams)  # [B, K]
  cache = _gather_cache(new_cache, _gather(candidates.beams, keep),
                        call.cache_offset, call.with_cache_index)
  return live_log_probs, _gather(candidates.seqs, keep), cache


def _update_finished(call: BeamCall, state: BeamState, candidates: Candidates):
  """The K best of the finished beams and the candidates that just ended."""
  penalty = brevity_penalty(call.alpha, state.cur_index + 1)[:, None]  # [B, 1]
  new_scores = (candidates.log_probs / penalty +
                jnp.where(candidates.ended, 0.0, NEG_INF))
  scores = jnp.concatenate([state.finished_scores, new_scores], axis=1)
  seqs = jnp.concatenate([state.finished_seqs, candidates.seqs], axis=1)
  flags = jnp.concatenate([state.finished_flags, candidates.ended], axis=1)
  finished_scores, best = _top(scores, call.beams)  # [B, K]
  return finished_scores, _gather(seqs, best), _gather(flags, best)


def _beam_core(call: BeamCall):
  batch = call.inputs.shape[0]
  best_penalty = brevity_penalty(call.alpha, jnp.asarray(call.length))

  def cond_fn(state: BeamState) -> jax.Array:
    not_at_end = jnp.any(state.cur_index < call.length - 1)
    # The best live beam, given the largest brevity penalty still to come,
    # against the worst finished one.
    best_live = state.live_log_probs[:, -1] / best_penalty  # [B]
    worst_finished = jnp.where(state.finished_flags[:, 0],
                               state.finished_scores[:, 0], NEG_INF)
    return not_at_end & ~jnp.all(worst_finished > best_live)

  def body_fn(state: BeamState) -> BeamState:
    log_probs, new_cache = _model_step(call, state)
    candidates = _extend(call, state, log_probs)
    live_log_probs, live_seqs, cache = _update_live(call, candidates,
                                                    new_cache)
    finished_scores, finished_seqs, finished_flags = _update_finished(
        call, state, candidates)
    new_state = BeamState(state.cur_index + 1, live_log_probs, finished_scores,
                          live_seqs, finished_seqs, finished_flags, cache)
    # Inputs that started later (initial_index) may still run: the others
    # stay as they were.
    at_end = state.cur_index >= call.length - 1  # [B]

    def keep_old(new, old):
      if new.ndim == 0 or new.shape[0] != batch:
        return new
      return jnp.where(at_end.reshape((batch,) + (1,) * (new.ndim - 1)), old,
                       new)

    return dataclasses.replace(
        jax.tree_util.tree_map(keep_old, new_state, state), cache=cache)

  final = lax.while_loop(cond_fn, body_fn, _initial_state(call))
  any_finished = jnp.any(final.finished_flags, axis=1)  # [B]
  seqs = jnp.where(any_finished[:, None, None], final.finished_seqs,
                   final.live_seqs)
  scores = jnp.where(any_finished[:, None], final.finished_scores,
                     final.live_log_probs)
  # Drop the dummy BOS: [B, K, T + 1] -> [B, K, T].
  return seqs[:, :, 1:], scores


_beam_core_jit = jax.jit(_beam_core)


def beam_search(inputs: jax.Array,
                cache: Mapping[str, jax.Array],
                tokens_to_logits,
                eos_id: int,
                num_decodes: int = 4,
                alpha: float = 0.6,
                max_decode_len: Optional[int] = None,
                decode_rng: Optional[jax.Array] = None,
                cache_offset: int = 0,
                initial_index: Optional[jax.Array] = None):
  """Beam search with the signature, defaults and returns of T5X's.

  Args:
    inputs: int [B, L]; BOS 0 first, non-zero entries a forced prompt.
    cache: the model cache for B rows (expanded to B*K here).
    tokens_to_logits: (DecodingState) -> (logits [B*K, V], cache).
    eos_id: end-of-sequence token id.
    num_decodes: K, the beam width and the number of results per input.
    alpha: brevity penalty exponent (>= 0; 0 ranks by log-prob).
    max_decode_len: positions to decode (default L; at most L).
    decode_rng: unused (beam search is deterministic); accepted for parity.
    cache_offset: batch axis of cache arrays (1 with scanned layers).
    initial_index: int [B]; positions to start from (prefilled cache).

  Returns:
    sequences int32 [B, K, max_decode_len] and scores float32 [B, K], each
    input's beams sorted by increasing score.
  """
  del decode_rng
  inputs = validation.check_inputs(inputs)
  batch, length = inputs.shape
  validation.check_callable("tokens_to_logits", tokens_to_logits)
  eos_id = validation.check_int("eos_id", eos_id, minimum=0)
  beams = validation.check_int("num_decodes", num_decodes, minimum=1)
  cache_offset = validation.check_int("cache_offset", cache_offset, minimum=0)
  alpha = validation.check_alpha(alpha)
  if max_decode_len is None:
    max_decode_len = length
  max_decode_len = validation.check_int("max_decode_len", max_decode_len,
                                        minimum=1)
  if max_decode_len > length:
    raise ValueError(f"max_decode_len must be in [1, inputs.shape[1] = "
                     f"{length}]; got {max_decode_len}.")
  call = BeamCall(
      inputs=inputs, cache=cache,
      initial_index=validation.check_initial_index(initial_index, batch,
                                                   length),
      tokens_to_logits=tokens_to_logits, eos_id=eos_id, beams=beams,
      alpha=alpha, max_decode_len=max_decode_len, cache_offset=cache_offset)
  return jit_or_trace(_beam_core, _beam_core_jit, call)
