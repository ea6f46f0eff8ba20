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
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
from jax import lax

from arithmetic_decoding import validation
from arithmetic_decoding.decoding import call_core
from arithmetic_decoding.protocol import (DecodingState, expand_rows,
                                          map_batched, match_container)

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
    cur_index: int32 [B]; the position fed at this step, per input.
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


# Lanes of a TPU vreg: the first stage of `_top_k` works on rows this wide.
_LANES = 128


def _top_k(x: jax.Array, k: int):
  """lax.top_k over a wide last axis, in two exact stages.

  The beam step picks the best 2K of K * V candidates per input: few rows,
  millions of columns. TPUs lay such an array out with the short batch axis
  padded to 128 lanes, which multiplies the top-k's memory (measured with
  the AOT compiler: GiBs per chip for mT5-small). Splitting each row into
  128 contiguous chunks and keeping the k best of each first (the best k of
  a row are among the chunks' best k), then the k best of those 128 * k,
  gives the same values and indices, ties included (lower index first).

  >>> v, i = _top_k(jnp.array([[0., 5., 3., 5., 1.] * 600]), 2)
  >>> v.tolist(), i.tolist()
  ([[5.0, 5.0]], [[1, 3]])
  """
  batch, width = x.shape
  if width <= 8 * _LANES * k:
    return lax.top_k(x, k)
  chunk = -(-width // _LANES)  # ceil
  padded = jnp.pad(x, ((0, 0), (0, chunk * _LANES - width)),
                   constant_values=-jnp.inf)
  # [B, W] -> [B * 128, W / 128]: the k best of each chunk.
  values, local = lax.top_k(padded.reshape(batch * _LANES, chunk), k)
  offsets = (jnp.arange(_LANES, dtype=local.dtype) * chunk)[None, :, None]
  # [B, 128, k] -> [B, 128 * k], in index order of the chunks.
  index = (local.reshape(batch, _LANES, k) + offsets).reshape(batch, _LANES * k)
  values, best = lax.top_k(values.reshape(batch, _LANES * k), k)
  return values, jnp.take_along_axis(index, best, axis=1)


def _gather_cache(cache: PyTree, beam_indices: jax.Array, offset: int,
                  with_cache_index: bool) -> PyTree:
  """Reorders the B*K cache rows: row b*K + k takes row b*K + beam[b, k]."""
  batch, beams = beam_indices.shape
  # [B, K] -> [B*K]: flat source rows.
  flat = (jnp.arange(batch, dtype=jnp.int32)[:, None] * beams +
          beam_indices).reshape(batch * beams)
  return map_batched(lambda x: jnp.take(x, flat, axis=offset), cache, offset,
                     with_cache_index)


def _beam_core(inputs, cache, initial_index, *, tokens_to_logits, eos_id: int,
               beams: int, alpha: float, max_decode_len: int,
               cache_offset: int):
  batch = inputs.shape[0]
  length = max_decode_len + 1  # the dummy BOS slot
  with_cache_index = initial_index is not None
  # [B, L] -> [B, T + 1]: the prompt in beam position space.
  prompt = jnp.zeros((batch, length), jnp.int32)
  width = min(inputs.shape[1], length)
  prompt = prompt.at[:, :width].set(inputs[:, :width].astype(jnp.int32))
  slots = jnp.arange(length, dtype=jnp.int32)
  if initial_index is None:
    start = jnp.zeros((batch,), jnp.int32)
  else:
    start = initial_index.astype(jnp.int32)

  # [B, K]: one live beam (log-prob 0); the others can never be picked.
  live0 = jnp.where(jnp.arange(beams)[None, :] == beams - 1, 0.0, NEG_INF)
  state = BeamState(
      cur_index=start,
      live_log_probs=jnp.broadcast_to(live0, (batch, beams)).astype(jnp.float32),
      finished_scores=jnp.full((batch, beams), NEG_INF, jnp.float32),
      live_seqs=jnp.broadcast_to(prompt[:, None, :], (batch, beams, length)),
      finished_seqs=jnp.zeros((batch, beams, length), jnp.int32),
      finished_flags=jnp.zeros((batch, beams), bool),
      cache=map_batched(lambda x: expand_rows(x, beams, axis=cache_offset),
                        cache, cache_offset, with_cache_index))
  best_penalty = brevity_penalty(alpha, jnp.asarray(length))

  def cond_fn(state: BeamState) -> jax.Array:
    not_at_end = jnp.any(state.cur_index < length - 1)
    # The best live beam, given the largest brevity penalty still to come,
    # against the worst finished one.
    best_live = state.live_log_probs[:, -1] / best_penalty  # [B]
    worst_finished = jnp.where(state.finished_flags[:, 0],
                               state.finished_scores[:, 0], NEG_INF)
    done = jnp.all(worst_finished > best_live)
    return not_at_end & ~done

  def body_fn(state: BeamState) -> BeamState:
    i = state.cur_index  # [B]
    at_i = slots[None, :] == i[:, None]  # [B, T + 1]
    # [B, K, T + 1] -> [B*K, 1]: the token at position i of every beam.
    cur_token = jnp.sum(jnp.where(at_i[:, None, :], state.live_seqs, 0), axis=2)
    decoding_state = DecodingState(
        cur_index=expand_rows(i, beams),
        sequences=state.live_seqs.reshape(batch * beams, length),
        cur_token=cur_token.reshape(batch * beams, 1),
        cache=state.cache)
    logits, new_cache = tokens_to_logits(decoding_state)
    new_cache = match_container(state.cache, new_cache)
    vocab = logits.shape[-1]
    # [B*K, V] -> [B, K, V]: log-probs of every extension.
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    log_probs = log_probs.reshape(batch, beams, vocab)
    log_probs = log_probs + state.live_log_probs[:, :, None]
    # [B, K*V] -> [B, 2K]: the best 2K extensions over all beams.
    flat = log_probs.reshape(batch, beams * vocab)
    top_log_probs, top_indices = _top_k(flat, 2 * beams)
    top_beams = top_indices // vocab
    top_tokens = top_indices % vocab

    # Teacher forcing: inside the prompt keep one beam with log-prob 0.
    at_next = slots[None, :] == (i + 1)[:, None]  # [B, T + 1]
    forced = jnp.sum(jnp.where(at_next, prompt, 0), axis=1)  # [B]
    in_prompt = (forced != 0)[:, None]  # [B, 1]
    only_first = jnp.where(jnp.arange(2 * beams)[None, :] == 0, 0.0, NEG_INF)
    top_log_probs = jnp.where(in_prompt, only_first, top_log_probs)
    top_tokens = jnp.where(in_prompt, forced[:, None], top_tokens)

    # [B, 2K, T + 1]: the 2K candidates with their new token at i + 1.
    candidates = _gather(state.live_seqs, top_beams)
    candidates = jnp.where(at_next[:, None, :], top_tokens[:, :, None],
                           candidates)
    just_ended = top_tokens == eos_id  # [B, 2K]

    # Live set: the K best that did not just end.
    live_scores = top_log_probs + jnp.where(just_ended, NEG_INF, 0.0)
    live_log_probs, keep = _top(live_scores, beams)  # [B, K]
    live_seqs = _gather(candidates, keep)
    cache = _gather_cache(new_cache, _gather(top_beams, keep), cache_offset,
                          with_cache_index)

    # Finished set: the K best of the old finished and the newly ended.
    penalty = brevity_penalty(alpha, i + 1)[:, None]  # [B, 1]
    new_scores = (top_log_probs / penalty +
                  jnp.where(just_ended, 0.0, NEG_INF))
    all_scores = jnp.concatenate([state.finished_scores, new_scores], axis=1)
    all_seqs = jnp.concatenate([state.finished_seqs, candidates], axis=1)
    all_flags = jnp.concatenate([state.finished_flags, just_ended], axis=1)
    finished_scores, best = _top(all_scores, beams)
    new_state = BeamState(
        cur_index=i + 1,
        live_log_probs=live_log_probs,
        finished_scores=finished_scores,
        live_seqs=live_seqs,
        finished_seqs=_gather(all_seqs, best),
        finished_flags=_gather(all_flags, best),
        cache=cache)
    # Inputs that started later (initial_index) may still run: the others
    # stay as they were.
    at_end = i >= length - 1  # [B]

    def keep_old(new, old):
      if new.ndim == 0 or new.shape[0] != batch:
        return new
      return jnp.where(at_end.reshape((batch,) + (1,) * (new.ndim - 1)), old,
                       new)

    return dataclasses.replace(
        jax.tree_util.tree_map(keep_old, new_state, state), cache=cache)

  final = lax.while_loop(cond_fn, body_fn, state)
  any_finished = jnp.any(final.finished_flags, axis=1)  # [B]
  seqs = jnp.where(any_finished[:, None, None], final.finished_seqs,
                   final.live_seqs)
  scores = jnp.where(any_finished[:, None], final.finished_scores,
                     final.live_log_probs)
  # Drop the dummy BOS: [B, K, T + 1] -> [B, K, T].
  return seqs[:, :, 1:], scores


_STATIC = ("tokens_to_logits", "eos_id", "beams", "alpha", "max_decode_len",
           "cache_offset")
_beam_core_jit = jax.jit(_beam_core, static_argnames=_STATIC)


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
  initial_index = validation.check_initial_index(initial_index, batch, length)
  args = (inputs, cache, initial_index)
  static = dict(tokens_to_logits=tokens_to_logits, eos_id=eos_id, beams=beams,
                alpha=alpha, max_decode_len=max_decode_len,
                cache_offset=cache_offset)
  return call_core(_beam_core, _beam_core_jit, args, static)
