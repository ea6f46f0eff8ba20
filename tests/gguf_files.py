"""Tiny GGUF files written with the `gguf` package, for the loader's tests.

`write_tiny(path, arch, params)` writes a DecoderOnly parameter tree of a
`TINY`-like config the way llama.cpp lays a model out (GGUF tensor names,
[out, in] weights, metadata keys), with a small vocabulary of the kind the
architecture uses:

  llama   byte-level BPE ("gpt2"): 3 control tokens, GPT-2's 256-character
          byte alphabet, then the merges "h e", "Ġ he", "l l" (ids 259-261)
  gemma3  SentencePiece ("llama"): <pad> <eos> <bos> <unk> <start_of_turn>
          <end_of_turn>, 256 <0xXX> byte pieces, then "▁", "a", "b", "ab",
          "▁a", "  " (a whitespace run spelled with spaces, user-defined)
"""

import gguf
import numpy as np

from arithmetic_decoding.models.decoder_config import DecoderConfig

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                 "{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def _byte_alphabet():
  # GPT-2's printable spelling of the 256 bytes.
  keep = (list(range(ord("!"), ord("~") + 1)) +
          list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return [chars[b] for b in range(256)]


def gpt2_vocab():
  tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + _byte_alphabet()
  merges = ["h e", "Ġ he", "l l"]
  tokens += [m.replace(" ", "") for m in merges]
  types = [3, 3, 3] + [1] * (len(tokens) - 3)
  return tokens, types, merges


def spm_vocab():
  tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
            "<end_of_turn>"]
  types = [3, 3, 3, 2, 3, 3]
  tokens += [f"<0x{b:02X}>" for b in range(256)]
  types += [6] * 256
  tokens += ["\u2581", "a", "b", "ab", "\u2581a", "  "]
  types += [1, 1, 1, 1, 1, 4]
  return tokens, types


def vocab_size(arch: str) -> int:
  return len(gpt2_vocab()[0]) if arch == "llama" else len(spm_vocab()[0])


def write_tiny(path, config: DecoderConfig, params, *, quantize_embedding=False,
               chat_template=CHAT_TEMPLATE, sliding_pattern=None):
  arch = config.architecture
  w = gguf.GGUFWriter(str(path), arch)
  w.add_string("general.name", f"tiny-{arch}")
  w.add_uint32(f"{arch}.context_length", config.context_length)
  w.add_uint32(f"{arch}.embedding_length", config.d_model)
  w.add_uint32(f"{arch}.block_count", config.num_layers)
  w.add_uint32(f"{arch}.feed_forward_length", config.d_ff)
  w.add_uint32(f"{arch}.attention.head_count", config.num_heads)
  w.add_uint32(f"{arch}.attention.head_count_kv", config.num_kv_heads)
  w.add_uint32(f"{arch}.attention.key_length", config.head_dim)
  w.add_uint32(f"{arch}.attention.value_length", config.head_dim)
  w.add_float32(f"{arch}.rope.freq_base", config.rope_base)
  w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config.norm_eps)
  if arch == "gemma3":
    w.add_uint32(f"{arch}.attention.sliding_window", config.sliding_window)
    w.add_float32(f"{arch}.rope.freq_base_swa", config.rope_base_local)
    if sliding_pattern is not None:
      w.add_uint32(f"{arch}.attention.sliding_window_pattern", sliding_pattern)
    tokens, types = spm_vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores([-float(i) for i in range(len(tokens))])
    w.add_uint32("tokenizer.ggml.bos_token_id", 2)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
  else:
    tokens, types, merges = gpt2_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_string("tokenizer.ggml.pre", "smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
  if chat_template:
    w.add_chat_template(chat_template)

  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  d, h, hkv, k = (config.d_model, config.num_heads, config.num_kv_heads,
                  config.head_dim)
  emb = f32(params["embedding"])
  if quantize_embedding:
    q = gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", q,
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
  else:
    w.add_tensor("token_embd.weight", emb)
  w.add_tensor("output_norm.weight", f32(params["final_norm"]))
  for i in range(config.num_layers):
    p, b = params[f"layer_{i}"], f"blk.{i}."
    a = p["attention"]
    w.add_tensor(b + "attn_q.weight", f32(a["query"]).reshape(d, h * k).T.copy())
    w.add_tensor(b + "attn_k.weight", f32(a["key"]).reshape(d, hkv * k).T.copy())
    w.add_tensor(b + "attn_v.weight", f32(a["value"]).reshape(d, hkv * k).T.copy())
    w.add_tensor(b + "attn_output.weight", f32(a["out"]).reshape(h * k, d).T.copy())
    w.add_tensor(b + "attn_norm.weight", f32(p["attention_norm"]))
    w.add_tensor(b + "ffn_norm.weight", f32(p["mlp_norm"]))
    for ours, theirs in (("gate", "ffn_gate"), ("up", "ffn_up"),
                         ("down", "ffn_down")):
      w.add_tensor(b + theirs + ".weight", f32(p["mlp"][ours]).T.copy())
    if config.qk_norm:
      w.add_tensor(b + "attn_q_norm.weight", f32(a["query_norm"]))
      w.add_tensor(b + "attn_k_norm.weight", f32(a["key_norm"]))
    if config.post_norms:
      w.add_tensor(b + "post_attention_norm.weight",
                   f32(p["post_attention_norm"]))
      w.add_tensor(b + "post_ffw_norm.weight", f32(p["post_mlp_norm"]))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path
