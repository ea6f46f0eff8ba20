"""The HTTP side of the sampling server: FastAPI routes over a `Batcher`.

  GET  /health               liveness and the batcher's counters (no key)
  GET  /v1/models            the one model served
  POST /v1/completions       prompt(s) -> n completions each
  POST /v1/chat/completions  messages (the model's chat template) -> n replies

Every error is an OpenAI error object, {"error": {"message", "type",
"param", "code"}}: 400 for an invalid field, type or value (a prompt that
with `max_tokens` passes the context names the limit), 401 without the API
key (when the server has one; every endpoint but /health), 404 for a model
it does not serve, 413 for a body over `Limits.max_body_bytes`, 429 (with
Retry-After) when the queue is full or a client has too many requests in
flight, 503 (with Retry-After) while shutting down.

A client that disconnects frees its rows: a waiting handler notices within
a quarter of a second, a streaming one when its next write fails, and the
batcher ends the job's rows at the next segment boundary.
"""

from __future__ import annotations

import asyncio
import collections
import json
import secrets
import time
import uuid
from typing import List, Optional

import fastapi
import pydantic
from fastapi import responses
from fastapi.exceptions import RequestValidationError

from arithmetic_apps.server import schema
from arithmetic_apps.server.batcher import (Batcher, Choice, Job, Limits,
                                            Overloaded, ShuttingDown)
from arithmetic_decoding import llm as llm_lib
from arithmetic_decoding.request import SamplingParams


class ApiError(Exception):
  """An error answered as an OpenAI error object."""

  def __init__(self, status: int, message: str, kind: str,
               param: Optional[str] = None, code: Optional[str] = None,
               retry_after: Optional[int] = None):
    super().__init__(message)
    self.status, self.message, self.kind = status, message, kind
    self.param, self.code, self.retry_after = param, code, retry_after

  def response(self) -> responses.JSONResponse:
    body = schema.ErrorResponse(error=schema.ErrorBody(
        message=self.message, type=self.kind, param=self.param,
        code=self.code))
    headers = ({"Retry-After": str(self.retry_after)}
               if self.retry_after is not None else None)
    return responses.JSONResponse(body.model_dump(), status_code=self.status,
                                  headers=headers)


def _invalid(message: str, param: Optional[str] = None) -> ApiError:
  return ApiError(400, message, "invalid_request_error", param)


