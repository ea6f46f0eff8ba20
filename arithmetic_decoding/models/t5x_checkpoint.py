"""T5X checkpoints in and out of our T5.1.1 / mT5 model, without importing T5X.

A T5X checkpoint is a directory (`.../checkpoint_<step>/`, local or `gs://`):

  checkpoint                      msgpack index (flax.serialization) of
                                  {"version": 3, "optimizer": {"target": {...},
                                   "state": {"step": ..., "param_states": ...}}}
  target.encoder.layers_0.mlp.wi_0.kernel/   one zarr array per parameter
  ...

In the index each parameter leaf is either the array itself or a TensorStore
spec (a dict with "driver": "zarr" and a "kvstore" whose path is relative to
the checkpoint directory: the parameter's tree path joined by dots). Only
`target` (the parameters) is read here; optimizer state is ignored. We write
`target` and `state.step` (what `t5x infer` / eval restore; to fine-tune from
such a checkpoint with `t5x train`, set
`utils.RestoreCheckpointConfig.fallback_to_scratch = True` so the optimizer
state starts fresh).

T5X's `t5x.examples.t5.network.Transformer` names and shapes (T5.1.1, mT5):

  token_embedder/embedding                         [V, D]
  encoder/relpos_bias/rel_embedding                [H, 32]
  encoder/layers_i/attention/{query,key,value}/kernel   [D, H*K]
  encoder/layers_i/attention/out/kernel            [H*K, D]
  encoder/layers_i/mlp/{wi_0,wi_1}/kernel [D, F], mlp/wo/kernel [F, D]
  encoder/layers_i/pre_{attention,mlp}_layer_norm/scale  [D]
  decoder/layers_i/{self_attention,encoder_decoder_attention}/...
  decoder/{decoder_norm/scale, logits_dense/kernel [D, V]}

Ours differ in names and in the attention kernels' head axes ([D, H, K] and
[H, K, D]); `to_t5x_params` / `from_t5x_params` are exact inverses (reshapes
and renames only), so ours -> T5X -> ours is bitwise.

  >>> import jax
  >>> from arithmetic_decoding.models import EncoderDecoderModel, preset
  >>> config = preset("tiny", relative_attention_num_buckets=32,
  ...                 relative_attention_max_distance=128)
  >>> params = EncoderDecoderModel(config).init(jax.random.PRNGKey(0))
  >>> flat = to_t5x_params(config, params)
  >>> flat["decoder/layers_1/encoder_decoder_attention/out/kernel"].shape
  (32, 32)
  >>> found, back = from_t5x_params(flat)
  >>> found == config
  True
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np
from flax import serialization, traverse_util

from arithmetic_decoding.models.config import PRESETS, T5Config

PyTree = Any
# The index version T5X writes (t5x.checkpoints.VERSION at cc342d4).
T5X_CHECKPOINT_VERSION = 3
# T5X's T5 network fixes its relative position buckets (t5x/examples/t5).
T5X_RELPOS_BUCKETS = 32
T5X_RELPOS_MAX_DISTANCE = 128
# Largest zarr chunk we write (T5X aims at 64 MiB too).
_CHUNK_BYTES = 64 * 2**20

# Our names for one attention block's kernels -> T5X's.
_ATTENTION = ("query", "key", "value", "out")
_ENCODER_LAYER = {
    "pre_attention_norm/scale": "pre_attention_layer_norm/scale",
    "pre_mlp_norm/scale": "pre_mlp_layer_norm/scale",
    **{f"attention/{k}": f"attention/{k}/kernel" for k in _ATTENTION},
    **{f"mlp/{k}": f"mlp/{k}/kernel" for k in ("wi_0", "wi_1", "wo")},
}
_DECODER_LAYER = {
    "pre_self_attention_norm/scale": "pre_self_attention_layer_norm/scale",
    "pre_cross_attention_norm/scale": "pre_cross_attention_layer_norm/scale",
    "pre_mlp_norm/scale": "pre_mlp_layer_norm/scale",
    **{f"self_attention/{k}": f"self_attention/{k}/kernel" for k in _ATTENTION},
    **{f"cross_attention/{k}": f"encoder_decoder_attention/{k}/kernel"
       for k in _ATTENTION},
    **{f"mlp/{k}": f"mlp/{k}/kernel" for k in ("wi_0", "wi_1", "wo")},
}
_GLOBAL = {
    "token_embedder": "token_embedder/embedding",
    "encoder_relpos/rel_embedding": "encoder/relpos_bias/rel_embedding",
    "decoder_relpos/rel_embedding": "decoder/relpos_bias/rel_embedding",
    "encoder_norm/scale": "encoder/encoder_norm/scale",
    "decoder_norm/scale": "decoder/decoder_norm/scale",
    "logits_dense": "decoder/logits_dense/kernel",
}


def _name_map(config: T5Config) -> Dict[str, str]:
  """Our flat parameter names -> T5X's, for one configuration."""
  names = dict(_GLOBAL)
  for i in range(config.num_encoder_layers):
    names.update({f"encoder_{i}/{ours}": f"encoder/layers_{i}/{theirs}"
                  for ours, theirs in _ENCODER_LAYER.items()})
  for i in range(config.num_decoder_layers):
    names.update({f"decoder_{i}/{ours}": f"decoder/layers_{i}/{theirs}"
                  for ours, theirs in _DECODER_LAYER.items()})
  return names


