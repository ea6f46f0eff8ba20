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
  styles) and a wrong body fails (slow; the fast tier runs six); the
  hostile solutions are in test_scoring.py.
"""

import itertools
import json
import os
import types

import numpy as np
import pytest

import sandbox_host
from arithmetic_apps import sandbox
from arithmetic_apps.verifiable import estimators as est
from arithmetic_apps.verifiable import humaneval, word_problems
from arithmetic_decoding.rollouts import group_codes
from sandbox_host import needs_sandbox

SLOT = sandbox_host.slot(3)
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


@pytest.mark.slow
@needs_sandbox
def test_every_humaneval_canonical_solution_passes_and_wrong_bodies_fail():
  problems = humaneval.load_problems()
  assert len(problems) == 164
  right = [p["canonical_solution"] for p in problems]
  # As a chat model answers: the whole function in a fenced block.
  fenced = ["Here:\n```python\n" + p["prompt"] + p["canonical_solution"] +
            "```\nDone." for p in problems[:40]]
  verdicts = humaneval.score_all(problems, right, first_slot=SLOT)
  verdicts += humaneval.score_all(problems[:40], fenced, chat=True,
                                  first_slot=SLOT)
  assert [(v.status, v.reason) for v in verdicts] == [("passed", "")] * 204
  assert {v.isolation for v in verdicts} == {sandbox.isolation()}
  wrong = humaneval.score_all(problems, ["    return None\n"] * 164,
                              first_slot=SLOT)
  assert not any(v.passed for v in wrong)
  assert all(v.status == "failed" and v.calls >= 1 for v in wrong)


@needs_sandbox
def test_humaneval_canonical_solutions_pass_in_the_sandbox():
  # The fast tier's sample: problems whose tests call prompt helpers (32:
  # poly, 38: encode_cyclic), the entry point by name (33), random inputs
  # (53), and a few plain ones.
  problems = humaneval.load_problems()
  picked = [problems[i] for i in (0, 2, 32, 33, 38, 53)]
  verdicts = humaneval.score_all(
      picked, [p["canonical_solution"] for p in picked], first_slot=SLOT)
  assert [v.status for v in verdicts] == ["passed"] * len(picked)
  assert all(v.calls >= 3 for v in verdicts)
  wrong = humaneval.score_all(picked, ["    return None\n"] * len(picked),
                              first_slot=SLOT)
  assert [v.status for v in wrong] == ["failed"] * len(picked)


def test_humaneval_prompts_and_cuts():
  p = {"prompt": "import math\n\n\ndef f(x):\n    \"\"\"doc\"\"\"\n",
       "entry_point": "f", "test": "def check(c):\n    assert c(2) == 3\n"}
  body = humaneval.solution(p, "    return x + 1\n\ndef g():\n  pass")
  assert body == p["prompt"] + "    return x + 1\n"  # no tests in it
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
  full = humaneval.solution(p, "```python\ndef f(x):\n    return x + 1\n```",
                            chat=True)
  assert full == "import math\n\n\ndef f(x):\n    return x + 1\n"
  body_only = humaneval.solution(p, "    return x + 1", chat=True)
  assert body_only == p["prompt"] + "    return x + 1\n"


def test_humaneval_checker_runs_the_dataset_test_here():
  # The check is the problem's own code, run in this process, with the
  # entry point's name bound to the candidate as well.
  p = {"task_id": "T/0", "entry_point": "f",
       "prompt": "def helper(x):\n    return 2 * x\n\n\ndef f(x):\n"
                 "    \"\"\"doc\"\"\"\n",
       "test": "def check(candidate):\n    assert candidate(1) == helper(1)\n"
               "    assert f(2) == 4\n"}
  calls = []
  humaneval.checker(p)(lambda x: calls.append(x) or 2 * x)
  assert calls == [1, 2]
  with pytest.raises(AssertionError):
    humaneval.checker(p)(lambda x: x)
  with pytest.raises(ValueError, match="same length"):
    humaneval.score_all([p], [])
