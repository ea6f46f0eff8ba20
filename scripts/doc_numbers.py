"""The numbers of README.md and docs/ that come from results/, written from
the committed records by this one command.

    python scripts/doc_numbers.py            # rewrite the generated blocks
    python scripts/doc_numbers.py --check    # exit 1 if a doc disagrees

A generated block sits between two marker lines in a markdown file:

    <!-- numbers: NAME (python scripts/doc_numbers.py) -->
    ...what BLOCKS[NAME]() writes from the records...
    <!-- /numbers -->

`checks/test_doc_numbers.py` (`make check-results`, CI) fails when a block
differs from what its records give, so a number is stated once: in its
record, and regenerated, not typed, wherever a page shows it.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys
from typing import Callable, Dict, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_budget  # noqa: E402  (the budgets, stated there once)
import llm_diversity  # noqa: E402  (its table and summary, from records)

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_BLOCK = re.compile(r"(<!-- numbers: (\S+) \(python scripts/doc_numbers.py\) "
                    r"-->\n)(.*?)(<!-- /numbers -->)", re.S)


def _measured_on(records) -> List[str]:
  """A table's closing lines: the CPUs its records were measured on."""
  hosts = sorted({r["host"] for r in records})
  return ["", f"Measured on: {'; '.join(hosts)}."]


def _jsonl(path: pathlib.Path) -> List[dict]:
  return [json.loads(line) for line in path.read_text().splitlines()
          if line.strip()]


def _json(path: pathlib.Path) -> dict:
  return json.loads(path.read_text())


def fig4_row() -> str:
  """README: Fig. 4's std ratios at N = 16, 64, 2."""
  fig4 = _json(RESULTS / "experiments_paper" / "summary.json")["fig4"]
  temps = sorted(fig4, key=lambda t: float(t.split("=")[1]))
  ratio = lambda t, n: f"{fig4[t]['by_n'][str(n)]['ratio']:.2f}"
  every = all(fig4[t]["by_n"][n]["ci95"][1] < 1 for t in temps
              for n in fig4[t]["by_n"])
  verses = fig4[temps[0]]["verses"]
  budget = _json(RESULTS / "experiments_paper" / "summary.json")["budget"]
  at16 = ", ".join(f"{ratio(t, 16)} at T = {t.split('=')[1]}" for t in temps)
  return (f"| Fig. 4 | std of the expected-BLEU estimate, arithmetic / i.i.d. "
          f"sampling at N = 16 ({verses} verses x {budget['repeats']} "
          f"repeats): {at16}; "
          f"{' / '.join(ratio(t, 64) for t in temps)} at N = 64; "
          f"{' / '.join(ratio(t, 2) for t in temps)} at N = 2"
          f"{' (every bootstrap interval below 1)' if every else ''} | "
          "`python scripts/experiments_paper.py --report_only` |")


def variance_row() -> str:
  """README: the demo's toy estimate (`results/translation/demo.json`, from
  `python -m arithmetic_apps.demo --json`; `make demo` prints the same
  numbers readably, recorded in `demo_output.txt` beside it)."""
  toy = json.loads((RESULTS / "translation" / "demo.json").read_text())["toy"]
  lattice, iid = toy["arithmetic (shifted lattice)"], toy["ancestral (iid codes)"]
  return (f"| variance | toy model, {toy['num_decodes']} samples, 2,000 "
          f"estimates: std {lattice['std']:.3f} arithmetic vs {iid['std']:.3f}"
          f" ancestral ({toy['std_ratio']:.2f}x) | `make demo` |")


def translation_row() -> str:
  """README: the embedded model's test BLEU."""
  text = (RESULTS / "translation" / "evaluate_test.json").read_text()
  test = json.JSONDecoder().raw_decode(text.lstrip())[0]
  return ("| translation | embedded En→Fr T5.1.1 (12M parameters): test BLEU "
          f"greedy {test['greedy']['bleu']:.1f}, beam {test['beam']['bleu']:.1f}"
          " | `python scripts/evaluate_translation.py` |")


def sandbox_row() -> str:
  """README: the sandbox's cost (scripts/bench_sandbox.py's last records of
  the code before the sandbox issue and of the current code)."""
  records = _jsonl(RESULTS / "passk" / "bench_sandbox.jsonl")
  now = [r for r in records if r["code"] == "current"][-1]
  before = [r for r in records if r["code"] != "current"][-1]
  canon = now["humaneval_canonical"]
  return ("| sandbox | hostile programs see nothing of the host and leave "
          "nothing (bubblewrap, every namespace, cgroup limits on the whole "
          "tree); wrong solutions that exit 0, rig `__eq__` or read the tests "
          f"do not pass; {canon['passed']} of {canon['programs']} HumanEval "
          f"canonical solutions pass ({canon['seconds']} s on "
          f"{canon['workers']} workers; {before['humaneval_canonical']['seconds']}"
          f" s before the sandbox); "
          f"{now['trivial_checked_seconds']['median']} s per scored trivial "
          "solution (median) | `make test`, `python scripts/bench_sandbox.py` |")