def create_app(llm, model_id: str, limits: Limits = Limits(),
               api_key: Optional[str] = None,
               batcher: Optional[Batcher] = None) -> fastapi.FastAPI:
  """The API for one loaded model (`arithmetic_decoding.llm.LLM`) served
  as `model_id`; `api_key`: required as a bearer token on every endpoint
  but /health (None: no key)."""
  batcher = batcher or Batcher(llm, limits)
  app = fastapi.FastAPI(title="arithmetic-decoding sampling server",
                        docs_url=None, redoc_url=None)
  app.state.batcher = batcher
  in_flight = collections.Counter()
  created = int(time.time())

  @app.exception_handler(ApiError)
  async def _api_error(request, error: ApiError):
    del request
    return error.response()

  @app.exception_handler(RequestValidationError)
  async def _validation(request, error: RequestValidationError):
    del request
    first = error.errors()[0] if error.errors() else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    message = first.get("msg", "invalid request")
    if first.get("type") == "json_invalid":
      message = "the body is not valid JSON"
    return _invalid(f"{'.'.join(loc) + ': ' if loc else ''}{message}",
                    ".".join(loc) or None).response()

  @app.exception_handler(Exception)
  async def _unexpected(request, error: Exception):
    del request
    return ApiError(500, f"internal error: {type(error).__name__}",
                    "server_error").response()

  app.add_middleware(_Guard, limits=limits, api_key=api_key)

  async def _body(request: fastapi.Request, kind):
    """The request body, read up to the limit (chunked bodies too), as
    `kind`."""
    data = bytearray()
    async for chunk in request.stream():
      data += chunk
      if len(data) > limits.max_body_bytes:
        raise ApiError(413, f"the body is larger than "
                       f"{limits.max_body_bytes} bytes",
                       "invalid_request_error")
    try:
      raw = json.loads(bytes(data) or b"null")
    except (ValueError, UnicodeDecodeError) as e:
      raise _invalid("the body is not valid JSON") from e
    if not isinstance(raw, dict):
      raise _invalid("the body must be a JSON object")
    try:
      return kind.model_validate(raw)
    except pydantic.ValidationError as e:
      first = e.errors()[0]
      loc = ".".join(str(x) for x in first["loc"])
      raise _invalid(f"{loc}: {first['msg']}", loc or None) from e

  @app.get("/health")
  async def health():
    status = batcher.status()
    return {"status": "draining" if status["draining"] else "ok",
            "model": model_id, **status}

  @app.get("/v1/models")
  async def models():
    return schema.ModelList(data=[schema.ModelCard(
        id=model_id, created=created)]).model_dump()

  def _sampling(body, new_tokens: int) -> SamplingParams:
    if body.model != model_id:
      raise ApiError(404, f"the model {body.model!r} is not served here "
                     f"(GET /v1/models: {model_id!r})",
                     "invalid_request_error", "model", "model_not_found")
    field = body.unsupported()
    if field is not None:
      raise _invalid(f"{field} is not supported by this server", field)
    if body.n > limits.max_n:
      raise _invalid(f"n must be <= {limits.max_n}; got {body.n}", "n")
    if new_tokens > limits.max_tokens:
      raise _invalid(f"max_tokens must be <= {limits.max_tokens}; got "
                     f"{new_tokens}", "max_tokens")
    seed = body.seed if body.seed is not None else secrets.randbits(32)
    try:
      return SamplingParams(
          n=body.n, method=body.method, temperature=body.temperature,
          topk=body.top_k, topp=0.0 if body.top_p >= 1.0 else body.top_p,
          max_new_tokens=new_tokens, seed=seed,
          code_scheme=body.code_scheme, code_resolution=body.code_resolution)
    except (ValueError, TypeError) as e:
      raise _invalid(str(e)) from e

  def _prepare(texts: List[str], steps: int):
    try:
      return llm_lib.prepare_prompts(llm, texts, steps, False)[:2]
    except (ValueError, TypeError) as e:
      raise _invalid(str(e), "prompt") from e

  async def _run(request: fastapi.Request, body, texts: List[str],
                 sampling: SamplingParams, top: Optional[int], render,
                 render_chunk):
    client = body.user or request.headers.get("authorization") or (
        request.client.host if request.client else "?")
    if in_flight[client] >= limits.max_per_client:
      raise ApiError(429, f"too many requests in flight for this client "
                     f"(max {limits.max_per_client})", "rate_limit_error",
                     retry_after=1)
    prompts, ids = _prepare(texts, sampling.max_new_tokens)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    events: asyncio.Queue = asyncio.Queue()

    def on_done(result):
      if not done.done():
        done.set_result(result)
      events.put_nowait(("done", result))

    def on_progress(index, text, finished):
      events.put_nowait(("text", (index, text, finished)))

    job = Job(ids=ids, texts=prompts, sampling=sampling,
              stops=body.stops(), top_logprobs=top, loop=loop,
              on_done=on_done,
              on_progress=on_progress if body.stream else None)
    try:
      batcher.submit(job)
    except Overloaded as e:
      raise ApiError(429, f"the server is overloaded: {e}",
                     "rate_limit_error", retry_after=e.retry_after) from e
    except ShuttingDown as e:
      raise ApiError(503, str(e), "server_error", retry_after=5) from e
    in_flight[client] += 1
    usage_prompt = sum(len(x) for x in ids)

    def failure(result) -> Optional[ApiError]:
      if isinstance(result, ShuttingDown):
        return ApiError(503, str(result), "server_error", retry_after=5)
      if isinstance(result, ValueError):
        return _invalid(str(result))
      if isinstance(result, Exception):
        return ApiError(500, f"decoding failed: {type(result).__name__}: "
                        f"{result}", "server_error")
      return None

    if not body.stream:
      try:
        while not done.done():
          try:
            await asyncio.wait_for(asyncio.shield(done), 0.25)
          except asyncio.TimeoutError:
            if await request.is_disconnected():
              batcher.cancel(job)
              return responses.Response(status_code=499)
        result = done.result()
      finally:
        in_flight[client] -= 1
      error = failure(result)
      if error is not None:
        raise error
      return render(result, usage_prompt, sampling.seed)

    async def stream():
      include_usage = bool(body.stream_options and
                           body.stream_options.include_usage)
      sent = {}
      try:
        yield _sse(render_chunk(None, "", None, None))  # opens the stream
        while True:
          kind, value = await events.get()
          if kind == "text":
            index, text, _ = value
            delta = text[len(sent.get(index, "")):]
            if delta and text.startswith(sent.get(index, "")):
              sent[index] = text
              yield _sse(render_chunk(index, delta, None, None))
            continue
          error = failure(value)
          if error is not None:
            yield _sse({"error": schema.ErrorBody(
                message=error.message, type=error.kind).model_dump()})
            break
          for index, choice in enumerate(value):
            before = sent.get(index, "")
            delta = (choice.text[len(before):] if
                     choice.text.startswith(before) else choice.text)
            yield _sse(render_chunk(index, delta, choice.finish_reason,
                                    choice.code))
          if include_usage:
            yield _sse(render_chunk(None, None, None, None,
                                    usage=_usage(value, usage_prompt)))
          break
        yield "data: [DONE]\n\n"
      finally:
        in_flight[client] -= 1
        if not done.done():
          batcher.cancel(job)

    return responses.StreamingResponse(stream(),
                                       media_type="text/event-stream")

  @app.post("/v1/completions")
  async def completions(request: fastapi.Request):
    body = await _body(request, schema.CompletionRequest)
    if len(body.prompts()) > limits.max_prompts:
      raise _invalid(f"prompt may hold at most {limits.max_prompts} "
                     "prompts", "prompt")
    sampling = _sampling(body, body.max_tokens)
    rid = f"cmpl-{uuid.uuid4().hex}"

    def render(choices: List[Choice], prompt_tokens, seed):
      return schema.CompletionResponse(
          id=rid, created=int(time.time()), model=model_id,
          choices=[schema.CompletionChoice(
              index=i, text=c.text, finish_reason=c.finish_reason,
              code=c.code, logprobs=_completion_logprobs(llm, c))
                   for i, c in enumerate(choices)],
          usage=_usage(choices, prompt_tokens), seed=seed).model_dump()

    def render_chunk(index, text, reason, code, usage=None):
      choices = ([] if index is None else [dict(
          index=index, text=text, logprobs=None, finish_reason=reason,
          code=code)])
      return dict(id=rid, object="text_completion", created=int(time.time()),
                  model=model_id, choices=choices, usage=usage,
                  seed=sampling.seed)

    if body.stream and body.logprobs is not None:
      raise _invalid("logprobs with stream is not supported", "logprobs")
    return await _run(request, body, body.prompts(), sampling,
                      body.logprobs, render, render_chunk)

  @app.post("/v1/chat/completions")
  async def chat(request: fastapi.Request):
    body = await _body(request, schema.ChatCompletionRequest)
    sampling = _sampling(body, body.new_tokens())
    text = llm.chat_prompt([m.model_dump(exclude_none=True)
                            for m in body.messages])
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    top = (body.top_logprobs or 0) if body.logprobs else None

    def render(choices: List[Choice], prompt_tokens, seed):
      return schema.ChatCompletionResponse(
          id=rid, created=int(time.time()), model=model_id,
          choices=[schema.ChatChoice(
              index=i, message=schema.AssistantMessage(content=c.text),
              finish_reason=c.finish_reason, code=c.code,
              logprobs=_chat_logprobs(llm, c) if top is not None else None)
                   for i, c in enumerate(choices)],
          usage=_usage(choices, prompt_tokens), seed=seed).model_dump()

    def render_chunk(index, text, reason, code, usage=None):
      if index is None and text == "":  # the opening chunk
        choices = [dict(index=i, delta={"role": "assistant", "content": ""},
                        logprobs=None, finish_reason=None)
                   for i in range(sampling.n)]
      elif index is None:
        choices = []
      else:
        choices = [dict(index=index, delta={"content": text} if text else {},
                        logprobs=None, finish_reason=reason, code=code)]
      return dict(id=rid, object="chat.completion.chunk",
                  created=int(time.time()), model=model_id, choices=choices,
                  usage=usage, seed=sampling.seed)

    if body.stream and body.logprobs:
      raise _invalid("logprobs with stream is not supported", "logprobs")
    return await _run(request, body, [text], sampling, top, render,
                      render_chunk)

  return app


