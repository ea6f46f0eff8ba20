"""Hugging Face `transformers` loading the same GGUF files (the independent
runtime), and the logit tolerance between it and us.

Both sides compute in float32 from the same dequantized weights
(transformers dequantizes GGUF tensors with the gguf package, as we do), so
they differ only in the order of float32 operations. A dot product of n
float32 terms carries a relative rounding error of about sqrt(n) * 2**-24
(errors of random sign); each of the L layers adds such an error to the
residual stream relative to its scale, and the logits inherit the sum
relative to theirs:

  tolerance = L * sqrt(max(F, D)) * 2**-24 * max |logit|

SmolLM2-135M (L = 30, F = 1536): 7.0e-5 of the largest logit, about 2e-3;
Gemma 3 270M (L = 18, F = 2048): 4.9e-5, about 2e-3. The measured
differences are an order of magnitude below (`scripts/llm_check.py`).
"""

import functools
import math
import os

import numpy as np


def logit_tolerance(config, max_abs_logit: float) -> float:
  width = max(config.d_ff, config.d_model)
  return config.num_layers * math.sqrt(width) * 2.0 ** -24 * max_abs_logit


@functools.lru_cache(maxsize=2)
def hf(path: str):
  """(model, tokenizer) of transformers for a GGUF file, float32, eval."""
  import torch
  from transformers import AutoModelForCausalLM, AutoTokenizer
  torch.set_num_threads(os.cpu_count() or 1)
  folder, name = os.path.split(path)
  tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
  model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                               dtype=torch.float32)
  model.eval()
  return model, tokenizer


def hf_logits(model, ids) -> np.ndarray:
  """float32 [T, V] logits of one sequence."""
  import torch
  with torch.no_grad():
    return model(torch.tensor([ids])).logits[0].float().numpy()


def hf_greedy(model, tokenizer, batch_ids, new_tokens: int):
  """Greedy continuations of prompts of different lengths in one batch
  (left padding with an attention mask, as transformers batches), and the
  per-step logits [B, new_tokens, V]."""
  import torch
  width = max(len(r) for r in batch_ids)
  pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
  ids = torch.full((len(batch_ids), width), pad, dtype=torch.long)
  mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
  for b, r in enumerate(batch_ids):
    ids[b, width - len(r):] = torch.tensor(r)
    mask[b, width - len(r):] = 1
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask,
                         max_new_tokens=new_tokens, do_sample=False,
                         output_logits=True,
                         return_dict_in_generate=True, pad_token_id=pad)
  tokens = out.sequences[:, width:].numpy()
  logits = np.stack([l.float().numpy() for l in out.logits], axis=1)
  return tokens, logits
