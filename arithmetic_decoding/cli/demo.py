"""`make demo`: arithmetic sampling vs ancestral sampling vs beam search.

Part 1 decodes with the T5.1.1 / mT5 encoder-decoder (`--preset`, random
weights until a trained checkpoint is embedded): for eight inputs, N samples
from each method, with their distinct counts and timings (after compiling).

Part 2 uses the embedded toy model, whose sequences can be enumerated. For a
few prompts, decodes N samples with arithmetic sampling (codes on a
randomly shifted lattice) and N ancestral samples (independent codes, which is
ordinary ancestral sampling), and prints them with their log-probs and the
number of distinct samples. Then it estimates a model expectation (the mean
length of a decoded sequence) many times with each method and compares the
spread of the estimates with the exact value from enumeration.

  python -m arithmetic_decoding.cli.demo [--num_decodes 8] [--temperature 1.0]
                                    [--preset tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from arithmetic_decoding import CodeScheme, ancestral_sample, arithmetic_sample
from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.testing import enumerate_sequences
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel

WORDS = ["<pad>", "</s>", "le", "chat", "dort", "sur", "un", "tapis"]
MODEL = ToyLanguageModel(vocab_size=len(WORDS), num_sources=3, num_states=4096,
                         logit_scale=1.6, eos_bonus=0.6, seed=1)
LENGTH = 6
METHODS = {"arithmetic (shifted lattice)": CodeScheme.SHIFTED_LATTICE,
           "ancestral (iid codes)": CodeScheme.IID}


def text(tokens) -> str:
  return " ".join(WORDS[t] for t in tokens if t != 0)


def decode(sources, num_decodes, temperature, scheme, seed):
  """Samples [B, N, L] and log-probs [B, N] for the given sources."""
  sources = jnp.asarray(sources, jnp.int32)
  inputs = jnp.zeros((sources.shape[0], LENGTH), jnp.int32)
  return arithmetic_sample(inputs, MODEL.init_cache(sources), MODEL.tokens_to_logits,
                           EOS_ID, jax.random.PRNGKey(seed), num_decodes=num_decodes,
                           temperature=temperature, topk=0, code_scheme=scheme)


def decoded_length(sequences: np.ndarray) -> np.ndarray:
  """Tokens up to and including EOS, per sequence: [..., L] -> [...]."""
  return np.sum(sequences != 0, axis=-1)


VERSES = ("In the beginning God created the heaven and the earth.",
          "And God said, Let there be light: and there was light.",
          "And God saw the light, that it was good.",
          "And God called the light Day, and the darkness he called Night.",
          "And the evening and the morning were the first day.",
          "And God called the firmament Heaven.",
          "And God called the dry land Earth.",
          "And the earth brought forth grass.")


def encode_text(line: str, vocab: int, length: int) -> np.ndarray:
  """A stand-in tokenizer for random weights: characters to ids in [2, vocab)."""
  ids = [2 + (ord(c) % (vocab - 2)) for c in line[:length]]
  return np.array(ids + [0] * (length - len(ids)), np.int32)


def encoder_decoder_part(preset_name: str, n: int, temperature: float,
                         seed: int) -> dict:
  """Part 1: the three methods on the encoder-decoder."""
  from arithmetic_decoding.models import EncoderDecoderModel, preset  # pylint: disable=g-import-not-at-top
  model = EncoderDecoderModel(preset(preset_name))
  cfg = model.config
  params = model.init(jax.random.PRNGKey(seed))
  tokens = jnp.asarray(np.stack([encode_text(v, cfg.vocab_size, 32)
                                 for v in VERSES]))
  length = 12
  print(f"Part 1: encoder-decoder `{preset_name}` ({cfg.num_params() / 1e6:.2f}M "
        f"parameters, random weights), {len(VERSES)} inputs, N = {n}, "
        f"temperature {temperature}, {length} positions\n")

  def make(method):
    def run(params, tokens, key):
      inputs, cache, fn = model.decode_inputs(params, tokens, length, n)
      if method == "beam search":
        return beam_search(inputs, cache, fn, EOS_ID, num_decodes=n, alpha=0.6)
      sampler = (arithmetic_sample if method == "arithmetic" else
                 ancestral_sample)
      return sampler(inputs, cache, fn, EOS_ID, key, num_decodes=n,
                     temperature=temperature, topk=0)
    return jax.jit(run)

  report = {}
  key = jax.random.PRNGKey(seed + 1)
  for method in ("arithmetic", "ancestral", "beam search"):
    fn = make(method)
    start = time.perf_counter()
    decodes, scores = jax.block_until_ready(fn(params, tokens, key))
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(5):
      start = time.perf_counter()
      jax.block_until_ready(fn(params, tokens, key))
      times.append(time.perf_counter() - start)
    decodes, scores = np.asarray(decodes), np.asarray(scores)
    # Beam search may finish fewer than N beams; its empty slots (score
    # NEG_INF, all padding) are not samples.
    kept = [[tuple(s) for s, sc in zip(decodes[b], scores[b]) if sc > -1e6]
            for b in range(len(VERSES))]
    distinct = [len(set(k)) for k in kept]
    report[method] = {"ms": round(1e3 * statistics.median(times), 2),
                      "compile_s": round(compile_s, 2), "distinct": distinct,
                      "returned": [len(k) for k in kept]}
    print(f"  {method:<12} {1e3 * statistics.median(times):8.2f} ms per decode "
          f"(compile {compile_s:.1f} s); distinct per input: "
          + " ".join(f"{d}/{len(k)}" for d, k in zip(distinct, kept))
          + f" (mean {np.mean(distinct):.2f})")
    # The three best of input 0 (beam search: finished beams only).
    print("    best three of input 0 (score, tokens):")
    best = [(seq, sc) for seq, sc in zip(decodes[0], scores[0]) if sc > -1e6]
    for seq, sc in best[::-1][:3]:
      print(f"      {sc:9.3f}  {' '.join(str(t) for t in seq)}")
  print()
  return report


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num_decodes", type=int, default=8)
  parser.add_argument("--temperature", type=float, default=1.0)
  parser.add_argument("--repetitions", type=int, default=2000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--preset", default="tiny",
                      help="encoder-decoder size for part 1 (tiny, small, ...)")
  parser.add_argument("--model_temperature", type=float, default=0.5,
                      help="sampling temperature for part 1")
  args = parser.parse_args(argv)
  n = args.num_decodes

  model_report = encoder_decoder_part(args.preset, 16, args.model_temperature,
                                      args.seed)
  print("Part 2: ", end="")

  print(f"arithmetic-decoding demo: toy language model (vocabulary {WORDS[2:]}, "
        f"length {LENGTH}), {n} samples per prompt, temperature "
        f"{args.temperature}, jax {jax.__version__} on {jax.default_backend()}\n")
  sources = list(range(MODEL.num_sources))
  samples = {}
  for name, scheme in METHODS.items():
    decodes, log_probs = decode(sources, n, args.temperature, scheme, args.seed)
    samples[name] = (np.asarray(decodes), np.asarray(log_probs))
  for b in sources:
    print(f"prompt {b}")
    for name in METHODS:
      decodes, log_probs = samples[name]
      distinct = len({tuple(s) for s in decodes[b]})
      print(f"  {name:<30} {distinct}/{n} distinct")
      for seq, lp in zip(decodes[b][::-1], log_probs[b][::-1]):
        print(f"    {lp:7.3f}  {text(seq)}")
    print()

  # Estimating E[decoded length] with N samples, many times over.
  exact = sum(p * decoded_length(np.array(s)) for s, p in
              enumerate_sequences(MODEL, 0, LENGTH, temperature=args.temperature))
  reps = args.repetitions
  report = {"num_decodes": n, "temperature": args.temperature, "exact": float(exact),
            "encoder_decoder": model_report}
  print(f"Estimating the mean decoded length of prompt 0 from {n} samples, "
        f"{reps} times (exact value {exact:.4f}):")
  for name, scheme in tqdm(METHODS.items(), desc="estimates", file=sys.stderr):
    decodes, _ = decode([0] * reps, n, args.temperature, scheme, args.seed + 1)
    estimates = decoded_length(np.asarray(decodes)).mean(axis=1)
    distinct = np.mean([len({tuple(s) for s in row}) for row in np.asarray(decodes)])
    report[name] = {"mean": float(estimates.mean()), "std": float(estimates.std()),
                    "mean_distinct": float(distinct)}
    print(f"  {name:<30} mean {estimates.mean():.4f}  std {estimates.std():.4f}  "
          f"distinct samples {distinct:.2f}/{n}")
  ratio = (report["arithmetic (shifted lattice)"]["std"] /
           report["ancestral (iid codes)"]["std"])
  print(f"\nstd ratio arithmetic / ancestral: {ratio:.2f}")
  print(json.dumps(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
