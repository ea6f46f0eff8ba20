"""Hugging Face model folders: `LLM.from_hf` against transformers loading
the same folder.

Small random models written by transformers itself (`save_pretrained`,
safetensors) with a tokenizer made here (nothing downloaded): a SmolLM2-like
byte-level BPE with a ChatML template for Llama, a Gemma-like SentencePiece
BPE (byte fallback, BOS added) with a template using `bos_token` for
Gemma 3; both trained on Bible verses by the tokenizers library, then
loaded and saved by transformers' own tokenizer classes (GPT2Tokenizer,
GemmaTokenizer), as a fine-tuning run would save them.

  folder        model               what it exercises
  llama         LlamaForCausalLM    tied embedding, one model.safetensors
  llama-shards  LlamaForCausalLM    untied lm_head, linear RoPE scaling,
                                    sharded with an index
  gemma         Gemma3ForCausalLM   sliding (window 5) and global layers,
                                    linear RoPE scaling of the global ones,
                                    query_pre_attn_scalar != head_dim
  gemma-bf16    Gemma3ForCausalLM   the same config, saved as BF16

The weights are redrawn at scales that make next-token distributions
peaked and greedy continuations varied (random models at transformers'
initialisation are nearly uniform, where greedy decoding would be a string
of near-ties), and every norm weight is random, so a Gemma norm read as w
instead of 1 + w would show.

Checked: logits at every position of several sequences within
`runtime.logit_tolerance` (both sides float32; the BF16 folder upcast
exactly on both); greedy continuations of a batch of prompts of different
lengths identical (a difference only at a genuine near-tie); the tokenizer
id for id on the 95-text corpus of test_against_transformers; the chat
template rendered identically.

    make .venv/.llm-runtime-installed
    .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/integration_llm/test_hf_folder.py
"""

import copy
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tokenizers as tk  # noqa: E402

from arithmetic_apps.translation.data import load_verses  # noqa: E402
from arithmetic_decoding.llm import LLM, generate  # noqa: E402

import runtime  # noqa: E402
from test_against_transformers import PROMPTS, corpus  # noqa: E402

LLAMA_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n"
    "{% endif %}")
LLAMA_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                 "<end_of_turn>"]
SPACE = "\u2581"
VOCAB = 1024
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "Name a fruit."},
     {"role": "assistant", "content": "Apple."},
     {"role": "user", "content": "Another?"}],
]


def _training_texts():
  verses = load_verses()
  return [v.sources[0] for v in verses[:4000]] + [
      "def f(x):\n    return x + 1\n", "1 2 3 10 100 2024-12-01"]


def _llama_tokenizer(texts):
  """SmolLM2's pipeline: digits alone, then GPT-2's byte-level split."""
  tok = tk.Tokenizer(tk.models.BPE())
  tok.pre_tokenizer = tk.pre_tokenizers.Sequence([
      tk.pre_tokenizers.Digits(individual_digits=True),
      tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
  tok.train_from_iterator(texts, tk.trainers.BpeTrainer(
      vocab_size=VOCAB, special_tokens=LLAMA_SPECIAL, show_progress=False,
      initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet()))
  tok.decoder = tk.decoders.ByteLevel()
  config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
            "unk_token": "<|endoftext|>", "add_prefix_space": False,
            "clean_up_tokenization_spaces": False}
  return tok, config, LLAMA_TEMPLATE


def _gemma_tokenizer(texts):
  """Gemma's kind: SentencePiece BPE over "▁"-spelled text, the 256
  <0xXX> byte pieces for byte fallback, BOS added."""
  trainer_tok = tk.Tokenizer(tk.models.BPE())
  trainer_tok.normalizer = tk.normalizers.Replace(" ", SPACE)
  trainer_tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(
      replacement=SPACE, prepend_scheme="never")
  trainer_tok.train_from_iterator(texts, tk.trainers.BpeTrainer(
      vocab_size=VOCAB - 256, show_progress=False))
  learned = json.loads(trainer_tok.to_str())["model"]
  pieces = (GEMMA_SPECIAL + [f"<0x{b:02X}>" for b in range(256)] +
            [p for p, _ in sorted(learned["vocab"].items(),
                                  key=lambda kv: kv[1])])
  ids = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
  merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
            for m in learned["merges"]]
  tok = tk.Tokenizer(tk.models.BPE(vocab=ids, merges=merges,
                                   unk_token="<unk>", byte_fallback=True,
                                   fuse_unk=True))
  tok.normalizer = tk.normalizers.Replace(" ", SPACE)
  tok.decoder = tk.decoders.Sequence([
      tk.decoders.Replace(SPACE, " "), tk.decoders.ByteFallback(),
      tk.decoders.Fuse()])
  tok.add_special_tokens([tk.AddedToken(t, special=True, normalized=False)
                          for t in GEMMA_SPECIAL])
  tok.post_processor = tk.processors.TemplateProcessing(
      single="<bos> $A", pair="<bos> $A <bos> $B",
      special_tokens=[("<bos>", ids["<bos>"])])
  config = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>",
            "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
            "add_bos_token": True, "add_eos_token": False}
  return tok, config, GEMMA_TEMPLATE


