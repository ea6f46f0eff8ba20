"""`make demo`: English->French translations, arithmetic vs ancestral vs beam.

Part 1 uses the embedded trained model (`translation`, a T5.1.1
encoder-decoder trained on the public-domain Bible corpus). For a few
held-out verses (or your own sentences: `--text "..."`, or lines on stdin
with `--text -`) it prints the English source, the two French references,
N arithmetic and N ancestral samples with their log-probs, the distinct
count, sentence BLEU and n-gram diversity of each set, then beam search's
best translations.

Part 2 uses the toy model, whose sequences can be enumerated: it estimates
a model expectation (the mean length of a decoded sequence) many times from
N samples with each method and compares the spread of the estimates with
the exact value.

Part 3 loads a real decoder-only LLM from its GGUF file (SmolLM2-135M-
Instruct by default, installed by pip) and prints N arithmetic and N
ancestral completions of one chat prompt side by side, with each
arithmetic sample's code and the distinct counts (`--llm none` skips it).

  python -m arithmetic_apps.demo [--num_decodes 8] [--temperature 0.5]
      [--verses 4] [--text "The Lord is my shepherd."] [--json]

`--json` prints one JSON object with every result instead of the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from arithmetic_decoding import CodeScheme, Method, arithmetic_sample
from arithmetic_apps.metrics import ngram_diversity, sentence_bleu
from arithmetic_decoding.testing import enumerate_sequences
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel
from arithmetic_apps.translation.data import load_split
from arithmetic_apps.translation.translate import Translator

# Held-out test verses shown by default (indices into the test split).
DEMO_VERSES = (0, 90, 250, 300)

WORDS = ["<pad>", "</s>", "le", "chat", "dort", "sur", "un", "tapis"]
MODEL = ToyLanguageModel(vocab_size=len(WORDS), num_sources=3, num_states=4096,
                         logit_scale=1.6, eos_bonus=0.6, seed=1)
LENGTH = 6
# The toy part draws both sample sets from codes: iid codes decode to
# exactly the distribution of ancestral samples.
CODE_SETS = {"arithmetic (shifted lattice)": CodeScheme.SHIFTED_LATTICE,
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


def show_set(name, samples, references):
  """Prints one method's samples with their set statistics."""
  texts = [s.text for s in samples]
  line = f"  {name}: {len(set(texts))}/{len(texts)} distinct, diversity " \
         f"{ngram_diversity(texts):.2f}"
  if references:
    bleu = [sentence_bleu(t, references) for t in texts]
    line += f", sentence BLEU mean {np.mean(bleu):.1f} best {max(bleu):.1f}"
  print(line)
  for s in samples:
    print(f"    {s.log_prob:8.2f}  {s.text}")
  return texts


def translation_part(args) -> dict:
  translator = Translator.load()
  if args.text is not None:
    lines = sys.stdin.read().splitlines() if args.text == "-" else [args.text]
    items = [(f"input {i + 1}", line, ()) for i, line in enumerate(lines)
             if line.strip()]
  else:
    test = load_split("test")
    items = [(test[i].name, test[i].source, test[i].references)
             for i in DEMO_VERSES[:args.verses]]
  n, temperature = args.num_decodes, args.temperature
  print(f"Part 1: English -> French, {n} samples per verse at temperature "
        f"{temperature} (trained model: "
        f"{translator.model.config.num_params() / 1e6:.1f}M parameters)\n")
  key = jax.random.PRNGKey(args.seed)
  report = []
  for index, (name, source, references) in enumerate(items):
    print(f"[{name}] {source}")
    for r in references:
      print(f"  reference: {r}")
    row = {"name": name}
    for method in (m.value for m in Method.sampling()):
      samples = translator.sample([source], n, temperature,
                                  jax.random.fold_in(key, index), method)[0]
      texts = show_set(method, samples, references)
      row[method] = {"distinct": len(set(texts)),
                     "diversity": ngram_diversity(texts)}
    best = translator.beam([source], beams=4)[0][0]
    print(f"  beam search (4 beams), best: {best.log_prob:.2f}  {best.text}\n")
    report.append(row)
  return {"verses": report}


