"""N completions of one prompt from an LLM, with how many are distinct.

  python -m arithmetic_apps.llm_sample --prompt "Name a fruit." -n 8
      [--model smollm2-135m|gemma3-270m] [--method arithmetic|ancestral|
      greedy|beam] [--temperature 1.0] [--seed 0] [--max_new_tokens 48]
      [--no_chat] [--gguf PATH] [--json]

The chat template is applied for instruct models (those whose file has
one) unless --no_chat. Each completion is printed with its code (arithmetic
sampling) and log-probability, then a summary line: distinct completions
and distinct first tokens out of N.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from arithmetic_decoding import Method, validation
from arithmetic_decoding.llm import LLM, generate
from arithmetic_decoding.request import SamplingParams
from arithmetic_apps import llms


def parse(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--prompt", required=True)
  p.add_argument("-n", "--num_samples", type=int, default=8)
  p.add_argument("--model", default="smollm2-135m", choices=sorted(llms.MODELS))
  p.add_argument("--gguf", default=None,
                 help="a GGUF file (or a Hugging Face model folder) instead "
                 "of --model")
  p.add_argument("--method", default="arithmetic",
                 choices=[m.value for m in Method])
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--topk", type=int, default=0)
  p.add_argument("--topp", type=float, default=0.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--max_new_tokens", type=int, default=48)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--no_chat", action="store_true")
  p.add_argument("--json", action="store_true", help="one JSON object")
  return p.parse_args(argv)


def main(argv=None) -> int:
  args = parse(argv)
  try:
    # The sampling arguments are checked before the model loads (seconds):
    # by the same record `generate` builds from them.
    SamplingParams(
        n=validation.check_int("num_samples", args.num_samples, minimum=1),
        method=args.method, temperature=args.temperature, topk=args.topk,
        topp=args.topp, max_new_tokens=args.max_new_tokens, seed=args.seed)
    llm = (LLM.load(args.gguf, dtype=args.dtype) if args.gguf else
           llms.load(args.model, args.dtype))
    chat = not args.no_chat and bool(llm.vocab.chat_template)
    start = time.time()
    out = generate(llm, [args.prompt], args.num_samples, method=args.method,
                   temperature=args.temperature, seed=args.seed,
                   max_new_tokens=args.max_new_tokens, topk=args.topk,
                   topp=args.topp, chat=chat)
  except (ValueError, TypeError, FileNotFoundError) as e:
    # Bad input: one line naming what is wrong, no traceback.
    print(f"llm_sample: error: {e}", file=sys.stderr)
    return 2
  seconds = time.time() - start
  texts, tokens = out.texts[0], out.tokens[0]
  distinct = out.distinct()[0]
  first = len({t[0] if t else None for t in tokens})
  if args.json:
    print(json.dumps({
        "model": llm.name, "method": out.method.value, "prompt": args.prompt,
        "chat": chat, "temperature": args.temperature, "seed": args.seed,
        "completions": texts, "codes": out.codes[0].tolist(),
        "log_probs": out.log_probs[0].tolist(), "distinct": distinct,
        "distinct_first_tokens": first, "seconds": round(seconds, 2)}))
    return 0
  print(f"{llm.name} | {out.method.value} | T={args.temperature} | "
        f"seed {args.seed}{' | chat template' if chat else ''}")
  for j, text in enumerate(texts):
    code = (f"code {out.codes[0, j]:.4f}  " if out.method is Method.ARITHMETIC
            else "")
    print(f"[{j:2d}] {code}logp {out.log_probs[0, j]:8.2f}  "
          f"{text.strip()!r}")
  print(f"{distinct}/{len(texts)} distinct completions, {first} distinct "
        f"first tokens ({seconds:.1f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
