"""GGUF -> a `DecoderConfig`, parameters, a tokenizer and a chat template.

A GGUF file (llama.cpp's format) carries everything a decoder-only model
needs: hyperparameters as `{architecture}.*` metadata, tensors (often
quantized; the `gguf` package dequantizes them to float32), the vocabulary
with its merges or scores and token types, the special token ids and, for
instruct models, a Jinja chat template. This module reads them; nothing is
hard-coded per model, only per architecture (what llama.cpp also fixes per
architecture: Gemma 3's five sliding-window layers per global one and its
local RoPE base when the file does not state them, RoPE's pairing, which
norms exist).

Needs the `llm` extra: gguf, tokenizers, jinja2.

  contents = read_gguf(path)                  # metadata + tensor index
  config = config_from_metadata(contents.metadata, dtype="float32")
  params = load_params(contents, config)      # the DecoderOnly param tree

Tensor layout. GGUF lists a weight's dimensions fastest first, so the
dequantized numpy array of `blk.0.attn_q.weight` is [out, in] = [H*K, D];
our kernels are [in, ...] (x @ W), hence the transposes below.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Dict, Mapping, Optional

import numpy as np

from arithmetic_decoding.models.decoder_config import DecoderConfig

PyTree = Any
SUPPORTED_ARCHITECTURES = ("llama", "gemma3")
# Gemma 3's defaults where a file does not state them (as llama.cpp fixes
# them for the architecture): every 6th layer global, local RoPE base 10k.
GEMMA3_SLIDING_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10_000.0
_MAGIC = b"GGUF"


def _require_gguf():
  try:
    import gguf  # noqa: F401
  except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("reading GGUF files needs the `gguf` package: "
                      "pip install 'arithmetic-decoding[llm]'") from e
  return gguf


@dataclasses.dataclass(frozen=True)
class GGUFContents:
  """What a GGUF file holds, read lazily (tensors stay memory-mapped).

  Attributes:
    path: the file.
    metadata: key -> value (strings, numbers, lists), every key of the file.
    reader: the `gguf.GGUFReader` (tensors by name through `tensor`).
  """

  path: str
  metadata: Mapping[str, Any]
  reader: Any

  @property
  def architecture(self) -> str:
    return self.metadata["general.architecture"]

  def tensor_names(self):
    return [t.name for t in self.reader.tensors]

  def tensor(self, name: str) -> np.ndarray:
    """The named tensor dequantized to float32 numpy (numpy axis order)."""
    gguf = _require_gguf()
    for t in self.reader.tensors:
      if t.name == name:
        try:
          return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type),
                            np.float32)
        except NotImplementedError as e:
          raise ValueError(
              f"{self.path}: tensor {name!r} is stored as "
              f"{t.tensor_type.name}, a quantization type the gguf package "
              f"cannot dequantize ({e}).") from e
    raise KeyError(f"{self.path}: no tensor named {name!r}.")


def _field_value(field) -> Any:
  value = field.contents()
  if isinstance(value, (bytes, bytearray)):
    return bytes(value).decode("utf-8", errors="replace")
  return value


def read_gguf(path: str) -> GGUFContents:
  """Opens a GGUF file: its metadata, and its tensors memory-mapped.

  Raises:
    FileNotFoundError: no such file.
    ValueError: not a GGUF file (wrong magic), or truncated / corrupt (the
      header or tensor data do not fit in the file).
  """
  gguf = _require_gguf()
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no GGUF file at {path!r}.")
  with open(path, "rb") as f:
    magic = f.read(4)
  if magic != _MAGIC:
    raise ValueError(f"{path!r} is not a GGUF file: it starts with "
                     f"{magic!r}, not {_MAGIC!r}.")
  try:
    reader = gguf.GGUFReader(path, "r")
  except Exception as e:  # the reader raises several types on bad files
    raise ValueError(f"{path!r} is a truncated or corrupt GGUF file: "
                     f"{type(e).__name__}: {e}") from e
  size = os.path.getsize(path)
  for t in reader.tensors:
    if t.data_offset + t.n_bytes > size:
      raise ValueError(f"{path!r} is truncated: tensor {t.name!r} ends at "
                       f"byte {t.data_offset + t.n_bytes}, the file has "
                       f"{size}.")
  metadata = {}
  for key, field in reader.fields.items():
    try:
      metadata[key] = _field_value(field)
    except Exception:  # pragma: no cover - exotic field types
      continue
  if "general.architecture" not in metadata:
    raise ValueError(f"{path!r} has no general.architecture metadata.")
  return GGUFContents(path=path, metadata=metadata, reader=reader)


def config_from_metadata(metadata: Mapping[str, Any],
                         dtype: str = "float32") -> DecoderConfig:
  """A `DecoderConfig` from a GGUF file's metadata.

  >>> meta = {"general.architecture": "llama", "llama.embedding_length": 8,
  ...         "llama.block_count": 2, "llama.feed_forward_length": 16,
  ...         "llama.attention.head_count": 2,
  ...         "llama.attention.head_count_kv": 1,
  ...         "tokenizer.ggml.tokens": ["a"] * 32}
  >>> cfg = config_from_metadata(meta)
  >>> cfg.head_dim, cfg.vocab_size, cfg.rope_style
  (4, 32, 'interleaved')
  >>> config_from_metadata({"general.architecture": "mamba"})
  Traceback (most recent call last):
  ...
  ValueError: unsupported architecture 'mamba': this library runs ['llama', 'gemma3'].
  """
  arch = metadata.get("general.architecture")
  if arch not in SUPPORTED_ARCHITECTURES:
    raise ValueError(f"unsupported architecture {arch!r}: this library runs "
                     f"{list(SUPPORTED_ARCHITECTURES)}.")

  def get(key, default=None, required=False):
    full = f"{arch}.{key}"
    if full not in metadata:
      if required:
        raise ValueError(f"GGUF metadata lacks {full!r}.")
      return default
    return metadata[full]

  d_model = int(get("embedding_length", required=True))
  num_heads = int(get("attention.head_count", required=True))
  kv_heads = get("attention.head_count_kv", num_heads)
  head_dim = int(get("attention.key_length", d_model // num_heads))
  value_dim = int(get("attention.value_length", head_dim))
  if value_dim != head_dim:
    raise ValueError(f"value_length {value_dim} != key_length {head_dim} is "
                     "not supported.")
  rope_dims = int(get("rope.dimension_count", head_dim))
  if rope_dims != head_dim:
    raise ValueError(f"partial RoPE ({rope_dims} of {head_dim} dimensions) is "
                     "not supported.")
  for key in ("attention.head_count", "attention.head_count_kv",
              "feed_forward_length"):
    if isinstance(get(key), (list, tuple)):
      raise ValueError(f"per-layer {arch}.{key} is not supported.")
  num_layers = int(get("block_count", required=True))
  vocab = get("vocab_size")
  if vocab is None:
    vocab = len(metadata.get("tokenizer.ggml.tokens", ()))
  scaling = get("rope.scaling.type", "none")
  if scaling not in ("none", "linear"):
    raise ValueError(f"RoPE scaling {scaling!r} is not supported (none, "
                     "linear).")
  rope_scale = float(get("rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
  common = dict(
      architecture=arch, vocab_size=int(vocab), d_model=d_model,
      num_layers=num_layers, num_heads=num_heads, num_kv_heads=int(kv_heads),
      head_dim=head_dim, d_ff=int(get("feed_forward_length", required=True)),
      norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
      rope_base=float(get("rope.freq_base", 10_000.0)), rope_scale=rope_scale,
      context_length=int(get("context_length", 2048)), dtype=dtype)
  if arch == "llama":
    # llama.cpp stores Llama's query/key rows permuted so that RoPE turns
    # adjacent pairs.
    return DecoderConfig(**common, rope_style="interleaved", activation="silu")
  pattern = get("attention.sliding_window_pattern", GEMMA3_SLIDING_PATTERN)
  if isinstance(pattern, (list, tuple)):  # per layer: True = sliding
    kinds = tuple("sliding" if p else "global" for p in pattern)
  else:
    kinds = tuple("global" if (i + 1) % int(pattern) == 0 else "sliding"
                  for i in range(num_layers))
  return DecoderConfig(
      **common, rope_style="halves", activation="gelu_tanh",
      rope_base_local=float(get("rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE)),
      layer_kinds=kinds, sliding_window=int(get("attention.sliding_window", 0)),
      post_norms=True, qk_norm=True, embed_scale=math.sqrt(d_model),
      query_scale_base=float(head_dim), tied_embedding=True)


def config_from_file(contents: GGUFContents,
                     dtype: str = "float32") -> DecoderConfig:
  """`config_from_metadata`, with the output projection tied to the token
  embedding unless the file has its own `output.weight`."""
  config = config_from_metadata(contents.metadata, dtype)
  untied = "output.weight" in contents.tensor_names()
  return dataclasses.replace(config, tied_embedding=not untied)


def load_params(contents: GGUFContents, config: DecoderConfig) -> PyTree:
  """The `DecoderOnly` parameter tree, dequantized, in `config.dtype`.

  Raises:
    ValueError: a tensor is missing, has an unexpected shape, or uses a
      quantization type the gguf package cannot dequantize.
  """
  import jax.numpy as jnp

  names = set(contents.tensor_names())
  d, h, hkv, k = (config.d_model, config.num_heads, config.num_kv_heads,
                  config.head_dim)
  dt = config.jnp_dtype

  def get(name, shape):
    if name not in names:
      raise ValueError(f"{contents.path}: missing tensor {name!r}.")
    x = contents.tensor(name)
    if x.shape != tuple(shape):
      raise ValueError(f"{contents.path}: tensor {name!r} has shape "
                       f"{x.shape}, expected {tuple(shape)} from the "
                       "metadata.")
    return x

  def out(x):
    return jnp.asarray(x, dt)

  params: Dict[str, Any] = {
      "embedding": out(get("token_embd.weight", (config.vocab_size, d))),
      "final_norm": out(get("output_norm.weight", (d,))),
  }
  if not config.tied_embedding:
    params["output"] = out(get("output.weight", (config.vocab_size, d)).T)
  for i in range(config.num_layers):
    b = f"blk.{i}."
    # [H*K, D] -> [D, H, K]; [D, H*K] -> [H, K, D]; [F, D] -> [D, F].
    attention = {
        "query": out(get(b + "attn_q.weight", (h * k, d)).T.reshape(d, h, k)),
        "key": out(get(b + "attn_k.weight", (hkv * k, d)).T.reshape(d, hkv, k)),
        "value": out(get(b + "attn_v.weight", (hkv * k, d)).T.reshape(d, hkv, k)),
        "out": out(get(b + "attn_output.weight", (d, h * k)).T.reshape(h, k, d)),
    }
    if config.qk_norm:
      attention["query_norm"] = out(get(b + "attn_q_norm.weight", (k,)))
      attention["key_norm"] = out(get(b + "attn_k_norm.weight", (k,)))
    layer = {
        "attention": attention,
        "attention_norm": out(get(b + "attn_norm.weight", (d,))),
        "mlp_norm": out(get(b + "ffn_norm.weight", (d,))),
        "mlp": {
            "gate": out(get(b + "ffn_gate.weight", (config.d_ff, d)).T),
            "up": out(get(b + "ffn_up.weight", (config.d_ff, d)).T),
            "down": out(get(b + "ffn_down.weight", (d, config.d_ff)).T),
        },
    }
    if config.post_norms:
      layer["post_attention_norm"] = out(get(b + "post_attention_norm.weight",
                                             (d,)))
      layer["post_mlp_norm"] = out(get(b + "post_ffw_norm.weight", (d,)))
    params[f"layer_{i}"] = layer
  return params