def toy_part(args) -> dict:
  n = args.num_decodes
  # Estimating E[decoded length] with N samples, many times over.
  exact = sum(p * decoded_length(np.array(s)) for s, p in
              enumerate_sequences(MODEL, 0, LENGTH, temperature=args.toy_temperature))
  reps = args.repetitions
  report = {"num_decodes": n, "temperature": args.toy_temperature,
            "exact": float(exact)}
  print(f"Part 2: the toy model (vocabulary {WORDS[2:]}), whose sequences "
        f"can be enumerated.\nEstimating the mean decoded length of prompt 0 "
        f"from {n} samples, {reps} times (exact value {exact:.4f}):")
  for name, scheme in CODE_SETS.items():  # a line each, as it is done
    decodes, _ = decode([0] * reps, n, args.toy_temperature, scheme,
                        args.seed + 1)
    estimates = decoded_length(np.asarray(decodes)).mean(axis=1)
    distinct = np.mean([len({tuple(s) for s in row}) for row in np.asarray(decodes)])
    report[name] = {"mean": float(estimates.mean()), "std": float(estimates.std()),
                    "mean_distinct": float(distinct)}
    print(f"  {name:<30} mean {estimates.mean():.4f}  std {estimates.std():.4f}  "
          f"distinct samples {distinct:.2f}/{n}", flush=True)
  ratio = (report["arithmetic (shifted lattice)"]["std"] /
           report["ancestral (iid codes)"]["std"])
  print(f"\nstd ratio arithmetic / ancestral: {ratio:.2f}")
  report["std_ratio"] = ratio
  return report


def llm_part(args) -> dict:
  """N arithmetic vs N ancestral completions of one chat prompt, side by side."""
  from arithmetic_decoding.llm import generate
  from arithmetic_apps import llms
  n = args.llm_samples
  print(f"\nPart 3: {args.llm} (GGUF, from pip), one chat prompt, {n} "
        f"completions each way at temperature {args.llm_temperature}")
  llm = llms.load(args.llm)
  chat = bool(llm.vocab.chat_template)
  print(f"prompt: {args.llm_prompt!r}" + (" (chat template)" if chat else ""))
  outs = {m: generate(llm, [args.llm_prompt], n, method=m,
                      temperature=args.llm_temperature, seed=args.seed,
                      max_new_tokens=args.llm_tokens, chat=chat)
          for m in ("arithmetic", "ancestral")}
  width = 58
  print(f"  {'arithmetic (code)':<{width + 9}}ancestral")
  for j in range(n):
    a = outs["arithmetic"]
    left = " ".join(a.texts[0][j].split())[:width]
    right = " ".join(outs["ancestral"].texts[0][j].split())[:width]
    print(f"  {a.codes[0, j]:.3f}  {left:<{width}} | {right}")
  report = {}
  for m, out in outs.items():
    firsts = {t[0] for t in out.tokens[0] if t}
    report[m] = {"distinct": out.distinct()[0],
                 "distinct_first_tokens": len(firsts)}
  print("  distinct completions: " + ", ".join(
      f"{m} {r['distinct']}/{n} (first tokens {r['distinct_first_tokens']})"
      for m, r in report.items()))
  return report


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num_decodes", type=int, default=8)
  parser.add_argument("--temperature", type=float, default=0.5)
  parser.add_argument("--verses", type=int, default=len(DEMO_VERSES))
  parser.add_argument("--text", default=None,
                      help='translate this sentence ("-": lines from stdin)')
  parser.add_argument("--toy_temperature", type=float, default=1.0)
  parser.add_argument("--repetitions", type=int, default=2000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--llm", default="smollm2-135m",
                      help="a model of arithmetic_apps.llms ('none': skip)")
  parser.add_argument("--llm_prompt", default="Name a fruit and say why you "
                      "like it.")
  parser.add_argument("--llm_samples", type=int, default=8)
  parser.add_argument("--llm_temperature", type=float, default=0.7)
  parser.add_argument("--llm_tokens", type=int, default=24)
  parser.add_argument("--json", action="store_true",
                      help="print one JSON object with every result instead "
                      "of the readable report")
  args = parser.parse_args(argv)
  readable = open(os.devnull, "w") if args.json else sys.stdout
  with contextlib.redirect_stdout(readable):
    report = {"translation": translation_part(args)}
    if args.text is None:
      report["toy"] = toy_part(args)
      if args.llm != "none":
        report["llm"] = llm_part(args)
  if args.json:
    print(json.dumps(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
