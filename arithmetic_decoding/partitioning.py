"""Partitioning: logical axis names -> the mesh axes `data` and `model`.

One table, `LOGICAL_AXIS_RULES`, maps the model's logical axis names to the
mesh axes (as T5X's `standard_logical_axis_rules`): the samples (rows =
batch x num_decodes) go over `data`; heads, the feed-forward width and the
vocabulary over `model`; everything else is replicated. The helpers place
parameters and host arrays on a mesh from those names, with one process or
several (`jax.distributed`). Sharded decoding (`sharding`) builds on them.

  >>> dict(LOGICAL_AXIS_RULES)["heads"], dict(LOGICAL_AXIS_RULES)["batch"]
  ('model', 'data')
"""

from __future__ import annotations

import contextlib
from typing import Any, Tuple

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

PyTree = Any

# Logical axis -> mesh axis (None: replicated). The only sharding table.
LOGICAL_AXIS_RULES: Tuple[Tuple[str, Any], ...] = (
    ("batch", "data"),
    ("length", None),
    ("embed", None),
    ("heads", "model"),
    ("kv", None),
    # Key/value heads of grouped-query attention (often fewer than the model
    # axis: Gemma 3 270M has one): replicated.
    ("kv_heads", None),
    ("mlp", "model"),
    ("vocab", "model"),
    ("relpos_buckets", None),
    ("cache_batch", "data"),
    ("cache_length", None),
    ("cache_heads", "model"),
    ("cache_kv", None),
)


def rules_without_data() -> Tuple[Tuple[str, Any], ...]:
  """The rules inside a shard_map that is manual over `data`."""
  return tuple((name, None if axis == "data" else axis)
               for name, axis in LOGICAL_AXIS_RULES)


@contextlib.contextmanager
def logical_rules(mesh: Mesh, rules=LOGICAL_AXIS_RULES):
  """Activates `rules` and `mesh` for the model's logical constraints."""
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
    yield


def logical_to_sharding(logical_specs: PyTree, mesh: Mesh) -> PyTree:
  """A tree of logical PartitionSpecs -> NamedShardings on `mesh`."""
  return nn.logical_to_mesh_sharding(logical_specs, mesh, LOGICAL_AXIS_RULES)


def param_shardings(model, mesh: Mesh) -> PyTree:
  """NamedShardings of `model`'s parameters (from their logical axes)."""
  return logical_to_sharding(model.param_logical_axes(), mesh)


def to_global(x, sharding: NamedSharding) -> jax.Array:
  """Host array (the same on every process) -> global array on `sharding`.

  Works with one process or many (`jax.distributed`): each process fills
  only the shards of its own devices.
  """
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def shard_params(params: PyTree, model, mesh: Mesh) -> PyTree:
  """Places parameters (identical on every process) on their shardings."""
  return jax.tree_util.tree_map(to_global, params,
                                param_shardings(model, mesh))