class _Guard:
  """ASGI middleware: 413 for a declared body over the limit, 401 without
  the API key (all but /health). Plain ASGI, so that handlers still see a
  client's disconnect."""

  def __init__(self, app, limits: Limits, api_key: Optional[str]):
    self.app, self.limits, self.api_key = app, limits, api_key

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1")
               for k, v in scope.get("headers", [])}
    error = None
    length = headers.get("content-length")
    if length is not None:
      if not length.isdigit():
        error = _invalid("Content-Length is not a number")
      elif int(length) > self.limits.max_body_bytes:
        error = ApiError(413, f"the body is larger than "
                         f"{self.limits.max_body_bytes} bytes",
                         "invalid_request_error")
    if (error is None and self.api_key is not None and
        scope.get("path") != "/health" and not secrets.compare_digest(
            headers.get("authorization", "").encode(),
            f"Bearer {self.api_key}".encode())):
      error = ApiError(401, "a valid API key is required (Authorization: "
                       "Bearer ...)", "invalid_request_error",
                       code="invalid_api_key")
    if error is not None:
      return await error.response()(scope, receive, send)
    return await self.app(scope, receive, send)


def _sse(payload: dict) -> str:
  return f"data: {json.dumps(payload)}\n\n"


def _usage(choices: List[Choice], prompt_tokens: int) -> dict:
  completion = sum(len(c.tokens) for c in choices)
  return schema.Usage(prompt_tokens=prompt_tokens,
                      completion_tokens=completion,
                      total_tokens=prompt_tokens + completion).model_dump()


def _completion_logprobs(llm, choice: Choice):
  if choice.token_log_probs is None:
    return None
  pieces = [llm.decode([t]) for t in choice.tokens]
  offsets, at = [], 0
  for piece in pieces:
    offsets.append(at)
    at += len(piece)
  top = None
  if choice.top is not None:
    top = [{llm.decode([t]): lp for t, lp in alts}
           for alts in choice.top]
  return schema.CompletionLogprobs(
      tokens=pieces, token_logprobs=choice.token_log_probs,
      top_logprobs=top, text_offset=offsets)


def _chat_logprobs(llm, choice: Choice):
  if choice.token_log_probs is None:
    return None
  content = []
  for i, (token, lp) in enumerate(zip(choice.tokens,
                                      choice.token_log_probs)):
    piece = llm.decode([token])
    alts = [] if choice.top is None else [
        schema.TopLogprob(token=llm.decode([t]), logprob=a,
                          bytes=list(llm.decode([t]).encode()))
        for t, a in choice.top[i]]
    content.append(schema.TokenLogprob(token=piece, logprob=lp,
                                       bytes=list(piece.encode()),
                                       top_logprobs=alts))
  return schema.ChoiceLogprobs(content=content)