def _save_tokenizer(tok, config, template, raw_folder, folder):
  """Through transformers' own tokenizer class, as a fine-tuning run saves
  it: tokenizer.json, tokenizer_config.json, chat_template.jinja."""
  os.makedirs(raw_folder, exist_ok=True)
  tok.save(os.path.join(raw_folder, "tokenizer.json"))
  with open(os.path.join(raw_folder, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
  hf_tok = transformers.AutoTokenizer.from_pretrained(raw_folder)
  hf_tok.chat_template = template
  hf_tok.save_pretrained(folder)
  return hf_tok


def _randomize(model, seed, gemma):
  """Peaked random weights: embeddings N(0, 0.2^2), each linear N(0, 1/in),
  norm scales 1 + N(0, 0.2^2), except the final norm and Gemma's post-norms
  at 8 + N(0, 0.2^2) (Gemma stores the scale minus 1). A tied model at
  transformers' initialisation, or with larger embeddings, repeats its last
  token: its own embedding dominates the residual stream."""
  gen = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = torch.randn(p.shape, generator=gen)
      if "norm" in name:
        big = "post" in name or name == "model.norm.weight"
        value = 0.2 * noise + (8.0 if big else 1.0) - (1.0 if gemma else 0.0)
      elif "embed" in name:
        value = 0.2 * noise
      else:
        value = noise / p.shape[-1] ** 0.5
      p.copy_(value)


def _llama_config(vocab, **kw):
  return transformers.LlamaConfig(
      vocab_size=vocab, hidden_size=64, intermediate_size=160,
      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
      max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
      eos_token_id=2, **kw)


def _gemma_config(vocab):
  return transformers.Gemma3TextConfig(
      vocab_size=vocab, hidden_size=64, intermediate_size=160,
      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
      head_dim=16, query_pre_attn_scalar=24, sliding_window=5,
      layer_types=["sliding_attention", "sliding_attention",
                   "full_attention", "sliding_attention"],
      rope_parameters={
          "full_attention": {"rope_type": "linear", "factor": 4.0,
                             "rope_theta": 1_000_000.0},
          "sliding_attention": {"rope_type": "default",
                                "rope_theta": 10_000.0}},
      max_position_embeddings=512, bos_token_id=2, eos_token_id=[1, 5],
      pad_token_id=0)


FOLDERS = ["llama", "llama-shards", "gemma", "gemma-bf16"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """name -> folder written by transformers."""
  torch.set_num_threads(os.cpu_count() or 1)
  root = tmp_path_factory.mktemp("hf")
  texts = _training_texts()
  kinds = {"llama": _llama_tokenizer(texts), "gemma": _gemma_tokenizer(texts)}
  out = {}
  for i, name in enumerate(FOLDERS):
    kind = name.split("-")[0]
    folder = str(root / name)
    hf_tok = _save_tokenizer(*kinds[kind], str(root / f"raw-{name}"), folder)
    vocab = len(hf_tok)
    if name == "llama":
      config = _llama_config(vocab, tie_word_embeddings=True)
    elif name == "llama-shards":
      config = _llama_config(vocab, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "linear",
                                              "factor": 2.0,
                                              "rope_theta": 500.0})
    else:
      config = _gemma_config(vocab)
    model_class = (transformers.LlamaForCausalLM if kind == "llama" else
                   transformers.Gemma3ForCausalLM)
    model = model_class(config)
    _randomize(model, seed=i, gemma=kind == "gemma")
    if name.endswith("bf16"):
      model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = config.eos_token_id
    model.save_pretrained(folder, max_shard_size="100KB"
                          if name.endswith("shards") else "5GB")
    out[name] = folder
  return out


def test_folders_are_what_they_claim(folders):
  files = set(os.listdir(folders["llama-shards"]))
  assert "model.safetensors.index.json" in files
  assert len([f for f in files if f.endswith(".safetensors")]) > 2
  assert "model.safetensors" in os.listdir(folders["llama"])
  with open(os.path.join(folders["gemma-bf16"], "model.safetensors"),
            "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
  assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
      "BF16"}


@pytest.fixture(scope="module", params=FOLDERS)
def pair(request, folders):
  folder = folders[request.param]
  ours = LLM.from_hf(folder, verbose=False)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      folder, dtype=torch.float32)
  model.eval()
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  return request.param, ours, model, tokenizer


def test_config_as_written(pair):
  name, ours, model, _ = pair
  cfg, theirs = ours.config, model.config
  assert (cfg.num_layers, cfg.d_model, cfg.d_ff, cfg.vocab_size) == (
      theirs.num_hidden_layers, theirs.hidden_size, theirs.intermediate_size,
      theirs.vocab_size)
  assert cfg.tied_embedding == (name != "llama-shards")
  if name.startswith("gemma"):
    assert cfg.layer_kinds == ("sliding", "sliding", "global", "sliding")
    assert (cfg.sliding_window, cfg.rope_scale, cfg.query_scale_base) == (
        5, 4.0, 24.0)
    assert ours.stop_ids == (1, 5)  # <eos>, <end_of_turn>
  else:
    assert ours.stop_ids == (2, 0)  # <|im_end|>, <|endoftext|>


def test_logits_at_every_position_within_tolerance(pair):
  name, ours, model, _ = pair
  texts = PROMPTS + [ours.chat_prompt("Write a haiku about rain."),
                     " ".join(corpus()[:6])]
  worst, errors = (0.0, 0.0, 0.0), np.zeros(2)
  exact_model = copy.deepcopy(model).double()
  for text in texts:
    ids = ours.encode(text)
    theirs = runtime.hf_logits(model, ids)
    with torch.no_grad():  # transformers in float64: each side's own error
      exact = exact_model(torch.tensor([ids])).logits[0].numpy()
    mine = np.asarray(ours.model.logits(ours.params, np.array([ids])))[0]
    tol = runtime.logit_tolerance(ours.config, np.abs(theirs).max())
    diff = np.abs(mine - theirs).max()
    assert diff <= tol, (f"{name}: max |diff| {diff:.2e} > tolerance "
                         f"{tol:.2e} ({len(ids)} tokens)")
    top2 = np.sort(theirs, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * tol
    np.testing.assert_array_equal(mine.argmax(-1)[clear],
                                  theirs.argmax(-1)[clear])
    worst = max(worst, (diff / tol, diff, tol))
    errors = np.maximum(errors, [np.abs(mine - exact).max(),
                                 np.abs(theirs - exact).max()])
  # Shown with `pytest -s`.
  print(f"\n{name}: {len(texts)} sequences, max |diff| {worst[1]:.1e} where "
        f"the tolerance is {worst[2]:.1e} ({worst[0]:.0%} of it); from "
        f"transformers in float64: ours {errors[0]:.1e}, transformers' "
        f"float32 {errors[1]:.1e}")


def test_greedy_batch_of_different_lengths_identical(pair):
  name, ours, model, tokenizer = pair
  new = 24
  out = generate(ours, PROMPTS, 1, method="greedy", max_new_tokens=new)
  theirs, logits = runtime.hf_greedy(model, tokenizer, out.prompt_tokens, new)
  # Not a repetition of one token (a weak comparison).
  assert max(len(set(t[0])) for t in out.tokens) > new // 3, out.tokens
  stops = set(ours.stop_ids)
  assert set(model.generation_config.eos_token_id if isinstance(
      model.generation_config.eos_token_id, list) else
      [model.generation_config.eos_token_id]) <= stops
  for b in range(len(PROMPTS)):
    mine = out.tokens[b][0]
    ref = theirs[b].tolist()
    ref = ref[:next((i for i, t in enumerate(ref) if t in stops), len(ref))]
    if mine == ref:
      continue
    i = next(i for i in range(min(len(mine), len(ref)) + 1)
             if i >= len(mine) or i >= len(ref) or mine[i] != ref[i])
    step = logits[b, i]
    tol = runtime.logit_tolerance(ours.config, np.abs(step).max())
    top2 = np.sort(step)[-2:]
    assert top2[1] - top2[0] <= 2 * tol, (
        f"{name} prompt {b}: greedy differs at new token {i} where "
        f"transformers' top-2 gap is {top2[1] - top2[0]:.3e} > {2 * tol:.3e}")


def test_tokenizer_identical_on_a_varied_corpus(pair):
  name, ours, _, tokenizer = pair
  texts = corpus()
  assert len(texts) > 60
  for text in texts:
    theirs = tokenizer(text).input_ids
    assert ours.encode(text) == theirs, (name, text)
    assert ours.decode(theirs) == tokenizer.decode(
        theirs, skip_special_tokens=True), (name, text)


def test_chat_template_renders_identically(pair):
  name, ours, _, tokenizer = pair
  assert ours.vocab.chat_template == tokenizer.chat_template
  for messages in CONVERSATIONS:
    theirs = tokenizer.apply_chat_template(messages, tokenize=False,
                                           add_generation_prompt=True)
    assert ours.chat_prompt(messages) == theirs, name
    # The rendered prompt encodes alike too (the BOS Gemma's template
    # writes is not doubled).
    assert ours.encode(theirs) == tokenizer(
        theirs, add_special_tokens=False).input_ids, name
