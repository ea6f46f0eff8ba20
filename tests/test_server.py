"""The OpenAI-compatible sampling server, over loopback, with real clients.

A decoder of SmolLM2's shapes (`llm_models.mid_llm`) served by uvicorn in
this process (a thread, an ephemeral loopback port); the SIGTERM test runs
the real command in a subprocess. Checked:

- the API: models, health, completions and chat completions through the
  official `openai` client (sync, async, streaming with n > 1), per-token
  log-probs equal to `llm.token_log_probs`, usage counts;
- load independence: a request's completions equal offline `generate`
  with its seed, alone and among 16 concurrent clients with other seeds,
  prompts, n and methods;
- auth on every endpoint but /health; limits (n, max_tokens, per-client
  requests, queue: 429 with Retry-After); bad input answered as OpenAI
  error objects (400 / 404 / 413), never 500, for a property-based fuzz of
  bodies;
- a client that disconnects frees its rows; SIGTERM answers every request
  in flight (finished or 503) and exits.
"""

import asyncio
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st

from arithmetic_apps.server.app import create_app
from arithmetic_apps.server.batcher import Limits
from arithmetic_decoding import llm as llm_lib
from arithmetic_decoding.llm import generate
from arithmetic_decoding.request import SamplingParams
from llm_models import mid_llm

KEY = "test-key"
PROMPTS = ["hehe he", "h", "he eh hehe ehe h", "eh", "ehh", "hee he"]


