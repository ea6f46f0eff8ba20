"""Decoder-only LLMs from GGUF files: load, then `generate` N completions.

  llm = LLM.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # prints memory
  out = generate(llm, ["What is 2 + 2?"], num_samples=8, chat=True,
                 method="arithmetic", temperature=1.0, seed=0,
                 max_new_tokens=32)
  out.texts[0]        # 8 completions of the first prompt
  out.codes[0]        # the code in [0, 1) each was decoded from
  out.log_probs[0]    # each completion's log-probability

`decode` is the public decode entry of the LLM side: token ids and a
`request.SamplingParams` -> one `request.DecodeRequest` (`llm_request`),
run by the compacted scheduler (`compaction.run_compacted`: ended rows
dropped, each prompt prefilled once and its samples sharing prefixes) or
the fused one. `generate`, `rollouts.group_rollouts` and the sampling
server all decode through it, with one seed policy (`seeds`), so a
prompt's samples are a function of (seed, step, prompt id, N, method,
settings) alone: the same alone, in any batch of other prompts, through
any of them.

Batch invariance. XLA:CPU computes a row of a matrix product the same way
whatever the other rows hold, but picks its kernel by shape: fewer than
about 33 rows, a prefill of another width, or a cache of fewer than 64
positions give other last bits. So a prompt is prefilled alone at its own
width (its length rounded up to `PROMPT_BUCKET`) into at least
`MIN_SLOTS` positions, and the compacted scheduler never runs the model on
fewer than `Compaction.min_rows` (64) rows (`pad_small`).
`tests/test_engine.py` checks each of these on the machine at hand.

Every method of `methods.Method` runs: the samplers through the request's
loop, beam search through `beam_search` (which keeps beams, not rows).
Arithmetic samples come back ordered by code (sample j of a prompt is the
j-th point of its shifted lattice), the others as the decode returns them
(by increasing log-probability).

A completion ends at the model's EOS or end-of-turn tokens (from the file's
metadata), at `SamplingParams.stop_ids`, or after `max_new_tokens`; the
stop token is not part of `tokens` or `texts` but counts in `log_probs`.
Needs the `llm` extra (gguf, tokenizers, jinja2).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, List, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import seeds, validation
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.choosers import Distribution, Noise
from arithmetic_decoding.compaction import Compaction, RowLayout, run_compacted
from arithmetic_decoding.engine import Scheduler, run_fused
from arithmetic_decoding.loop import resize_cache
from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import gguf_loader, gguf_tokenizer
from arithmetic_decoding.models import hf_loader, hf_tokenizer
from arithmetic_decoding.models.decoder_config import DecoderConfig
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from arithmetic_decoding.request import DecodeRequest, SamplingParams, build

PyTree = Any
# Prompt widths are rounded up to a multiple of this (fewer recompiles; a
# prompt's prefill width depends on its own length only).
PROMPT_BUCKET = 16
# Cache positions at least (and prefill caches a multiple of this): on
# XLA:CPU attention over fewer positions takes other kernels.
MIN_SLOTS = 64
# The compacted scheduler of the LLM entry points: at least 64 model rows
# at every step, whatever the batch (`Compaction.pad_small`), and rows kept
# at four counts per doubling, at least multiples of 16 (64, 80, 96, 112,
# 128, 160, ..., 448, 512 as samples end: `per_octave`). Coarser counts
# step ended rows: 8 x 2^k (`geometric`) kept every row of a 512-row
# decode while more than half were still decoding, multiples of 64 kept
# a 128-row decode at 128 rows nearly to its end; docs/engine.md measures
# the difference. Sample rows are padded to 8, 16, then those counts
# (`pad_samples`: the programs do not depend on N). The samples are the
# same: a row's logits do not depend on how many rows from 64 up it is
# decoded among.
LLM_COMPACTION = Compaction(pad_small=True, geometric=False, multiple=16,
                            per_octave=4, pad_samples=True)


@dataclasses.dataclass(frozen=True, eq=False)
class LLM:
  """A loaded decoder-only model: configuration, parameters, tokenizer.

  Attributes:
    name: the file's `general.name`.
    config: the `DecoderConfig` read from the metadata.
    model: the T5X-protocol wrapper (`models.DecoderOnlyModel`).
    params: the parameter tree (float32 or bfloat16).
    vocab: the tokenizer metadata (special ids, chat template).
    tokenizer: a `tokenizers.Tokenizer` built from `vocab`.
  """

  name: str
  config: DecoderConfig
  model: DecoderOnlyModel
  params: PyTree
  vocab: gguf_tokenizer.GGUFVocab
  tokenizer: Any

  @classmethod
  def from_gguf(cls, path: str, dtype: str = "float32",
                verbose: bool = True) -> "LLM":
    """Reads a GGUF file: architecture, dequantized weights (as `dtype`),
    tokenizer, stop tokens and chat template. Prints the parameter memory
    unless `verbose` is False.

    Raises:
      FileNotFoundError / ValueError: see `gguf_loader.read_gguf`,
        `config_from_metadata` (unsupported architecture) and
        `load_params` (unsupported quantization type, missing tensor).
    """
    contents = gguf_loader.read_gguf(path)
    config = gguf_loader.config_from_file(contents, dtype)
    params = gguf_loader.load_params(contents, config)
    vocab = gguf_tokenizer.GGUFVocab.from_metadata(contents.metadata)
    llm = cls(name=str(contents.metadata.get("general.name", path)),
              config=config, model=DecoderOnlyModel(config), params=params,
              vocab=vocab, tokenizer=gguf_tokenizer.build_tokenizer(vocab))
    if verbose:
      nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
      print(f"{llm.name}: {config.architecture}, {config.num_layers} layers, "
            f"{llm.num_params() / 1e6:.1f}M parameters, {nbytes / 2**20:.0f} "
            f"MiB as {dtype}")
    return llm

  @classmethod
  def from_hf(cls, folder: str, dtype: str = "float32",
              verbose: bool = True) -> "LLM":
    """Reads a Hugging Face model folder (Llama-style or Gemma 3 text, as
    `save_pretrained` writes it): config.json, the safetensors weights (one
    file or shards; F32, F16, BF16, cast to `dtype`), tokenizer.json, the
    special tokens, stop ids and chat template. Prints the parameter memory
    unless `verbose` is False. The name is the folder's.

    Raises:
      FileNotFoundError / ValueError: see `hf_loader.read_folder` (missing
        files, bad safetensors), `hf_loader.config_from_hf` (unsupported
        model_type or option), `hf_loader.load_params` (missing tensor,
        wrong shape) and `hf_tokenizer`.
    """
    contents = hf_loader.read_folder(folder)
    config = hf_loader.config_from_hf(contents.config, dtype)
    params = hf_loader.load_params(contents, config)
    tokenizer = hf_tokenizer.load_tokenizer(contents.folder)
    vocab = hf_tokenizer.read_vocab(contents.folder, tokenizer, contents.config,
                                    contents.generation_config)
    name = os.path.basename(os.path.normpath(contents.folder))
    llm = cls(name=name, config=config, model=DecoderOnlyModel(config),
              params=params, vocab=vocab, tokenizer=tokenizer)
    if verbose:
      nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
      print(f"{llm.name}: {config.architecture}, {config.num_layers} layers, "
            f"{llm.num_params() / 1e6:.1f}M parameters, {nbytes / 2**20:.0f} "
            f"MiB as {dtype}")
    return llm

  @classmethod
  def load(cls, path: str, dtype: str = "float32",
           verbose: bool = True) -> "LLM":
    """A Hugging Face model folder (`from_hf`) or a GGUF file
    (`from_gguf`), by what `path` is."""
    if os.path.isdir(path):
      return cls.from_hf(path, dtype, verbose)
    return cls.from_gguf(path, dtype, verbose)

  def num_params(self) -> int:
    return sum(x.size for x in jax.tree_util.tree_leaves(self.params))

  @property
  def stop_ids(self) -> Tuple[int, ...]:
    """EOS and the end-of-turn tokens."""
    return self.vocab.stop_ids

  def chat_prompt(self, user: Union[str, Sequence[dict]]) -> str:
    """The chat template applied to a user message (or a message list),
    ending with the assistant's turn; the text itself when the file has no
    template (a base model)."""
    messages = ([{"role": "user", "content": user}] if isinstance(user, str)
                else list(user))
    if not self.vocab.chat_template:
      return "\n".join(m["content"] for m in messages)
    bos = (self.vocab.tokens[self.vocab.bos_id]
           if self.vocab.bos_id is not None else "")
    eos = (self.vocab.tokens[self.vocab.eos_id]
           if self.vocab.eos_id is not None else "")
    return gguf_tokenizer.render_chat(self.vocab.chat_template, messages,
                                      bos_token=bos, eos_token=eos)

  def encode(self, text: str) -> List[int]:
    """Token ids of a prompt, with BOS first where the file asks for it
    (and the text does not already start with it)."""
    ids = self.tokenizer.encode(text, add_special_tokens=False).ids
    bos = self.vocab.bos_id
    if self.vocab.add_bos and bos is not None and ids[:1] != [bos]:
      ids = [bos] + ids
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    return self.tokenizer.decode(list(ids), skip_special_tokens=True)


@dataclasses.dataclass(frozen=True)
class Generation:
  """N completions of each of B prompts.

  Attributes:
    prompts: the prompt texts as encoded (chat template applied).
    prompt_tokens: [B] lists of ids.
    tokens: [B][N] lists of new ids (stop token excluded).
    texts: [B][N] decoded completions.
    log_probs: float32 [B, N]; each completion's log-probability under the
      sampling distribution (temperature, top-k, top-p applied), stop token
      included; beam search: its length-normalised score.
    codes: float32 [B, N]; arithmetic sampling's codes (zeros otherwise).
    finished: bool [B, N]; ended by a stop token (else by max_new_tokens).
    stop_tokens: int32 [B, N]; the stop token that ended it (-1: none).
    method: the `Method` used.
  """

  prompts: List[str]
  prompt_tokens: List[List[int]]
  tokens: List[List[List[int]]]
  texts: List[List[str]]
  log_probs: np.ndarray
  codes: np.ndarray
  finished: np.ndarray
  stop_tokens: np.ndarray
  method: Method

  def distinct(self) -> List[int]:
    """Distinct completions (as token sequences) per prompt."""
    return [len({tuple(t) for t in row}) for row in self.tokens]


@functools.partial(jax.jit, static_argnames=("model", "slots"))
def _prefill(params, prompt, *, model, slots):
  """The cache [1, slots, ...] of one prompt [1, W] (W a multiple of
  `PROMPT_BUCKET`), prefilled alone."""
  return model.decode_start(params, prompt, slots + 1)[1]


def prompt_caches(llm: "LLM", ids: Sequence[Sequence[int]], slots: int,
                  params=None) -> PyTree:
  """The decode cache [B, slots, ...] of B prompts (token ids): each
  prompt prefilled alone at its own width into a cache of the fewest
  `MIN_SLOTS` multiples that hold it, then padded to `slots` positions
  (the same bits in any batch)."""
  params = llm.params if params is None else params
  caches = []
  for row in ids:
    width = -(-len(row) // PROMPT_BUCKET) * PROMPT_BUCKET
    prompt = np.zeros((1, width), np.int32)
    prompt[0, :len(row)] = row
    own = -(-(width + 1) // MIN_SLOTS) * MIN_SLOTS
    caches.append(resize_cache(
        _prefill(params, jnp.asarray(prompt), model=llm.model, slots=own),
        slots, axis=-1))
  return jax.tree_util.tree_map(lambda *x: jnp.concatenate(x, axis=0),
                                *caches)


def llm_request(llm: "LLM", ids: Sequence[Sequence[int]],
                sampling: SamplingParams, *, prompt_ids=None, codes=None,
                params=None) -> Tuple[DecodeRequest, RowLayout]:
  """The request that samples `sampling.n` completions of each of B
  prompts (token ids, as `prepare_prompts` makes them), with the layout of
  its rows for the compacted scheduler.

  Codes and noise follow `seeds` from (sampling.seed, sampling.step,
  prompt_ids [B], default 0..B-1); `codes` float [B, N] replaces the
  scheme's (arithmetic sampling). Rows draw their noise by position
  (`choosers.Noise.POSITION`), so they may run in any loop.
  """
  if sampling.method is Method.BEAM:
    raise ValueError("method 'beam' keeps beams, not rows: use `decode`.")
  batch, n, steps = len(ids), sampling.n, sampling.max_new_tokens
  prompt_ids = (np.arange(batch) if prompt_ids is None else
                seeds.check_prompt_ids(prompt_ids))
  if len(prompt_ids) != batch:
    raise ValueError(f"prompt_ids must have one id per prompt ({batch}); "
                     f"got {len(prompt_ids)}.")
  if len(set(prompt_ids.tolist())) != batch:
    raise ValueError("prompt_ids must be distinct.")
  arithmetic = sampling.method is Method.ARITHMETIC
  if codes is not None:
    if not arithmetic:
      raise ValueError("codes apply to method='arithmetic' only.")
    codes = np.asarray(validation.check_codes(codes, batch, n))
  elif arithmetic:
    codes = seeds.group_codes(sampling.seed, sampling.step, prompt_ids, n,
                              sampling.code_scheme)
  row_ids = seeds.noise_ids(
      sampling.seed, sampling.step, prompt_ids,
      seeds.sample_names(codes if arithmetic else np.zeros((batch, n)),
                         arithmetic))
  width = max(-(-len(r) // PROMPT_BUCKET) * PROMPT_BUCKET for r in ids)
  slots = min(max(width + steps, MIN_SLOTS), llm.config.context_length)
  inputs = np.zeros((batch, slots + 1), np.int32)  # slot 0: BOS placeholder
  for b, row in enumerate(ids):
    inputs[b, 1:len(row) + 1] = row
  params = llm.params if params is None else params
  request = build(
      sampling.method, inputs=jnp.asarray(inputs),
      cache=prompt_caches(llm, ids, slots, params),
      tokens_to_logits=llm.model.row_step(n),
      context={"params": params, "rows": {}},
      eos_id=tuple(dict.fromkeys(llm.stop_ids + sampling.stop_ids)),
      # The seed reaches each row through its code and noise id (`seeds`);
      # one decode key and per-row temperatures for every request, so
      # requests may share a running batch (`compaction.Compacted.join`).
      key=jax.random.PRNGKey(0), num_decodes=n,
      temperature=jnp.full((batch,), sampling.temperature, jnp.float32),
      topk=sampling.topk,
      topp=sampling.topp, codes=codes if arithmetic else None,
      code_scheme=sampling.code_scheme,
      code_resolution=sampling.resolution, row_ids=row_ids,
      initial_index=jnp.asarray([len(r) for r in ids], jnp.int32),
      max_decode_steps=steps, noise=Noise.POSITION)
  layout = RowLayout(llm.model.cache_growth(MIN_SLOTS), groups=1,
                     classes=batch)
  return request, layout


@functools.partial(jax.jit, static_argnames=("model", "num_beams", "length",
                                             "eos", "alpha"))
def _beam(params, prompts, *, model, num_beams, length, eos, alpha):
  """Beam search over prompts int32 [B, P] -> (decodes [B, K, L], scores
  [B, K])."""
  inputs, cache, tokens_to_logits = model.decode_inputs(params, prompts, length)
  return beam_search(inputs, cache, tokens_to_logits, eos, num_decodes=num_beams,
                     alpha=alpha, initial_index=model.start_index(prompts))


def decode(llm: "LLM", ids: Sequence[Sequence[int]], sampling: SamplingParams,
           *, prompt_ids=None, codes=None, params=None,
           scheduler: Union[str, Scheduler] = Scheduler.COMPACTED,
           compaction: Compaction = LLM_COMPACTION,
           stats: Optional[dict] = None
           ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """N completions of each prompt (token ids): (decodes int32 [B, N, L]
  (BOS dropped: index i is loop slot i + 1), scores float32 [B, N], codes
  float32 [B, N]), each prompt's samples by increasing score.

  Args:
    llm: a loaded model; ids: B prompts as token ids (`prepare_prompts`).
    sampling: what to sample (`request.SamplingParams`).
    prompt_ids, codes: see `llm_request`.
    params: the parameters to use instead of `llm.params` (the same tree,
      placed elsewhere: another device).
    scheduler: "compacted" (default: ended rows dropped, prefixes shared)
      or "fused" (one program; the same samples from 64 rows up).
    compaction, stats: the compacted scheduler's settings and counters.
  """
  scheduler = Scheduler.of(scheduler)
  if sampling.method is Method.BEAM:
    width = max(-(-len(r) // PROMPT_BUCKET) * PROMPT_BUCKET for r in ids)
    prompts = np.zeros((len(ids), width), np.int32)
    for b, row in enumerate(ids):
      prompts[b, :len(row)] = row
    decodes, scores = _beam(
        llm.params if params is None else params, jnp.asarray(prompts),
        model=llm.model, num_beams=sampling.n,
        length=width + 1 + sampling.max_new_tokens, eos=llm.stop_ids[0],
        alpha=sampling.alpha)
    return (np.asarray(decodes), np.asarray(scores),
            np.zeros(np.shape(scores), np.float32))
  request, layout = llm_request(llm, ids, sampling, prompt_ids=prompt_ids,
                                codes=codes, params=params)
  if scheduler is Scheduler.FUSED:
    out = run_fused(request)
  else:
    out = run_compacted(request, layout, compaction, stats)
  return tuple(np.asarray(x) for x in out)


@functools.partial(jax.jit, static_argnames=("model", "topk", "topp", "top"))
def _scores(params, sequences, temperature, *, model, topk, topp, top):
  """sequences int32 [R, S] -> (float32 [R, S]: the log-prob of token s
  given tokens < s under the sampling distribution, 0 for s = 0; and the
  `top` most likely tokens at each position, int32 [R, S, top], with their
  log-probs [R, S, top])."""
  logits = model.logits(params, sequences).astype(jnp.float32)  # [R, S, V]
  rows, length, vocab = logits.shape
  dist = Distribution(temperature, topk, topp)
  flat = dist.transform(logits[:, :-1].reshape(-1, vocab))  # [R*(S-1), V]
  logp = jax.nn.log_softmax(flat, axis=-1)
  picked = jnp.take_along_axis(logp, sequences[:, 1:].reshape(-1, 1), axis=-1)
  picked = jnp.pad(picked.reshape(rows, length - 1), ((0, 0), (1, 0)))
  best, which = jax.lax.top_k(logp, top)  # [R*(S-1), top]
  pad = lambda x: jnp.pad(x.reshape(rows, length - 1, top),
                          ((0, 0), (1, 0), (0, 0)))
  return picked, pad(which), pad(best)


def token_log_probs(llm: "LLM", prompt: Sequence[int],
                    completions: Sequence[Sequence[int]],
                    sampling: SamplingParams, *, top: int = 0,
                    row_block: int = 16, params=None, device=None):
  """Each token's log-probability under the sampling distribution
  (temperature, top-k / top-p applied) given the prompt and the tokens
  before it, by one teacher-forced pass.

  The completions run in blocks of `row_block` rows (the last block padded
  with copies), each at the width of the prompt plus `max_new_tokens`
  rounded up to `PROMPT_BUCKET`: a completion's log-probs do not depend on
  how many completions are scored with it.

  Returns:
    a list, per completion, of float32 [T] log-probs (T its length), and,
    with `top` > 0, of the `top` most likely tokens at each of its
    positions (int32 [T, top]) and their log-probs (float32 [T, top]);
    else None for both.
  """
  params = llm.params if params is None else params
  if device is not None:
    params = jax.device_put(params, device)
  steps = sampling.max_new_tokens
  width = -(-(len(prompt) + steps) // PROMPT_BUCKET) * PROMPT_BUCKET
  logps, alts, alt_logps = [], [], []
  for start in range(0, len(completions), row_block):
    block = list(completions[start:start + row_block])
    block += [block[0]] * (row_block - len(block))
    seqs = np.zeros((row_block, width), np.int32)
    for r, tokens in enumerate(block):
      seqs[r, :len(prompt)] = prompt
      seqs[r, len(prompt):len(prompt) + len(tokens)] = tokens[:steps]
    picked, which, best = (np.asarray(x) for x in _scores(
        params, jax.device_put(seqs, device),
        jax.device_put(jnp.float32(sampling.temperature), device),
        model=llm.model, topk=sampling.topk, topp=sampling.topp,
        top=max(top, 1)))
    n = len(prompt)
    for r, tokens in enumerate(completions[start:start + row_block]):
      t = min(len(tokens), steps)
      logps.append(picked[r, n:n + t])
      alts.append(which[r, n:n + t, :top])
      alt_logps.append(best[r, n:n + t, :top])
  return logps, (alts if top else None), (alt_logps if top else None)


def generate(llm: LLM, prompts: Union[str, Sequence[str]], num_samples: int,
             method: Union[str, Method] = Method.ARITHMETIC,
             temperature: float = 1.0, seed: int = 0,
             max_new_tokens: int = 64, *, topk: int = 0, topp: float = 0.0,
             chat: bool = False, codes=None,
             code_resolution: Optional[float] = None,
             code_scheme="shifted_lattice", prompt_ids=None,
             stop_ids: Sequence[int] = (), params=None,
             scheduler: Union[str, Scheduler] = Scheduler.COMPACTED
             ) -> Generation:
  """N completions of each prompt by one decode method.

  Args:
    llm: a loaded model (`LLM.from_gguf`).
    prompts: a text or a list of B texts.
    num_samples: N >= 1 completions per prompt (beams for "beam").
    method: "arithmetic", "ancestral", "greedy" or "beam".
    temperature: >= 0 (sampling methods).
    seed: int in [0, 2**32); the codes and keys of prompt b derive from
      (seed, prompt_ids[b]) (`seeds`): the same seed, prompt, id, N and
      settings give the same completions, alone or in any batch.
    max_new_tokens: >= 1 tokens per completion at most.
    topk, topp: the usual cuts (0 = off).
    chat: apply the model's chat template to each prompt (a user turn).
    codes: float [B, N] in [0, 1): decode these codes (arithmetic only).
    code_resolution: how deep a code decides its sample (default: float32's
      2**-22, as `arithmetic_sample`).
    code_scheme: the codes of each prompt (`SamplingParams.code_scheme`).
    prompt_ids: B distinct ints in [0, 2**32) naming the prompts in the
      seed policy (default 0..B-1).
    stop_ids: token ids that also end a completion.
    params: the parameters to use instead of `llm.params`.
    scheduler: "compacted" (default) or "fused" (see `decode`).

  Raises:
    ValueError / TypeError: an argument out of range; a prompt that is
      empty, contains token 0 (the protocol's pad) or, with
      max_new_tokens, exceeds the model's context length.
  """
  sampling = SamplingParams(
      n=validation.check_int("num_samples", num_samples, minimum=1),
      method=method, temperature=temperature, topk=topk,
      topp=topp, max_new_tokens=max_new_tokens, seed=seed,
      code_scheme=code_scheme, code_resolution=code_resolution,
      stop_ids=tuple(stop_ids))
  texts, ids, _ = prepare_prompts(llm, prompts, sampling.max_new_tokens, chat)
  arrays = decode(llm, ids, sampling, prompt_ids=prompt_ids, codes=codes,
                  params=params, scheduler=scheduler)
  return collect(llm, sampling.method, texts, ids, sampling.max_new_tokens,
                 arrays, llm.stop_ids + sampling.stop_ids)


def prepare_prompts(llm: LLM, prompts: Union[str, Sequence[str]], steps: int,
                    chat: bool) -> Tuple[List[str], List[List[int]], np.ndarray]:
  """Texts (chat template applied) -> (texts, ids, int32 [B, width]), the
  ids right-padded with 0 to a multiple of `PROMPT_BUCKET`; ValueError /
  TypeError for prompts the decode cannot take."""
  texts = [prompts] if isinstance(prompts, str) else list(prompts)
  if not texts or not all(isinstance(t, str) for t in texts):
    raise TypeError("prompts must be a string or a non-empty list of strings.")
  if chat:
    texts = [llm.chat_prompt(t) for t in texts]
  ids = [llm.encode(t) for t in texts]
  for b, row in enumerate(ids):
    if not row:
      raise ValueError(f"prompt {b} encodes to no tokens.")
    if 0 in row:
      raise ValueError(f"prompt {b} contains token 0 "
                       f"({llm.vocab.tokens[0]!r}), the decode protocol's pad.")
    if len(row) + steps > llm.config.context_length:
      raise ValueError(
          f"prompt {b} has {len(row)} tokens; with max_new_tokens={steps} "
          f"that exceeds the context length {llm.config.context_length}.")
  width = -(-max(len(r) for r in ids) // PROMPT_BUCKET) * PROMPT_BUCKET
  width = min(width, llm.config.context_length - steps)
  batch = np.zeros((len(ids), width), np.int32)
  for b, row in enumerate(ids):
    batch[b, :len(row)] = row
  return texts, ids, batch


def collect(llm: LLM, method: Method, texts: List[str], ids: List[List[int]],
            steps: int, arrays, stop_ids: Optional[Sequence[int]] = None
            ) -> Generation:
  """The decode's (decodes, scores, codes) arrays -> a `Generation` (waits
  for them); arithmetic samples ordered by code; completions cut at
  `stop_ids` (default the model's)."""
  decodes, scores, used = (np.asarray(a) for a in arrays)
  if method is Method.ARITHMETIC:
    order = np.argsort(used, axis=1, kind="stable")
    decodes = np.take_along_axis(decodes, order[:, :, None], axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    used = np.take_along_axis(used, order, axis=1)
  stops = set(llm.stop_ids if stop_ids is None else stop_ids)
  tokens = []
  stop_tokens = np.full(scores.shape, -1, np.int32)
  for b, row in enumerate(ids):
    # decodes drop the BOS placeholder: index i is slot i + 1, and the new
    # tokens of a prompt of n tokens start at slot n + 1.
    new = decodes[b, :, len(row):len(row) + steps].tolist()
    cut = []
    for j, seq in enumerate(new):
      end = next((i for i, t in enumerate(seq) if t in stops), None)
      if end is not None:
        stop_tokens[b, j] = seq[end]
      cut.append(seq if end is None else seq[:end])
    tokens.append(cut)
  return Generation(
      prompts=texts, prompt_tokens=ids, tokens=tokens,
      texts=[[llm.decode(t) for t in row] for row in tokens],
      log_probs=scores.astype(np.float32), codes=used.astype(np.float32),
      finished=stop_tokens >= 0, stop_tokens=stop_tokens, method=method)
