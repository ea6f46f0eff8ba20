"""SeqIO tasks over tests/data/bible_en_fr_infer.tsv for the `t5x infer` runs.

Imported by the runs' gin files (`import t5x_tasks`), with this folder on
PYTHONPATH. The vocabulary is the embedded model's SentencePiece file, loaded
by seqio exactly as a T5X user would load it.
"""

import pathlib

import seqio
import tensorflow as tf

from arithmetic_apps.translation.tokenizer import SPM_PATH

TSV = pathlib.Path(__file__).resolve().parents[1] / "data" / "bible_en_fr_infer.tsv"
VOCABULARY = seqio.SentencePieceVocabulary(str(SPM_PATH))
# One task for both model kinds: T5X's feature converter decides the layout
# (EncDecFeatureConverter, or DecoderFeatureConverter's prefix LM).
TASK = "bible_en_fr_infer"


def parse_tsv(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """'english<TAB>french' lines -> {"inputs", "targets"}."""
  def parse(line):
    inputs, targets = tf.io.decode_csv(line, record_defaults=["", ""],
                                       field_delim="\t", use_quote_delim=False)
    return {"inputs": inputs, "targets": targets}
  return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def register(name: str = TASK) -> None:
  if name in seqio.TaskRegistry.names():
    return
  seqio.TaskRegistry.add(
      name,
      source=seqio.TextLineDataSource({"test": str(TSV)}),
      preprocessors=[parse_tsv, seqio.preprocessors.tokenize,
                     seqio.CacheDatasetPlaceholder(),
                     seqio.preprocessors.append_eos_after_trim],
      output_features={
          "inputs": seqio.Feature(VOCABULARY, add_eos=True),
          "targets": seqio.Feature(VOCABULARY, add_eos=True)})


register()
