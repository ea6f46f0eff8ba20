"""Saving and loading a model: msgpack of the Flax tree + its config as JSON.

A model directory holds `params.msgpack` (`flax.serialization` of the
parameter tree, arrays as stored) and `config.json` (the `T5Config` fields).
No T5X is needed to read it.

  >>> import tempfile, jax
  >>> from arithmetic_decoding.models import EncoderDecoderModel, preset
  >>> model = EncoderDecoderModel(preset("tiny"))
  >>> params = model.init(jax.random.PRNGKey(0))
  >>> path = tempfile.mkdtemp()
  >>> save_model(path, model.config, params)
  >>> config, loaded = load_model(path)
  >>> config == model.config
  True
  >>> all(jax.tree.leaves(jax.tree.map(lambda a, b: (a == b).all(), params,
  ...                                  loaded)))
  True
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Tuple

import jax
import numpy as np
from flax import serialization

from arithmetic_decoding.models.config import T5Config

PyTree = Any


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
  """Writes `path` so that a kill at any moment leaves the old or new file."""
  tmp = path.with_name(path.name + ".tmp")
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def save_tree(path: pathlib.Path | str, tree: PyTree) -> None:
  """Any pytree of arrays -> msgpack file (atomically)."""
  host = jax.tree.map(np.asarray, tree)
  _atomic_write(pathlib.Path(path), serialization.msgpack_serialize(
      serialization.to_state_dict(host)))


def load_tree(path: pathlib.Path | str, like: PyTree = None) -> PyTree:
  """msgpack file -> nested dict of numpy arrays (restored into `like`)."""
  state = serialization.msgpack_restore(pathlib.Path(path).read_bytes())
  return state if like is None else serialization.from_state_dict(like, state)


def save_model(directory: pathlib.Path | str, config: T5Config,
               params: PyTree) -> None:
  """Writes `config.json` and `params.msgpack` into `directory`."""
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  _atomic_write(directory / "config.json",
                json.dumps(dataclasses.asdict(config), indent=1).encode())
  save_tree(directory / "params.msgpack", params)


def load_model(directory: pathlib.Path | str) -> Tuple[T5Config, PyTree]:
  """(config, params) from a directory written by `save_model`."""
  directory = pathlib.Path(directory)
  config = T5Config(**json.loads((directory / "config.json").read_text()))
  return config, load_tree(directory / "params.msgpack")
