"""Hugging Face folders without torch: the safetensors reader on bytes
written here with numpy, config.json -> DecoderConfig, the weight mapping,
the vocab record, and the errors for bad input.

A tiny model of each architecture (`decoder_config.TINY`) is written as
Hugging Face lays it out: [out, in] linear weights, Llama's query/key rows
in Hugging Face's order (RoPE on halves, the order llama.cpp permutes into
adjacent pairs), Gemma's norms stored as w of (1 + w). Loading it back gives
the same model: Llama's logits equal the original's (the pairing changes
the order of float32 sums only), Gemma's parameters bit for bit. The check
against transformers itself is tests/integration_llm/test_hf_folder.py.
"""

import dataclasses
import json
import os
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers as tk

from arithmetic_decoding.llm import LLM
from arithmetic_decoding.models import hf_loader, hf_tokenizer
from arithmetic_decoding.models.decoder_config import TINY
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from helpers import one_fast

ARCHS = sorted(TINY)
CODES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def to_bf16_bits(x):
  """float32 -> BF16 bits by truncation (exact for the values used)."""
  return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, metadata=None):
  """name -> float32 / float16 array, or ("BF16" | other dtype, raw array)."""
  header, blobs, offset = {}, [], 0
  if metadata is not None:
    header["__metadata__"] = metadata
  for name, value in tensors.items():
    dtype, array = value if isinstance(value, tuple) else (
        CODES[value.dtype], value)
    blob = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
    data = blob.tobytes()
    header[name] = {"dtype": dtype, "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header).encode()
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
  return path


def test_reads_f32_f16_bf16_exactly(tmp_path):
  rng = np.random.default_rng(0)
  f32 = rng.normal(size=(3, 4)).astype(np.float32)
  f16 = rng.normal(size=(5,)).astype(np.float16)
  bf16 = np.array([[1.0, -2.5], [0.15625, 3e38]], np.float32)
  path = write_safetensors(tmp_path / "a.safetensors",
                           {"f32": f32, "f16": f16,
                            "bf16": ("BF16", to_bf16_bits(bf16)),
                            "scalar": np.array(7.0, np.float32)},
                           metadata={"format": "pt"})
  entries = hf_loader.read_header(path)
  assert sorted(entries) == ["bf16", "f16", "f32", "scalar"]
  assert entries["f32"].shape == (3, 4) and entries["bf16"].dtype == "BF16"
  read = {n: hf_loader.read_tensor(e) for n, e in entries.items()}
  np.testing.assert_array_equal(read["f32"], f32)
  np.testing.assert_array_equal(read["f16"], f16.astype(np.float32))
  expected = (to_bf16_bits(bf16).astype(np.uint32) << 16).view(np.float32)
  np.testing.assert_array_equal(read["bf16"], expected)
  np.testing.assert_array_equal(read["bf16"][0], [1.0, -2.5])
  assert read["scalar"].shape == () and read["scalar"] == 7.0
  assert all(x.dtype == np.float32 for x in read.values())


def test_bad_safetensors_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="no safetensors file"):
    hf_loader.read_header(tmp_path / "none.safetensors")
  short = tmp_path / "short.safetensors"
  short.write_bytes(b"\x01\x02")
  with pytest.raises(ValueError, match="shorter than the 8-byte"):
    hf_loader.read_header(short)
  long = tmp_path / "long.safetensors"
  long.write_bytes(struct.pack("<Q", 1000) + b"{}")
  with pytest.raises(ValueError, match="header length 1000 exceeds"):
    hf_loader.read_header(long)
  garbage = tmp_path / "garbage.safetensors"
  garbage.write_bytes(struct.pack("<Q", 4) + b"{{{{")
  with pytest.raises(ValueError, match="not JSON"):
    hf_loader.read_header(garbage)
  good = write_safetensors(tmp_path / "good.safetensors",
                           {"w": np.ones((4, 4), np.float32)})
  cut = tmp_path / "cut.safetensors"
  cut.write_bytes(open(good, "rb").read()[:-8])
  with pytest.raises(ValueError, match="'w' has bytes 0..64.*truncated"):
    hf_loader.read_header(cut)
  text = json.dumps({"w": {"dtype": "F32", "shape": [4, 4],
                           "data_offsets": [0, 32]}}).encode()
  wrong = tmp_path / "wrong.safetensors"
  wrong.write_bytes(struct.pack("<Q", len(text)) + text + bytes(32))
  with pytest.raises(ValueError, match="'w' has 32 bytes; shape"):
    hf_loader.read_header(wrong)
  ints = write_safetensors(tmp_path / "ints.safetensors",
                           {"q": ("I8", np.ones(3, np.int8))})
  entry = hf_loader.read_header(ints)["q"]
  with pytest.raises(ValueError, match="'q' is stored as I8"):
    hf_loader.read_tensor(entry)


