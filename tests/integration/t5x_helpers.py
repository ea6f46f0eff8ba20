"""Building blocks shared by the integration tests: T5X's own T5 network at
tiny dims, its T5X model wrapper and our model for the same parameters."""

import functools

import jax
import jax.numpy as jnp
import seqio
from t5x import adafactor, models, partitioning, utils
from t5x.examples.t5 import network

from arithmetic_decoding.models import T5Config

# T5X's relative position table is fixed at 32 buckets up to distance 128.
TINY = T5Config(vocab_size=96, d_model=16, d_ff=32, num_heads=4, d_kv=8,
                num_encoder_layers=2, num_decoder_layers=2,
                relative_attention_num_buckets=32,
                relative_attention_max_distance=128)


def t5x_network(config: T5Config) -> network.Transformer:
  return network.Transformer(network.T5Config(
      vocab_size=config.vocab_size, dtype=config.dtype, emb_dim=config.d_model,
      num_heads=config.num_heads, num_encoder_layers=config.num_encoder_layers,
      num_decoder_layers=config.num_decoder_layers, head_dim=config.d_kv,
      mlp_dim=config.d_ff, mlp_activations=("gelu", "linear"),
      dropout_rate=0.0, logits_via_embedding=False))


def t5x_model(config: T5Config, decode_fn=None) -> models.EncoderDecoderModel:
  vocabulary = seqio.PassThroughVocabulary(size=config.vocab_size, eos_id=1)
  kwargs = {} if decode_fn is None else {"decode_fn": decode_fn}
  return models.EncoderDecoderModel(
      module=t5x_network(config), input_vocabulary=vocabulary,
      output_vocabulary=vocabulary, optimizer_def=adafactor.Adafactor(),
      **kwargs)


def t5x_train_state(model, batch: int, input_length: int, target_length: int,
                    seed: int = 0):
  """T5X's inference train state (parameters only) and its partitioner."""
  partitioner = partitioning.PjitPartitioner(num_partitions=1)
  shapes = {"encoder_input_tokens": (batch, input_length),
            "decoder_input_tokens": (batch, target_length),
            "decoder_target_tokens": (batch, target_length)}
  types = {k: jnp.int32 for k in shapes}
  initializer = utils.TrainStateInitializer(
      optimizer_def=None, init_fn=model.get_initial_variables,
      input_shapes=shapes, input_types=types, partitioner=partitioner)
  return initializer.from_scratch(jax.random.PRNGKey(seed)), partitioner


@functools.lru_cache(maxsize=None)
def random_tokens(seed: int, batch: int, length: int, vocab: int, pad_from=None):
  """int32 [batch, length] in [2, vocab); row b padded (0) from pad_from[b]."""
  tokens = jax.random.randint(jax.random.PRNGKey(seed), (batch, length), 2, vocab)
  if pad_from is not None:
    keep = jnp.arange(length)[None, :] < jnp.asarray(pad_from)[:, None]
    tokens = jnp.where(keep, tokens, 0)
  return tokens.astype(jnp.int32)