def sandbox_table() -> str:
  """docs/passk.md: the sandbox's cost, the last two runs of the code
  before it and of the current code (ranges over the runs)."""
  records = _jsonl(RESULTS / "passk" / "bench_sandbox.jsonl")
  now = [r for r in records if r["code"] == "current"][-2:]
  before = [r for r in records if r["code"] != "current"][-2:]

  def span(rs, field, digits=3):
    values = sorted(f"{x:.{digits}f}" for x in (
        r[field]["median"] if "median" in r[field] else r[field]["seconds"]
        for r in rs))
    return values[0] if values[0] == values[-1] else (
        f"{values[0]}-{values[-1]}")

  def canonical(rs):
    canon = rs[-1]["humaneval_canonical"]
    calls = f" ({canon['calls']:,} calls)" if "calls" in canon else ""
    return (f"{span(rs, 'humaneval_canonical', 1)} s, {canon['passed']} "
            f"passed{calls}")
  programs = now[-1]["humaneval_canonical"]["programs"]
  workers = now[-1]["humaneval_canonical"]["workers"]
  return "\n".join([
      f"| | before ({before[-1]['code']}) | now |", "|---|---|---|",
      f"| a trivial program, start to end (`run_python`) | "
      f"{span(before, 'trivial_run_seconds')} s | "
      f"{span(now, 'trivial_run_seconds')} s |",
      f"| a trivial checked call, start to verdict (`run_checked`) | — | "
      f"{span(now, 'trivial_checked_seconds')} s |",
      f"| the {programs} canonical solutions, {workers} workers | "
      f"{canonical(before)} | {canonical(now)} |"])


def fig2_row() -> str:
  """README: Fig. 2 (quality and diversity over all test verses)."""
  summary = _json(RESULTS / "experiments_paper" / "summary.json")
  budget, points = summary["budget"], summary["fig2"]
  pairs = {}
  for p in points:
    pairs.setdefault((p["n"], p["temperature"]), {})[p["method"]] = p
  pairs = {k: v for k, v in pairs.items() if {"arithmetic", "iid"} <= set(v)}
  higher = sum(v["arithmetic"]["diversity"] > v["iid"]["diversity"]
               for v in pairs.values())
  gains = {(g["n"], g["temperature"]): g["gain"] for g in
           summary["oracle_gain"]}
  low = [g[0] for (n, t), g in gains.items() if t <= 0.2]
  rest = [g for (n, t), g in gains.items() if t >= 0.3]
  above = sum(g[1] > 0 for g in rest)  # 95 % interval above 0
  temps = budget["quality_temperatures"]
  return (f"| Fig. 2 | all {budget['quality_verses']} test verses, T = "
          f"{min(temps)}-{max(temps)}, N = "
          f"{', '.join(map(str, budget['quality_n']))}: the same mean BLEU, "
          f"higher n-gram diversity at {higher} of {len(pairs)} points; "
          f"oracle (best-of-N) gain +{min(low):.1f} to +{max(low):.1f} BLEU "
          f"at T = 0.1-0.2; at T >= 0.3 its 95 % interval lies above 0 at "
          f"{above} of {len(rest)} points | "
          "`python scripts/experiments_paper.py --report_only` |")


def experiments_speed_row() -> str:
  """README: the paper experiments' workload, before / after."""
  r = _jsonl(RESULTS / "bench_experiments.jsonl")[-1]
  after, before = r["after"]["samplers"], r["before"]["samplers"]
  return (f"| experiments' speed | the paper experiments' workload on the "
          f"embedded model: {after['tokens_per_s']:,.0f} generated tokens/s "
          f"(arithmetic sampling {r['after']['arithmetic']['tokens_per_s']:,.0f}"
          f", ancestral {r['after']['ancestral']['tokens_per_s']:,.0f}) vs "
          f"{before['tokens_per_s']:,.0f} for the code before the speedups in "
          f"the same run ({after['tokens_per_s'] / before['tokens_per_s']:.1f}"
          f"x){', every sample bit for bit the same' if r['identical'] else ''}"
          f"; {100 * after['roofline_fraction']:.1f} % of the "
          f"{r['roofline']['matmul_gflops']:.0f} GFLOP/s matmul roofline "
          "measured in that run | `python scripts/bench_experiments.py` |")


def experiments_speed_table() -> str:
  """docs/benchmarks.md: the paper experiments' workload, before / after,
  and the record before the last one."""
  *_, prev, r = _jsonl(RESULTS / "bench_experiments.jsonl")
  ts = ("0.1", "0.2", "0.5")
  n = lambda x: f"{x:,.0f}"
  rate = lambda rec, side, k: rec[side][k]["tokens_per_s"]
  by_t = lambda rec, side, m: " / ".join(
      n(rec[side]["tokens_per_s_by_config"][f"{m} T={t}"]) for t in ts)
  ratio_t = lambda m: " / ".join(
      f"{r['after']['tokens_per_s_by_config'][f'{m} T={t}'] / r['before']['tokens_per_s_by_config'][f'{m} T={t}']:.1f}x"
      for t in ts)
  both = lambda rec, k: (f"{n(rate(rec, 'before', k))} -> "
                         f"{n(rate(rec, 'after', k))}")
  pct = lambda x: f"{100 * x:.1f} %"
  rows = [["both samplers, generated tokens/s",
           n(rate(r, "before", "samplers")), n(rate(r, "after", "samplers")),
           f"{rate(r, 'after', 'samplers') / rate(r, 'before', 'samplers'):.2f}x",
           f"{both(prev, 'samplers')} ("
           f"{rate(prev, 'after', 'samplers') / rate(prev, 'before', 'samplers'):.2f}x)"]]
  for method in ("arithmetic", "ancestral"):
    rows.append([f"{method} sampling, tokens/s", n(rate(r, "before", method)),
                 n(rate(r, "after", method)),
                 f"{rate(r, 'after', method) / rate(r, 'before', method):.2f}x",
                 both(prev, method)])
    rows.append([f"... at T = {' / '.join(ts)}", by_t(r, "before", method),
                 by_t(r, "after", method), ratio_t(method),
                 by_t(prev, "after", method)])
  rows += [
      # Before the speedups no rows shared: greedy decoded every row.
      ["greedy, every row decoded, tokens/s",
       n(rate(r, "before", "greedy")),
       n(rate(r, "after", "greedy_unshared")),
       f"{rate(r, 'after', 'greedy_unshared') / rate(r, 'before', 'greedy'):.2f}x",
       f"{n(rate(prev, 'before', 'greedy'))} -> "
       f"{n(rate(prev, 'after', 'greedy_unshared'))}"],
      ["greedy, as the translator decodes it (a verse's identical rows "
       "share), tokens/s", "", n(rate(r, "after", "greedy")), "",
       n(rate(prev, "after", "greedy"))],
      ["matmul roofline measured in the run (GFLOP/s)", "",
       f"{r['roofline']['matmul_gflops']:.0f}", "",
       f"{prev['roofline']['matmul_gflops']:.0f}"],
      ["fraction of the matmul roofline (both samplers)",
       pct(r["before"]["samplers"]["roofline_fraction"]),
       pct(r["after"]["samplers"]["roofline_fraction"]), "",
       f"{pct(prev['before']['samplers']['roofline_fraction'])} -> "
       f"{pct(prev['after']['samplers']['roofline_fraction'])}"],
      [f"samples identical ({r['samples_compared']:,} sets of "
       f"{r['workload']['n']}, bit for bit)", "",
       "yes" if r["identical"] else "no", "",
       "yes" if prev["identical"] else "no"]]
  lines = [f"| | before ({r['baseline']}) | after | speedup | record before "
           f"({prev['commit']}) |", "|---|---:|---:|---:|---:|"]
  lines += [_table_row(row) for row in rows]
  return "\n".join(lines)


