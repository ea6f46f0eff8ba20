"""A Hugging Face model folder -> a `DecoderConfig` and parameters.

What `save_pretrained` writes for a Llama-style model (`LlamaForCausalLM`,
SmolLM2) or Gemma 3's text model (`Gemma3ForCausalLM`, model_type
`gemma3_text`):

  config.json                      architecture and sizes
  generation_config.json           (optional) EOS ids generation stops at
  model.safetensors                the weights, or shards
  model-00001-of-00002.safetensors   listed by
  model.safetensors.index.json       {"weight_map": {tensor: shard file}}
  tokenizer.json, tokenizer_config.json, chat_template.jinja
                                   (read by `hf_tokenizer`)

This module reads the safetensors files with numpy alone (no torch, no
safetensors package), maps config.json to a `DecoderConfig` and the tensors
to the `DecoderOnly` parameter tree:

  contents = read_folder(path)                 # configs + tensor index
  config = config_from_hf(contents.config, dtype="float32")
  params = load_params(contents, config)

A safetensors file is an 8-byte little-endian header length N, N bytes of
JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}}, plus an
optional "__metadata__"), then the tensors' bytes, row-major, little-endian,
offsets counted from the end of the header. F32, F16 and BF16 are read
(every tensor becomes float32 first, exactly: both halves are subsets).

Two differences from a GGUF file of the same model, both undone here:

- RoPE pairing. Hugging Face's Llama rotates halves (dimension i with
  i + K/2) on the weights as trained; llama.cpp's conversion permutes the
  query/key rows so that adjacent dimensions pair instead. So a Llama folder
  loads with `rope_style="halves"` and unpermuted weights (the GGUF path:
  "interleaved", the permuted ones); the two give the same attention.
- Gemma's norms. Gemma's RMSNorm multiplies by (1 + w) and stores w;
  llama.cpp's conversion stores 1 + w, which is what `decoder_only.rms_norm`
  multiplies by. So every Gemma norm weight (the four per layer, QK-norm,
  the final norm) is loaded as 1 + w, added in float32.

Linear weights are [out, in] as in GGUF, so the transposes are the GGUF
loader's: q_proj [H*K, D] -> query [D, H, K], o_proj [D, H*K] -> out
[H, K, D], gate/up_proj [F, D] -> [D, F], down_proj [D, F] -> [F, D].
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from arithmetic_decoding.models.decoder_config import DecoderConfig

PyTree = Any
# config.json's model_type -> our architecture.
MODEL_TYPES = {"llama": "llama", "gemma3_text": "gemma3"}
# The defaults of transformers' config classes for the keys a saved
# config.json may leave out (it omits values equal to the base class's).
DEFAULTS = {
    "llama": {"tie_word_embeddings": False, "rms_norm_eps": 1e-6,
              "max_position_embeddings": 2048, "rope_theta": 10_000.0,
              "hidden_act": "silu"},
    "gemma3": {"tie_word_embeddings": True, "rms_norm_eps": 1e-6,
               "max_position_embeddings": 131_072, "rope_theta": 1_000_000.0,
               "rope_local_base_freq": 10_000.0, "sliding_window_pattern": 6,
               "hidden_activation": "gelu_pytorch_tanh",
               "query_pre_attn_scalar": 256, "sliding_window": 4096},
}
# Activation names (config.json) our two gates implement.
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
LAYER_TYPES = {"full_attention": "global", "sliding_attention": "sliding"}
ROPE_TYPES = ("default", "linear")
# safetensors dtype -> bytes per element; those `read_tensor` decodes.
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
            "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1,
            "F8_E5M2": 1}
READABLE = ("F32", "F16", "BF16")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_MAX_HEADER = 100 * 2**20  # bytes of JSON a header may take


@dataclasses.dataclass(frozen=True)
class TensorEntry:
  """Where one tensor's bytes lie.

  Attributes:
    path: the safetensors file.
    name: the tensor's name.
    dtype: the safetensors dtype ("F32", "F16", "BF16", ...).
    shape: its shape.
    start: byte offset of its first byte in the file.
    nbytes: its size in bytes.
  """

  path: str
  name: str
  dtype: str
  shape: Tuple[int, ...]
  start: int
  nbytes: int


def read_header(path: str) -> Dict[str, TensorEntry]:
  """The tensors a safetensors file holds, by name (nothing else is read).

  Raises:
    FileNotFoundError: no such file.
    ValueError: the header is too short, too long for the file, not JSON,
      or describes a tensor whose bytes do not fit (offsets out of the
      data, size != shape x dtype size); the message names the file and
      the tensor.
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no safetensors file at {path!r}.")
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    head = f.read(8)
    if len(head) < 8:
      raise ValueError(f"{path!r} is not a safetensors file: {size} bytes, "
                       "shorter than the 8-byte header length.")
    (length,) = struct.unpack("<Q", head)
    if length > min(size - 8, _MAX_HEADER):
      raise ValueError(f"{path!r} is not a safetensors file or is truncated: "
                       f"its header length {length} exceeds the "
                       f"{size - 8} bytes after it.")
    try:
      header = json.loads(f.read(length).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise ValueError(f"{path!r}: the safetensors header is not JSON "
                       f"({e}).") from e
  if not isinstance(header, dict):
    raise ValueError(f"{path!r}: the safetensors header is not a JSON object.")
  data_start, data_size = 8 + length, size - 8 - length
  entries = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    try:
      dtype, shape = str(info["dtype"]), tuple(int(n) for n in info["shape"])
      begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f"{path!r}: tensor {name!r} lacks a dtype, shape or "
                       f"data_offsets pair ({info!r}).") from e
    if min(shape, default=0) < 0 or not 0 <= begin <= end <= data_size:
      raise ValueError(f"{path!r}: tensor {name!r} has bytes {begin}..{end} "
                       f"(shape {shape}), outside the file's {data_size} data "
                       "bytes: the file is truncated or corrupt.")
    expected = math.prod(shape) * ITEMSIZE.get(dtype, 0)
    if dtype in ITEMSIZE and end - begin != expected:
      raise ValueError(f"{path!r}: tensor {name!r} has {end - begin} bytes; "
                       f"shape {shape} of {dtype} needs {expected}.")
    entries[name] = TensorEntry(path=path, name=name, dtype=dtype,
                                shape=shape, start=data_start + begin,
                                nbytes=end - begin)
  return entries


