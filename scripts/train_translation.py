"""Trains the embedded English->French model (resumable; see translation.train).

    python scripts/train_translation.py --workdir runs/en_fr            # train
    python scripts/train_translation.py --workdir runs/en_fr --measure  # speed

`--measure` times a few steps of the configured size and prints tokens/s
(JSON), to size the model for a time budget. `--export` copies the final
model into the package (`apps/arithmetic_apps/assets/en_fr/`).
`--tokenizer` (re)trains the SentencePiece vocabulary on the training
split's English and French text and writes `assets/en_fr/spm.model`.
"""

import argparse
import json
import shutil
import time

import jax

from arithmetic_decoding.models import preset
from arithmetic_apps.translation import data, tokenizer, train

ASSETS = tokenizer.ASSETS


def model_config(args):
  return preset("tiny").replace(
      vocab_size=tokenizer.Tokenizer.load().vocab_size, d_model=args.d_model,
      d_ff=args.d_ff, num_heads=args.num_heads, d_kv=args.d_kv,
      num_encoder_layers=args.layers, num_decoder_layers=args.layers,
      relative_attention_num_buckets=32, relative_attention_max_distance=128)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--workdir", default="runs/en_fr")
  parser.add_argument("--d_model", type=int, default=256)
  parser.add_argument("--d_ff", type=int, default=768)
  parser.add_argument("--num_heads", type=int, default=4)
  parser.add_argument("--d_kv", type=int, default=64)
  parser.add_argument("--layers", type=int, default=4)
  parser.add_argument("--tokens_per_batch", type=int, default=4096)
  parser.add_argument("--max_steps", type=int, default=20_000)
  parser.add_argument("--measure", action="store_true")
  parser.add_argument("--export", action="store_true")
  parser.add_argument("--tokenizer", action="store_true")
  args = parser.parse_args()
  if args.tokenizer:
    texts = [t for v in data.load_split("train") for t in v.sources +
             v.references]
    tokenizer.SPM_PATH.write_bytes(tokenizer.train_sentencepiece(texts, 8000))
    print(json.dumps({"tokenizer": str(tokenizer.SPM_PATH),
                      "sentences": len(texts)}))
    return
  cfg = train.TrainConfig(model=model_config(args), max_steps=args.max_steps,
                          tokens_per_batch=args.tokens_per_batch)
  if args.export:
    for name in ("config.json", "params.msgpack"):
      shutil.copy(f"{args.workdir}/final/{name}", ASSETS / name)
    print(json.dumps({"exported": str(ASSETS)}))
    return
  tok = tokenizer.Tokenizer.load()
  pairs = [(tok.encode(s), tok.encode(t))
           for s, t in data.training_pairs(data.load_split("train"))]
  if args.measure:
    model = train.EncoderDecoderModel(cfg.model)
    opt = train.make_optimizer(cfg)
    step = train.make_train_step(model, opt)
    params = model.init(jax.random.PRNGKey(0))
    state = opt.init(params)
    batches = [b for b in train.bucket_batches(pairs, cfg, 0)
               if b[0].shape[1] == 48][:6]
    params, state, loss = step(params, state, *batches[0])
    loss.block_until_ready()
    t0, tokens = time.perf_counter(), 0
    for src, tgt in batches[1:]:
      params, state, loss = step(params, state, src, tgt)
      tokens += int((src > 0).sum() + (tgt > 0).sum())
    loss.block_until_ready()
    dt = time.perf_counter() - t0
    print(json.dumps({"params": cfg.model.num_params(), "tokens_per_s":
                      tokens / dt, "s_per_step": dt / 5,
                      "pairs": len(pairs)}))
    return
  train.train(cfg, pairs, args.workdir)


if __name__ == "__main__":
  main()
