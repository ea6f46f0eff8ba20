"""The English->French Bible corpus: verses, book splits, training pairs.

The corpus (`assets/bible_en_fr/verses.tsv.gz`, public domain) has four
translations of every verse: two English (`en_web`, `en_kjv`) and two French
(`fr_segond1910`, `fr_darby`). Splits are whole books, so no held-out verse
has a near copy in training (parallel books all sit in train):

  >>> sorted(SPLITS)
  ['dev', 'test']
  >>> len(load_split("test")), len(load_split("dev"))
  (345, 224)
  >>> verse = load_split("test")[0]
  >>> verse.name, verse.source[:30]
  ('Ruth 1:1', 'It happened in the days when t')
  >>> len(verse.references)
  2
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import pathlib
from typing import Dict, FrozenSet, List, Tuple

CORPUS = (pathlib.Path(__file__).resolve().parent.parent / "assets" /
          "bible_en_fr" / "verses.tsv.gz")
SOURCE_COLUMNS = ("en_web", "en_kjv")  # en_web is the modern-English source.
TARGET_COLUMNS = ("fr_segond1910", "fr_darby")

# Held-out books by number (Protestant canon, 1 = Genesis). Everything else
# trains. Test: Ruth, Jonah, Philippians, James (345 verses). Dev: Joel,
# Titus, 1 Peter (224 verses).
SPLITS: Dict[str, FrozenSet[int]] = {
    "test": frozenset({8, 32, 50, 59}),
    "dev": frozenset({29, 56, 60}),
}


@dataclasses.dataclass(frozen=True)
class Verse:
  """One aligned verse.

  Attributes:
    name: "Book chapter:verse", e.g. "Ruth 1:1".
    book: book number (1 = Genesis ... 66 = Revelation).
    sources: the English texts, in `SOURCE_COLUMNS` order.
    references: the French texts, in `TARGET_COLUMNS` order.
  """

  name: str
  book: int
  sources: Tuple[str, ...]
  references: Tuple[str, ...]

  @property
  def source(self) -> str:
    """The modern English text (World English Bible): what we translate."""
    return self.sources[0]


@functools.lru_cache(maxsize=1)
def load_verses() -> Tuple[Verse, ...]:
  """All 31,102 verses in canonical order."""
  with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  return tuple(
      Verse(name=f"{r['book_name']} {r['chapter']}:{r['verse']}",
            book=int(r["book"]),
            sources=tuple(r[c] for c in SOURCE_COLUMNS),
            references=tuple(r[c] for c in TARGET_COLUMNS)) for r in rows)


def split_of(book: int) -> str:
  """'test', 'dev' or 'train' for a book number."""
  for name, books in SPLITS.items():
    if book in books:
      return name
  return "train"


def load_split(split: str) -> List[Verse]:
  """The verses of 'train', 'dev' or 'test', in canonical order."""
  if split not in ("train", "dev", "test"):
    raise ValueError(f"split must be 'train', 'dev' or 'test'; got {split!r}.")
  return [v for v in load_verses() if split_of(v.book) == split]


def training_pairs(verses: List[Verse]) -> List[Tuple[str, str]]:
  """Every (English, French) combination of each verse: 4 pairs a verse."""
  return [(s, t) for v in verses for s in v.sources for t in v.references]
