"""pass@k, self-consistency and GRPO-group statistics, arithmetic vs iid,
on SmolLM2-135M and Gemma 3 270M (CPU), resumable.

  python scripts/passk.py            # run what is missing, then report
  python scripts/passk.py --report   # only the report from the records
  python scripts/passk.py --rescore  # score the recorded HumanEval
                                     # completions again, say what changed

Each record is one group: G completions of one problem, drawn by
`rollouts.group_rollouts` at (seed 0, step = repeat, prompt id = problem
id) with scheme "shifted_lattice" (arithmetic) or "iid" (ancestral by
inverse-CDF decoding of uniform codes: the same decode, so the time per
completion is the same by construction), scored exactly (word problems) or
by `humaneval.score` (HumanEval: the solution in the sandbox, the tests
outside it; a run that would need model-written code to run without the
sandbox refuses). Records are appended to results/passk/records.jsonl as
they finish; the report writes results/passk/summary.json, summary.md and
passk_*.png.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import numpy as np

from arithmetic_apps import jsonl, llms, sandbox
from arithmetic_apps.verifiable import estimators as est
from arithmetic_apps.verifiable import humaneval, word_problems
from arithmetic_decoding.rollouts import group_rollouts

OUT = os.path.join(os.path.dirname(__file__), "..", "results", "passk")
MODELS = ("smollm2-135m", "gemma3-270m")
SCHEMES = {"arithmetic": "shifted_lattice", "iid": "iid"}
TASKS = {
    # task: problems, group size, repeats, temperatures, new tokens
    "words": dict(problems=32, group=64, repeats=2,
                  temperatures=(0.4, 0.8, 1.0), max_new_tokens=24),
    "humaneval": dict(problems=10, group=16, repeats=1, temperatures=(0.8,),
                      max_new_tokens=192),
}
SANDBOX = humaneval.LIMITS  # 10 s wall, 5 s CPU, 1 GiB for the whole tree


def items(tasks):
  for task in tasks:
    cfg = TASKS[task]
    for model in MODELS:
      for t in cfg["temperatures"]:
        for method in SCHEMES:
          for repeat in range(cfg["repeats"]):
            for problem in range(cfg["problems"]):
              yield (task, model, t, method, repeat, problem)


def key(r):
  return (r["task"], r["model"], r["temperature"], r["method"], r["repeat"],
          r["problem"])


def newline_ids(llm):
  """Token ids that are exactly a newline run (one-line answers stop there)."""
  return [i for i, t in enumerate(llm.vocab.tokens)
          if llm.decode([i]) in ("\n", "\n\n")]


def measure(item):
  task, model, t, method, repeat, problem = item
  llm = llms.load(model)
  cfg = TASKS[task]
  chat = bool(llm.vocab.chat_template)
  if task == "words":
    p = word_problems.make_problems(100, seed=0)[problem]
    text, extra = word_problems.prompt(p["question"]), newline_ids(llm)
  else:
    p = humaneval.load_problems()[problem]
    text, extra = humaneval.prompt_text(p, llm), []
    chat = False  # prompt_text applies the template
  start = time.perf_counter()
  out = group_rollouts(llm, text, cfg["group"], prompt_ids=[problem], seed=0,
                       step=repeat, scheme=SCHEMES[method], temperature=t,
                       max_new_tokens=cfg["max_new_tokens"], chat=chat,
                       rows_per_call=cfg["group"], token_log_probs=False,
                       stop_ids=extra)
  seconds = time.perf_counter() - start
  texts = out.texts[0]
  if task == "words":
    answers = [word_problems.extract_answer(x) for x in texts]
    rewards = [int(a == p["answer"]) for a in answers]
    reasons = []
    isolation = None
  else:
    answers = []
    rewards, reasons, isolation = score_humaneval(
        p, texts, humaneval.is_chat(llm))
  return dict(task=task, model=model, temperature=t, method=method,
              repeat=repeat, problem=problem, rewards=rewards,
              answers=answers, reasons=reasons, texts=texts,
              codes=out.codes[0].tolist(), tokens=int(out.mask.sum()),
              seconds=round(seconds, 3), distinct=out.distinct()[0],
              isolation=isolation)


def score_humaneval(problem, texts, chat):
  """(rewards, statuses, isolation) of a group's completions."""
  verdicts = humaneval.score_all([problem] * len(texts), texts, chat,
                                 SANDBOX, workers=2)
  for i, v in enumerate(verdicts):
    if v.status == "error":  # the sandbox's failure, not the program's
      print(f"passk: sandbox error on {problem['task_id']} completion {i}, "
            f"scoring it again: {v.reason}", file=sys.stderr)
      verdicts[i] = humaneval.score(problem, texts[i], chat, SANDBOX)
      if verdicts[i].status == "error":
        raise RuntimeError(f"the sandbox failed twice on {problem['task_id']}"
                           f" completion {i}: {verdicts[i].reason}")
  isolation = {v.isolation for v in verdicts}
  if len(isolation) != 1:
    raise RuntimeError(f"a group scored under several isolations: "
                       f"{isolation}")
  return ([int(v.passed) for v in verdicts], [v.status for v in verdicts],
          isolation.pop())