def _attention_kind(name: str) -> Optional[str]:
  """'in' for query/key/value kernels, 'out' for the output one, else None."""
  match = re.search(r"attention/(query|key|value|out)$", name)
  if match is None:
    return None
  return "out" if match.group(1) == "out" else "in"


def to_t5x_params(config: T5Config, params: PyTree) -> Dict[str, np.ndarray]:
  """Our parameter tree -> T5X's flat {"encoder/layers_0/...": array}."""
  _check_t5x_representable(config)
  flat = {"/".join(k): np.asarray(v)
          for k, v in traverse_util.flatten_dict(params).items()}
  names = _name_map(config)
  if set(flat) != set(names):
    raise ValueError(
        f"params do not match config: missing {sorted(set(names) - set(flat))}"
        f", unexpected {sorted(set(flat) - set(names))}.")
  out = {}
  for ours, theirs in names.items():
    array = flat[ours]
    kind = _attention_kind(ours)
    if kind == "in":  # [D, H, K] -> [D, H*K]
      array = array.reshape(array.shape[0], -1)
    elif kind == "out":  # [H, K, D] -> [H*K, D]
      array = array.reshape(-1, array.shape[-1])
    out[theirs] = array
  return out


def _infer_config(flat: Mapping[str, np.ndarray], dtype: str) -> T5Config:
  """Reads the architecture off T5X's parameter shapes."""
  def shape(name):
    if name not in flat:
      raise ValueError(f"not a T5.1.1 / mT5 checkpoint: no parameter {name!r}.")
    return flat[name].shape

  if "encoder/layers_0/mlp/wi/kernel" in flat:
    raise ValueError("T5.1.0 checkpoints (ReLU feed-forward, 'mlp/wi') are not "
                     "supported: only T5.1.1 / mT5 (gated GELU, 'mlp/wi_0').")
  if "decoder/logits_dense/kernel" not in flat:
    raise ValueError("checkpoint ties the output projection to the embedding "
                     "(logits_via_embedding=True); T5.1.1 / mT5 do not, and "
                     "neither does this model.")
  vocab_size, d_model = shape("token_embedder/embedding")
  num_heads, buckets = shape("encoder/relpos_bias/rel_embedding")
  heads_kv = shape("encoder/layers_0/attention/query/kernel")[1]
  if heads_kv % num_heads:
    raise ValueError(f"query width {heads_kv} is not a multiple of the "
                     f"{num_heads} heads of the relative position table.")
  layers = lambda stack: len({m.group(1) for name in flat for m in [
      re.match(rf"{stack}/layers_(\d+)/", name)] if m})
  return T5Config(
      vocab_size=vocab_size, d_model=d_model,
      d_ff=shape("encoder/layers_0/mlp/wi_0/kernel")[1], num_heads=num_heads,
      d_kv=heads_kv // num_heads, num_encoder_layers=layers("encoder"),
      num_decoder_layers=layers("decoder"),
      relative_attention_num_buckets=buckets,
      relative_attention_max_distance=T5X_RELPOS_MAX_DISTANCE,
      dtype=dtype, param_dtype=dtype)