class Served:
  """A uvicorn server of `app` on a free loopback port, in a thread."""

  def __init__(self, app):
    self.app = app
    self.server = uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="error"))
    self.thread = threading.Thread(target=self.server.run, daemon=True)
    self.thread.start()
    while not self.server.started:
      time.sleep(0.01)
    port = self.server.servers[0].sockets[0].getsockname()[1]
    self.url = f"http://127.0.0.1:{port}"

  def close(self):
    self.server.should_exit = True
    self.thread.join(10)
    self.app.state.batcher.stop()


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
  return mid_llm(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def served(llm):
  s = Served(create_app(llm, "mid", Limits(max_n=16, max_tokens=64,
                                           max_per_client=64), api_key=KEY))
  yield s
  s.close()


def _client(served):
  return openai.OpenAI(base_url=served.url + "/v1", api_key=KEY,
                       max_retries=0)


def _offline(llm, prompt, n, seed, tokens, method="arithmetic", chat=False,
             temperature=1.0):
  return generate(llm, prompt, n, method=method, seed=seed,
                  max_new_tokens=tokens, chat=chat,
                  temperature=temperature).texts[0]


def test_models_health_and_auth(served):
  plain = httpx.Client(base_url=served.url)
  assert plain.get("/health").json()["status"] == "ok"
  for path in ("/v1/models", "/v1/completions", "/v1/chat/completions"):
    r = (plain.get(path) if path == "/v1/models" else
         plain.post(path, json={}))
    assert r.status_code == 401, path
    assert r.json()["error"]["code"] == "invalid_api_key"
  wrong = plain.get("/v1/models", headers={"Authorization": "Bearer no"})
  assert wrong.status_code == 401
  assert [m.id for m in _client(served).models.list()] == ["mid"]


def test_completions_equal_offline_generate(served, llm):
  r = _client(served).completions.create(
      model="mid", prompt="hehe he", n=4, max_tokens=12, seed=11)
  assert [c.text for c in r.choices] == _offline(llm, "hehe he", 4, 11, 12)
  assert [c.index for c in r.choices] == [0, 1, 2, 3]
  codes = [c.model_extra["code"] for c in r.choices]
  assert codes == sorted(codes) and len(set(codes)) == 4
  assert r.model_extra["seed"] == 11
  assert r.usage.prompt_tokens == len(llm.encode("hehe he"))
  # Two prompts: choices prompt-major; each prompt's as alone (its index
  # is its id in the seed policy).
  two = _client(served).completions.create(
      model="mid", prompt=["hehe he", "eh"], n=2, max_tokens=6, seed=2)
  gen = generate(llm, ["hehe he", "eh"], 2, seed=2, max_new_tokens=6)
  assert [c.text for c in two.choices] == gen.texts[0] + gen.texts[1]


def test_chat_logprobs_and_usage(served, llm):
  messages = [{"role": "user", "content": "hehe"}]
  r = _client(served).chat.completions.create(
      model="mid", messages=messages, n=2, max_tokens=8, seed=5,
      logprobs=True, top_logprobs=3)
  assert [c.message.content for c in r.choices] == _offline(
      llm, "hehe", 2, 5, 8, chat=True)
  prompt = llm.encode(llm.chat_prompt(messages))
  sampling = SamplingParams(n=2, max_new_tokens=8, seed=5)
  gen = generate(llm, "hehe", 2, seed=5, max_new_tokens=8, chat=True)
  ref, alts, alt_lps = llm_lib.token_log_probs(llm, prompt, gen.tokens[0],
                                               sampling, top=3)
  for j, choice in enumerate(r.choices):
    content = choice.logprobs.content
    n = len(gen.tokens[0][j])
    assert [t.logprob for t in content] == ref[j][:n].tolist()
    assert [[a.logprob for a in t.top_logprobs] for t in content] == (
        alt_lps[j][:n].tolist())
    assert content[0].top_logprobs[0].logprob >= content[0].logprob
  assert r.usage.completion_tokens == sum(len(t) for t in gen.tokens[0])


def test_streaming_interleaves_choices_and_equals_the_whole(served, llm):
  stream = _client(served).chat.completions.create(
      model="mid", messages=[{"role": "user", "content": "he"}], n=3,
      max_tokens=24, seed=8, stream=True,
      stream_options={"include_usage": True})
  texts, order, reasons, usage = {}, [], {}, None
  for chunk in stream:
    if chunk.usage is not None:
      usage = chunk.usage
    for c in chunk.choices:
      texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
      if c.delta.content:
        order.append(c.index)
      if c.finish_reason:
        reasons[c.index] = c.finish_reason
  want = _offline(llm, "he", 3, 8, 24, chat=True)
  assert [texts[i] for i in range(3)] == want
  assert set(reasons) == {0, 1, 2} and usage is not None
  # Deltas of different choices arrive in between one another.
  assert len(order) > 3 and order != sorted(order)


@pytest.mark.slow
def test_async_client(served, llm):
  async def ask():
    client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key=KEY,
                                max_retries=0)
    return await asyncio.gather(*[client.completions.create(
        model="mid", prompt=p, n=2, max_tokens=6, seed=i)
                                  for i, p in enumerate(PROMPTS[:4])])
  results = asyncio.run(ask())
  for i, (r, p) in enumerate(zip(results, PROMPTS)):
    assert [c.text for c in r.choices] == _offline(llm, p, 2, i, 6)