def read_tensor(entry: TensorEntry) -> np.ndarray:
  """A tensor as float32 numpy of its shape (F32, F16, BF16: exact).

  BF16 is the top half of a float32, so its 16 bits shifted left are the
  float32's bits:

  >>> bits = np.array([0x3F80, 0xC040], np.uint16)   # 1.0, -3.0 in BF16
  >>> _bf16_to_float32(bits).tolist()
  [1.0, -3.0]
  """
  if entry.dtype not in READABLE:
    raise ValueError(f"{entry.path!r}: tensor {entry.name!r} is stored as "
                     f"{entry.dtype}; this reader decodes {list(READABLE)}.")
  count = math.prod(entry.shape)
  raw = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[entry.dtype]
  with open(entry.path, "rb") as f:
    f.seek(entry.start)
    x = np.fromfile(f, dtype=raw, count=count)
  if x.size != count:
    raise ValueError(f"{entry.path!r}: tensor {entry.name!r} is truncated.")
  x = _bf16_to_float32(x) if entry.dtype == "BF16" else x.astype(np.float32)
  return x.reshape(entry.shape)


def _bf16_to_float32(bits: np.ndarray) -> np.ndarray:
  return (bits.astype(np.uint32) << 16).view(np.float32)


def read_json(path: str, required: bool = True) -> Optional[dict]:
  """A JSON object from a file; None for a missing optional file.

  Raises:
    FileNotFoundError: a required file is missing.
    ValueError: the file is not a JSON object.
  """
  if not os.path.isfile(path):
    if required:
      raise FileNotFoundError(f"no {os.path.basename(path)} at {path!r}.")
    return None
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path!r} is not valid JSON ({e}).") from e
  if not isinstance(value, dict):
    raise ValueError(f"{path!r} is not a JSON object.")
  return value


