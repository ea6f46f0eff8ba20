"""The verifiable tasks and the pass@k / GRPO estimators, checked exactly.

- k-sets of a lattice group are k-point shifted lattices (from the codes
  `group_codes` makes); pass@k from sets equals brute force.
- Chen et al.'s estimator equals the exact average over all k-subsets.
- `group_mean_variance` is unbiased: its average over every pair of
  repeats from a finite population of equally likely groups equals the
  population variance exactly.
- The word-problem generator makes the committed test set; answers are
  extracted as documented.
- Every HumanEval canonical solution passes in the sandbox (both prompt
  styles) and a wrong body fails.
"""

import itertools
import json
import os
import types

import numpy as np
import pytest

from arithmetic_apps.sandbox import Limits, run_all
from arithmetic_apps.verifiable import estimators as est
from arithmetic_apps.verifiable import humaneval, word_problems
from arithmetic_decoding.rollouts import group_codes

ASSET = os.path.join(os.path.dirname(word_problems.__file__), "..", "assets",
                     "word_problems", "test.jsonl")


@pytest.mark.parametrize("g,k", [(64, 1), (64, 4), (64, 16), (16, 8)])
def test_k_sets_of_a_lattice_are_lattices(g, k):
  codes = group_codes(7, 3, [11, 12], g)  # [2, G]
  for row in codes:
    for s in est.k_sets(g, k):
      points = np.sort(row[s])
      assert len(points) == k
      if k > 1:
        np.testing.assert_allclose(np.diff(points), 1.0 / k, atol=1e-6)
  assert sorted(est.k_sets(g, k).ravel().tolist()) == list(range(g))


def test_pass_at_k_sets_is_brute_force():
  rng = np.random.default_rng(0)
  correct = rng.random((5, 2, 16)) < 0.2
  for k in (1, 2, 4, 8, 16):
    got = est.pass_at_k_sets(correct, k)
    m = 16 // k
    want = [np.mean([correct[p, r, [s + m * i for i in range(k)]].any()
                     for r in range(2) for s in range(m)]) for p in range(5)]
    np.testing.assert_allclose(got, want)


def test_unbiased_estimator_is_the_average_over_all_subsets():
  outcomes = [1, 0, 0, 1, 0, 0, 0]
  n, c = len(outcomes), sum(outcomes)
  for k in range(1, n + 1):
    subsets = list(itertools.combinations(outcomes, k))
    exact = np.mean([any(s) for s in subsets])
    assert est.pass_at_k_unbiased(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_group_mean_variance_is_unbiased_by_enumeration():
  # A population of equally likely repeats (each a [1, G] reward row); the
  # estimator averaged over every ordered pair of independent repeats must
  # equal the variance of a g-group's mean under the same population.
  population = [np.array(x, float) for x in
                ([1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0])]
  g = 2
  sets = est.k_sets(4, g)
  means = [row[s].mean() for row in population for s in sets]
  true_var = np.var(means)  # each (repeat, set) is one equally likely draw
  estimates = [est.group_mean_variance(np.stack([a, b])[None], g)[0]
               for a in population for b in population]
  assert np.mean(estimates) == pytest.approx(true_var, abs=1e-12)


def test_zero_advantage_and_majority():
  rewards = np.array([[[1, 1, 0, 1, 1, 1, 1, 1]]], float)
  # sets {0,4} {1,5} {2,6} {3,7}: only {2, 6} is mixed.
  assert est.zero_advantage_fraction(rewards, 2).tolist() == [0.75]
  answers = np.array([[[3, 4, 4, None]]], object)
  assert est.majority_at_k_sets(answers, [4], 4).tolist() == [1.0]
  assert est.majority_at_k_sets(answers, [4], 1).tolist() == [0.5]
  assert est.samples_to_reach({1: 0.1, 2: 0.2, 4: 0.4}, 0.3) == \
      pytest.approx(2 ** 1.5)
  assert est.samples_to_reach({1: 0.1, 2: 0.2}, 0.9) is None


def test_word_problems_are_the_committed_test_set():
  with open(ASSET) as f:
    committed = [json.loads(line) for line in f]
  assert word_problems.make_problems(100, seed=0) == committed
  for p in committed:
    assert p["answer"] >= 0
  assert word_problems.extract_answer(" 4 + 7 = 11 pencils.\nQuestion") == 11
  assert word_problems.extract_answer("1,200 apples") == 1200
  assert word_problems.extract_answer("\n12") is None  # the answer line is empty
  assert word_problems.check("Sam has 6 + 5 = 11 shells.", 11)
  assert not word_problems.check("Sam has 6 + 5 = 11 shells, then 2", 11)
  with pytest.raises(ValueError, match="count"):
    word_problems.make_problems(0)


def test_humaneval_canonical_solutions_pass_in_the_sandbox():
  problems = humaneval.load_problems()
  assert len(problems) == 164
  limits = Limits(wall_seconds=10, cpu_seconds=5)
  right = [humaneval.program(p, p["canonical_solution"]) for p in problems]
  # As a chat model answers: the whole function in a fenced block.
  fenced = [humaneval.program(p, "Here:\n```python\n" + p["prompt"] +
                              p["canonical_solution"] + "```\nDone.",
                              chat=True) for p in problems[:40]]
  wrong = [humaneval.program(p, "    return None\n") for p in problems[:20]]
  outcomes = run_all(right + fenced + wrong, limits, workers=2, first_slot=40)
  assert [o.status for o in outcomes[:164 + 40]] == ["passed"] * (164 + 40)
  assert not any(o.passed for o in outcomes[164 + 40:])


def test_humaneval_prompts_and_cuts():
  p = {"prompt": "import math\n\n\ndef f(x):\n    \"\"\"doc\"\"\"\n",
       "entry_point": "f", "test": "def check(c):\n    assert c(2) == 3\n"}
  body = humaneval.program(p, "    return x + 1\n\ndef g():\n  pass")
  assert body == (p["prompt"] + "    return x + 1\n\n\n" + p["test"] +
                  "\n\ncheck(f)\n")
  assert humaneval.cut("    return 1\n```\n") == "    return 1\n"
  assert humaneval.cut("    if x:\n        return 1\n#c") == \
      "    if x:\n        return 1\n"
  assert humaneval.prompt_text(p) == p["prompt"]  # no model: the prompt
  chat = types.SimpleNamespace(
      vocab=types.SimpleNamespace(chat_template="{{ messages }}"),
      chat_prompt=lambda user: f"<user>{user}</user><assistant>")
  text = humaneval.prompt_text(p, chat)
  assert text == (f"<user>{humaneval.REQUEST}\n\n```python\n"
                  f"{p['prompt'].rstrip()}\n```</user><assistant>")
  full = humaneval.program(p, "```python\ndef f(x):\n    return x + 1\n```",
                           chat=True)
  assert full.startswith("import math\n\n\ndef f(x):\n    return x + 1\n")
  body_only = humaneval.program(p, "    return x + 1", chat=True)
  assert body_only.startswith(p["prompt"] + "    return x + 1\n")
