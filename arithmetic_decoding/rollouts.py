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

Reproducible and independent of batching. A group is `llm.decode` with
the seed policy of `seeds`: sample j of prompt p at RL step s is decoded
from its code c = codes[p, j] (made from (seed, s, p)), and the noise that
continues it once the code is spent (`choosers.Arithmetic`) comes from a
row id hashed from (seed, s, p, c) and the position it writes, never from
its place in the batch. The model's arithmetic is independent of the batch
too (`llm`: each prompt prefilled alone, at least 64 model rows per step),
so a (prompt, code) pair gives the same tokens alone, inside a batch of
other prompts, in a larger group, and on 1 or several devices (`devices`:
the prompts are split over them, each part decoded by the compacted
scheduler on its device, the parts in parallel). The same prompt, seed and
settings give the same group through `llm.generate` (step 0) and the
sampling server.

`scheme` picks the group: "shifted_lattice" (stratified, the default),
"van_der_corput" (stratified and extensible: the first 2**k codes of a group
are the 2**k-point lattice with the same shift, so a group of 8 is the
first half of the group of 16), or "iid" (independent uniform codes: exactly
ancestral sampling, by inverse-CDF decoding of a uniform code, so the
baseline goes through the same decode and has the same invariances).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any, List, Optional, Sequence, Union

import jax
import numpy as np

from arithmetic_decoding import seeds, validation
from arithmetic_decoding.codes import CodeScheme, SchemeLike
from arithmetic_decoding.methods import Method
from arithmetic_decoding.request import SamplingParams

# Seed policy functions, re-exported: RL code names a group by them.
group_codes = seeds.group_codes
noise_ids = seeds.noise_ids


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


def _in_order(out_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
  """int [G]: for each requested code j, its sample's index among the
  decode's outputs (which come sorted by log-prob, codes with them)."""
  at = np.empty(codes.size, np.int64)
  at[np.argsort(codes, kind="stable")] = np.argsort(out_codes, kind="stable")
  return at


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
    prompt_ids: B distinct ints in [0, 2**32) naming the prompts (default
      0..B-1); the same id with the same text gives the same group in any
      batch.
    seed, step: ints >= 0; the run's seed and the RL step (a fresh group
      per step).
    scheme: "shifted_lattice" (stratified), "van_der_corput" (stratified,
      extensible in powers of two) or "iid" (ancestral sampling).
    temperature, topk, topp, max_new_tokens, chat: as `llm.generate`.
    rows_per_call: rows of every teacher-forced call that scores the
      tokens (`token_log_probs`; fixed, so that a token's log-prob does not
      depend on G or the batch).
    token_log_probs: also compute per-token log-probs (one teacher-forced
      pass).
    devices: JAX devices to split the prompts over (default: the first).
    codes: float [B, G] codes to decode instead of the scheme's.
    stop_ids: token ids that also end a completion (besides the model's
      EOS and end-of-turn tokens), e.g. a newline for one-line answers.

  Raises:
    ValueError / TypeError: an argument out of range (see also `generate`).
  """
  from arithmetic_decoding import llm as llm_lib  # the `llm` extra

  sampling = SamplingParams(
      n=validation.check_int("group_size", group_size, minimum=1),
      method=Method.ARITHMETIC, temperature=temperature,
      topk=topk, topp=topp, max_new_tokens=max_new_tokens, seed=seed,
      step=step, code_scheme=scheme, stop_ids=tuple(stop_ids))
  g, steps = sampling.n, sampling.max_new_tokens
  rows = validation.check_int("rows_per_call", rows_per_call, minimum=1)
  texts, ids_all, _ = llm_lib.prepare_prompts(llm, prompts, steps, chat)
  ids = (np.arange(len(texts)) if prompt_ids is None else
         seeds.check_prompt_ids(prompt_ids))
  if len(ids) != len(texts):
    raise ValueError(f"prompt_ids must have one id per prompt ({len(texts)});"
                     f" got {len(ids)}.")
  if len(set(ids.tolist())) != len(ids):
    raise ValueError("prompt_ids must be distinct.")
  if codes is None:
    codes = seeds.group_codes(seed, step, ids, g, sampling.code_scheme)
  else:
    codes = np.asarray(validation.check_codes(codes, len(texts), g))
  devices = list(devices) if devices is not None else [jax.devices()[0]]
  if not devices:
    raise ValueError("devices must name at least one device.")
  params_on = {d: jax.device_put(llm.params, d) for d in devices}
  stops = tuple(dict.fromkeys(llm.stop_ids + sampling.stop_ids))
  # The prompts in contiguous parts, one per device, decoded in parallel.
  parts = [p for p in np.array_split(np.arange(len(texts)), len(devices))
           if p.size]

  def run(part, device):
    return llm_lib.decode(llm, [ids_all[b] for b in part], sampling,
                          prompt_ids=ids[part], codes=codes[part],
                          params=params_on[device])

  with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
    outs = list(pool.map(run, parts, devices[:len(parts)]))

  tokens = np.zeros((len(texts), g, steps), np.int32)
  mask = np.zeros((len(texts), g, steps), bool)
  totals = np.zeros((len(texts), g), np.float32)
  finished = np.zeros((len(texts), g), bool)
  out_texts: List[List[str]] = [[""] * g for _ in texts]
  for part, arrays in zip(parts, outs):
    gen = llm_lib.collect(llm, Method.ARITHMETIC, [texts[b] for b in part],
                          [ids_all[b] for b in part], steps, arrays, stops)
    for i, b in enumerate(part):
      for j, k in enumerate(_in_order(gen.codes[i], codes[b])):
        stop = int(gen.stop_tokens[i, k])
        full = gen.tokens[i][k] + ([stop] if stop >= 0 else [])
        tokens[b, j, :len(full)] = full
        mask[b, j, :len(full)] = True
        out_texts[b][j] = gen.texts[i][k]
        totals[b, j] = gen.log_probs[i, k]
        finished[b, j] = gen.finished[i, k]

  logps = None
  if token_log_probs:
    logps = np.zeros((len(texts), g, steps), np.float32)
    for part, device in zip(parts, devices):
      for b in part:
        completions = [tokens[b, j, :int(mask[b, j].sum())].tolist()
                       for j in range(g)]
        scored = llm_lib.token_log_probs(
            llm, ids_all[b], completions, sampling, row_block=rows,
            params=params_on[device], device=device)[0]
        for j, lp in enumerate(scored):
          logps[b, j, :lp.size] = lp
  return Rollouts(prompt_ids=ids, codes=codes, tokens=tokens, mask=mask,
                  token_log_probs=logps, log_probs=totals, texts=out_texts,
                  finished=finished)
