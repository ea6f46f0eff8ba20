"""Every generated block of README.md and docs/ equals what its committed
records give (`scripts/doc_numbers.py`): a number is written by one
command from its record, never typed twice."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import doc_numbers  # noqa: E402


def test_generated_numbers_equal_their_records():
  stale = [str(page.relative_to(ROOT)) for page in doc_numbers.PAGES
           if doc_numbers.render(page.read_text()) != page.read_text()]
  assert not stale, (f"{stale} differ from their records: run python "
                     "scripts/doc_numbers.py")


def test_every_block_names_a_known_generator():
  names = set()
  for page in doc_numbers.PAGES:
    names |= {m.group(2) for m in doc_numbers._BLOCK.finditer(  # pylint: disable=protected-access
        page.read_text())}
  assert names and names <= set(doc_numbers.BLOCKS)
  assert "readme-table" in names
