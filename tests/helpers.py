"""Small fake models and a runner for protocol tests."""


import jax
import jax.numpy as jnp
import numpy as np

EOS_ID = 1
NEG = -1e7  # T5X tests' "effectively -inf" logit.


def constant_model(logits):
  """tokens_to_logits returning fixed logits [rows, V] and an empty cache."""
  logits = np.asarray(logits, np.float32)

  def tokens_to_logits(state):
    del state
    return jnp.asarray(logits), {}

  return tokens_to_logits


def run(mode, fn, *args, traced=(), **kwargs):
  """Calls fn(*args, **kwargs) in one of the RUN_MODES.

  In `outer_jit` mode the positional args and the keyword args named in
  `traced` become traced arguments of a user's jax.jit.
  """
  if mode == "library_jit":
    return fn(*args, **kwargs)
  if mode == "no_jit":
    with jax.disable_jit():
      return fn(*args, **kwargs)
  assert mode == "outer_jit", mode
  traced_kwargs = {k: kwargs.pop(k) for k in traced}

  @jax.jit
  def wrapped(args, traced_kwargs):
    return fn(*args, **traced_kwargs, **kwargs)

  return wrapped(args, traced_kwargs)
