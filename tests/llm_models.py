"""LLMs for the engine's and the server's tests: the tokenizer of a tiny
GGUF file (`gguf_files.write_tiny`) with a decoder of a real model's shapes
and random parameters.
"""

import dataclasses

import jax
import numpy as np

from arithmetic_decoding.llm import LLM
from arithmetic_decoding.models.decoder_config import TINY, DecoderConfig
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from gguf_files import vocab_size, write_tiny


def tiny_config(arch):
  return dataclasses.replace(TINY[arch], vocab_size=vocab_size(arch))


# Decoders with the shapes of the real models (SmolLM2's width and heads;
# Gemma 3 270M's width, one key/value head of 256, QK-norm, sliding
# windows), two layers, a small vocabulary: XLA:CPU computes a row of these
# the same way at any place among 64 or more rows, as it does the real
# models' (`tests/integration_llm`). The tiny test models' odd shapes (a
# key/value head of 8) are not so computed: in a 64-row step of the
# 3-layer tiny Gemma, rows 56-63 get other last bits.
MID = {
    "llama": DecoderConfig(
        architecture="llama", vocab_size=512, d_model=576, num_layers=2,
        num_heads=9, num_kv_heads=3, head_dim=64, d_ff=1536,
        rope_base=10000.0, rope_style="halves", activation="silu",
        context_length=256),
    "gemma3": DecoderConfig(
        architecture="gemma3", vocab_size=512, d_model=640, num_layers=2,
        num_heads=4, num_kv_heads=1, head_dim=256, d_ff=2048, norm_eps=1e-6,
        rope_base=1000000.0, rope_base_local=10000.0, rope_style="halves",
        activation="gelu_tanh", layer_kinds=("sliding", "global"),
        sliding_window=4, post_norms=True, qk_norm=True,
        embed_scale=640 ** 0.5, query_scale_base=256.0, context_length=256),
}


# Parameters x this: distributions neither flat nor one-hot.
SCALE = {"llama": 3.0, "gemma3": 1.0}


def mid_llm(folder, arch: str) -> LLM:
  """An LLM read from a tiny GGUF file written to `folder` (its
  tokenizer), with the MID model's configuration and random parameters."""
  model = DecoderOnlyModel(tiny_config(arch))
  params = jax.tree_util.tree_map(lambda x: np.asarray(x) * 4.0,
                                  model.init(jax.random.PRNGKey(0)))
  path = write_tiny(folder / "f32.gguf", tiny_config(arch), params,
                    sliding_pattern=3 if arch == "gemma3" else None)
  small = LLM.from_gguf(path, verbose=False)
  mid = DecoderOnlyModel(MID[arch])
  mid_params = jax.tree_util.tree_map(lambda x: x * SCALE[arch],
                                      mid.init(jax.random.PRNGKey(1)))
  return dataclasses.replace(small, config=MID[arch], model=mid,
                             params=mid_params)


