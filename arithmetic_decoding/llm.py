"""Decoder-only LLMs from GGUF files: load, then `generate` N completions.

  llm = LLM.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # prints memory
  out = generate(llm, ["What is 2 + 2?"], num_samples=8, chat=True,
                 method="arithmetic", temperature=1.0, seed=0,
                 max_new_tokens=32)
  out.texts[0]        # 8 completions of the first prompt
  out.codes[0]        # the code in [0, 1) each was decoded from
  out.log_probs[0]    # each completion's log-probability

Every method of `methods.Method` runs through the same T5X-protocol decode
functions as the T5 models: the prompts are prefilled into the cache and
each row decodes from its own `initial_index` (`models.DecoderOnlyModel`),
so a prompt's samples do not depend on the other prompts of the batch or on
their lengths. Arithmetic samples come back ordered by code (sample j of a
prompt is the j-th point of its shifted lattice), the others as the decode
function returns them (by increasing log-probability).

A completion ends at the model's EOS or end-of-turn tokens (from the file's
metadata) or after `max_new_tokens`; the stop token is not part of `tokens`
or `texts` but counts in `log_probs`. Needs the `llm` extra (gguf,
tokenizers, jinja2).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, List, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import validation
from arithmetic_decoding.methods import Method
from arithmetic_decoding.models import gguf_loader, gguf_tokenizer
from arithmetic_decoding.models.decoder_config import DecoderConfig
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel

PyTree = Any
# Prompt widths are rounded up to a multiple of this (fewer recompiles).
PROMPT_BUCKET = 16


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


@functools.partial(jax.jit, static_argnames=(
    "model", "method", "num_samples", "length", "max_new_tokens", "topk",
    "topp", "eos", "code_resolution"))
def _decode(params, prompts, key, temperature, codes, row_ids, *, model,
            method,
            num_samples, length, max_new_tokens, topk, topp, eos,
            code_resolution):
  """prompts int32 [B, P] -> (decodes [B, N, L], scores [B, N], codes [B, N])."""
  inputs, cache, tokens_to_logits = model.decode_inputs(params, prompts, length)
  initial_index = model.start_index(prompts)
  if method is Method.BEAM:
    decodes, scores = method.decode(inputs, cache, tokens_to_logits, eos[0],
                                    None, num_decodes=num_samples,
                                    initial_index=initial_index)
    return decodes, scores, jnp.zeros_like(scores)
  return method.decode(inputs, cache, tokens_to_logits, eos, key,
                       num_decodes=num_samples, temperature=temperature,
                       topk=topk, topp=topp, initial_index=initial_index,
                       max_decode_steps=max_new_tokens, codes=codes,
                       code_resolution=code_resolution, return_codes=True,
                       row_ids=row_ids)


def generate(llm: LLM, prompts: Union[str, Sequence[str]], num_samples: int,
             method: Union[str, Method] = Method.ARITHMETIC,
             temperature: float = 1.0, seed: int = 0,
             max_new_tokens: int = 64, *, topk: int = 0, topp: float = 0.0,
             chat: bool = False, codes=None,
             code_resolution: Optional[float] = None,
             row_ids=None, params=None) -> Generation:
  """N completions of each prompt by one decode method.

  Args:
    llm: a loaded model (`LLM.from_gguf`).
    prompts: a text or a list of B texts.
    num_samples: N >= 1 completions per prompt (beams for "beam").
    method: "arithmetic", "ancestral", "greedy" or "beam".
    temperature: >= 0 (sampling methods).
    seed: int; the codes' random shift and the samplers' keys derive from
      it (the same seed, prompts and N give the same completions).
    max_new_tokens: >= 1 tokens per completion at most.
    topk, topp: the usual cuts (0 = off).
    chat: apply the model's chat template to each prompt (a user turn).
    codes: float [B, N] in [0, 1): decode these codes (arithmetic only).
    code_resolution: how deep a code decides its sample (default: float32's
      2**-22, as `arithmetic_sample`).
    row_ids: int [B, N] naming each sample's noise (arithmetic only; see
      `arithmetic_sample`); `rollouts.group_rollouts` sets them so that a
      sample does not depend on its batch.
    params: the parameters to use instead of `llm.params` (the same tree,
      placed elsewhere: another device).

  Raises:
    ValueError / TypeError: an argument out of range; a prompt that is
      empty, contains token 0 (the protocol's pad) or, with
      max_new_tokens, exceeds the model's context length.
  """
  method = Method.of(method)
  n = validation.check_int("num_samples", num_samples, minimum=1)
  steps = validation.check_int("max_new_tokens", max_new_tokens, minimum=1)
  validation.check_int("seed", seed, minimum=0)
  validation.check_temperature(temperature, 1)
  topk = validation.check_topk(topk)
  topp = validation.check_topp(topp)
  validation.check_topk_topp(topk, topp)
  if codes is not None and method is not Method.ARITHMETIC:
    raise ValueError("codes apply to method='arithmetic' only.")
  if row_ids is not None and method is not Method.ARITHMETIC:
    raise ValueError("row_ids apply to method='arithmetic' only.")
  texts, ids, batch = prepare_prompts(llm, prompts, steps, chat)
  if codes is not None:
    codes = validation.check_codes(codes, len(ids), n)
  row_ids = validation.check_row_ids(row_ids, len(ids), n)
  resolution = (2.0 ** -22 if code_resolution is None else
                validation.check_code_resolution(code_resolution))
  arrays = _decode(
      llm.params if params is None else params, jnp.asarray(batch),
      jax.random.PRNGKey(seed), jnp.float32(temperature), codes, row_ids,
      model=llm.model, method=method, num_samples=n,
      length=batch.shape[1] + 1 + steps, max_new_tokens=steps, topk=topk,
      topp=topp, eos=llm.stop_ids, code_resolution=resolution)
  return collect(llm, method, texts, ids, steps, arrays)


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