@dataclasses.dataclass(frozen=True)
class HFContents:
  """A Hugging Face model folder, read lazily (tensors stay on disk).

  Attributes:
    folder: the folder.
    config: config.json.
    generation_config: generation_config.json, or {} without one.
    tensors: name -> where its bytes lie, over every weight file.
  """

  folder: str
  config: Mapping[str, Any]
  generation_config: Mapping[str, Any]
  tensors: Mapping[str, TensorEntry]

  def tensor(self, name: str) -> np.ndarray:
    """The named tensor as float32 numpy."""
    if name not in self.tensors:
      raise KeyError(f"{self.folder}: no tensor named {name!r}.")
    return read_tensor(self.tensors[name])


def _weight_files(folder: str) -> Dict[str, str]:
  """tensor name -> file, from model.safetensors or the shards' index."""
  single = os.path.join(folder, SINGLE_FILE)
  if os.path.isfile(single):
    return {name: single for name in read_header(single)}
  index_path = os.path.join(folder, INDEX_FILE)
  if not os.path.isfile(index_path):
    others = [f for f in ("pytorch_model.bin", "pytorch_model.bin.index.json",
                          "model.pt") if os.path.exists(os.path.join(folder, f))]
    hint = (f" ({others[0]} is a pickled PyTorch checkpoint; save the model "
            "with safe_serialization, the default)" if others else "")
    raise FileNotFoundError(f"{folder!r} has neither {SINGLE_FILE} nor "
                            f"{INDEX_FILE}{hint}.")
  weight_map = read_json(index_path).get("weight_map")
  if not isinstance(weight_map, dict) or not weight_map:
    raise ValueError(f"{index_path!r} has no weight_map.")
  files = {}
  for name, shard in weight_map.items():
    shard_path = os.path.join(folder, str(shard))
    if not os.path.isfile(shard_path):
      raise FileNotFoundError(f"{index_path!r} puts {name!r} in {shard!r}, "
                              f"which is not in {folder!r}.")
    files[name] = shard_path
  return files


def read_folder(folder: str) -> HFContents:
  """Reads a model folder's config.json, generation_config.json and the
  headers of its safetensors files (one file or shards with an index).

  Raises:
    FileNotFoundError: no such folder, no config.json, no weights, or a
      shard the index names is missing.
    ValueError: a bad JSON or safetensors file; a tensor the index puts in
      a shard that does not hold it.
  """
  folder = os.fspath(folder)
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"no Hugging Face model folder at {folder!r}.")
  config = read_json(os.path.join(folder, "config.json"))
  generation = read_json(os.path.join(folder, "generation_config.json"),
                         required=False) or {}
  tensors, headers = {}, {}
  for name, path in _weight_files(folder).items():
    if path not in headers:
      headers[path] = read_header(path)
    if name not in headers[path]:
      raise ValueError(f"{INDEX_FILE} puts {name!r} in "
                       f"{os.path.basename(path)!r}, which does not hold it.")
    tensors[name] = headers[path][name]
  return HFContents(folder=folder, config=config,
                    generation_config=generation, tensors=tensors)


# -- config.json -> DecoderConfig ---------------------------------------------


def architecture(hf: Mapping[str, Any]) -> str:
  """Our architecture for config.json's model_type.

  >>> architecture({"model_type": "gemma3_text"})
  'gemma3'
  >>> architecture({"model_type": "qwen2"})
  Traceback (most recent call last):
  ...
  ValueError: config.json: unsupported model_type 'qwen2': this library loads ['llama', 'gemma3_text'].
  """
  model_type = hf.get("model_type")
  if model_type == "gemma3":
    raise ValueError(
        "config.json: model_type 'gemma3' is Gemma 3 with its vision tower "
        "(Gemma3ForConditionalGeneration); this library loads the text-only "
        "model, model_type 'gemma3_text' (Gemma3ForCausalLM).")
  if model_type not in MODEL_TYPES:
    raise ValueError(f"config.json: unsupported model_type {model_type!r}: "
                     f"this library loads {list(MODEL_TYPES)}.")
  return MODEL_TYPES[model_type]


