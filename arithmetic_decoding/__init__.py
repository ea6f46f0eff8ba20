"""Arithmetic sampling for T5X: parallel, diverse, unbiased decoding.

Each sample is named by a code in [0, 1); the model's conditionals define an
implicit arithmetic codebook, and decoding a code walks it one token at a time
at the cost of ordinary sampling. N codes on a randomly shifted lattice give N
diverse, stratified, individually exact samples, each decoded on its own.

Modules, in reading order:
  codes        code schemes and `make_codes`
  categorical  the one-step arithmetic categorical (the heart of the method)
  transforms   temperature / top-k / top-p, as T5X applies them
  protocol     T5X's DecodingState / SamplingLoopState and cache expansion
  decoding     `arithmetic_sample` (T5X drop-in), `ancestral_sample`,
               `arithmetic_encode`
  beam_search  T5X's beam search, in the same protocol
  models       a T5.1.1 / mT5 encoder-decoder in Flax (needs the `models` extra)
  topology     TPU v4 topologies (tpu_configs/) and meshes
  sharding     logical axis rules and sharded decoding (pjit + shard_map)
  toy          a small enumerable language model for the demo and tests
"""

from arithmetic_decoding.categorical import arithmetic_categorical, token_interval
from arithmetic_decoding.codes import CodeScheme, make_codes, radical_inverse_base2
from arithmetic_decoding.decoding import (DecodeOptions, ancestral_sample,
                                          arithmetic_encode, arithmetic_sample)
from arithmetic_decoding.protocol import DecodingState, SamplingLoopState

__all__ = [
    "CodeScheme",
    "DecodeOptions",
    "DecodingState",
    "SamplingLoopState",
    "ancestral_sample",
    "arithmetic_categorical",
    "arithmetic_encode",
    "arithmetic_sample",
    "make_codes",
    "radical_inverse_base2",
    "token_interval",
]

__version__ = "0.1.0"