def from_t5x_params(flat: Mapping[str, np.ndarray], *,
                    dtype: Optional[str] = None) -> Tuple[T5Config, PyTree]:
  """T5X's flat parameters -> (our config, our parameter tree).

  `dtype` ("float32" / "bfloat16") sets the config's activation and parameter
  dtypes and casts the arrays; None keeps the stored dtype.
  """
  stored = str(np.asarray(flat["token_embedder/embedding"]).dtype
               ) if "token_embedder/embedding" in flat else "float32"
  dtype = dtype or ("bfloat16" if stored == "bfloat16" else "float32")
  config = _infer_config(flat, dtype)
  names = _name_map(config)
  unexpected = sorted(set(flat) - set(names.values()))
  if unexpected:
    raise ValueError(f"checkpoint has parameters this model lacks: "
                     f"{unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
  h, k = config.num_heads, config.d_kv
  ours = {}
  for mine, theirs in names.items():
    if theirs not in flat:
      raise ValueError(f"checkpoint lacks parameter {theirs!r}.")
    array = np.asarray(flat[theirs])
    kind = _attention_kind(mine)
    if kind == "in":  # [D, H*K] -> [D, H, K]
      array = array.reshape(array.shape[0], h, k)
    elif kind == "out":  # [H*K, D] -> [H, K, D]
      array = array.reshape(h, k, array.shape[-1])
    ours[tuple(mine.split("/"))] = array.astype(config.parameter_dtype)
  return config, traverse_util.unflatten_dict(ours)


def check_architecture(found: T5Config, expected: Union[str, T5Config]) -> None:
  """ValueError naming the first shape field where `found` differs.

  >>> check_architecture(PRESETS["small"], "xxl")
  Traceback (most recent call last):
  ...
  ValueError: expected mT5-xxl, found d_model 512 (expected 4096).
  """
  name = expected if isinstance(expected, str) else "the given config"
  if isinstance(expected, str):
    if expected not in PRESETS:
      raise ValueError(f"expected must be a T5Config or one of "
                       f"{sorted(PRESETS)}; got {expected!r}.")
    expected, name = PRESETS[expected], f"mT5-{expected}"
  for field in ("d_model", "num_heads", "d_kv", "d_ff", "num_encoder_layers",
                "num_decoder_layers", "vocab_size",
                "relative_attention_num_buckets"):
    have, want = getattr(found, field), getattr(expected, field)
    if have != want:
      raise ValueError(f"expected {name}, found {field} {have} (expected "
                       f"{want}).")


def _check_t5x_representable(config: T5Config) -> None:
  if (config.relative_attention_num_buckets != T5X_RELPOS_BUCKETS or
      config.relative_attention_max_distance != T5X_RELPOS_MAX_DISTANCE):
    raise ValueError(
        "T5X's T5 network has 32 relative position buckets up to distance "
        f"128; this config has {config.relative_attention_num_buckets} up to "
        f"{config.relative_attention_max_distance}.")


# --- Storage: a kvstore for local paths and gs:// alike -----------------------


def _kvstore(directory: str) -> dict:
  """TensorStore kvstore spec of a checkpoint directory (local or gs://)."""
  directory = str(directory)
  if directory.startswith("gs://"):
    bucket, _, prefix = directory[len("gs://"):].partition("/")
    return {"driver": "gcs", "bucket": bucket,
            "path": prefix.rstrip("/") + "/" if prefix else ""}
  return {"driver": "file", "path": os.path.abspath(directory) + "/"}


def _checkpoint_dir(path: str) -> str:
  """The directory holding the `checkpoint` index, given it or the file."""
  path = str(path).rstrip("/")
  return path[:-len("/checkpoint")] if path.endswith("/checkpoint") else path


def _relative_array_path(spec: Mapping[str, Any]) -> str:
  """Where T5X says an array lives, relative to the checkpoint directory."""
  kvstore = spec.get("kvstore", {})
  # tensorstore >= 0.1.14 puts the path in the kvstore (local writes); T5X's
  # gs:// writes put it at the top level next to a placeholder bucket.
  path = kvstore.get("path") or spec.get("path")
  if not path:
    raise ValueError(f"TensorStore spec without a path: {dict(spec)!r}")
  return path


def _is_ts_spec(leaf: Any) -> bool:
  return isinstance(leaf, Mapping) and "driver" in leaf and "kvstore" in leaf


def read_t5x_params(path: str) -> Dict[str, np.ndarray]:
  """A T5X checkpoint's parameters (`target`), flat, as stored.

  `path` is the `checkpoint_<step>` directory (or its `checkpoint` file),
  local or `gs://...` (GCS needs credentials tensorstore can find).
  """
  import tensorstore as ts  # pylint: disable=g-import-not-at-top

  directory = _checkpoint_dir(path)
  base = _kvstore(directory)
  store = ts.KvStore.open(base).result()
  index = store.read("checkpoint").result()
  if index.state != "value":
    raise FileNotFoundError(f"no T5X checkpoint index at {directory}/checkpoint")
  contents = serialization.msgpack_restore(bytes(index.value))
  if "optimizer" not in contents or "target" not in contents["optimizer"]:
    raise ValueError(f"{directory}/checkpoint is not a T5X checkpoint index "
                     "(no optimizer/target); Orbax-format checkpoints are not "
                     "supported.")
  target = traverse_util.flatten_dict(contents["optimizer"]["target"],
                                      is_leaf=lambda _, v: _is_ts_spec(v))

  async def read(spec):
    spec = dict(spec)
    kvstore = dict(base, path=base["path"] + _relative_array_path(spec))
    spec.pop("path", None)
    spec["kvstore"] = kvstore
    array = await ts.open(spec, open=True, read=True)
    return await array.read()

  async def read_all(specs):
    return await asyncio.gather(*[read(s) for s in specs.values()])

  specs = {k: v for k, v in target.items() if _is_ts_spec(v)}
  arrays = dict(zip(specs, asyncio.run(read_all(specs)) if specs else []))
  return {"/".join(k): np.asarray(arrays.get(k, v)) for k, v in target.items()}


def _chunks(shape: Tuple[int, ...], itemsize: int) -> list:
  """Chunk shape dividing `shape` with at most _CHUNK_BYTES per chunk:
  halve (or divide by the smallest factor of) the largest dimension.

  >>> _chunks((250112, 4096), 2)
  [7816, 4096]
  """
  chunk = list(shape)
  while chunk and int(np.prod(chunk)) * itemsize > _CHUNK_BYTES:
    i = int(np.argmax(chunk))
    factor = next(f for f in range(2, chunk[i] + 1) if chunk[i] % f == 0)
    chunk[i] //= factor
  return chunk


def write_t5x_params(directory: str, flat: Mapping[str, np.ndarray],
                     step: int = 0) -> str:
  """Writes T5X's flat parameters as a T5X checkpoint `directory`.

  Every parameter goes to its own gzip-compressed zarr array; the index holds
  their specs (with paths relative to `directory`) and `state.step`.
  Returns `directory`.
  """
  import tensorstore as ts  # pylint: disable=g-import-not-at-top

  base = _kvstore(directory)
  specs = {}

  async def write(name, array):
    relative = "target." + name.replace("/", ".")
    dtype = np.dtype(array.dtype).name
    metadata = {"shape": list(array.shape), "compressor": {"id": "gzip"},
                "chunks": _chunks(array.shape, array.dtype.itemsize)}
    spec = {"driver": "zarr", "dtype": dtype, "metadata": metadata,
            "kvstore": {"driver": "file", "path": relative}}
    store = await ts.open(dict(spec, kvstore=dict(
        base, path=base["path"] + relative)), create=True, delete_existing=True)
    await store.write(array)
    specs[tuple(("target/" + name).split("/"))] = spec

  async def write_all():
    await asyncio.gather(*[write(n, np.asarray(a)) for n, a in flat.items()])

  asyncio.run(write_all())
  tree = traverse_util.unflatten_dict(specs)
  index = {"version": T5X_CHECKPOINT_VERSION,
           "optimizer": {"target": tree["target"],
                         "state": {"step": np.asarray(step, np.int32)}}}
  store = ts.KvStore.open(base).result()
  store.write("checkpoint", serialization.msgpack_serialize(index)).result()
  return str(directory)


def load_t5x_checkpoint(path: str, *, expected: Union[None, str, T5Config] = None,
                        dtype: Optional[str] = None) -> Tuple[T5Config, PyTree]:
  """(config, params) of our model from a T5X T5.1.1 / mT5 checkpoint.

  `expected` (a preset name like "xxl" or a T5Config) checks the architecture
  and raises ValueError naming the first mismatch; `dtype` casts (None keeps
  the stored dtype).

    config, params = load_t5x_checkpoint(
        "gs://t5-data/pretrained_models/t5x/mt5_small/checkpoint_1000000",
        expected="small")
  """
  if dtype is not None and dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype must be 'float32', 'bfloat16' or None; got "
                     f"{dtype!r}.")
  config, params = from_t5x_params(read_t5x_params(path), dtype=dtype)
  if expected is not None:
    check_architecture(config, expected)
  return config, params