def require_sandbox() -> str:
  """The sandbox's isolation; exits with the reason where it cannot run
  (model-written code never runs here without it)."""
  try:
    return sandbox.isolation()
  except sandbox.SandboxUnavailable as e:
    raise SystemExit(f"passk: HumanEval completions run only in the "
                     f"sandbox, and it cannot run here: {e}") from None


def rescore(path):
  """Scores every recorded HumanEval completion again with the current
  scorer, rewrites the records in place (rewards, reasons, isolation) and
  returns one line per (model, T, method): passes before -> after."""
  require_sandbox()
  problems = humaneval.load_problems()
  with open(path) as f:
    lines = f.read().splitlines()
  models = {}
  changes = {}
  for i, line in enumerate(lines):
    r = json.loads(line)
    if r["task"] != "humaneval":
      continue
    if r["model"] not in models:
      models[r["model"]] = bool(llms.load(r["model"]).vocab.chat_template)
    rewards, reasons, isolation = score_humaneval(
        problems[r["problem"]], r["texts"], models[r["model"]])
    cell = changes.setdefault((r["model"], r["temperature"], r["method"]),
                              [0, 0, 0, 0])
    cell[0] += sum(r["rewards"])
    cell[1] += sum(rewards)
    cell[2] += sum(a != b for a, b in zip(r["rewards"], rewards))
    cell[3] += len(rewards)
    r.update(rewards=rewards, reasons=reasons, isolation=isolation)
    lines[i] = json.dumps(r)
  with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
  os.replace(path + ".tmp", path)
  return [f"{m} T={t} {method}: {a} -> {b} passed of {n} ({c} changed)"
          for (m, t, method), (a, b, c, n) in sorted(changes.items())]