LLAMA_JSON = {"model_type": "llama", "vocab_size": 64, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "max_position_embeddings": 64, "tie_word_embeddings": True,
              "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}}
GEMMA_JSON = {"model_type": "gemma3_text", "vocab_size": 64, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 1,
              "head_dim": 8, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 8,
              "sliding_window": 3, "max_position_embeddings": 64,
              "hidden_activation": "gelu_pytorch_tanh",
              "layer_types": ["sliding_attention", "sliding_attention",
                              "full_attention"],
              "rope_parameters": {
                  "full_attention": {"rope_type": "default",
                                     "rope_theta": 1000.0},
                  "sliding_attention": {"rope_type": "default",
                                        "rope_theta": 100.0}}}
HF_JSON = {"llama": LLAMA_JSON, "gemma3": GEMMA_JSON}


@pytest.mark.parametrize("arch", ARCHS)
def test_config_maps_to_the_tiny_config(arch):
  expected = dataclasses.replace(TINY[arch], rope_style="halves")
  assert hf_loader.config_from_hf(HF_JSON[arch]) == expected


def test_config_earlier_spelling_and_defaults():
  legacy = {k: v for k, v in GEMMA_JSON.items()
            if k not in ("rope_parameters", "layer_types",
                         "query_pre_attn_scalar", "max_position_embeddings")}
  legacy.update(num_hidden_layers=7, rope_theta=1e6,
                rope_local_base_freq=1e4, sliding_window_pattern=3,
                rope_scaling={"rope_type": "linear", "factor": 8.0})
  cfg = hf_loader.config_from_hf(legacy, dtype="bfloat16")
  assert cfg.layer_kinds == ("sliding", "sliding", "global") * 2 + ("sliding",)
  assert (cfg.rope_base, cfg.rope_base_local, cfg.rope_scale) == (1e6, 1e4, 8.0)
  # Absent keys take transformers' class defaults.
  assert (cfg.query_scale_base, cfg.context_length, cfg.tied_embedding,
          cfg.dtype) == (256.0, 131_072, True, "bfloat16")
  llama = {k: v for k, v in LLAMA_JSON.items()
           if k not in ("head_dim", "tie_word_embeddings", "rope_parameters",
                        "num_key_value_heads")}
  cfg = hf_loader.config_from_hf(dict(llama, rope_theta=5e5, rope_scaling={
      "type": "linear", "factor": 2.0}))
  assert (cfg.head_dim, cfg.num_kv_heads, cfg.tied_embedding, cfg.rope_base,
          cfg.rope_scale) == (8, 4, False, 5e5, 2.0)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "qwen2"}, "unsupported model_type 'qwen2'"),
    ({"model_type": "gemma3"}, "vision tower"),
    ({"hidden_size": None}, "lacks 'hidden_size'"),
    ({"num_hidden_layers": 0}, "num_hidden_layers must be an int >= 1"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"attention_bias": True}, "attention_bias = True"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
     "RoPE scaling 'llama3'"),
    ({"rope_parameters": {"rope_type": "default",
                          "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
])
def test_config_errors_name_the_field(change, message):
  hf = {k: v for k, v in dict(LLAMA_JSON, **change).items() if v is not None}
  with pytest.raises(ValueError, match=message):
    hf_loader.config_from_hf(hf)


@pytest.mark.parametrize("change, message", [
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    ({"sliding_window": None}, "sliding_window must be an int"),
    ({"layer_types": ["full_attention"]}, "layer_types must give"),
    ({"hidden_activation": "silu"}, "hidden_activation 'silu'"),
])
def test_gemma_config_errors(change, message):
  with pytest.raises(ValueError, match=message):
    hf_loader.config_from_hf(dict(GEMMA_JSON, **change))


def halves_order(x):
  """[..., K] in interleaved pairs (2i, 2i+1) -> halves (i, i + K/2)."""
  k = x.shape[-1]
  return x.reshape(x.shape[:-1] + (k // 2, 2)).swapaxes(-1, -2).reshape(
      x.shape)


def hf_tensors(arch, params):
  """Our parameter tree as a Hugging Face checkpoint's tensors (float32)."""
  cfg = TINY[arch]
  d, h, hkv, k = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  gemma = arch == "gemma3"
  norm = lambda x: f32(x) - np.float32(1.0) if gemma else f32(x)
  pair = (lambda x: x) if gemma else halves_order
  out = {"model.embed_tokens.weight": f32(params["embedding"]),
         "model.norm.weight": norm(params["final_norm"])}
  for i in range(cfg.num_layers):
    p, b = params[f"layer_{i}"], f"model.layers.{i}."
    a = p["attention"]
    out[b + "self_attn.q_proj.weight"] = f32(pair(np.asarray(a["query"])).reshape(d, h * k).T)
    out[b + "self_attn.k_proj.weight"] = f32(pair(np.asarray(a["key"])).reshape(d, hkv * k).T)
    out[b + "self_attn.v_proj.weight"] = f32(np.asarray(a["value"]).reshape(d, hkv * k).T)
    out[b + "self_attn.o_proj.weight"] = f32(np.asarray(a["out"]).reshape(h * k, d).T)
    out[b + "input_layernorm.weight"] = norm(p["attention_norm"])
    for ours, theirs in (("gate", "gate_proj"), ("up", "up_proj"),
                         ("down", "down_proj")):
      out[b + f"mlp.{theirs}.weight"] = f32(np.asarray(p["mlp"][ours]).T)
    if gemma:
      out[b + "self_attn.q_norm.weight"] = norm(a["query_norm"])
      out[b + "self_attn.k_norm.weight"] = norm(a["key_norm"])
      out[b + "post_attention_layernorm.weight"] = norm(p["post_attention_norm"])
      out[b + "pre_feedforward_layernorm.weight"] = norm(p["mlp_norm"])
      out[b + "post_feedforward_layernorm.weight"] = norm(p["post_mlp_norm"])
    else:
      out[b + "post_attention_layernorm.weight"] = norm(p["mlp_norm"])
  return out


def tiny_params(arch, seed=0):
  """Random peaked parameters; norms 1 + j/256 (so that w = norm - 1 and
  1 + w are exact in float32)."""
  params = DecoderOnlyModel(TINY[arch]).init(jax.random.PRNGKey(seed))
  rng = np.random.default_rng(seed)

  def draw(path, x):
    name = jax.tree_util.keystr(path)
    if "norm" in name:
      return (1 + np.round(rng.normal(size=x.shape) * 50) / 256).astype(
          np.float32)
    return np.asarray(x, np.float32) * 4.0

  return jax.tree_util.tree_map_with_path(draw, params)


def tiny_tokenizer(folder, template_in_config=True, jinja=None):
  """A character-level tokenizer of 40 ids, Gemma-like specials, BOS
  added by its post-processor."""
  specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
              "<end_of_turn>"]
  chars = list("abcdefghijklmnopqrstuvwxyz ,.!?")
  vocab = {t: i for i, t in enumerate(specials + chars)}
  tok = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
  tok.add_special_tokens([tk.AddedToken(t, special=True, normalized=False)
                          for t in specials])
  tok.post_processor = tk.processors.TemplateProcessing(
      single="<bos> $A", special_tokens=[("<bos>", 2)])
  tok.decoder = tk.decoders.Fuse()
  tok.save(os.path.join(folder, "tokenizer.json"))
  config = {"bos_token": {"content": "<bos>", "special": True},
            "eos_token": "<eos>"}
  if template_in_config:
    config["chat_template"] = "{{ bos_token }}{{ messages[0]['content'] }}"
  with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
  if jinja is not None:
    with open(os.path.join(folder, "chat_template.jinja"), "w") as f:
      f.write(jinja)


def write_folder(folder, arch, params, *, shards=1, bf16=False, config=None,
                 extra=None, drop=()):
  os.makedirs(folder, exist_ok=True)
  tensors = dict(hf_tensors(arch, params), **(extra or {}))
  for name in drop:
    del tensors[name]
  if bf16:
    tensors = {n: ("BF16", to_bf16_bits(x)) for n, x in tensors.items()}
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(dict(HF_JSON[arch], **(config or {})), f)
  with open(os.path.join(folder, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": [1, 5], "bos_token_id": 2}, f)
  tiny_tokenizer(folder)
  names = sorted(tensors)
  if shards == 1:
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    return folder
  weight_map = {}
  for s in range(shards):
    file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    part = {n: tensors[n] for n in names[s::shards]}
    write_safetensors(os.path.join(folder, file), part)
    weight_map.update({n: file for n in part})
  with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)
  return folder


@pytest.fixture(scope="module")
def originals():
  return {arch: tiny_params(arch) for arch in ARCHS}


def _expected_tree(arch, params):
  """What loading must give: Llama's query/key in halves order."""
  if arch == "gemma3":
    return params
  out = jax.tree_util.tree_map(lambda x: x, params)
  for i in range(TINY[arch].num_layers):
    a = dict(out[f"layer_{i}"]["attention"])
    a["query"], a["key"] = halves_order(a["query"]), halves_order(a["key"])
    out[f"layer_{i}"] = dict(out[f"layer_{i}"], attention=a)
  return out


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_weights_map_back_and_give_the_same_logits(tmp_path, originals, arch):
  params = originals[arch]
  single = write_folder(str(tmp_path / "one"), arch, params)
  sharded = write_folder(str(tmp_path / "three"), arch, params, shards=3)
  assert len([f for f in os.listdir(sharded) if f.endswith(".safetensors")]) == 3
  expected = _expected_tree(arch, params)
  for folder in (single, sharded):
    contents = hf_loader.read_folder(folder)
    config = hf_loader.config_from_hf(contents.config)
    loaded = hf_loader.load_params(contents, config)
    assert jax.tree_util.tree_structure(loaded) == (
        jax.tree_util.tree_structure(expected))
    jax.tree_util.tree_map(np.testing.assert_array_equal, loaded, expected)
  # The same model: Llama's halves pairing on permuted weights.
  tokens = np.array([[5, 9, 17, 3, 40, 22, 11, 60, 7, 30]])
  theirs = DecoderOnlyModel(TINY[arch]).logits(params, tokens)
  ours = DecoderOnlyModel(config).logits(loaded, tokens)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=0,
                             atol=1e-5 * float(np.abs(theirs).max()))


def test_bf16_folder_as_bfloat16_and_float32(tmp_path, originals):
  params = originals["gemma3"]
  folder = write_folder(str(tmp_path / "bf16"), "gemma3", params, bf16=True)
  contents = hf_loader.read_folder(folder)
  stored = hf_loader.read_tensor(
      contents.tensors["model.layers.0.mlp.up_proj.weight"])
  for dtype in ("float32", "bfloat16"):
    config = hf_loader.config_from_hf(contents.config, dtype)
    loaded = hf_loader.load_params(contents, config)
    up = loaded["layer_0"]["mlp"]["up"]
    assert up.dtype == config.jnp_dtype
    np.testing.assert_array_equal(np.asarray(up, np.float32), stored.T)
    # The norms are 1 + w (w = j/256 is exact in BF16; 1 + w is formed
    # in float32, then cast).
    np.testing.assert_array_equal(
        np.asarray(loaded["final_norm"], np.float32),
        np.asarray(jnp.asarray(params["final_norm"], config.jnp_dtype),
                   np.float32))


def test_untied_output_and_tensor_errors(tmp_path, originals):
  params = originals["llama"]
  out = np.asarray(params["embedding"], np.float32)[::-1].copy()
  folder = write_folder(str(tmp_path / "untied"), "llama", params,
                        config={"tie_word_embeddings": False},
                        extra={"lm_head.weight": out})
  contents = hf_loader.read_folder(folder)
  config = hf_loader.config_from_hf(contents.config)
  loaded = hf_loader.load_params(contents, config)
  np.testing.assert_array_equal(loaded["output"], out.T)

  def load(name, **kw):
    c = hf_loader.read_folder(write_folder(str(tmp_path / name), "llama",
                                           params, **kw))
    return hf_loader.load_params(c, hf_loader.config_from_hf(c.config))

  with pytest.raises(ValueError, match="missing tensor 'lm_head.weight'"):
    load("no_head", config={"tie_word_embeddings": False})
  with pytest.raises(ValueError, match="missing tensor 'model.layers.1.mlp"):
    load("no_up", drop=["model.layers.1.mlp.up_proj.weight"])
  with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(3,\), "
                     r"expected \(32,\) from config.json"):
    load("bad_shape", extra={"model.norm.weight": np.ones(3, np.float32)})
  with pytest.raises(ValueError, match="does not use: 'model.layers.0.self_"
                     "attn.q_proj.bias'"):
    load("bias", extra={"model.layers.0.self_attn.q_proj.bias":
                        np.zeros(32, np.float32)})
  # A tied checkpoint that also saved lm_head: the embedding is the output.
  load("tied_head", extra={"lm_head.weight": out})


