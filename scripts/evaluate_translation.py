"""Corpus BLEU of the embedded English->French model on a split.

    python scripts/evaluate_translation.py                 # test, greedy + beam
    python scripts/evaluate_translation.py --split dev --beams 0

sacrebleu corpus BLEU against both French references (Segond 1910, Darby)
of every verse, translating the modern English (World English Bible) text.
Prints JSON (with a few example translations) and a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tqdm import tqdm

from arithmetic_apps.metrics import corpus_bleu
from arithmetic_apps.translation.data import load_split
from arithmetic_apps.translation.translate import Translator


def translate_all(translator, sources, method, beams, batch):
  out = []
  for i in tqdm(range(0, len(sources), batch), desc=method, file=sys.stderr):
    chunk = sources[i:i + batch]
    if method == "greedy":
      out += translator.greedy(chunk)
    else:
      out += [row[0].text for row in translator.beam(chunk, beams=beams)]
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--split", default="test")
  parser.add_argument("--beams", type=int, default=4, help="0: greedy only")
  parser.add_argument("--batch", type=int, default=16)
  args = parser.parse_args(argv)
  translator = Translator.load()
  verses = load_split(args.split)
  sources = [v.source for v in verses]
  references = [v.references for v in verses]
  result = {"split": args.split, "verses": len(verses)}
  methods = ["greedy"] + (["beam"] if args.beams else [])
  for method in methods:
    start = time.perf_counter()
    hyps = translate_all(translator, sources, method, args.beams, args.batch)
    result[method] = {"bleu": corpus_bleu(hyps, references),
                      "seconds": round(time.perf_counter() - start, 1),
                      "examples": [{"source": s, "translation": h}
                                   for s, h in list(zip(sources, hyps))[:3]]}
  # The two references against each other: how far apart humans are.
  result["reference_vs_reference"] = corpus_bleu(
      [r[0] for r in references], [[r[1]] for r in references])
  print(json.dumps(result, ensure_ascii=False))
  summary = ", ".join(f"{m} {result[m]['bleu']:.1f}" for m in methods)
  print(f"evaluate_translation: corpus BLEU on {args.split} "
        f"({len(verses)} verses, 2 references): {summary}; Segond vs Darby "
        f"{result['reference_vs_reference']:.1f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
