"""T5X's checkpoint format without T5X (models.t5x_checkpoint): round trip,
the spec layout T5X writes on gs://, and the errors. The same code against
real T5X: tests/integration/test_t5x_checkpoint.py."""

import jax
import numpy as np
import pytest
from flax import serialization

from arithmetic_decoding.models import EncoderDecoderModel, preset
from arithmetic_decoding.models import t5x_checkpoint as ckpt

CONFIG = preset("tiny", relative_attention_num_buckets=32,
                relative_attention_max_distance=128)


def _params():
  return EncoderDecoderModel(CONFIG).init(jax.random.PRNGKey(0))


def test_round_trip_is_bitwise(tmp_path):
  params = _params()
  path = ckpt.save_t5x_checkpoint(str(tmp_path / "checkpoint_7"), CONFIG,
                                  params, step=7)
  config, back = ckpt.load_t5x_checkpoint(path, expected=CONFIG)
  assert config == CONFIG
  assert all(jax.tree.leaves(jax.tree.map(
      lambda a, b: a.dtype == b.dtype and np.array_equal(a, b), params, back)))
  # The `checkpoint` file itself may be given, and bfloat16 casting works.
  config16, back16 = ckpt.load_t5x_checkpoint(path + "/checkpoint",
                                              dtype="bfloat16")
  assert config16.dtype == "bfloat16"
  assert back16["logits_dense"].dtype == np.dtype("bfloat16")


def test_reads_the_spec_layout_t5x_writes_on_gcs(tmp_path):
  # On gs:// T5X writes a placeholder bucket and the array path at the top
  # level of the spec; the reader resolves it against the directory given.
  path = ckpt.save_t5x_checkpoint(str(tmp_path / "checkpoint_0"), CONFIG,
                                  _params())
  index_file = tmp_path / "checkpoint_0" / "checkpoint"
  index = serialization.msgpack_restore(index_file.read_bytes())
  def to_gcs(tree):
    if "driver" in tree:
      relative = tree["kvstore"]["path"]
      return dict(tree, path=relative,
                  kvstore={"driver": "gcs", "bucket": "t5x-dummy-bucket"})
    return {k: to_gcs(v) for k, v in tree.items()}
  index["optimizer"]["target"] = to_gcs(index["optimizer"]["target"])
  index_file.write_bytes(serialization.msgpack_serialize(index))
  flat = ckpt.read_t5x_params(path)
  expected = ckpt.to_t5x_params(CONFIG, _params())
  assert set(flat) == set(expected)
  for name, array in expected.items():
    np.testing.assert_array_equal(flat[name], array)


def test_gcs_paths_map_to_the_gcs_kvstore():
  assert ckpt._kvstore("gs://t5-data/pretrained_models/t5x/mt5_xxl/"  # pylint: disable=protected-access
                       "checkpoint_1000000") == {
      "driver": "gcs", "bucket": "t5-data",
      "path": "pretrained_models/t5x/mt5_xxl/checkpoint_1000000/"}


def test_errors_name_the_problem(tmp_path):
  with pytest.raises(FileNotFoundError, match="no T5X checkpoint index"):
    ckpt.read_t5x_params(str(tmp_path))
  with pytest.raises(ValueError, match="expected mT5-small, found d_model 32"):
    ckpt.check_architecture(CONFIG, "small")
  with pytest.raises(ValueError, match="32 relative position buckets"):
    ckpt.to_t5x_params(preset("tiny"), EncoderDecoderModel(
        preset("tiny")).init(jax.random.PRNGKey(0)))
  flat = ckpt.to_t5x_params(CONFIG, _params())
  flat["encoder/layers_0/mlp/wi/kernel"] = flat.pop(
      "encoder/layers_0/mlp/wi_0/kernel")
  with pytest.raises(ValueError, match="T5.1.0 checkpoints"):
    ckpt.from_t5x_params(flat)
  with pytest.raises(ValueError, match="dtype must be"):
    ckpt.load_t5x_checkpoint(str(tmp_path), dtype="float16")