@pytest.mark.slow
def test_samples_do_not_depend_on_the_load(served, llm):
  """16 concurrent clients, each asking its own (prompt, n, seed, method,
  max_tokens): every answer equals its offline `generate`, as alone. Every
  fifth asks for a long prompt and 40 tokens, more cache than the others
  need (a batch once stopped growing at its first request's size)."""
  long_prompt = "he eh hehe ehe h " * 3
  asks = [(long_prompt if i % 5 == 4 else PROMPTS[i % len(PROMPTS)],
           [1, 2, 4, 8][i % 4], 100 + i,
           ["arithmetic", "ancestral"][(i // 4) % 2],
           40 if i % 5 == 4 else 10) for i in range(16)]
  want = [_offline(llm, p, n, seed, tokens, method)
          for p, n, seed, method, tokens in asks]

  def one(ask):
    p, n, seed, method, tokens = ask
    return [c.text for c in _client(served).completions.create(
        model="mid", prompt=p, n=n, max_tokens=tokens, seed=seed,
        extra_body={"method": method}).choices]

  with concurrent.futures.ThreadPoolExecutor(16) as pool:
    got = list(pool.map(one, asks))
  for ask, g, w in zip(asks, got, want):
    sort = (lambda x: x) if ask[3] == "arithmetic" else sorted
    assert sort(g) == sort(w), ask
  assert served.app.state.batcher.status()["batches"] <= 2


def _post(served, path, body, **kw):
  headers = {"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})}
  return httpx.post(served.url + path, headers=headers, timeout=60,
                    content=body if isinstance(body, (bytes, str)) else
                    json.dumps(body), **kw)


@pytest.mark.parametrize("body,status,param", [
    ({"model": "mid", "prompt": "h", "n": 0}, 400, "n"),
    ({"model": "mid", "prompt": "h", "n": 17}, 400, "n"),
    ({"model": "mid", "prompt": "h", "max_tokens": 65}, 400, "max_tokens"),
    ({"model": "mid", "prompt": "h", "temperature": -1}, 400, "temperature"),
    ({"model": "mid", "prompt": "h", "temperature": "hot"}, 400,
     "temperature"),
    ({"model": "mid", "prompt": ""}, 400, "prompt"),
    ({"model": "mid", "prompt": "h", "colour": "red"}, 400, "colour"),
    ({"model": "mid", "prompt": "h", "echo": True}, 400, "echo"),
    ({"model": "mid", "prompt": "h", "method": "nucleus"}, 400, "method"),
    ({"model": "mid", "prompt": "h", "top_k": 5, "top_p": 0.5}, 400,
     "top_k"),
    ({"model": "mid", "prompt": "h", "stream": True, "logprobs": 1}, 400,
     "logprobs"),
    ({"model": "other", "prompt": "h"}, 404, "model"),
    ({"prompt": "h"}, 400, "model"),
])
def test_bad_requests_get_openai_errors(served, body, status, param):
  r = _post(served, "/v1/completions", body)
  assert r.status_code == status, r.text
  error = r.json()["error"]
  assert error["param"] == param and error["message"]


def test_context_limit_body_size_and_bad_json(served, llm):
  long = "he " * 200
  r = _post(served, "/v1/completions",
            {"model": "mid", "prompt": long, "max_tokens": 64})
  assert r.status_code == 400
  assert f"context length {llm.config.context_length}" in (
      r.json()["error"]["message"])
  assert _post(served, "/v1/completions", b"{not json").status_code == 400
  assert _post(served, "/v1/completions", b"[1, 2]").status_code == 400
  big = json.dumps({"model": "mid", "prompt": "h" * (1 << 20)})
  assert _post(served, "/v1/completions", big).status_code == 413


@pytest.mark.slow
def test_overload_and_per_client_limits(llm):
  """A queue of one: a third concurrent request is refused with 429 and
  Retry-After, as is a client's request beyond its own limit."""
  s = Served(create_app(llm, "mid", Limits(max_queue=1, max_rows=64,
                                           max_per_client=2)))
  try:
    slow = {"model": "mid", "prompt": "he", "n": 16, "max_tokens": 60,
            "temperature": 1.0}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
      futures = [pool.submit(_post, s, "/v1/completions",
                             dict(slow, user=f"u{i}", seed=i))
                 for i in range(6)]
      codes = [f.result().status_code for f in futures]
    assert codes.count(200) >= 2 and codes.count(429) >= 1
    refused = [f.result() for f in futures if f.result().status_code == 429]
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
      futures = [pool.submit(_post, s, "/v1/completions",
                             dict(slow, user="same", seed=i, max_tokens=40))
                 for i in range(3)]
      codes = [f.result().status_code for f in futures]
    assert 429 in codes or codes.count(200) == 3  # queue or client limit
  finally:
    s.close()


def _wait(predicate, seconds=60.0):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(0.05)
  return False


@pytest.mark.slow
def test_a_client_that_disconnects_frees_its_rows(llm):
  s = Served(create_app(llm, "mid", Limits(max_tokens=200)))
  try:
    batcher = s.app.state.batcher
    body = {"model": "mid", "prompt": "he", "n": 16, "max_tokens": 200,
            "temperature": 1.0, "seed": 1}
    with httpx.Client(base_url=s.url) as c:  # waiting, not streaming
      try:
        c.post("/v1/completions", json=body, timeout=1.0)
      except httpx.TimeoutException:
        pass
    assert _wait(lambda: batcher.status()["running"] == 0)
    with httpx.Client(base_url=s.url) as c:  # streaming
      with c.stream("POST", "/v1/completions", json=dict(body, stream=True),
                    timeout=30) as r:
        for line in r.iter_lines():
          if line.startswith("data: {") and '"text": "' in line:
            break
    assert _wait(lambda: batcher.status()["running"] == 0)
    assert batcher.status().get("cancelled", 0) >= 2, batcher.status()
  finally:
    s.close()


KEYS = ["model", "prompt", "messages", "n", "temperature", "top_p", "top_k",
        "max_tokens", "stop", "seed", "stream", "logprobs", "method",
        "code_scheme", "code_resolution", "user", "echo", "best_of"]
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 70), st.floats(-2, 3),
    st.text(max_size=8), st.lists(st.text(max_size=4), max_size=5),
    st.sampled_from(["mid", "he", "arithmetic", "beam", "greedy", "iid"]),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(
        ["user", "bot"]), "content": st.text(max_size=5)}), max_size=2))


