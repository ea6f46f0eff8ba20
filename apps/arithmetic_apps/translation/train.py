"""Training the English->French model: batches, loss, a resumable loop.

The loop is deterministic for a given `TrainConfig` (the data order is a
function of the seed and the epoch), checkpoints its whole state
(parameters, optimizer state, step) atomically every `checkpoint_every`
steps, and continues from the last checkpoint when restarted, so a killed
run loses at most that many steps. Progress goes to a tqdm bar (loss,
tokens/s) and, one JSON line per `log_every` steps, to `log.jsonl`.

Batches are bucketed by length: a pair goes to the smallest bucket that
holds both its source and its target, and each bucket's batch size keeps
about `tokens_per_batch` tokens per side, so there are only
`len(buckets)` compiled shapes.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Iterator, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from arithmetic_decoding.models import EncoderDecoderModel
from arithmetic_decoding.models.config import T5Config
from arithmetic_apps.translation import checkpoint
from arithmetic_apps.translation.tokenizer import PAD_ID


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """One training run.

  Attributes:
    model: the encoder-decoder's dimensions (float32 on CPU).
    buckets: padded lengths; longer pairs are dropped.
    tokens_per_batch: about this many source (and target) tokens a step.
    peak_learning_rate: Adafactor's rate after warm-up; decays as
      1/sqrt(step) after `decay_after` steps.
    warmup_steps: linear warm-up.
    decay_after: steps at the peak rate before the 1/sqrt decay.
    max_steps: stop after this many steps.
    seed: parameters and data order.
    checkpoint_every: steps between checkpoints.
    log_every: steps between JSON log lines.
  """

  model: T5Config
  buckets: Tuple[int, ...] = (24, 32, 48, 64, 96, 128)
  tokens_per_batch: int = 4096
  peak_learning_rate: float = 1e-2
  warmup_steps: int = 200
  decay_after: int = 3000
  max_steps: int = 20_000
  seed: int = 0
  checkpoint_every: int = 200
  log_every: int = 20


def bucket_batches(pairs: Sequence[Tuple[List[int], List[int]]],
                   config: TrainConfig, epoch: int
                   ) -> List[Tuple[np.ndarray, np.ndarray]]:
  """One epoch of (source [b, L], target [b, L]) int32 batches, shuffled.

  >>> cfg = TrainConfig(model=T5Config(), buckets=(4, 8), tokens_per_batch=8)
  >>> pairs = [([5, 1], [6, 7, 1])] * 3 + [([5] * 6 + [1], [6, 1])]
  >>> [(s.shape, t.shape) for s, t in sorted(
  ...     bucket_batches(pairs, cfg, 0), key=lambda b: b[0].shape)]
  [((1, 8), (1, 8)), ((2, 4), (2, 4)), ((2, 4), (2, 4))]
  """
  rng = np.random.default_rng([config.seed, epoch])
  by_bucket = {length: [] for length in config.buckets}
  for source, target in pairs:
    need = max(len(source), len(target))
    fits = [length for length in config.buckets if length >= need]
    if fits:
      by_bucket[fits[0]].append((source, target))
  batches = []
  for length, members in by_bucket.items():
    size = max(1, config.tokens_per_batch // length)
    order = rng.permutation(len(members))
    for start in range(0, len(order), size):
      chunk = [members[i] for i in order[start:start + size]]
      src = np.zeros((size, length), np.int32)
      tgt = np.zeros((size, length), np.int32)
      for row, (s, t) in enumerate(chunk):
        src[row, :len(s)], tgt[row, :len(t)] = s, t
      batches.append((src, tgt))  # a short last batch keeps its shape
  return [batches[i] for i in rng.permutation(len(batches))]


def loss_fn(model: EncoderDecoderModel, params, source: jax.Array,
            target: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """Mean token cross-entropy of target given source, and the token count.

  Decoder inputs are the targets shifted right behind BOS 0; padding
  positions (target 0) carry no loss.
  """
  decoder_inputs = jnp.pad(target[:, :-1], ((0, 0), (1, 0)))  # [b, L]
  logits = model.logits(params, source, decoder_inputs)  # [b, L, V]
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  # [b, L, V] at [b, L] -> [b, L]
  token_ll = jnp.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
  mask = (target != PAD_ID).astype(jnp.float32)
  count = jnp.sum(mask)
  return -jnp.sum(token_ll * mask) / jnp.maximum(count, 1.0), count


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
  """Adafactor with updates scaled by each parameter's RMS, as T5X trains
  T5. T5 folds attention's 1/sqrt(d_kv) into a small query initialisation;
  plain Adam's updates (the same size for every parameter) swamp it, and
  with Adam at 2e-3 this model sat at loss 4.0 for 350 steps without using
  its source (measured; see docs/translation.md)."""

  def schedule(step):
    step = jnp.maximum(step, 1).astype(jnp.float32)
    return config.peak_learning_rate * jnp.minimum(
        step / config.warmup_steps,
        jnp.sqrt(config.decay_after / jnp.maximum(step, config.decay_after)))

  return optax.adafactor(schedule, multiply_by_parameter_scale=True,
                         clipping_threshold=1.0)


def make_train_step(model: EncoderDecoderModel,
                    optimizer: optax.GradientTransformation):
  """The jitted step: (params, opt_state, source, target) -> (..., loss)."""

  @jax.jit
  def train_step(params, opt_state, source, target):
    (loss, _), grads = jax.value_and_grad(
        lambda p: loss_fn(model, p, source, target), has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return train_step


def batch_stream(pairs, config: TrainConfig, start_step: int
                 ) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
  """Batches from global step `start_step` on (epochs concatenated)."""
  epoch, skip = 0, start_step
  while True:
    batches = bucket_batches(pairs, config, epoch)
    if skip < len(batches):
      yield from batches[skip:]
      skip = 0
    else:
      skip -= len(batches)
    epoch += 1


def train(config: TrainConfig, pairs, workdir: pathlib.Path | str,
          progress: bool = True):
  """Trains (or resumes) in `workdir`; returns the final parameters.

  `workdir` gets `state.msgpack` (the resumable state, rewritten every
  `checkpoint_every` steps), `log.jsonl` (one line per `log_every` steps)
  and the model directory `final/` (`checkpoint.save_model`, rewritten with
  each checkpoint, so a run stopped early still leaves a usable model).
  """
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  model = EncoderDecoderModel(config.model)
  optimizer = make_optimizer(config)
  params = model.init(jax.random.PRNGKey(config.seed))
  state = {"params": params, "opt_state": optimizer.init(params),
           "step": np.int64(0)}
  state_path = workdir / "state.msgpack"
  if state_path.exists():
    state = checkpoint.load_tree(state_path, like=state)
  step = int(state["step"])
  params, opt_state = state["params"], state["opt_state"]
  train_step = make_train_step(model, optimizer)
  bar = tqdm(total=config.max_steps, initial=step, disable=not progress,
             desc="train", dynamic_ncols=True)
  tokens, losses, t0 = 0, [], time.perf_counter()
  with open(workdir / "log.jsonl", "a", encoding="utf-8") as log:
    for source, target in batch_stream(pairs, config, step):
      if step >= config.max_steps:
        break
      params, opt_state, loss = train_step(params, opt_state, source, target)
      step += 1
      tokens += int((target != PAD_ID).sum() + (source != PAD_ID).sum())
      losses.append(loss)
      bar.update(1)
      if step % config.log_every == 0:
        mean_loss = float(np.mean(jax.device_get(losses)))
        rate = tokens / (time.perf_counter() - t0)
        bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{rate:,.0f}")
        log.write(json.dumps({"step": step, "loss": mean_loss,
                              "tokens_per_s": rate, "time": time.time()}) + "\n")
        log.flush()
        tokens, losses, t0 = 0, [], time.perf_counter()
      if step % config.checkpoint_every == 0 or step == config.max_steps:
        checkpoint.save_tree(state_path, {"params": params,
                                          "opt_state": opt_state,
                                          "step": np.int64(step)})
        checkpoint.save_model(workdir / "final", config.model, params)
  bar.close()
  return params
