"""Exports a model of ours as a T5X checkpoint plus the gin that describes it.

  python scripts/export_t5x.py --out /tmp/en_fr_t5x

writes /tmp/en_fr_t5x/checkpoint_2800/ (T5X's format: msgpack index and one
zarr array per parameter; local or gs://) and /tmp/en_fr_t5x/model.gin (the
`network.T5Config` dims and the SentencePiece file), so that `t5x infer` runs
the embedded English->French model (docs/t5x.md, "With T5X"). Prints JSON and a
one-line summary.
"""

import argparse
import json
import pathlib
import time

import jax
import numpy as np

from arithmetic_decoding.models.t5x_checkpoint import (
    load_t5x_checkpoint, save_t5x_checkpoint, t5x_model_gin)
from arithmetic_apps.translation.checkpoint import load_model
from arithmetic_apps.translation.tokenizer import ASSETS, SPM_PATH


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default=str(ASSETS),
                      help="directory with config.json and params.msgpack")
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--step", type=int, default=2800)
  args = parser.parse_args()
  start = time.time()
  config, params = load_model(args.model)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  path = save_t5x_checkpoint(str(out / f"checkpoint_{args.step}"), config,
                             params, step=args.step)
  (out / "model.gin").write_text(t5x_model_gin(config, str(SPM_PATH)))
  # Read it back: the exported checkpoint must be the model, bitwise.
  _, back = load_t5x_checkpoint(path, expected=config)
  bitwise = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params),
                                                     jax.tree.leaves(back)))
  result = {"checkpoint": path, "gin": str(out / "model.gin"),
            "bitwise_round_trip": bool(bitwise),
            "seconds": round(time.time() - start, 1)}
  print(json.dumps(result))
  print(f"exported {args.model} -> {path} (+ model.gin); round trip bitwise: "
        f"{bitwise}")


if __name__ == "__main__":
  main()