def _engine_records(host: str = None) -> Dict[tuple, dict]:
  """The latest record of each configuration, all from one kind of CPU
  (`host`; by default the host of the newest "after" record): speeds of
  two hosts are never compared."""
  records = _jsonl(RESULTS / "llm" / "bench_engine.jsonl")
  host = host or _engine_hosts()[0]
  latest = {}
  for r in records:
    if r["host"] == host:
      latest[(r["version"], r["model"], r["n"], r["temperature"],
              r["method"])] = r
  return latest


def _engine_hosts() -> List[str]:
  """The kinds of CPU with "after" records, the newest one's first."""
  records = _jsonl(RESULTS / "llm" / "bench_engine.jsonl")
  hosts = []
  for r in reversed(records):
    if r["version"] == "after" and r["host"] not in hosts:
      hosts.append(r["host"])
  return hosts


def llm_engine_row() -> str:
  """README: LLM sampling through the engine, before / after, and the
  llama.cpp peer."""
  latest = _engine_records()
  speedups, ratios = [], []
  for (version, model, n, t, method), after in latest.items():
    if version != "after":
      continue
    before = latest.get(("before", model, n, t, method))
    if before:
      speedups.append(after["tokens_per_second"] /
                      before["tokens_per_second"])
    if method == "arithmetic":
      twin = latest.get(("after", model, n, t, "ancestral"))
      if twin:
        ratios.append(twin["tokens_per_second"] / after["tokens_per_second"])
  def grid(model):
    """The configurations measured, e.g. "m (N = 16, 64; T = 0.4-1.0)", or
    per N where the temperatures differ between them."""
    keys = [k for k in latest if k[0] == "after" and k[1] == model]
    temps = {n: sorted({k[3] for k in keys if k[2] == n})
             for n in sorted({k[2] for k in keys})}
    span = lambda ts: str(ts[0]) if len(ts) == 1 else f"{ts[0]}-{ts[-1]}"
    if len({tuple(ts) for ts in temps.values()}) == 1:
      return (f"{model} (N = {', '.join(map(str, temps))}; T = "
              f"{span(next(iter(temps.values())))})")
    return f"{model} (" + "; ".join(f"N = {n}: T = {span(ts)}"
                                    for n, ts in temps.items()) + ")"
  models = sorted({k[1] for k in latest if k[0] == "after"})
  return (f"| LLM sampling | {' and '.join(grid(m) for m in models)}: 8 chat "
          f"prompts x N, 64 new tokens, float32, 2 CPU cores: "
          f"{min(speedups):.2f}-{max(speedups):.2f}x the generated tokens/s "
          f"of the code before the engine (ended rows dropped, a prompt "
          f"prefilled once, prefixes shared, ancestral noise drawn only for "
          f"tokens that can win); arithmetic sampling "
          f"{min(ratios):.2f}-{max(ratios):.2f}x ancestral's time per token"
          " | `python scripts/bench_llm_engine.py --report_only` |")