def summarize(records):
  """Per (task, model, T, method): pass@k from k-sets, the unbiased iid
  estimator, majority@k, duplicates, zero-advantage groups, group-mean
  variance, time per completion. Only problems with every repeat of both
  methods count (a partial run reports on what is complete, paired)."""
  groups = {}
  for r in records:
    groups.setdefault((r["task"], r["model"], r["temperature"], r["method"]),
                      []).append(r)
  complete = {}
  for (task, model, t, method), rs in groups.items():
    reps = TASKS[task]["repeats"]
    have = {}
    for r in rs:
      have.setdefault(r["problem"], set()).add(r["repeat"])
    done = {p for p, got in have.items() if len(got) == reps}
    key3 = (task, model, t)
    complete[key3] = done if key3 not in complete else complete[key3] & done
  rows = []
  per_problem = {}
  for (task, model, t, method), rs in sorted(groups.items()):
    cfg = TASKS[task]
    problems = sorted(complete[(task, model, t)])
    index = {p: i for i, p in enumerate(problems)}
    rs = [r for r in rs if r["problem"] in index]
    g, reps, n_p = cfg["group"], cfg["repeats"], len(problems)
    if not n_p:
      continue
    rewards = np.zeros((n_p, reps, g))
    answers = np.empty((n_p, reps, g), object)
    texts = {}
    for r in rs:
      rewards[index[r["problem"]], r["repeat"]] = r["rewards"]
      if r["answers"]:
        answers[index[r["problem"]], r["repeat"]] = r["answers"]
      texts[(r["problem"], r["repeat"])] = r["texts"]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= g]
    row = dict(task=task, model=model, temperature=t, method=method,
               problems=n_p, group=g, repeats=reps, records=len(rs))
    if task == "humaneval":
      row["isolation"] = sorted({r.get("isolation") or "none recorded"
                                 for r in rs})
      row["statuses"] = dict(sorted(collections.Counter(
          s for r in rs for s in r["reasons"]).items()))
    row["pass_at_k"] = {k: est.bootstrap(est.pass_at_k_sets(rewards > 0, k))
                        for k in ks}
    if method == "iid":
      flat = rewards.reshape(n_p, -1)
      row["pass_at_k_unbiased"] = {
          k: est.bootstrap(np.array([est.pass_at_k_unbiased(
              flat.shape[1], int(f.sum()), k) for f in flat])) for k in ks}
    if task == "words":
      truths = [word_problems.make_problems(100, seed=0)[i]["answer"]
                for i in problems]
      row["majority_at_k"] = {k: est.bootstrap(est.majority_at_k_sets(
          answers, truths, k)) for k in ks}
    distinct = [len(set(x)) for x in texts.values()]
    row["distinct_per_group"] = float(np.mean(distinct))
    row["duplicate_rate"] = float(1 - np.mean(distinct) / g)
    row["zero_advantage"] = {}
    row["group_mean_variance"] = {}
    for gg in (4, 8, 16):
      if gg <= g:
        row["zero_advantage"][gg] = est.bootstrap(
            est.zero_advantage_fraction(rewards, gg))
        if reps >= 2:
          var = est.group_mean_variance(rewards, gg)
          per_problem[(task, model, t, method, gg)] = var
          row["group_mean_variance"][gg] = est.bootstrap(var)
    row["seconds_per_completion"] = sum(r["seconds"] for r in rs) / (
        len(rs) * g)
    row["tokens_per_completion"] = sum(r["tokens"] for r in rs) / (len(rs) * g)
    rows.append(row)
  for row in rows:
    if row["method"] != "arithmetic":
      continue
    row["variance_ratio_vs_iid"] = {}
    for gg in (4, 8, 16):
      a = per_problem.get((row["task"], row["model"], row["temperature"],
                           "arithmetic", gg))
      b = per_problem.get((row["task"], row["model"], row["temperature"],
                           "iid", gg))
      if a is not None and b is not None and b.mean() > 0:
        row["variance_ratio_vs_iid"][gg] = est.paired_ratio(a, b)
  return rows


def _fmt(ci):
  return f"{ci[0]:.3f} [{ci[1]:.3f}, {ci[2]:.3f}]"


