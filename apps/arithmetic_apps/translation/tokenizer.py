"""The SentencePiece vocabulary of the English->French model.

One unigram model over English and French training text, with T5's special
ids (0 padding / decoder BOS, 1 EOS, 2 unknown, no BOS piece), so the same
file loads in T5X as `seqio.SentencePieceVocabulary(path)`.

  >>> tok = Tokenizer.load()
  >>> tok.vocab_size
  8000
  >>> ids = tok.encode("In the beginning God created the heavens.")
  >>> ids[-1] == EOS_ID, tok.decode(ids)
  (True, 'In the beginning God created the heavens.')
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
from typing import Iterable, List, Sequence

import numpy as np

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
ASSETS = pathlib.Path(__file__).resolve().parent.parent / "assets" / "en_fr"
SPM_PATH = ASSETS / "spm.model"


def train_sentencepiece(texts: Iterable[str], vocab_size: int = 8000,
                        seed_sentences: int = 200_000) -> bytes:
  """Trains a unigram SentencePiece model; returns its serialized bytes."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(list(texts)), model_writer=model,
      vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
      pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
      input_sentence_size=seed_sentences, shuffle_input_sentence=False,
      num_threads=2, minloglevel=2)
  return model.getvalue()


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """Text <-> ids. `encode` appends EOS; `decode` stops at it."""

  processor: object

  @classmethod
  def load(cls, path: pathlib.Path | str = SPM_PATH) -> "Tokenizer":
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    return cls(spm.SentencePieceProcessor(model_file=str(path)))

  @property
  def vocab_size(self) -> int:
    return self.processor.get_piece_size()

  def encode(self, text: str) -> List[int]:
    return list(self.processor.encode(text)) + [EOS_ID]

  def decode(self, ids: Sequence[int]) -> str:
    """Ids up to the first EOS (padding 0 dropped) -> text."""
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    return self.processor.decode([i for i in ids if i != PAD_ID])

  def encode_batch(self, texts: Sequence[str], length: int) -> np.ndarray:
    """Texts -> int32 [len(texts), length], 0-padded; too long raises."""
    out = np.zeros((len(texts), length), np.int32)
    for row, text in enumerate(texts):
      ids = self.encode(text)
      if len(ids) > length:
        raise ValueError(f"text {row} has {len(ids)} tokens with EOS; length "
                         f"is {length}: {text[:60]!r}...")
      out[row, :len(ids)] = ids
    return out
