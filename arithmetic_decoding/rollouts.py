"""Group rollouts for RL: G completions per prompt, each a function of
(seed, step, prompt id, code) alone.

GRPO-style training draws a group of G completions per prompt and uses the
group's mean reward as the baseline; pass@k evaluation draws k. Arithmetic
sampling makes the group a shifted lattice of G codes: stratified over the
policy, so fewer duplicates and a less noisy group mean, with every sample
still an exact policy sample.

  out = group_rollouts(llm, ["What is 7 * 6?", "Spell 'cat' backwards."],
                       group_size=8, prompt_ids=[1041, 77], seed=0, step=12,
                       temperature=1.0, max_new_tokens=32, chat=True)
  out.texts[0]             # 8 completions of prompt 1041
  out.codes[0]             # their codes: (j / 8 + u) mod 1, u from (0, 12, 1041)
  out.tokens, out.mask     # int32 / bool [B, G, T]: new tokens, stop included
  out.token_log_probs      # float32 [B, G, T] under the sampling policy
  group_advantages(rewards)  # [B, G] -> GRPO's (r - mean) / (std + eps)

Reproducible and independent of batching. Sample j of prompt p at RL step s
is decoded from its code c = codes[p, j] (made from (seed, s, p)), and the
noise that continues it once the code is spent (`choosers.Arithmetic`) is
selected by a row id hashed from (seed, s, p, c) (`noise_ids`), never by
its place in the batch. The arithmetic of the model is kept independent of
the batch too: XLA's matrix products round differently for different
numbers of rows (on this CPU, 1 row vs 2-32 rows vs 64 rows give
different last bits), so every decode call holds exactly `rows_per_call`
rows of ONE prompt (its G codes padded with spare codes when G is not a
multiple), with the prompt's own width. A (prompt, code) pair therefore
gives the same tokens alone, inside a batch of other prompts, in a larger
group, and on 1 or several devices (`devices`: calls go to devices in turn;
each device runs the same program).

`scheme` picks the group: "shifted_lattice" (stratified, the default),
"van_der_corput" (stratified and extensible: the first 2**k codes of a group
are the 2**k-point lattice with the same shift, so a group of 8 is the
first half of the group of 16), or "iid" (independent uniform codes: exactly
ancestral sampling, by inverse-CDF decoding of a uniform code, so the
baseline goes through the same decode and has the same invariances).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, List, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.categorical import CODE_RESOLUTION
from arithmetic_decoding.choosers import Distribution
from arithmetic_decoding.codes import (ONE_BELOW, CodeScheme, SchemeLike,
                                       as_code_scheme, radical_inverse_base2)
from arithmetic_decoding.methods import Method



def _prompt_keys(seed: int, step: int, prompt_ids: np.ndarray, stream: int):
  """[B] keys fold_in(fold_in(fold_in(PRNGKey(seed), step), stream), id)."""
  base = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), step),
                            stream)
  ids = jnp.asarray(prompt_ids, jnp.uint32)
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(base, ids)


def group_codes(seed: int, step: int, prompt_ids, group_size: int,
                scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE) -> np.ndarray:
  """float32 [B, G] codes of each prompt's group, from (seed, step, id).

  A prompt's codes do not depend on the other prompts. Shifted lattice:
  (j / G + u) mod 1 with u uniform from the prompt's key; van der Corput:
  (radical_inverse_2(j) + u) mod 1 (a prefix of 2**k codes is the 2**k
  lattice); iid: code j uniform from fold_in(key, j) (a prefix of a larger
  group).

  >>> c = group_codes(0, 0, [5, 9], 4)
  >>> c.shape, bool(np.allclose(np.diff(np.sort(c[0])), 0.25, atol=1e-6))
  ((2, 4), True)
  >>> bool((group_codes(0, 0, [9], 4)[0] == c[1]).all())
  True
  """
  scheme = as_code_scheme(scheme)
  ids = _check_ids(prompt_ids)
  g = validation.check_int("group_size", group_size, minimum=1)
  keys = _prompt_keys(seed, step, ids, 0)  # [B]
  index = jnp.arange(g, dtype=jnp.int32)
  if scheme is CodeScheme.IID:
    codes = jax.vmap(lambda k: jax.vmap(
        lambda j: jax.random.uniform(jax.random.fold_in(k, j)))(index))(keys)
  elif scheme in (CodeScheme.SHIFTED_LATTICE, CodeScheme.VAN_DER_CORPUT):
    shift = jax.vmap(jax.random.uniform)(keys)[:, None]  # [B, 1]
    grid = (index.astype(jnp.float32) / g if scheme is
            CodeScheme.SHIFTED_LATTICE else radical_inverse_base2(index))
    codes = grid[None, :] + shift  # [B, G] in [0, 2)
    codes = jnp.where(codes >= 1.0, codes - 1.0, codes)
  else:
    raise ValueError("scheme must be 'shifted_lattice', 'van_der_corput' or "
                     f"'iid' for rollouts; got {scheme.value!r}.")
  return np.asarray(jnp.clip(codes, 0.0, ONE_BELOW), np.float32)


def noise_ids(seed: int, step: int, prompt_ids, codes) -> np.ndarray:
  """int32 [B, G]: the id that selects a sample's noise, hashed from
  (seed, step, prompt id, the code's float32 bits): the same sample gets
  the same id wherever it is decoded.

  >>> a = noise_ids(0, 3, [7], np.float32([[0.25, 0.5]]))
  >>> b = noise_ids(0, 3, [2, 7], np.float32([[0.1, 0.2], [0.5, 0.9]]))
  >>> int(a[0, 1]) == int(b[1, 0]), int(a[0, 0]) != int(a[0, 1])
  (True, True)
  """
  ids = _check_ids(prompt_ids)
  codes = np.asarray(codes, np.float32)
  keys = _prompt_keys(seed, step, ids, 1)  # [B]
  bits = jax.lax.bitcast_convert_type(jnp.asarray(codes), jnp.uint32)

  def one(key, b):
    return jax.random.bits(jax.random.fold_in(key, b), (), jnp.uint32)

  hashed = jax.vmap(lambda k, row: jax.vmap(lambda b: one(k, b))(row))(
      keys, bits)
  return np.asarray(jax.lax.bitcast_convert_type(hashed, jnp.int32))


def _check_ids(prompt_ids) -> np.ndarray:
  ids = np.asarray(prompt_ids)
  if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
    raise TypeError("prompt_ids must be a non-empty 1-D sequence of ints; got "
                    f"{prompt_ids!r}.")
  if ids.min() < 0 or ids.max() >= 2**32:
    raise ValueError(f"prompt_ids must lie in [0, 2**32); got {prompt_ids!r}.")
  return ids.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Rollouts:
  """G completions of each of B prompts, in code order of the request.

  Attributes:
    prompt_ids: int64 [B].
    codes: float32 [B, G]; sample j of prompt b was decoded from codes[b, j].
    tokens: int32 [B, G, T]; the new tokens, the stop token included (the
      policy's last action), 0 after it. T = max_new_tokens.
    mask: bool [B, G, T]; True on the tokens of `tokens`.
    token_log_probs: float32 [B, G, T]; log-probability of each token under
      the sampling distribution (temperature, top-k/top-p applied),
      recomputed by one teacher-forced pass; 0 off the mask. None when not
      asked for.
    log_probs: float32 [B, G]; each completion's log-probability as the
      decode loop accumulated it.
    texts: [B][G] the completions decoded to text (stop token excluded).
    finished: bool [B, G]; ended by a stop token.
  """

  prompt_ids: np.ndarray
  codes: np.ndarray
  tokens: np.ndarray
  mask: np.ndarray
  token_log_probs: Optional[np.ndarray]
  log_probs: np.ndarray
  texts: List[List[str]]
  finished: np.ndarray

  def distinct(self) -> List[int]:
    """Distinct completions (token sequences) per prompt."""
    return [len({tuple(t[m].tolist()) for t, m in zip(tok, msk)})
            for tok, msk in zip(self.tokens, self.mask)]


def group_advantages(rewards, normalize: bool = True,
                     eps: float = 1e-6) -> np.ndarray:
  """GRPO's advantages (float64 [B, G]) from a group's rewards [B, G]: r - mean over the
  group, divided by the group's standard deviation + eps when `normalize`.
  A group whose rewards are all equal has advantage 0: it teaches nothing.

  >>> group_advantages([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]).round(4)
  array([[ 1., -1., -1.,  1.],
         [ 0.,  0.,  0.,  0.]])
  """
  r = np.asarray(rewards, np.float64)
  if r.ndim != 2 or r.shape[1] < 1:
    raise ValueError(f"rewards must have shape [batch, group]; got {r.shape}.")
  centred = r - r.mean(axis=1, keepdims=True)
  if not normalize:
    return centred
  return centred / (r.std(axis=1, keepdims=True) + eps)


@functools.partial(jax.jit, static_argnames=("model", "topk", "topp"))
def _token_log_probs(params, sequences, temperature, *, model, topk, topp):
  """sequences int32 [R, S] -> float32 [R, S]: the log-prob of token s
  given tokens < s under the sampling distribution (0 for s = 0)."""
  logits = model.logits(params, sequences).astype(jnp.float32)  # [R, S, V]
  rows, length, vocab = logits.shape
  dist = Distribution(temperature, topk, topp)
  flat = dist.transform(logits[:, :-1].reshape(-1, vocab))  # [R*(S-1), V]
  logp = jax.nn.log_softmax(flat, axis=-1)
  picked = jnp.take_along_axis(logp, sequences[:, 1:].reshape(-1, 1), axis=-1)
  picked = picked.reshape(rows, length - 1)
  return jnp.pad(picked, ((0, 0), (1, 0)))


def group_rollouts(llm, prompts: Union[str, Sequence[str]], group_size: int,
                   *, prompt_ids=None, seed: int = 0, step: int = 0,
                   scheme: SchemeLike = CodeScheme.SHIFTED_LATTICE,
                   temperature: float = 1.0, max_new_tokens: int = 64,
                   topk: int = 0, topp: float = 0.0, chat: bool = False,
                   rows_per_call: int = 16, token_log_probs: bool = True,
                   devices: Optional[Sequence[Any]] = None,
                   codes=None, stop_ids: Sequence[int] = ()) -> Rollouts:
  """G completions of each prompt, reproducible from (seed, step, prompt id).

  Args:
    llm: an `llm.LLM`.
    prompts: a text or B texts.
    group_size: G >= 1 completions per prompt.
    prompt_ids: B ints in [0, 2**32) naming the prompts (default 0..B-1);
      the same id with the same text gives the same group in any batch.
    seed, step: ints >= 0; the run's seed and the RL step (a fresh group
      per step).
    scheme: "shifted_lattice" (stratified), "van_der_corput" (stratified,
      extensible in powers of two) or "iid" (ancestral sampling).
    temperature, topk, topp, max_new_tokens, chat: as `llm.generate`.
    rows_per_call: rows of every decode call (fixed, so that a sample's
      arithmetic does not depend on G or the batch); a group takes
      ceil(G / rows_per_call) calls. Changing it may change samples (last
      bits of the logits).
    token_log_probs: also compute per-token log-probs (one teacher-forced
      pass per call).
    devices: JAX devices to spread the calls over (default: the first).
    codes: float [B, G] codes to decode instead of the scheme's.
    stop_ids: token ids that also end a completion (besides the model's
      EOS and end-of-turn tokens), e.g. a newline for one-line answers.

  Raises:
    ValueError / TypeError: an argument out of range (see also `generate`).
  """
  from arithmetic_decoding import llm as llm_lib  # the `llm` extra

  texts = [prompts] if isinstance(prompts, str) else list(prompts)
  if not texts or not all(isinstance(t, str) for t in texts):
    raise TypeError("prompts must be a string or a non-empty list of strings.")
  g = validation.check_int("group_size", group_size, minimum=1)
  rows = validation.check_int("rows_per_call", rows_per_call, minimum=1)
  steps = validation.check_int("max_new_tokens", max_new_tokens, minimum=1)
  validation.check_int("seed", seed, minimum=0)
  validation.check_int("step", step, minimum=0)
  validation.check_temperature(temperature, 1)
  ids = (np.arange(len(texts)) if prompt_ids is None else
         _check_ids(prompt_ids))
  if len(ids) != len(texts):
    raise ValueError(f"prompt_ids must have one id per prompt ({len(texts)});"
                     f" got {len(ids)}.")
  if len(set(ids.tolist())) != len(ids):
    raise ValueError("prompt_ids must be distinct.")
  if codes is None:
    codes = group_codes(seed, step, ids, g, scheme)
  else:
    codes = np.asarray(validation.check_codes(codes, len(texts), g))
  noise = noise_ids(seed, step, ids, codes)
  devices = list(devices) if devices is not None else [jax.devices()[0]]
  if not devices:
    raise ValueError("devices must name at least one device.")
  params_on = {}

  def params_for(device):
    if device not in params_on:
      params_on[device] = jax.device_put(llm.params, device)
    return params_on[device]

  topk = validation.check_topk(topk)
  topp = validation.check_topp(topp)
  validation.check_topk_topp(topk, topp)
  stops = tuple(llm.stop_ids) + tuple(
      validation.check_int("stop_ids", t, minimum=1) for t in stop_ids
      if t not in llm.stop_ids)
  calls = -(-g // rows)
  # Launch every call first (asynchronous: the devices work in parallel),
  # then collect. Call (b, c) holds codes [c*rows, (c+1)*rows) of prompt b,
  # padded with copies of its first code (same code, same noise id: the
  # same sample, dropped).
  launched = []
  for b, text in enumerate(texts):
    chat_text, ids_b, batch = llm_lib.prepare_prompts(llm, text, steps, chat)
    for c in range(calls):
      part = np.arange(c * rows, min(g, (c + 1) * rows))
      fill = np.concatenate([part, np.full(rows - len(part), part[0])])
      device = devices[len(launched) % len(devices)]
      arrays = llm_lib._decode(  # pylint: disable=protected-access
          params_for(device), jax.device_put(batch, device),
          jax.device_put(jax.random.PRNGKey(seed), device),
          jax.device_put(jnp.float32(temperature), device),
          jax.device_put(codes[b, fill][None], device),
          jax.device_put(noise[b, fill][None], device), model=llm.model,
          method=Method.ARITHMETIC, num_samples=rows,
          length=batch.shape[1] + 1 + steps, max_new_tokens=steps, topk=topk,
          topp=topp, eos=stops, code_resolution=CODE_RESOLUTION)
      launched.append((b, part, fill, device, chat_text, ids_b, arrays))

  tokens = np.zeros((len(texts), g, steps), np.int32)
  mask = np.zeros((len(texts), g, steps), bool)
  totals = np.zeros((len(texts), g), np.float32)
  finished = np.zeros((len(texts), g), bool)
  out_texts: List[List[str]] = [[""] * g for _ in texts]
  for b, part, _, _, chat_text, ids_b, arrays in launched:
    gen = llm_lib.collect(llm, Method.ARITHMETIC, chat_text, ids_b, steps,
                          arrays, stops)
    for j in part:
      # Samples come back ordered by code; find code j's.
      i = int(np.flatnonzero(gen.codes[0] == codes[b, j])[0])
      stop = int(gen.stop_tokens[0, i])
      full = gen.tokens[0][i] + ([stop] if stop >= 0 else [])
      tokens[b, j, :len(full)] = full
      mask[b, j, :len(full)] = True
      out_texts[b][j] = gen.texts[0][i]
      totals[b, j] = gen.log_probs[0, i]
      finished[b, j] = gen.finished[0, i]

  logps = None
  if token_log_probs:
    scored = []
    for b, part, fill, device, _, ids_b, _ in launched:
      prompt = ids_b[0]
      length = -(-(len(prompt) + steps) // llm_lib.PROMPT_BUCKET)
      seqs = np.zeros((rows, length * llm_lib.PROMPT_BUCKET), np.int32)
      seqs[:, :len(prompt)] = prompt
      seqs[:, len(prompt):len(prompt) + steps] = tokens[b, fill]
      scored.append((b, part, len(prompt), _token_log_probs(
          params_for(device), jax.device_put(seqs, device),
          jax.device_put(jnp.float32(max(float(temperature), 1e-4)), device),
          model=llm.model, topk=topk, topp=topp)))
    logps = np.zeros((len(texts), g, steps), np.float32)
    for b, part, n, lp in scored:
      new = np.asarray(lp)[:len(part), n:n + steps]
      logps[b, part] = np.where(mask[b, part], new, 0.0)
  return Rollouts(prompt_ids=ids, codes=codes, tokens=tokens, mask=mask,
                  token_log_probs=logps, log_probs=totals, texts=out_texts,
                  finished=finished)