def report(rows, out):
  """summary.json, summary.md, one pass@k figure per task."""
  with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(rows, f, indent=1, default=str)
  by = {(r["task"], r["model"], r["temperature"], r["method"]): r
        for r in rows}
  isolations = sorted({i for r in rows for i in r.get("isolation", [])})
  lines = ["# pass@k, arithmetic vs iid (`python scripts/passk.py --report`)",
           "", f"Sandbox isolation of the HumanEval scores: "
           f"{', '.join(isolations) or 'none recorded'}.", ""]
  for task in TASKS:
    lines += [f"## {task}", "",
              "| model | T | k | pass@k arithmetic | pass@k iid | iid "
              "unbiased (all samples) | samples to reach iid pass@k(max) |",
              "|---|---|---|---|---|---|---|"]
    for (tk, model, t, method), r in sorted(by.items()):
      if tk != task or method != "arithmetic":
        continue
      iid = by.get((task, model, t, "iid"))
      if iid is None:
        continue
      ks = sorted(r["pass_at_k"], key=int)
      curve_a = {int(k): r["pass_at_k"][k][0] for k in ks}
      target = iid["pass_at_k"][ks[-1]][0]
      reach = est.samples_to_reach(curve_a, target)
      for k in ks:
        lines.append(
            f"| {model} ({r['problems']} problems) | {t} | {k} | "
            f"{_fmt(r['pass_at_k'][k])} | "
            f"{_fmt(iid['pass_at_k'][k])} | "
            f"{_fmt(iid['pass_at_k_unbiased'][k])} | "
            f"{'' if k != ks[-1] else (f'{reach:.1f} vs {k}' if reach else 'not reached')} |")
    lines += ["", "| model | T | method | distinct / group | duplicate rate | "
              "zero-adv. G=4 | G=8 | G=16 | Var(group mean) G=4 | G=8 | G=16 "
              "| majority@8 | s / completion |", "|" + "---|" * 13]
    for (tk, model, t, method), r in sorted(by.items()):
      if tk != task:
        continue
      za = [(_fmt(r["zero_advantage"][g]) if g in r["zero_advantage"] else "")
            for g in (4, 8, 16)]
      var = [(f"{r['group_mean_variance'][g][0]:.4f}" if g in
              r["group_mean_variance"] else "") for g in (4, 8, 16)]
      maj = r.get("majority_at_k", {}).get(8)
      lines.append(f"| {model} | {t} | {method} | "
                   f"{r['distinct_per_group']:.1f} / {r['group']} | "
                   f"{r['duplicate_rate']:.3f} | {' | '.join(za)} | "
                   f"{' | '.join(var)} | {_fmt(maj) if maj else ''} | "
                   f"{r['seconds_per_completion']:.3f} |")
    ratios = [(k, r) for k, r in sorted(by.items())
              if k[0] == task and r.get("variance_ratio_vs_iid")]
    if ratios:
      lines += ["", "Var(group-mean reward), arithmetic / iid (paired "
                "bootstrap over problems):", "",
                "| model | T | G=4 | G=8 | G=16 |", "|---|---|---|---|---|"]
      for (tk, model, t, _), r in ratios:
        v = r["variance_ratio_vs_iid"]
        lines.append(f"| {model} | {t} | " + " | ".join(
            _fmt(v[g]) if g in v else "" for g in (4, 8, 16)) + " |")
    statuses = [(k, r["statuses"]) for k, r in sorted(by.items())
                if k[0] == task and r.get("statuses")]
    if statuses:
      lines += ["", "Sandbox verdicts (`sandbox.Verdict.status`) of every "
                "completion:", ""]
      for (_, model, t, method), counts in statuses:
        lines.append(f"- {model} T={t} {method}: " + ", ".join(
            f"{n} {s}" for s, n in counts.items()))
    lines.append("")
  with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    return
  for task in TASKS:
    cells = sorted({(m, t) for (tk, m, t, _) in by if tk == task})
    if not cells:
      continue
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3),
                             squeeze=False)
    for ax, (model, t) in zip(axes[0], cells):
      for method, color in (("arithmetic", "C0"), ("iid", "C1")):
        r = by.get((task, model, t, method))
        if r is None:
          continue
        ks = sorted(r["pass_at_k"], key=int)
        v = np.array([r["pass_at_k"][k] for k in ks])
        x = [int(k) for k in ks]
        ax.plot(x, v[:, 0], "o-", color=color, label=method, ms=3)
        ax.fill_between(x, v[:, 1], v[:, 2], color=color, alpha=0.2)
      ax.set_xscale("log", base=2)
      ax.set_title(f"{model} T={t}", fontsize=8)
      ax.set_xlabel("k")
    axes[0][0].set_ylabel("pass@k")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"passk_{task}.png"), dpi=110)
    plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=OUT)
  parser.add_argument("--tasks", nargs="+", default=list(TASKS),
                      choices=list(TASKS))
  parser.add_argument("--report", action="store_true",
                      help="only summarize the records already there")
  parser.add_argument("--rescore", action="store_true",
                      help="score the recorded HumanEval completions again "
                           "with the current scorer, then report")
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, "records.jsonl")
  todo = list(items(args.tasks))
  if args.rescore:
    for line in rescore(path):
      print(line)
  if args.report or args.rescore:
    done = jsonl.load(path, key)
  else:
    if "humaneval" in args.tasks:
      require_sandbox()
    done = jsonl.run_missing(path, todo, key=key, run=measure, desc="passk")
  rows = summarize([done[k] for k in todo if k in done])
  report(rows, args.out)
  with open(os.path.join(args.out, "summary.md")) as f:
    sys.stdout.write(f.read())


if __name__ == "__main__":
  main()
