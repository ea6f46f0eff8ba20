"""A small, fixed, enumerable language model that speaks T5X's protocol.

The demo decodes with it and the tests check exact outcomes against it: with a
handful of tokens and a few positions every sequence can be listed with its
exact probability (`testing.enumerate_sequences`, numpy, independent of the
library).

The model is conditional, like an encoder-decoder: each batch row has a
`source` (an int in [0, num_sources), standing in for an encoded input). The
next-token logits are a fixed random table indexed by the source and by a hash
of the tokens decoded so far, plus an end-of-sequence bonus that grows with
length, so sequences end on their own. Token 0 (padding) has logit -inf and is
never produced; token 1 is EOS.

The state of a row lives in its cache (`source`, `prefix_hash`, `length`), as
in a real model, so the decode loop's cache expansion, FrozenDict handling and
prefilled starts (`initial_index`) are exercised for real.

Worked example (vocab 6, source 0): `model.next_logits(0, ())` are the logits
of the first token; `model.next_logits(0, (3,))` those after token 3.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Dict, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PAD_ID = 0
EOS_ID = 1
_HASH_MULTIPLIER = 1000003


def _hash_step(prefix_hash: int, token: int) -> int:
  """The cache's prefix hash after appending `token` (uint32 arithmetic)."""
  return (prefix_hash * _HASH_MULTIPLIER + token + 1) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class ToyLanguageModel:
  """A fixed random conditional language model over a tiny vocabulary.

  Attributes:
    vocab_size: tokens 0 (padding, never produced), 1 (EOS) and words 2...
    num_sources: number of distinct conditioning inputs.
    num_states: rows of the logits table per source; prefixes are hashed
      into them.
    logit_scale: standard deviation of the table's logits (peakier if larger).
    eos_bonus: added to the EOS logit once per token decoded so far.
    seed: seed of the table.
  """

  vocab_size: int = 6
  num_sources: int = 4
  num_states: int = 512
  logit_scale: float = 1.5
  eos_bonus: float = 0.75
  seed: int = 0

  @functools.cached_property
  def table(self) -> np.ndarray:
    """float32 [num_sources, num_states, vocab_size]; column 0 is -inf."""
    rng = np.random.default_rng(self.seed)
    table = rng.normal(
        0.0, self.logit_scale,
        (self.num_sources, self.num_states, self.vocab_size)).astype(np.float32)
    table[..., PAD_ID] = -np.inf
    return table

  # --- The model, in T5X's protocol ------------------------------------------

  def init_cache(self, sources) -> Dict[str, jax.Array]:
    """An empty cache for rows conditioned on `sources` int [batch]."""
    sources = jnp.asarray(sources, jnp.int32)
    return {
        "source": sources,
        "prefix_hash": jnp.zeros(sources.shape, jnp.uint32),
        "length": jnp.zeros(sources.shape, jnp.int32),
    }

  def prefill(self, sources, inputs, initial_index) -> Dict[str, jax.Array]:
    """A cache holding the prompt tokens `inputs[b, 1:initial_index[b]]`.

    The token at `initial_index` is fed by the decode loop's first step, as
    with T5X's decoder-only models.
    """
    inputs = np.asarray(inputs)
    initial_index = np.asarray(initial_index)
    hashes, lengths = [], []
    for row, start in zip(inputs, initial_index):
      h = 0
      for token in row[1:start]:
        h = _hash_step(h, int(token))
      hashes.append(h)
      lengths.append(max(int(start) - 1, 0))
    return {
        "source": jnp.asarray(sources, jnp.int32),
        "prefix_hash": jnp.asarray(np.array(hashes, np.uint32)),
        "length": jnp.asarray(np.array(lengths, np.int32)),
    }

  def tokens_to_logits(self, state) -> Tuple[jax.Array, Dict[str, jax.Array]]:
    """(DecodingState) -> (logits float32 [rows, vocab], new cache)."""
    cache = state.cache
    token = state.cur_token[:, 0].astype(jnp.uint32)  # [rows]
    # Position 0 holds BOS, which is not part of the prefix.
    appends = state.cur_index > 0
    new_hash = jnp.where(
        appends,
        cache["prefix_hash"] * jnp.uint32(_HASH_MULTIPLIER) + token + jnp.uint32(1),
        cache["prefix_hash"])
    length = cache["length"] + appends.astype(jnp.int32)
    row = (new_hash % jnp.uint32(self.num_states)).astype(jnp.int32)
    # [sources, states, V] -> [rows, V]
    logits = jnp.asarray(self.table)[cache["source"], row]
    bonus = jnp.float32(self.eos_bonus) * length.astype(jnp.float32)
    is_eos = jnp.arange(self.vocab_size)[None, :] == EOS_ID
    logits = jnp.where(is_eos, logits + bonus[:, None], logits)
    new_cache = {"source": cache["source"], "prefix_hash": new_hash,
                 "length": length}
    if not isinstance(cache, dict):
      new_cache = type(cache)(new_cache)
    return logits, new_cache

  def next_logits(self, source: int, prefix: Sequence[int]) -> np.ndarray:
    """float32 [vocab] logits after `prefix` (tokens after BOS)."""
    h = 0
    for token in prefix:
      h = _hash_step(h, int(token))
    logits = self.table[source, h % self.num_states].copy()
    logits[EOS_ID] = logits[EOS_ID] + np.float32(self.eos_bonus) * np.float32(len(prefix))
    return logits
