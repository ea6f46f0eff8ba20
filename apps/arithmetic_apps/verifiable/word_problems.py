r"""Arithmetic word problems from a seeded generator, with an exact checker.

Small models are neither hopeless nor perfect at these: one or two
operations on numbers below 20, phrased in words. The fixed test set is
`make_problems(100, seed=0)` (committed as
`assets/word_problems/test.jsonl`; a test checks that the generator still
makes it).

  >>> p = make_problems(2, seed=0)[0]
  >>> sorted(p)
  ['answer', 'id', 'question']
  >>> extract_answer(" 7 + 5 = 12\nQuestion: 3 + 4?")
  12
  >>> extract_answer("No idea") is None
  True
  >>> check("Tom now has 9 + 3 = 12 apples.", 12)
  True

Answer extraction: the completion is cut at the first stop sequence
(`STOP_SEQUENCES`: the end of the answer line, as the worked examples in
the prompt show it), then the LAST integer in what is left is the answer (a
model that works its way to the result states it last: "7 + 5 = 12");
commas inside numbers are dropped; no integer means no answer (wrong).
"""

from __future__ import annotations

import random
import re
from typing import Dict, List, Optional

NAMES = ["Tom", "Anna", "Sam", "Lena", "Omar", "Mia", "Ravi", "Zoe"]
THINGS = ["apples", "books", "coins", "stickers", "marbles", "pencils",
          "cookies", "shells"]
STOP_SEQUENCES = ("\n",)
# Worked examples a prompt may start with (from seed 1000, not the test
# set's seed); none by default: these small models copy the examples'
# numbers more than they learn from them (measured: SmolLM2 at T = 0.4
# drops from 16 % to 2 % with 3 shots).
SHOTS = 0

_TEMPLATES = (
    ("{n} has {a} {t}. {n} gets {b} more {t}. How many {t} does {n} have "
     "now?", lambda a, b, c: a + b),
    ("{n} has {a} {t} and gives {b} of them away. How many {t} does {n} have "
     "left?", lambda a, b, c: a - b),
    ("{n} buys {a} bags with {b} {t} in each bag. How many {t} does {n} buy "
     "in all?", lambda a, b, c: a * b),
    ("{n} has {a} {t}, finds {b} more, then loses {c}. How many {t} does {n} "
     "have now?", lambda a, b, c: a + b - c),
    ("{n} has {a} {t}. A friend has {b} more {t} than {n}. How many {t} does "
     "the friend have?", lambda a, b, c: a + b),
)


def make_problems(count: int, seed: int = 0) -> List[Dict]:
  """`count` problems from `seed`: dicts with id, question, answer (int)."""
  if not isinstance(count, int) or count < 1:
    raise ValueError(f"count must be an int >= 1; got {count!r}.")
  rng = random.Random(seed)
  out = []
  for i in range(count):
    template, answer = _TEMPLATES[rng.randrange(len(_TEMPLATES))]
    a, b = rng.randint(3, 12), rng.randint(2, 9)
    if answer(5, 3, 0) == 2:  # subtraction: keep the result positive
      a = max(a, b + 1)
    c = rng.randint(1, min(a + b - 1, 5))
    if "{a} bags" in template:
      a = rng.randint(2, 9)
    n, t = rng.choice(NAMES), rng.choice(THINGS)
    out.append(dict(id=i, question=template.format(n=n, t=t, a=a, b=b, c=c),
                    answer=int(answer(a, b, c))))
  return out


def prompt(question: str, shots: int = SHOTS) -> str:
  """The user turn (chat models) or the text (base models): `shots` solved
  examples, then the question; the answer is expected on the same line.

  >>> print(prompt("Ann has 2 pens. Ann gets 3 more pens. How many pens "
  ...              "does Ann have now?", shots=1))
  Question: Anna has 4 shells, finds 8 more, then loses 3. How many shells does Anna have now?
  Answer: 9
  <BLANKLINE>
  Question: Ann has 2 pens. Ann gets 3 more pens. How many pens does Ann have now?
  Answer with the number only.
  Answer:
  """
  parts = [f"Question: {p['question']}\nAnswer: {p['answer']}\n\n"
           for p in make_problems(shots, seed=1000)] if shots else []
  return ("".join(parts) + f"Question: {question}\n"
          "Answer with the number only.\nAnswer:")


def cut(completion: str) -> str:
  """The completion up to the first stop sequence."""
  ends = [completion.find(s) for s in STOP_SEQUENCES if s in completion]
  return completion[:min(ends)] if ends else completion


def extract_answer(completion: str) -> Optional[int]:
  """The last integer of the cut completion, or None."""
  numbers = re.findall(r"-?\d[\d,]*", cut(completion))
  if not numbers:
    return None
  return int(numbers[-1].replace(",", "").strip(",") or 0)


def check(completion: str, answer: int) -> bool:
  """Exactly right."""
  return extract_answer(completion) == answer