def llm_engine_table() -> str:
  """docs/engine.md: the benchmark per configuration, one table per kind of
  CPU (the newest first)."""
  tables = []
  for host in _engine_hosts():
    latest = _engine_records(host)
    lines = ["| model | N | T | method | before tok/s | after tok/s | x | "
             "row-steps / token before, after | peak MiB before, after | "
             "llama.cpp quantized, float32 tok/s | after at |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for (version, model, n, t, method), a in sorted(latest.items()):
      if version != "after":
        continue
      b = latest.get(("before", model, n, t, method))
      peers = [latest.get((f"llama.cpp {kind}", model, n, t, "ancestral"))
               for kind in ("quantized", "float32")]
      peer = (", ".join(f"{p['tokens_per_second']:.0f}" if p else "-"
                        for p in peers) if method == "ancestral" else "")
      lines.append(
          f"| {model} | {n} | {t} | {method} | "
          f"{b['tokens_per_second'] if b else '-'} | "
          f"{a['tokens_per_second']} | "
          f"{a['tokens_per_second'] / b['tokens_per_second']:.2f} | "
          f"{b['row_steps_per_token'] if b else '-'}, "
          f"{a['row_steps_per_token']} | {b['peak_mib'] if b else '-'}, "
          f"{a['peak_mib']} | {peer} | {a['commit']} |" if b else
          f"| {model} | {n} | {t} | {method} | - | {a['tokens_per_second']} "
          f"| - | -, {a['row_steps_per_token']} | -, {a['peak_mib']} | "
          f"{peer} | {a['commit']} |")
    shown = [r for k, r in latest.items()
             if ("after",) + k[1:] in latest]  # the records of the rows
    kinds = collections.Counter(r.get("protocol") or "none" for r in shown)
    lines += _measured_on(latest.values())
    lines.append("Protocol (`scripts/bench_llm_engine.py`'s docstring), "
                 "records: " + ", ".join(f"{k} {v}" for k, v in
                                         sorted(kinds.items())) + ".")
    tables.append("\n".join(lines))
  return "\n\n".join(tables)


def server_table() -> str:
  """docs/serving.md: the load test."""
  path = RESULTS / "llm" / "bench_server.jsonl"
  if not path.exists():
    return ("No record yet (`results/llm/bench_server.jsonl`): run the "
            "command above.")
  records = _jsonl(path)
  last = {}
  for r in records:
    last[(r["server"], r.get("kind"), r.get("clients"))] = r
  lines = ["| server | clients | generated tokens/s | p50 s | p99 s | "
           "failed |", "|---|---:|---:|---:|---:|---:|"]
  for (server, kind, clients), r in last.items():
    name = server + (f" ({kind})" if kind else "")
    lines.append(f"| {name} | {clients or '-'} | {r['tokens_per_second']} | "
                 f"{r.get('p50_s') or '-'} | {r.get('p99_s') or '-'} | "
                 f"{r.get('failed', '-')} |")
  hosts = sorted({r["host"] for r in records})
  lines.append("")
  lines.append(f"Measured on: {'; '.join(hosts)}; requests of n = "
               f"{records[-1]['n']}, at most {records[-1]['max_tokens']} "
               "tokens.")
  return "\n".join(lines)


def _rollout_records() -> Dict[tuple, dict]:
  """The latest record of each configuration bench_rollouts.py runs now
  (row block 16 for rollouts; generate has none), by (kind, scheme,
  per-token log-probs)."""
  last = {}
  for r in _jsonl(RESULTS / "passk" / "bench_rollouts.jsonl"):
    if r["rows_per_call"] in (16, None):
      last[(r["kind"], r["scheme"], r["token_log_probs"])] = r
  return last


def rollouts_row() -> str:
  """README: rollouts' invariance and cost against generate."""
  last = _rollout_records()
  lattice = last[("rollouts", "shifted_lattice", False)]
  iid = last[("rollouts", "iid", False)]
  plain = last[("generate", "arithmetic", False)]
  return (f"| rollouts | a (prompt, code) gives the same tokens alone, in any "
          f"batch, in a larger group, on 1 or 8 devices; a group costs "
          f"{lattice['seconds_per_completion'] / plain['seconds_per_completion']:.2f}"
          f"x plain `generate` of the same completions (SmolLM2, "
          f"{lattice['seconds_per_completion']} s per completion; iid groups "
          f"{iid['seconds_per_completion']} s) | "
          "`python scripts/bench_rollouts.py --repeats 3` |")


def _bench_decode_records() -> List[dict]:
  """The latest record of each (preset, N) of scripts/bench_decode.py."""
  latest = {}
  for r in _jsonl(RESULTS / "bench_decode.jsonl"):
    latest[(r["preset"], r["n"])] = r
  order = {"tiny": 0, "small": 1}
  return [latest[k] for k in sorted(latest, key=lambda k: (order.get(
      k[0], 2), k[0], k[1]))]


def bench_decode_table() -> str:
  """docs/benchmarks.md: whole decodes, the three samplers and beam."""
  g = lambda x: f"{x:.3g}"
  lines = ["| preset | N | arithmetic ms/step | ancestral ms/step | greedy "
           "ms/step | arith / anc | arith / greedy | anc / greedy | "
           "arithmetic tok/s | ancestral tok/s | beam vs ancestral time | "
           "temp MB arith / anc / greedy / beam |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in _bench_decode_records():
    a, c, gr, b = (r[m] for m in ("arithmetic", "ancestral", "greedy",
                                  "beam"))
    temps = " / ".join(g(x["temp_mb"]) for x in (a, c, gr, b))
    lines.append(
        f"| {r['preset']} | {r['n']} | {g(a['ms_per_step'])} | "
        f"{g(c['ms_per_step'])} | {g(gr['ms_per_step'])} | "
        f"{r['arithmetic_vs_ancestral_step']:.2f} | "
        f"{r['arithmetic_vs_greedy_step']:.2f} | "
        f"{r['ancestral_vs_greedy_step']:.2f} | {a['tokens_per_s']:,.0f} | "
        f"{c['tokens_per_s']:,.0f} | {r['beam_vs_ancestral']:.2f} | {temps} |")
  # Records before the host field: a 2-core AMD EPYC (scripts/bench_decode.py).
  made = sorted({(r.get("host", "AMD EPYC"), r.get("jax", "0.10.2"),
                  r.get("cross_kv", "per_sample"))
                 for r in _bench_decode_records()})
  lines += ["", "Measured on: " + "; ".join(
      f"{host}, JAX {version}, cross-attention keys/values {kv}"
      for host, version, kv in made) + "."]
  return "\n".join(lines)


def decode_speed_row() -> str:
  """README: arithmetic's decode step on mT5-small against greedy's."""
  ratios = [r["arithmetic_vs_greedy_step"] for r in _bench_decode_records()
            if r["preset"] == "small"]
  return (f"| speed | arithmetic decode step of mT5-small "
          f"{min(ratios):.2f}-{max(ratios):.2f}x greedy's | "
          "`python scripts/bench_decode.py --out results/bench_decode.jsonl` |")


def _diversity_seed0() -> List[dict]:
  """The latest seed-0 record of each (model, T, N, method) of
  scripts/llm_diversity.py (the docs' command: `--seeds 0`)."""
  latest = {}
  for r in _jsonl(RESULTS / "llm" / "diversity.jsonl"):
    if r["seed"] == 0:
      latest[(r["model"], r["temperature"], r["n"], r["method"])] = r
  return list(latest.values())


def _table_row(cells) -> str:
  """A markdown table row; empty cells as `| |`."""
  return "|" + "|".join(f" {c} " if c != "" else " " for c in cells) + "|"


def llm_diversity_table() -> str:
  """docs/llm.md: first tokens and duplicates, seed 0 (the doc's command:
  `python scripts/llm_diversity.py --seeds 0`)."""
  table = llm_diversity.summarize(_diversity_seed0())
  lines = ["| model | T | N | method | distinct of N | duplicates | distinct "
           "first tokens | tokens with count floor/ceil(Nq) | max "
           "abs(count - Nq) |", "|---|---|---|---|---|---|---|---|---|"]
  for r in table:
    lines.append(
        f"| {r['model']} | {r['temperature']} | {r['n']} | {r['method']} | "
        f"{r['mean_distinct']:.1f} | {r['mean_duplicates']:.1f} | "
        f"{r['mean_distinct_first_tokens']:.1f} | "
        f"{r['share_floor_or_ceil']:.0%} | {r['max_abs_deviation']:.2f} |")
  return "\n".join(lines + ["", f"`{llm_diversity.summary_line(table)}`"])


def llm_first_tokens_row() -> str:
  """README: arithmetic's first tokens on the lattice (seed 0)."""
  records = _diversity_seed0()
  cases = [p["share_floor_or_ceil"] == 1.0 for r in records
           if r["method"] == "arithmetic" for p in r["prompts"]]
  table = llm_diversity.summarize(records)
  iid = [r["all_floor_or_ceil"] for r in table if r["method"] == "ancestral"]
  return (f"| LLM first tokens | arithmetic: every first token drawn "
          f"floor(Nq) or ceil(Nq) times in {sum(cases)} of {len(cases)} "
          f"(model, prompt, T, N) cases; ancestral in {sum(iid)} of the "
          f"{len(iid)} settings | `python scripts/llm_diversity.py --seeds 0` |")


def sharding_table() -> str:
  """docs/sharding.md: samples on each mesh against one device."""
  meshes = _json(RESULTS / "sharding_report.json")["meshes"]
  names = list(meshes)
  row = lambda label, cell: (f"| {label} | " + " | ".join(
      cell(meshes[m]) for m in names) + " |")
  pct = lambda x: f"{x:.0%}"
  return "\n".join([
      "| mesh (data x model) | " + " | ".join(names) + " |",
      "|---|" + "---:|" * len(names)] + [
          row(f"{m}: tokens equal", lambda r, m=m: pct(r[f"{m}_tokens_equal"]))
          for m in ("arithmetic", "ancestral", "beam")] + [
          row("arithmetic, max abs log-prob difference",
              lambda r: f"{r['arithmetic_max_abs_score_diff']:.1e}"),
          row("arithmetic with *full* code resolution: tokens equal",
              lambda r: pct(r["fullcode_tokens_equal"]))])


def small_grid_fig2_table() -> str:
  """docs/translation.md: an excerpt of the small grid's Fig. 2."""
  quality = _json(RESULTS / "experiments" / "summary.json")["quality"]
  picks = [(5, 0.2), (10, 0.4), (20, 0.2), (20, 0.8)]
  lines = ["| N | T | method | mean BLEU | oracle BLEU | diversity | "
           "duplicates |", "|---:|---:|---|---:|---:|---:|---:|"]
  cells = lambda q: (f"{q['mean_bleu']:.2f} | {q['max_bleu']:.2f} | "
                     f"{q['diversity']:.3f} | {q['duplicates']:.3f} |")
  for n, t in picks:
    for method in ("arithmetic", "ancestral"):
      q = next(q for q in quality if (q["n"], q["temperature"],
                                      q["method"]) == (n, t, method))
      lines.append(f"| {n} | {t} | {method} | " + cells(q))
  beams = [q for q in quality if q["method"] == "beam"]
  for q in beams[-1:]:
    lines.append(f"| {q['n']} | beam | beam search | " + cells(q))
  return "\n".join(lines)


def small_grid_std_table() -> str:
  """docs/translation.md: the small grid's Figs. 3-4 standard deviations."""
  summary = _json(RESULTS / "experiments" / "summary.json")
  estimator, ratios = summary["estimator"], summary["std_ratio"]
  picks = [("0.1", "4"), ("0.1", "8"), ("0.1", "16"), ("0.2", "16"),
           ("0.5", "16")]
  lines = ["| T | N | std arithmetic | std ancestral | ratio |",
           "|---:|---:|---:|---:|---:|"]
  for t, n in picks:
    a = estimator[f"T={t}"]["arithmetic"][n]
    c = estimator[f"T={t}"]["ancestral"][n]
    ratio = f"{a / c:.2f}"
    r = ratios.get(f"T={t}")
    if r and str(r["n"]) == n:
      lo, hi = r["ci95"]
      ratio = (f"{r['ratio']:.2f} (95 % bootstrap over verses {lo:.2f}-"
               f"{hi:.2f})" if t == picks[0][0] else
               f"{r['ratio']:.2f} ({lo:.2f}-{hi:.2f})")
    lines.append(f"| {t} | {n} | {a:.3f} | {c:.3f} | {ratio} |")
  return "\n".join(lines)


def paper_fig4_table() -> str:
  """docs/translation.md: the paper-size grid's Fig. 4 ratios."""
  fig4 = _json(RESULTS / "experiments_paper" / "summary.json")["fig4"]
  temps = sorted(fig4, key=lambda t: float(t.split("=")[1]))
  ns = sorted(fig4[temps[0]]["by_n"], key=int)
  lines = ["| T | " + " | ".join(("N = " if i == 0 else "") + n
                                 for i, n in enumerate(ns)) + " |",
           "|---|" + "---:|" * len(ns)]
  for t in temps:
    by_n = fig4[t]["by_n"]
    lines.append(f"| {t.split('=')[1]} | " + " | ".join(
        f"{by_n[n]['ratio']:.2f} ({by_n[n]['ci95'][0]:.2f}-"
        f"{by_n[n]['ci95'][1]:.2f})" for n in ns) + " |")
    lines.append("| share lower | " + " | ".join(
        f"{by_n[n]['verses_lower']:.2f}" for n in ns) + " |")
  return "\n".join(lines)


def intervals_table() -> str:
  """docs/translation.md: coverage and width of the K-lattice intervals."""
  rows = _json(RESULTS / "intervals" / "summary.json")["intervals"]
  label = {"iid": "iid (16 ancestral samples)", "K=4 x 4": "K = 4 lattices "
           "x 4", "K=8 x 2": "K = 8 lattices x 2"}
  lines = ["| T | codes | coverage of 95 % intervals | mean width (BLEU) | "
           "width / iid |", "|---|---|---:|---:|---:|"]
  for t in sorted(rows, key=float):
    for codes, r in rows[t].items():
      lines.append(f"| {t} | {label.get(codes, codes)} | "
                   f"{r['coverage']:.3f} | {r['mean_width']:.2f} | "
                   f"{r['width_vs_iid']:.2f} |")
  return "\n".join(lines)


def extensible_table() -> str:
  """docs/translation.md: van der Corput prefixes against fresh codes."""
  rows = _json(RESULTS / "intervals" / "summary.json")["extensible"]
  lines = ["| T | n | van der Corput prefix | fresh lattice | iid |",
           "|---|---|---:|---:|---:|"]
  for t in sorted(rows, key=float):
    for n in sorted(rows[t], key=int):
      r = rows[t][n]
      lines.append(f"| {t} | {n} | {r['vdc_prefix']:.2f} | "
                   f"{r['fresh_lattice']:.2f} | {r['iid']:.2f} |")
  return "\n".join(lines)


_PASSK_MODELS = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma 3"}


def _passk_words() -> Dict[tuple, dict]:
  """The word-problem summaries by (model, T, method), models in the
  docs' order."""
  rows = {(r["model"], r["temperature"], r["method"]): r
          for r in _json(RESULTS / "passk" / "summary.json")
          if r["task"] == "words"}
  return dict(sorted(rows.items(), key=lambda kv: (
      list(_PASSK_MODELS).index(kv[0][0]), kv[0][1], kv[0][2])))


def passk_words_table() -> str:
  """docs/passk.md: word problems' pass@k, arithmetic vs iid."""
  rows = _passk_words()
  ks = ["1", "8", "32", "64"]
  lines = ["| model | T | " + " | ".join(f"pass@{k}" for k in ks) + " |",
           "|---|---|" + "---|" * len(ks)]
  for (model, t, method), r in rows.items():
    if method != "arithmetic":
      continue
    iid = rows[(model, t, "iid")]
    lines.append(f"| {_PASSK_MODELS[model]} | {t} | " + " | ".join(
        f"{r['pass_at_k'][k][0]:.3f} vs {iid['pass_at_k'][k][0]:.3f}"
        for k in ks) + " |")
  return "\n".join(lines)


def passk_grpo_table() -> str:
  """docs/passk.md: Var(group-mean reward), arithmetic / iid."""
  rows = _passk_words()
  gs = ["4", "8", "16"]
  lines = ["| model | T | " + " | ".join(f"G = {g}" for g in gs) + " |",
           "|---|---|" + "---|" * len(gs)]
  for (model, t, method), r in rows.items():
    if method != "arithmetic":
      continue
    ratio = r["variance_ratio_vs_iid"]
    lines.append(f"| {_PASSK_MODELS[model]} | {t} | " + " | ".join(
        f"{ratio[g][0]:.2f} [{ratio[g][1]:.2f}, {ratio[g][2]:.2f}]"
        for g in gs) + " |")
  return "\n".join(lines)


def study_table() -> str:
  """docs/study.md: largest N per chip set, best mesh (`--max_exp` 10:
  N = 1024 is the largest tried, so it reads ">= 1024")."""
  best = _json(RESULTS / "study" / "summary.json")["best"]
  labels = {"beam": "beam search", "arithmetic": "arithmetic, one step, T5X "
            "layout", "arithmetic_shared": "arithmetic, keys/values per "
            "input (ours)"}
  topologies = ["v4-1x1x1", "v4-1x2x1", "v4-2x2x1", "v4-2x2x2"]
  lines = ["| largest N | L | 1 chip | 2 chips (1x2x1) | 4 chips (2x2x1) | "
           "8 chips (2x2x2) |", "|---|---|---:|---:|---:|---:|"]
  for method, label in labels.items():
    for i, length in enumerate((128, 256, 512, 1024)):
      cells = []
      for topology in topologies:
        r = best[f"{method} L{length} {topology}"]
        n = f">= {r['n']}" if r["n"] >= 2**10 else str(r["n"])
        mesh = "x".join(str(m) for m in r["mesh"])
        cells.append(n if topology == topologies[0] else f"{n} ({mesh})")
      lines.append(("| " + label if i == 0 else "|") + f" | {length} | " +
                   " | ".join(cells) + " |")
  return "\n".join(lines)


def cross_kv_table() -> str:
  """docs/models.md: keys/values per input against T5X's layout."""
  latest = {}
  for r in _jsonl(RESULTS / "bench_cross_kv.jsonl"):
    latest[(r["preset"], r["source_len"], r["n"])] = r
  g = lambda x: (f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 10 else
                 f"{x:.1f}" if x < 100 else f"{x:.0f}")
  lines = ["| preset | source S | N | T5X-style ms/step | per-input ms/step | "
           "speedup | temp MB T5X-style / per-input |",
           "|---|---:|---:|---:|---:|---:|---|"]
  mb = lambda x: (f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else
                  f"{x:.0f}")
  order = {"tiny": 0, "small": 1}
  for preset, source in sorted({k[:2] for k in latest},
                               key=lambda k: (order.get(k[0], 2), k)):
    rs = [latest[k] for k in sorted(latest) if k[:2] == (preset, source)]
    best = max(r["speedup"] for r in rs)
    speed = lambda r: (f"**{r['speedup']:.2f}**" if r["speedup"] == best
                       and best >= 1.3 else f"{r['speedup']:.2f}")
    lines.append(
        f"| {preset} | {source} | " + " / ".join(str(r["n"]) for r in rs) +
        " | " + " / ".join(g(r["per_sample"]["ms_per_step"]) for r in rs) +
        " | " + " / ".join(g(r["per_input"]["ms_per_step"]) for r in rs) +
        " | " + " / ".join(speed(r) for r in rs) + " | " + ", ".join(
            f"{mb(r['per_sample']['temp_mb'])}/{mb(r['per_input']['temp_mb'])}"
            for r in rs) + " |")
  return "\n".join(lines)


def bench_llm_table() -> str:
  """docs/llm.md: decode tokens/s, ours against transformers."""
  record = _jsonl(RESULTS / "llm" / "bench_llm.jsonl")[-1]
  rate = {(r["runtime"].split()[0], r["method"], r["batch"], r["n"]):
          r["decode_tok_s"] for r in record["rows"]}
  columns = [("ours", "greedy"), ("ours", "ancestral"), ("ours", "arithmetic"),
             ("transformers", "greedy"), ("transformers", "sampling")]
  lines = ["| B | N | ours greedy | ours ancestral | ours arithmetic | "
           "transformers greedy | transformers sampling |",
           "|---|---|---|---|---|---|---|"]
  for b, n in sorted({k[2:] for k in rate}):
    cells = [f"{rate[(who, m, b, n)]:.0f}" if (who, m, b, n) in rate else ""
             for who, m in columns]
    lines.append(_table_row([b, n, *cells]))
  return "\n".join(lines)


def readme_table() -> str:
  """README: "What it does today". Rows whose numbers are read from
  records are computed; the others name the command that prints them."""
  rows = [
      variance_row(),
      "| T5X parity | `arithmetic_sample` through T5X's `predict_batch_with_aux` equals ours; our `beam_search` equals T5X's; real `t5x infer` runs | `make test-t5x` |",
      translation_row(),
      fig4_row(),
      fig2_row(),
      decode_speed_row(),
      experiments_speed_row(),
      '| sharding | identical samples on every data x model mesh of 8 devices and on two hosts | `python scripts/sharding_report.py` |',
      '| Fig. 5 | mT5-XXL on TPU v4 (real compiler): beam search needs 2 chips from N = 32/16/8/4 at L = 128/256/512/1024; arithmetic sampling never needs more chips than beam search | `python -m arithmetic_apps.study --report_only` |',
      "| LLMs vs transformers | SmolLM2-135M and Gemma 3 270M from GGUF: logits within 1.5e-4 of transformers' (tolerance 2.2e-3), greedy batches identical, tokenizers id for id on 95 texts (one documented SmolLM2 numeral case) | `python scripts/llm_check.py`, `make test-llm` |",
      llm_first_tokens_row(),
      llm_engine_row(),
      "| GRPO groups | word problems, T = 0.4, groups of 16: variance of the group-mean reward 0.50x iid's (SmolLM2) and 0.40x (Gemma 3), intervals below 1; no measurable gain at T = 0.8, 1.0; pass@1 equal; HumanEval out of these models' reach | `python scripts/passk.py --report` |",
      rollouts_row(),
      sandbox_row(),
      "| keys/values per input | 2x the samples per chip of T5X's layout at every L on one chip | `python -m arithmetic_apps.study --report_only` |",
  ]
  return "\n".join(["| | headline | command |", "|---|---|---|"] + rows)


def rollouts_table() -> str:
  """docs/passk.md: time per completion of each configuration."""
  last = _rollout_records()
  plain = last[("generate", "arithmetic", False)]["seconds_per_completion"]
  lines = ["| call | codes | per-token log-probs | s per completion | "
           "x generate (arithmetic) |", "|---|---|---|---:|---:|"]
  for (kind, scheme, logps), r in sorted(last.items()):
    lines.append(f"| {kind} | {scheme} | {'yes' if logps else 'no'} | "
                 f"{r['seconds_per_completion']} | "
                 f"{r['seconds_per_completion'] / plain:.2f} |")
  return "\n".join(lines)


TIER_WHAT = {
    "fast": ("`make test-fast`", "every test not marked `slow`, two pytest "
             "workers, 25 examples per property test"),
    "full": ("`make test`", "every test, two pytest workers (one module per "
             "worker), 400 examples per property test"),
    "ci": ("`.ci/run`", "on a fresh clone with `CI=true`: installs, `make "
           "test` (property tests at 1,000 examples), `make check-results`, "
           "`make test-t5x` and `make test-llm`"),
}


def test_tiers() -> str:
  """docs/testing.md: each tier's last measured time against its budget."""
  last = {}
  path = RESULTS / "test_budget.jsonl"
  records = _jsonl(path) if path.exists() else []
  for r in records:
    last[r["tier"]] = r
  lines = ["| command | what | budget | last measured on 2 cores |",
           "|---|---|---:|---|"]
  for tier, (command, what) in TIER_WHAT.items():
    r = last.get(tier)
    measured = "not measured yet"
    if r:
      failed = f", {r['failed']} failed" if r.get("failed") else ""
      counts = (f"; {r['passed']} passed{failed}, {r['skipped']} skipped"
                if r["passed"] else "")
      measured = (f"{r['wall_seconds'] / 60:.1f} min wall{counts} "
                  f"(at {r.get('commit', '?')}; {r['cpu']})")
    budget = f"{test_budget.TIERS[tier][1] // 60} min"
    lines.append(f"| {command} | {what} | {budget} | {measured} |")
  parts = last.get("ci", {}).get("parts")
  if parts:
    lines.append("")
    lines.append("Within that `.ci/run`: " + "; ".join(
        f"`{name}` {text}" for name, text in parts.items()) + ".")
  # How much a tier's time moves on one CPU: its last records there.
  spread = []
  for tier, (command, _) in TIER_WHAT.items():
    cpu = last.get(tier, {}).get("cpu")
    mine = [r["wall_seconds"] / 60 for r in records
            if r["tier"] == tier and r["cpu"] == cpu][-8:]
    if len(mine) > 1:
      over = sum(m * 60 > test_budget.TIERS[tier][1] for m in mine)
      spread.append(f"{command} {min(mine):.1f}-{max(mine):.1f} min over "
                    f"its last {len(mine)} ({over} over budget)")
  if spread:
    lines.append("")
    lines.append("The same tiers on the same kind of CPU, their last records: "
                 + "; ".join(spread) + ".")
  return "\n".join(lines)


def engine_rounding_table() -> str:
  """docs/engine.md: how the compacted scheduler rounds its rows (multiples
  of 64, 32, 16 against 8 x 2^k), one table per CPU, the newest first."""
  latest = {}
  records = _jsonl(RESULTS / "llm" / "bench_rounding.jsonl")
  for r in records:
    key = (r["host"], r["variant"], r["method"], r["n"], r["temperature"])
    latest.pop(key, None)  # kept in the order the latest records ran
    latest[key] = r
  order = {key: i for i, key in enumerate(latest)}
  hosts = []
  for r in records:
    if r["host"] in hosts:
      hosts.remove(r["host"])
    hosts.insert(0, r["host"])
  tables = []
  for host in hosts:
    mine = {k[1:]: r for k, r in latest.items() if k[0] == host}
    lines = ["| variant | method | N | T | warm s | first call s (compiles "
             "included) | model row-steps | same samples as the other "
             "variants |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for (variant, method, n, t), r in sorted(
        mine.items(), key=lambda kv: (kv[0][2], kv[0][1],
                                      order[(host,) + kv[0]])):
      sums = {o["checksum"] for k, o in mine.items() if k[1:] == (method, n, t)}
      others = sum(1 for k in mine if k[1:] == (method, n, t)) > 1
      same = ("-" if not others else "yes" if len(sums) == 1 else "no")
      lines.append(f"| {variant} | {method} | {n} | {t} | "
                   f"{r['warm_seconds']} | {r['first_seconds']} | "
                   f"{r['row_steps']:,} | {same} |")
    tables.append("\n".join(lines + _measured_on(mine.values())))
  return "\n\n".join(tables)


def engine_programs_table() -> str:
  """docs/engine.md: programs compiled as N varies, padded or not."""
  latest = {}
  for r in _jsonl(RESULTS / "llm" / "bench_programs.jsonl"):
    latest[(r["variant"], r["method"])] = r
  lines = ["| variant | method | N, in order | first call s (compiles "
           "included) | warm s | segment programs after each | same "
           "samples |",
           "|---|---|---|---|---|---|---|"]
  for (variant, method), r in sorted(latest.items(),
                                     key=lambda kv: (kv[0][1], kv[0][0])):
    other = latest.get(("unpadded" if variant == "padded" else "padded",
                        method))
    same = ("-" if other is None or other["ns"] != r["ns"] else
            "yes" if other["checksums"] == r["checksums"] else "no")
    join = lambda xs: ", ".join(str(x) for x in xs)
    lines.append(f"| {variant} | {method} | {join(r['ns'])} | "
                 f"{join(r['first_seconds'])} | {join(r['warm_seconds'])} | "
                 f"{join(r['segment_programs'])} | {same} |")
  return "\n".join(lines + _measured_on(latest.values()))


BLOCKS: Dict[str, Callable[[], str]] = {
    "test-tiers": test_tiers,
    "rollouts-cost": rollouts_table,
    "readme-table": readme_table,
    "engine-benchmark": llm_engine_table,
    "engine-rounding": engine_rounding_table,
    "engine-programs": engine_programs_table,
    "bench-decode": bench_decode_table,
    "llm-diversity": llm_diversity_table,
    "sharding-meshes": sharding_table,
    "small-grid-fig2": small_grid_fig2_table,
    "small-grid-std": small_grid_std_table,
    "paper-fig4": paper_fig4_table,
    "intervals": intervals_table,
    "extensible": extensible_table,
    "passk-words": passk_words_table,
    "passk-grpo": passk_grpo_table,
    "study-largest-n": study_table,
    "cross-kv": cross_kv_table,
    "bench-llm": bench_llm_table,
    "experiments-speed": experiments_speed_table,
    "sandbox-cost": sandbox_table,
    "server-benchmark": server_table,
}


def render(text: str) -> str:
  """The page with every generated block written from its records."""
  def one(match):
    name = match.group(2)
    if name not in BLOCKS:
      raise KeyError(f"unknown numbers block {name!r}")
    return match.group(1) + BLOCKS[name]() + "\n" + match.group(4)
  return _BLOCK.sub(one, text)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true")
  args = parser.parse_args(argv)
  stale = []
  for page in PAGES:
    text = page.read_text()
    new = render(text)
    if new != text:
      stale.append(str(page.relative_to(ROOT)))
      if not args.check:
        page.write_text(new)
  verb = "differ from their records" if args.check else "rewritten"
  print(f"doc_numbers: {len(stale)} page(s) {verb}: {stale}")
  return 1 if args.check and stale else 0


if __name__ == "__main__":
  sys.exit(main())