def save_t5x_checkpoint(directory: str, config: T5Config, params: PyTree,
                        step: int = 0) -> str:
  """Writes our model as a T5X checkpoint `directory` (e.g. ".../checkpoint_0")
  that `t5x infer` restores with T5X's `network.Transformer` at the same dims
  (see `t5x_model_gin`)."""
  return write_t5x_params(directory, to_t5x_params(config, params), step)


def t5x_model_gin(config: T5Config, vocabulary_file: Optional[str] = None
                  ) -> str:
  """A gin file that makes T5X's T5 network this model (include it after
  t5x/examples/t5/t5_1_1/base.gin, or mt5/*.gin): its dims, dtype, no
  dropout and, if given, its SentencePiece file.

  >>> print(t5x_model_gin(PRESETS["small"]).splitlines()[5])
  network.T5Config.vocab_size = 250112
  """
  _check_t5x_representable(config)
  values = dict(vocab_size=config.vocab_size, emb_dim=config.d_model,
                num_heads=config.num_heads,
                num_encoder_layers=config.num_encoder_layers,
                num_decoder_layers=config.num_decoder_layers,
                head_dim=config.d_kv, mlp_dim=config.d_ff,
                dtype=f"'{config.dtype}'")
  lines = ["from __gin__ import dynamic_registration",
           "import seqio",
           "from t5x.examples.t5 import network", "",
           "# The T5X network dims of this model (T5.1.1 / mT5 architecture)."]
  lines += [f"network.T5Config.{k} = {v}" for k, v in values.items()]
  lines += ["network.T5Config.mlp_activations = ('gelu', 'linear')",
            "network.T5Config.logits_via_embedding = False",
            "DROPOUT_RATE = 0.0"]
  if vocabulary_file is not None:
    lines.append("seqio.SentencePieceVocabulary.sentencepiece_model_file = "
                 f'"{vocabulary_file}"')
  return "\n".join(lines) + "\n"
