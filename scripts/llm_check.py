"""Our LLM logits against transformers' on the same GGUF files: measured
differences beside the derived tolerance (tests/integration_llm/runtime.py).

  python scripts/llm_check.py [--models smollm2-135m gemma3-270m]

Prints one JSON line per model and a one-line summary. Needs the runtime
`make test-llm` installs (torch CPU build, transformers, accelerate).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests",
                                "integration_llm"))
import runtime  # noqa: E402

from arithmetic_apps import llms  # noqa: E402

TEXTS = ["The Lord is my shepherd; I shall not",
         "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
         "Question: what is 17 * 23? Answer:", "Paris is the capital of"]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--models", nargs="+", default=sorted(llms.MODELS))
  args = p.parse_args(argv)
  parts = []
  for name in args.models:
    ours = llms.load(name, verbose=False)
    model, _ = runtime.hf(llms.gguf_path(name))
    worst = {"max_abs_diff": 0.0}
    positions = agree = 0
    for text in TEXTS + [ours.chat_prompt("Write a haiku about rain.")]:
      ids = ours.encode(text)
      theirs = runtime.hf_logits(model, ids)
      mine = np.asarray(ours.model.logits(ours.params, np.array([ids])))[0]
      diff = float(np.abs(mine - theirs).max())
      tol = runtime.logit_tolerance(ours.config, float(np.abs(theirs).max()))
      positions += len(ids)
      agree += int((mine.argmax(-1) == theirs.argmax(-1)).sum())
      if diff >= worst["max_abs_diff"]:
        worst = {"max_abs_diff": diff, "tolerance": tol,
                 "max_abs_logit": float(np.abs(theirs).max())}
    record = {"model": name, "positions": positions,
              "argmax_agree": agree, **worst,
              "diff_over_tolerance": worst["max_abs_diff"] / worst["tolerance"]}
    print(json.dumps(record))
    parts.append(f"{name} max |diff| {worst['max_abs_diff']:.1e} "
                 f"(tolerance {worst['tolerance']:.1e}), argmax "
                 f"{agree}/{positions}")
  print("; ".join(parts))
  return 0


if __name__ == "__main__":
  sys.exit(main())
