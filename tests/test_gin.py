"""The gin binding that swaps T5X's decode function for arithmetic_sample.

T5X is not installable from PyPI, so a stand-in `t5x.models` module with the
same names is put on the path; the shipped gin file is parsed unchanged and
the bound decode function is called as T5X's EncoderDecoderModel calls it.
"""

import pathlib
import sys
import textwrap

import gin
import jax
import numpy as np
import pytest

from arithmetic_decoding import arithmetic_sample
from arithmetic_decoding.toy import EOS_ID, ToyLanguageModel

GIN_FILE = pathlib.Path(__file__).resolve().parents[1] / "gin" / "arithmetic_sample.gin"

STAND_IN_MODELS = textwrap.dedent('''
    class EncoderDecoderModel:
      """Stand-in with T5X's constructor argument and decode call."""

      def __init__(self, decode_fn=None):
        self._decode_fn = decode_fn

      def predict_batch_with_aux(self, batch, rng=None, num_decodes=1,
                                 return_all_decodes=False):
        decodes, scores = self._decode_fn(
            inputs=batch["decoder_prompt_inputs"], cache=batch["cache"],
            tokens_to_logits=batch["tokens_to_logits"], eos_id=batch["eos_id"],
            num_decodes=num_decodes, cache_offset=0, decode_rng=rng)
        if return_all_decodes:
          return decodes, {"scores": scores}
        return decodes[:, -1, :], {"scores": scores[:, -1]}
''')


@pytest.fixture
def t5x_stand_in(tmp_path, monkeypatch):
  package = tmp_path / "t5x"
  package.mkdir()
  (package / "__init__.py").write_text("")
  (package / "models.py").write_text(STAND_IN_MODELS)
  monkeypatch.syspath_prepend(str(tmp_path))
  for name in [m for m in sys.modules if m == "t5x" or m.startswith("t5x.")]:
    monkeypatch.delitem(sys.modules, name)
  gin.clear_config()
  yield
  gin.clear_config()


def test_gin_file_swaps_the_decode_function(t5x_stand_in):
  gin.parse_config_files_and_bindings(
      [str(GIN_FILE)], ["MODEL = @models.EncoderDecoderModel()", "NUM_DECODES = 4"])
  model = gin.query_parameter("%MODEL").scoped_configurable_fn()
  toy = ToyLanguageModel()
  batch = dict(decoder_prompt_inputs=np.zeros((2, 4), np.int32),
               cache=toy.init_cache([0, 1]), tokens_to_logits=toy.tokens_to_logits,
               eos_id=EOS_ID)
  rng = jax.random.PRNGKey(3)
  decodes, aux = model.predict_batch_with_aux(batch, rng=rng)
  # The gin bindings (topk=0, shifted lattice, 4 decodes, all returned) apply.
  expected, scores = arithmetic_sample(
      batch["decoder_prompt_inputs"], batch["cache"], toy.tokens_to_logits, EOS_ID,
      rng, num_decodes=4, topk=0, code_scheme="shifted_lattice")
  np.testing.assert_array_equal(decodes, expected)
  np.testing.assert_allclose(aux["scores"], scores)
  assert decodes.shape == (2, 4, 4)
  assert len({tuple(s) for s in np.asarray(decodes[0])}) > 1  # not greedy