def rope_settings(hf: Mapping[str, Any], arch: str
                  ) -> Dict[str, Tuple[float, float]]:
  """{"global": (base, scale), "sliding": (base, scale)} from config.json,
  in either of its spellings: `rope_parameters` (transformers 5: one dict,
  or one per layer type) or `rope_theta` / `rope_local_base_freq` /
  `rope_scaling` (earlier). Linear scaling divides positions by its
  factor; the sliding layers take none.

  >>> rope_settings({"rope_parameters": {"rope_type": "linear",
  ...                "rope_theta": 500.0, "factor": 2.0}}, "llama")
  {'global': (500.0, 2.0), 'sliding': (500.0, 1.0)}
  >>> rope_settings({"rope_theta": 1e6, "rope_local_base_freq": 1e4,
  ...                "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
  ...               "gemma3")
  {'global': (1000000.0, 8.0), 'sliding': (10000.0, 1.0)}
  >>> rope_settings({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "llama")
  Traceback (most recent call last):
  ...
  ValueError: config.json: RoPE scaling 'yarn' (global layers) is not supported: this library runs ['default', 'linear'].
  """
  defaults = DEFAULTS[arch]
  params = hf.get("rope_parameters")
  if isinstance(params, Mapping) and ("full_attention" in params or
                                      "sliding_attention" in params):
    by_kind = {"global": params.get("full_attention") or {},
               "sliding": params.get("sliding_attention") or {}}
  elif isinstance(params, Mapping):
    by_kind = {"global": params, "sliding": params}
  else:
    scaling = hf.get("rope_scaling") or {}
    by_kind = {"global": dict(scaling),
               "sliding": {"rope_theta": hf.get("rope_local_base_freq")}}
    by_kind["global"]["rope_theta"] = hf.get("rope_theta")
  out = {}
  for kind, p in by_kind.items():
    rope_type = p.get("rope_type", p.get("type")) or "default"
    if rope_type not in ROPE_TYPES:
      raise ValueError(f"config.json: RoPE scaling {rope_type!r} ({kind} "
                       f"layers) is not supported: this library runs "
                       f"{list(ROPE_TYPES)}.")
    partial = p.get("partial_rotary_factor", hf.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
      raise ValueError(f"config.json: partial_rotary_factor {partial} (partial "
                       "RoPE) is not supported.")
    scale = float(p.get("factor", 1.0)) if rope_type == "linear" else 1.0
    if not scale > 0:
      raise ValueError(f"config.json: RoPE factor must be > 0; got {scale}.")
    base = p.get("rope_theta")
    if base is None:
      base = defaults.get("rope_local_base_freq" if kind == "sliding" else
                          "rope_theta", defaults["rope_theta"])
    out[kind] = (float(base), scale)
  if out["sliding"][1] != 1.0 and arch == "gemma3":
    raise ValueError("config.json: RoPE scaling of the sliding-window layers "
                     "is not supported (only of the global ones).")
  out["sliding"] = (out["sliding"][0], 1.0)
  return out


def layer_kinds(hf: Mapping[str, Any], num_layers: int) -> Tuple[str, ...]:
  """"global" / "sliding" per layer: config.json's `layer_types`, else
  every `sliding_window_pattern`-th layer global (Gemma 3: 6).

  >>> layer_kinds({"sliding_window_pattern": 3}, 4)
  ('sliding', 'sliding', 'global', 'sliding')
  >>> layer_kinds({"layer_types": ["full_attention", "sliding_attention"]}, 2)
  ('global', 'sliding')
  """
  types = hf.get("layer_types")
  if types is not None:
    if len(types) != num_layers or not set(types) <= set(LAYER_TYPES):
      raise ValueError(f"config.json: layer_types must give one of "
                       f"{list(LAYER_TYPES)} per layer ({num_layers}); got "
                       f"{types!r}.")
    return tuple(LAYER_TYPES[t] for t in types)
  pattern = hf.get("sliding_window_pattern", hf.get(
      "_sliding_window_pattern", DEFAULTS["gemma3"]["sliding_window_pattern"]))
  return tuple("global" if (i + 1) % int(pattern) == 0 else "sliding"
               for i in range(num_layers))


def config_from_hf(hf: Mapping[str, Any], dtype: str = "float32"
                   ) -> DecoderConfig:
  """A `DecoderConfig` from a config.json (as a dict).

  >>> cfg = config_from_hf({"model_type": "llama", "vocab_size": 32,
  ...     "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
  ...     "num_attention_heads": 2, "num_key_value_heads": 1})
  >>> cfg.head_dim, cfg.rope_style, cfg.tied_embedding
  (4, 'halves', False)

  Raises:
    ValueError: an unsupported model_type, activation, RoPE scaling or
      option (biases, logit soft-capping, bidirectional attention), or a
      missing size; the message names the config.json field.
  """
  arch = architecture(hf)
  defaults = DEFAULTS[arch]

  def get(key, default=None):
    value = hf.get(key)
    return defaults.get(key, default) if value is None else value

  def size(key, default=None):
    value = get(key, default)
    if value is None:
      raise ValueError(f"config.json lacks {key!r}.")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"config.json: {key} must be an int >= 1; got "
                       f"{value!r}.")
    return value

  for key, meaning in (("attention_bias", "attention biases"),
                       ("mlp_bias", "feed-forward biases"),
                       ("use_bidirectional_attention",
                        "bidirectional attention"),
                       ("attn_logit_softcapping", "attention soft-capping"),
                       ("final_logit_softcapping", "logit soft-capping")):
    if hf.get(key) not in (None, False):
      raise ValueError(f"config.json: {key} = {hf[key]!r} ({meaning}) is not "
                       "supported.")
  act_key = "hidden_act" if arch == "llama" else "hidden_activation"
  act = get(act_key)
  if act not in ACTIVATIONS or (arch == "llama") != (act == "silu"):
    raise ValueError(f"config.json: {act_key} {act!r} is not supported for "
                     f"{hf['model_type']} (this library runs "
                     f"{'silu' if arch == 'llama' else 'gelu_pytorch_tanh'}).")
  d_model = size("hidden_size")
  num_heads = size("num_attention_heads")
  head_dim = size("head_dim", d_model // num_heads)
  rope = rope_settings(hf, arch)
  common = dict(
      architecture=arch, vocab_size=size("vocab_size"), d_model=d_model,
      num_layers=size("num_hidden_layers"), num_heads=num_heads,
      num_kv_heads=size("num_key_value_heads", num_heads), head_dim=head_dim,
      d_ff=size("intermediate_size"), norm_eps=float(get("rms_norm_eps")),
      rope_base=rope["global"][0], rope_scale=rope["global"][1],
      # Hugging Face's RoPE turns halves on the weights as trained.
      rope_style="halves", activation=ACTIVATIONS[act],
      tied_embedding=bool(get("tie_word_embeddings")),
      context_length=size("max_position_embeddings"), dtype=dtype)
  if arch == "llama":
    return DecoderConfig(**common)
  kinds = layer_kinds(hf, common["num_layers"])
  window = 0
  if "sliding" in kinds:
    window = hf.get("sliding_window", defaults["sliding_window"])
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
      raise ValueError(f"config.json: sliding_window must be an int >= 1 "
                       f"for the sliding layers {kinds}; got {window!r}.")
  return DecoderConfig(
      **common, rope_base_local=rope["sliding"][0], layer_kinds=kinds,
      sliding_window=window, post_norms=True, qk_norm=True,
      embed_scale=math.sqrt(d_model),
      query_scale_base=float(get("query_pre_attn_scalar")))


# -- tensors -> the DecoderOnly parameter tree --------------------------------


def load_params(contents: HFContents, config: DecoderConfig) -> PyTree:
  """The `DecoderOnly` parameter tree from the folder's tensors, in
  `config.dtype` (Gemma norms as 1 + w; see the module docstring).

  Raises:
    ValueError: a tensor is missing or has another shape than config.json
      implies, or the folder holds tensors the model would not use (biases,
      a vision tower): loading without them would change the outputs.
  """
  import jax.numpy as jnp

  d, h, hkv, k, f = (config.d_model, config.num_heads, config.num_kv_heads,
                     config.head_dim, config.d_ff)
  gemma = config.architecture == "gemma3"
  used = set()

  def get(name, shape):
    if name not in contents.tensors:
      raise ValueError(f"{contents.folder}: missing tensor {name!r}.")
    entry = contents.tensors[name]
    if entry.shape != tuple(shape):
      raise ValueError(f"{contents.folder}: tensor {name!r} has shape "
                       f"{entry.shape}, expected {tuple(shape)} from "
                       "config.json.")
    used.add(name)
    return read_tensor(entry)

  def norm(name, width):
    w = get(name, (width,))
    return w + np.float32(1.0) if gemma else w

  def out(x):
    return jnp.asarray(x, config.jnp_dtype)

  params: Dict[str, Any] = {
      "embedding": out(get("model.embed_tokens.weight",
                           (config.vocab_size, d))),
      "final_norm": out(norm("model.norm.weight", d)),
  }
  if not config.tied_embedding:
    params["output"] = out(get("lm_head.weight", (config.vocab_size, d)).T)
  for i in range(config.num_layers):
    b = f"model.layers.{i}."
    a = b + "self_attn."
    # [H*K, D] -> [D, H, K]; [D, H*K] -> [H, K, D]; [F, D] -> [D, F].
    attention = {
        "query": out(get(a + "q_proj.weight", (h * k, d)).T.reshape(d, h, k)),
        "key": out(get(a + "k_proj.weight", (hkv * k, d)).T.reshape(d, hkv, k)),
        "value": out(get(a + "v_proj.weight", (hkv * k, d)).T.reshape(d, hkv, k)),
        "out": out(get(a + "o_proj.weight", (d, h * k)).T.reshape(h, k, d)),
    }
    if config.qk_norm:
      attention["query_norm"] = out(norm(a + "q_norm.weight", k))
      attention["key_norm"] = out(norm(a + "k_norm.weight", k))
    layer = {
        "attention": attention,
        "attention_norm": out(norm(b + "input_layernorm.weight", d)),
        "mlp": {
            "gate": out(get(b + "mlp.gate_proj.weight", (f, d)).T),
            "up": out(get(b + "mlp.up_proj.weight", (f, d)).T),
            "down": out(get(b + "mlp.down_proj.weight", (d, f)).T),
        },
    }
    if config.post_norms:
      # Gemma: post_attention_layernorm is the attention output's norm and
      # pre_feedforward_layernorm the feed-forward input's.
      layer["post_attention_norm"] = out(norm(
          b + "post_attention_layernorm.weight", d))
      layer["mlp_norm"] = out(norm(b + "pre_feedforward_layernorm.weight", d))
      layer["post_mlp_norm"] = out(norm(
          b + "post_feedforward_layernorm.weight", d))
    else:
      # Llama: post_attention_layernorm is the feed-forward input's norm.
      layer["mlp_norm"] = out(norm(b + "post_attention_layernorm.weight", d))
    params[f"layer_{i}"] = layer
  unused = sorted(n for n in contents.tensors if n not in used and not (
      n.endswith("rotary_emb.inv_freq") or
      (n == "lm_head.weight" and config.tied_embedding)))
  if unused:
    shown = ", ".join(repr(n) for n in unused[:5])
    more = f" and {len(unused) - 5} more" if len(unused) > 5 else ""
    raise ValueError(f"{contents.folder}: tensors the {config.architecture} "
                     f"model does not use: {shown}{more}.")
  return params
