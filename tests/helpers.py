"""Small fake models, a runner for protocol tests, and a teacher-forced
log-prob reference for the encoder-decoder."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def teacher_forced_log_probs(model, params, encoder_tokens, decodes,
                             eos_id=EOS_ID, temperature=1.0):
  """Log-prob of each sequence [B, N, L] from one full pass of `model`
  (of the tempered distributions softmax(logits / temperature)).

  Counts tokens up to and including the first EOS (padding after it is
  ignored), as the decode functions report them. One compiled program per
  model and shape (run op by op, mT5-small's pass compiles ~200 small
  programs).
  """
  key = (id(model), eos_id)
  if key not in _TEACHER_FORCED:
    _TEACHER_FORCED[key] = (model, jax.jit(
        lambda p, e, d, t: _teacher_forced(model, p, e, d, t, eos_id)))
  fn = _TEACHER_FORCED[key][1]
  return np.asarray(fn(params, jnp.asarray(encoder_tokens),
                       jnp.asarray(decodes), jnp.float32(temperature)))


_TEACHER_FORCED = {}  # (id(model), eos_id) -> (model, its jitted pass)


def _teacher_forced(model, params, encoder_tokens, decodes, temperature,
                    eos_id=EOS_ID):
  """[B, N, L] decodes -> [B, N] summed log-probs up to the first EOS."""
  b, n, length = decodes.shape
  flat = decodes.reshape(b * n, length)
  decoder_inputs = jnp.pad(flat, ((0, 0), (1, 0)))[:, :-1]
  logits = model.logits(params, jnp.repeat(encoder_tokens, n, axis=0),
                        decoder_inputs)
  # [B*N, L, V] at [B*N, L] -> [B*N, L]
  token_lp = jnp.take_along_axis(jax.nn.log_softmax(logits / temperature),
                                 flat[:, :, None], axis=-1)[:, :, 0]
  before_eos = (jnp.cumsum(flat == eos_id, axis=1) - (flat == eos_id)) == 0
  return jnp.sum(jnp.where(before_eos, token_lp, 0.0), axis=1).reshape(b, n)


def one_fast(values, fast):
  """Test parameters: `fast` in the fast tier (`make test-fast`), the
  others in the slow tier only.

  >>> [getattr(p, "marks", ()) and "slow" or p for p in one_fast("ab", "a")]
  ['a', 'slow']
  """
  return [v if v == fast else pytest.param(v, marks=pytest.mark.slow)
          for v in values]
