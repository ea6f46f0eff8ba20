"""`make demo`: arithmetic vs ancestral sampling on the embedded toy model.

For a few prompts, decodes N samples with arithmetic sampling (codes on a
randomly shifted lattice) and N ancestral samples (independent codes, which is
ordinary ancestral sampling), and prints them with their log-probs and the
number of distinct samples. Then it estimates a model expectation (the mean
length of a decoded sequence) many times with each method and compares the
spread of the estimates with the exact value from enumeration.

  python -m arithmetic_decoding.demo [--num_decodes 8] [--temperature 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from arithmetic_decoding import CodeScheme, arithmetic_sample
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


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num_decodes", type=int, default=8)
  parser.add_argument("--temperature", type=float, default=1.0)
  parser.add_argument("--repetitions", type=int, default=2000)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  n = args.num_decodes

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
              MODEL.enumerate_sequences(0, LENGTH, temperature=args.temperature))
  reps = args.repetitions
  report = {"num_decodes": n, "temperature": args.temperature, "exact": float(exact)}
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
