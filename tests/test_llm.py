"""GGUF loading and `generate`, on tiny GGUF files written here.

Round trip: a parameter tree written as llama.cpp lays it out reads back
exactly (float32) or as the gguf package dequantizes it (Q8_0), with the
configuration the metadata states. The tokenizers reproduce hand-computed
ids; `generate` returns completions whose log-probabilities equal the
independent reference's, lattice codes, and clear errors for bad input.
"""

import dataclasses

import gguf
import jax
import numpy as np
import pytest

from arithmetic_decoding.llm import LLM, generate
from arithmetic_decoding.models import gguf_loader
from arithmetic_decoding.models.decoder_config import TINY
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from gguf_files import CHAT_TEMPLATE, vocab_size, write_tiny
from helpers import one_fast
from test_decoder_only import reference_logits

ARCHS = sorted(TINY)


def _config(arch):
  return dataclasses.replace(TINY[arch], vocab_size=vocab_size(arch))


def _params(arch, seed=0):
  model = DecoderOnlyModel(_config(arch))
  params = model.init(jax.random.PRNGKey(seed))
  return jax.tree_util.tree_map(lambda x: np.asarray(x) * 4.0, params)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  out = {}
  for arch in ARCHS:
    folder = tmp_path_factory.mktemp(arch)
    params = _params(arch)
    pattern = 3 if arch == "gemma3" else None
    out[arch] = (write_tiny(folder / "f32.gguf", _config(arch), params,
                            sliding_pattern=pattern),
                 write_tiny(folder / "q8.gguf", _config(arch), params,
                            quantize_embedding=True, sliding_pattern=pattern),
                 params)
  return out