def test_folder_errors(tmp_path, originals):
  with pytest.raises(FileNotFoundError, match="no Hugging Face model folder"):
    LLM.from_hf(str(tmp_path / "nowhere"))
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match="no config.json"):
    hf_loader.read_folder(empty)
  (empty / "config.json").write_text(json.dumps(LLAMA_JSON))
  (empty / "pytorch_model.bin").write_bytes(b"")
  with pytest.raises(FileNotFoundError, match="neither model.safetensors.*"
                     "pytorch_model.bin is a pickled"):
    hf_loader.read_folder(empty)
  folder = write_folder(str(tmp_path / "shards"), "llama",
                        originals["llama"], shards=2)
  os.remove(os.path.join(folder, "model-00002-of-00002.safetensors"))
  with pytest.raises(FileNotFoundError, match="in 'model-00002-of-00002"):
    hf_loader.read_folder(folder)
  folder = write_folder(str(tmp_path / "notok"), "llama", originals["llama"])
  os.remove(os.path.join(folder, "tokenizer.json"))
  with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
    LLM.from_hf(folder, verbose=False)


def test_vocab_record(tmp_path):
  tiny_tokenizer(str(tmp_path))
  tok = hf_tokenizer.load_tokenizer(str(tmp_path))
  vocab = hf_tokenizer.read_vocab(str(tmp_path), tok, {"eos_token_id": 1},
                                  {"eos_token_id": [1, 5]})
  assert (vocab.bos_id, vocab.eos_id, vocab.stop_ids) == (2, 1, (1, 5))
  assert vocab.add_bos  # from the post-processor: no add_bos_token here
  assert vocab.tokens[5] == "<end_of_turn>" and len(vocab.tokens) == 37
  assert vocab.chat_template == "{{ bos_token }}{{ messages[0]['content'] }}"
  # chat_template.jinja wins over tokenizer_config.json's; add_bos_token
  # wins over the post-processor; no generation_config: config.json's ids.
  other = tmp_path / "other"
  other.mkdir()
  tiny_tokenizer(str(other), template_in_config=False, jinja="J")
  cfg_path = other / "tokenizer_config.json"
  cfg_path.write_text(json.dumps(dict(json.loads(cfg_path.read_text()),
                                      add_bos_token=False,
                                      eos_token="<end_of_turn>")))
  vocab = hf_tokenizer.read_vocab(str(other), tok, {"eos_token_id": 1}, {})
  assert (vocab.chat_template, vocab.add_bos, vocab.stop_ids) == ("J", False,
                                                                  (5, 1))
  cfg_path.write_text(json.dumps({"eos_token": "<|im_end|>"}))
  with pytest.raises(ValueError, match="eos_token '<|im_end|>' is not in"):
    hf_tokenizer.read_vocab(str(other), tok, {}, {})
  with pytest.raises(ValueError, match="eos_token_id 99 is outside"):
    hf_tokenizer.read_vocab(str(tmp_path), tok, {"eos_token_id": 99}, {})


def test_from_hf_and_load(tmp_path, originals, capsys):
  folder = write_folder(str(tmp_path / "tiny-gemma"), "gemma3",
                        originals["gemma3"])
  llm = LLM.load(folder)
  assert "tiny-gemma: gemma3, 3 layers" in capsys.readouterr().out
  assert llm.name == "tiny-gemma" and llm.config.architecture == "gemma3"
  assert llm.stop_ids == (1, 5)
  assert llm.encode("ab c") == [2, 6, 7, 6 + 26, 8]
  assert llm.chat_prompt("hi") == "<bos>hi"
  assert llm.encode(llm.chat_prompt("hi")) == [2, 13, 14]
  assert llm.decode(llm.encode("hi, you!")) == "hi, you!"
  with pytest.raises(FileNotFoundError):
    LLM.load(str(tmp_path / "missing.gguf"))
