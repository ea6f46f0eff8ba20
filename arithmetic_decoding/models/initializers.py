"""Random parameters in one compiled program, with the bits of op-by-op init.

Flax's `module.init` run eagerly runs the whole forward pass op by op: every
operation at a new shape is a program of its own to compile. Run under
`jax.jit` it is one program, but XLA then fuses `normal draw * stddev` into
the draw's last arithmetic, and some parameters move by one float32 ulp.
Random parameters are what the project's pinned samples, its trained
translator and its tests start from, so the two must agree bit for bit.

`normal(stddev)` is flax's normal initializer with an optimization barrier
between the draw and the scale: inside a jit the draw compiles as it does
on its own, the multiply stays one rounding, and the parameters equal the
eager ones exactly (on XLA:CPU, where `tests/test_models.py` compares them
with flax's own initializer for the embedded translator's T5
configuration and both decoder families):

  >>> import jax, jax.numpy as jnp, numpy as np
  >>> key = jax.random.PRNGKey(0)
  >>> eager = jax.random.normal(key, (3, 5)) * jnp.array(0.02, jnp.float32)
  >>> fenced = jax.jit(normal(0.02), static_argnums=1)(key, (3, 5))
  >>> eager.tobytes() == np.asarray(fenced).tobytes()
  True

`params(module, rng, *args)` is `module.init(rng, *args)["params"]`,
unboxed, compiled once per (module, logical axis rules, argument shapes) in
a process: the models' `init` methods call it.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax


def normal(stddev: float):
  """Flax's `nn.initializers.normal(stddev)`, its draw fenced from its scale.

  Returns init(key, shape, dtype=float32) -> [*shape] dtype.
  """
  def init(key, shape, dtype=jnp.float32):
    draw = lax.optimization_barrier(jax.random.normal(key, shape, dtype))
    return draw * jnp.array(stddev, dtype)
  return init


@functools.partial(jax.jit, static_argnums=(0, 1))
def _params(module: nn.Module, rules, rng: jax.Array, *args) -> Any:
  with nn.logical_axis_rules(rules):
    return nn.unbox(module.init(rng, *args)["params"])


def params(module: nn.Module, rng: jax.Array, *args) -> Any:
  """The unboxed parameters `module.init(rng, *args)` makes, in one program.

  `module` is static (a flax module of hashable fields; equal modules share
  the compiled program), and so are the logical axis rules in force (the
  forward pass init runs constrains activations by them); `args` are the
  example inputs init runs on.
  """
  return _params(module, tuple(nn.get_logical_axis_rules()), rng, *args)