@settings(max_examples=40, deadline=None)
@given(body=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=7),
       chat=st.booleans())
def test_fuzzed_bodies_never_get_a_500(served, body, chat):
  body = dict(body)
  if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 8:
    body["max_tokens"] = 8  # keep the run short: the bounds are tested
  r = _post(served, "/v1/chat/completions" if chat else "/v1/completions",
            body)
  assert r.status_code in (200, 400, 404), r.text
  if r.status_code != 200:
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_sigterm_answers_every_request_in_flight(tmp_path):
  """The command, on a tiny GGUF model: requests in flight when SIGTERM
  arrives are answered (200, or 503 past the deadline), a new one gets 503
  or no connection, and the process exits."""
  from llm_models import tiny_config  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from arithmetic_decoding.models.decoder_model import DecoderOnlyModel  # pylint: disable=g-import-not-at-top
  from gguf_files import write_tiny  # pylint: disable=g-import-not-at-top
  config = tiny_config("llama")
  params = jax.tree_util.tree_map(
      lambda x: np.asarray(x), DecoderOnlyModel(config).init(
          jax.random.PRNGKey(0)))
  path = write_tiny(tmp_path / "tiny.gguf", config, params)
  port = _free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "arithmetic_apps.server", "--model", str(path),
       "--port", str(port), "--shutdown-seconds", "20"],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env=dict(os.environ, JAX_PLATFORMS="cpu"))
  url = f"http://127.0.0.1:{port}"
  try:
    assert _wait(lambda: _up(url), 120), proc.stdout.read()
    body = {"model": "tiny.gguf", "prompt": "he", "n": 8, "max_tokens": 40}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
      futures = [pool.submit(httpx.post, url + "/v1/completions",
                             json=dict(body, seed=i), timeout=60)
                 for i in range(4)]
      assert _wait(lambda: httpx.get(url + "/health").json()["running"] +
                   httpx.get(url + "/health").json()["queued"] > 0, 30)
      proc.send_signal(signal.SIGTERM)
      answers = [f.result() for f in futures]
    assert all(r.status_code in (200, 503) for r in answers)
    assert all(("choices" in r.json()) == (r.status_code == 200)
               for r in answers)
    # uvicorn re-raises the signal it caught once it has shut down.
    assert proc.wait(60) in (0, -signal.SIGTERM)
  finally:
    proc.kill()


def _up(url):
  try:
    return httpx.get(url + "/health", timeout=1).status_code == 200
  except httpx.HTTPError:
    return False