@pytest.fixture(scope="module")
def llms(files):
  return {arch: LLM.from_gguf(files[arch][0], verbose=False) for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_config_and_parameters_round_trip(files, arch):
  f32, q8, params = files[arch]
  contents = gguf_loader.read_gguf(f32)
  config = gguf_loader.config_from_file(contents)
  # GGUF stores floats as float32.
  expected = _config(arch)
  assert config == dataclasses.replace(
      expected, norm_eps=float(np.float32(expected.norm_eps)))
  loaded = gguf_loader.load_params(contents, config)
  jax.tree_util.tree_map(np.testing.assert_array_equal, loaded,
                         jax.tree_util.tree_map(np.float32, params))
  contents = gguf_loader.read_gguf(q8)
  loaded = gguf_loader.load_params(contents, config)
  emb = np.asarray(params["embedding"], np.float32)
  expected = gguf.quants.dequantize(
      gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
      gguf.GGMLQuantizationType.Q8_0)
  np.testing.assert_array_equal(np.asarray(loaded["embedding"]), expected)
  assert 0 < np.abs(expected - emb).max() < 0.01 * np.abs(emb).max()


def test_gemma3_layer_pattern_defaults_to_five_sliding_per_global(files):
  contents = gguf_loader.read_gguf(files["gemma3"][0])
  meta = dict(contents.metadata)
  del meta["gemma3.attention.sliding_window_pattern"]
  del meta["gemma3.rope.freq_base_swa"]
  meta["gemma3.block_count"] = 12
  cfg = gguf_loader.config_from_metadata(meta)
  assert cfg.layer_kinds == ("sliding",) * 5 + ("global",) + ("sliding",) * 5 + ("global",)
  assert cfg.rope_base_local == 10_000.0
  assert cfg.embed_scale == pytest.approx(32 ** 0.5)


def test_byte_level_tokenizer(llms):
  llm = llms["llama"]
  # "hehe ll": merges "h e" (259), "Ġ he" needs a space before "he", "l l".
  assert llm.encode("hehe") == [259, 259]
  assert llm.encode("he he") == [259, 260]
  assert llm.encode("ll1") == [261, 3 + ord("1")]  # byte 0x31
  assert llm.encode("<|im_start|>he") == [1, 259]  # control token kept whole
  assert llm.decode([259, 260, 2]) == "he he"  # special tokens skipped
  assert llm.stop_ids == (2, 0)  # <|im_end|> (EOS), then <|endoftext|>


def test_sentencepiece_tokenizer(llms):
  llm = llms["gemma3"]
  ids = {t: i for i, t in enumerate(llm.vocab.tokens)}
  sp = "\u2581"
  # BOS first; "ab" merged, " a" -> "▁a", "z" by byte fallback.
  assert llm.encode("ab a") == [2, ids["ab"], ids[sp + "a"]]
  assert llm.encode("z") == [2, ids["<0x7A>"]]
  # The whitespace run spelled with spaces is respelled "▁▁" and reachable.
  assert llm.encode("a  b")[1:] == [ids["a"], ids["  "], ids["b"]]
  assert llm.decode(llm.encode("ab a z")) == "ab a z"
  assert llm.stop_ids == (1, 5)  # <eos>, <end_of_turn>


def test_chat_template_from_the_file(llms):
  assert llms["llama"].chat_prompt("hi") == (
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
  assert llms["llama"].vocab.chat_template == CHAT_TEMPLATE


@pytest.mark.parametrize("arch", one_fast(ARCHS, "llama"))
def test_generate_log_probs_equal_the_reference(llms, files, arch):
  llm = llms[arch]
  params = files[arch][2]
  out = generate(llm, ["hehe he", "he"] if arch == "llama" else ["ab", "a ab b"],
                 num_samples=8, method="arithmetic", temperature=1.0, seed=3,
                 max_new_tokens=6)
  assert out.codes.shape == (2, 8)
  for b in range(2):
    codes = out.codes[b]
    assert np.all(np.diff(codes) > 0)  # ordered by code
    np.testing.assert_allclose(np.diff(codes), 1 / 8, atol=1e-6)  # a lattice
    prompt = out.prompt_tokens[b]
    for j in range(8):
      stop = out.stop_tokens[b, j]
      seq = prompt + out.tokens[b][j] + ([int(stop)] if stop >= 0 else [])
      logits = reference_logits(llm.config, params, np.array(seq))
      logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
      ref = sum(logp[i - 1, seq[i]] for i in range(len(prompt), len(seq)))
      np.testing.assert_allclose(out.log_probs[b, j], ref, rtol=1e-4,
                                 atol=1e-3)
      assert len(out.tokens[b][j]) <= 6


def test_generate_is_reproducible_and_every_method_runs(llms):
  llm = llms["gemma3"]
  a = generate(llm, ["ab"], 4, seed=1, max_new_tokens=5)
  b = generate(llm, ["ab"], 4, seed=1, max_new_tokens=5)
  c = generate(llm, ["ab"], 4, seed=2, max_new_tokens=5)
  assert a.tokens == b.tokens and np.array_equal(a.codes, b.codes)
  assert not np.array_equal(a.codes, c.codes)
  for method in ("greedy", "ancestral", "beam"):
    out = generate(llm, ["ab", "b a"], 3, method=method, max_new_tokens=4)
    assert len(out.tokens) == 2 and all(len(r) == 3 for r in out.tokens)
    assert np.all(out.codes == 0)
  greedy = generate(llm, ["ab"], 3, method="greedy", max_new_tokens=4)
  assert greedy.distinct() == [1]


def test_bad_files_and_arguments(tmp_path, llms, files):
  text = tmp_path / "notes.gguf"
  text.write_bytes(b"hello, not a model")
  with pytest.raises(ValueError, match="not a GGUF file"):
    gguf_loader.read_gguf(text)
  with pytest.raises(FileNotFoundError):
    gguf_loader.read_gguf(tmp_path / "missing.gguf")
  data = open(files["llama"][0], "rb").read()
  cut = tmp_path / "cut.gguf"
  cut.write_bytes(data[:len(data) // 2])
  with pytest.raises(ValueError, match="truncated"):
    gguf_loader.read_gguf(cut)
  meta = dict(gguf_loader.read_gguf(files["llama"][0]).metadata)
  meta["general.architecture"] = "rwkv6"
  with pytest.raises(ValueError, match="unsupported architecture 'rwkv6'"):
    gguf_loader.config_from_metadata(meta)
  llm = llms["llama"]
  with pytest.raises(ValueError, match="context length"):
    generate(llm, ["he" * 40], 2, max_new_tokens=30)
  with pytest.raises(ValueError, match="token 0"):
    generate(llm, ["<|endoftext|>he"], 2)
  with pytest.raises(ValueError, match="num_samples"):
    generate(llm, ["he"], 0)
  with pytest.raises(ValueError, match="method"):
    generate(llm, ["he"], 2, method="nucleus")
  with pytest.raises(ValueError, match="temperature"):
    generate(llm, ["he"], 2, temperature=-1.0)
  with pytest.raises(TypeError, match="prompts"):
    generate(llm, [3], 2)
  with pytest.raises(ValueError, match="codes"):
    generate(llm, ["he"], 2, method="ancestral", codes=np.zeros((1, 2)),
             max_new_tokens=4)


def test_llm_sample_reports_bad_input_in_one_line(tmp_path, files, capsys):
  from arithmetic_apps import llm_sample
  text = tmp_path / "notes.gguf"
  text.write_bytes(b"not a model")
  good = str(files["llama"][0])
  for argv, words in [
      (["--gguf", str(text), "--prompt", "he"], "not a GGUF file"),
      (["--gguf", good, "--prompt", "he", "-n", "0"], "num_samples"),
      # Checked before the model loads: the missing file is not reached.
      (["--gguf", str(tmp_path / "missing.gguf"), "--prompt", "he",
        "--topp", "1.5"], "topp"),
      (["--gguf", good, "--prompt", "he", "--temperature", "-1",
        "--max_new_tokens", "4"], "temperature")]:
    assert llm_sample.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("llm_sample: error:") and words in err
    assert "\n" not in err and "Traceback" not in err
