"""Continuous batching for the sampling server: one thread, bounded queues.

The HTTP handlers (`app`) turn a request into a `Job` and `submit` it; the
batcher's one thread admits queued jobs into running batches of the
engine's compacted scheduler (`arithmetic_decoding.compaction.Compacted`)
at segment boundaries, runs a segment of every batch in turn, ends rows
that reached a stop string or whose client left, and hands finished
results back to the handlers' event loop.

  queue (bounded: `Limits.max_queue`; full -> `Overloaded`, HTTP 429)
    -> admitted when the rows in flight allow (`Limits.max_rows`): the
       job's request is built (`llm.llm_request`: its prompts prefilled
       alone) and joins a running batch that runs its program, or starts
       one
    -> segments; after each, streamed text goes out, stop strings end rows
    -> finished: `llm.collect`, stop strings cut, log-probs if asked

A job's completions do not depend on what else is in flight: its codes
and noise come from (seed, prompt index) alone (`arithmetic_decoding.
seeds`), and its rows compute the same bits in any batch (`docs/engine.
md`), so they equal `llm.generate`'s with the same seed. Beam search keeps
beams, not rows: a beam job runs alone, in the thread, between segments.

Shutdown (`drain`): no job is admitted any more (`ShuttingDown`, HTTP
503); jobs in flight finish until the deadline, then every job still
queued or running fails with `ShuttingDown`: none is lost silently.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from arithmetic_decoding import llm as llm_lib
from arithmetic_decoding.compaction import Compacted
from arithmetic_decoding.methods import Method
from arithmetic_decoding.request import SamplingParams


@dataclasses.dataclass(frozen=True)
class Limits:
  """What the server takes on (all enforced; see docs/serving.md).

  Attributes:
    max_rows: sample rows in flight over all running batches (a job of B
      prompts x n takes B x n); a job that would exceed it waits queued
      (one job alone may always run).
    max_queue: jobs waiting to be admitted; beyond, 429 with Retry-After.
    max_n: completions per prompt at most.
    max_tokens: new tokens per completion at most.
    max_prompts: prompts per request at most.
    max_per_client: requests in flight per client (its `user` field, else
      its API key, else its address); beyond, 429.
    max_body_bytes: request bodies beyond are refused (413).
    shutdown_seconds: on SIGTERM, how long jobs in flight may finish.
  """

  max_rows: int = 512
  max_queue: int = 64
  max_n: int = 64
  max_tokens: int = 512
  max_prompts: int = 16
  max_per_client: int = 32
  max_body_bytes: int = 1 << 20
  shutdown_seconds: float = 30.0

  def __post_init__(self):
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      if (isinstance(value, bool) or not isinstance(value, (int, float))
          or value <= 0):
        raise ValueError(f"Limits.{f.name} must be a number > 0; got "
                         f"{value!r}.")


class Overloaded(Exception):
  """The queue is full: try again after `retry_after` seconds."""

  def __init__(self, message: str, retry_after: int = 1):
    super().__init__(message)
    self.retry_after = retry_after


class ShuttingDown(Exception):
  """The server is shutting down."""


@dataclasses.dataclass
class Job:
  """One request: B prompts (token ids) x `sampling.n` completions.

  Attributes:
    ids: the prompts' token ids.
    texts: the prompts as encoded (chat template applied).
    sampling: what to sample (its seed included).
    stops: strings that end a completion (cut there).
    top_logprobs: per-token log-probs with this many alternatives, or None.
    on_done: called in the handlers' loop with the list of choices (or an
      exception); on_progress: called there with (choice index, text so
      far, finished) after each segment while decoding (streaming), or
      None.
  """

  ids: List[List[int]]
  texts: List[str]
  sampling: SamplingParams
  stops: List[str]
  top_logprobs: Optional[int]
  loop: asyncio.AbstractEventLoop
  on_done: Callable[[Any], None]
  on_progress: Optional[Callable[[int, str, bool], None]] = None
  key: int = -1
  cancelled: bool = False
  sent: Dict[int, str] = dataclasses.field(default_factory=dict)

  @property
  def rows(self) -> int:
    return len(self.ids) * self.sampling.n


@dataclasses.dataclass(frozen=True)
class Choice:
  """One completion as the API returns it."""

  prompt: int
  text: str
  tokens: List[int]
  finish_reason: str
  code: Optional[float]
  log_prob: float
  token_log_probs: Optional[List[float]] = None
  top: Optional[List[List[tuple]]] = None  # per token [(id, log-prob)]


def cut_at_stop(text: str, stops: List[str], growing: bool = False):
  """(text before the first stop string, whether one was found). Of a
  `growing` text (its row still decoding) a trailing U+FFFD is an
  incomplete character, not yet text: a stop string holding U+FFFD
  matches only bytes that stay invalid, as in the finished text.

  >>> cut_at_stop("one. two. three", [". t"])
  ('one', True)
  >>> cut_at_stop("ab\ufffd", ["\ufffd"], growing=True)
  ('ab', False)
  >>> cut_at_stop("ab\ufffd", ["\ufffd"])
  ('ab', True)
  """
  if growing:
    text = text.rstrip("\ufffd")
  at = min((text.find(s) for s in stops if s in text), default=-1)
  return (text, False) if at < 0 else (text[:at], True)


def safe_prefix(text: str, stops: List[str]) -> str:
  """What of a growing text may be streamed: not a trailing part that
  could begin a stop string, nor an incomplete character.

  >>> safe_prefix("Hello wor", ["world!"]), safe_prefix("ab\\ufffd", [])
  ('Hello ', 'ab')
  """
  text = text.rstrip("\ufffd")
  hold = 0
  for stop in stops:
    for k in range(min(len(stop), len(text)), 0, -1):
      if text.endswith(stop[:k]):
        hold = max(hold, k)
        break
  return text[:len(text) - hold]


class Batcher:
  """The serving thread (see the module docstring)."""

  def __init__(self, llm, limits: Limits = Limits()):
    self.llm, self.limits = llm, limits
    self._queue = collections.deque()
    self._running: Dict[int, Job] = {}
    self._batches: List[Compacted] = []
    self._where: Dict[int, Compacted] = {}
    self._cv = threading.Condition()
    self._keys = itertools.count()
    self._draining = False
    self._deadline = None
    self._stopped = False
    self.counters = collections.Counter()
    self._thread = threading.Thread(target=self._run, name="batcher",
                                    daemon=True)
    self._thread.start()

  # -- called from the handlers -------------------------------------------

  def submit(self, job: Job) -> None:
    """Queues a job (Overloaded / ShuttingDown when it cannot)."""
    with self._cv:
      if self._draining or self._stopped:
        raise ShuttingDown("the server is shutting down")
      if len(self._queue) >= self.limits.max_queue:
        self.counters["overloaded"] += 1
        raise Overloaded(f"{len(self._queue)} requests are waiting "
                         f"(max_queue {self.limits.max_queue})",
                         retry_after=1 + len(self._queue) // 8)
      job.key = next(self._keys)
      self._queue.append(job)
      self.counters["submitted"] += 1
      self._cv.notify()

  def cancel(self, job: Job) -> None:
    """The client left: the job's rows end at the next segment boundary."""
    with self._cv:
      job.cancelled = True
      self._cv.notify()

  def drain(self, seconds: float) -> None:
    """Stops admitting; jobs in flight may finish for `seconds`, then all
    that remain fail with ShuttingDown."""
    with self._cv:
      self._draining = True
      self._deadline = time.monotonic() + seconds
      self._cv.notify()

  def idle(self) -> bool:
    with self._cv:
      return not self._queue and not self._running

  def stop(self, timeout: float = 10.0) -> None:
    with self._cv:
      self._stopped = True
      self._cv.notify()
    self._thread.join(timeout)

  def status(self) -> dict:
    with self._cv:
      return {"queued": len(self._queue), "running": len(self._running),
              "rows": self._rows(), "batches": len(self._batches),
              "draining": self._draining, **self.counters}

  # -- the thread ----------------------------------------------------------

  def _rows(self) -> int:
    return sum(job.rows for job in self._running.values())

  def _run(self):
    while True:
      with self._cv:
        while (not self._queue and not self._running and
               not self._stopped and not self._draining):
          self._cv.wait(0.5)
        if self._stopped:
          self._fail_all(ShuttingDown("the server stopped"))
          return
        if (self._draining and self._deadline is not None and
            time.monotonic() > self._deadline):
          self._fail_all(ShuttingDown("the server is shutting down; the "
                                      "request did not finish in time"))
          self._deadline = None
        admit = []
        if not self._draining:
          while self._queue:
            job = self._queue[0]
            if job.cancelled:  # left before its turn
              self._queue.popleft()
              self.counters["cancelled"] += 1
              continue
            if self._running and self._rows() + job.rows > self.limits.max_rows:
              break
            admit.append(self._queue.popleft())
            self._running[job.key] = job
        cancelled = [j for j in self._running.values() if j.cancelled]
      for job in admit:
        self._guard(job, self._admit, job)
      for job in cancelled:
        self._end(job)
      for batch in list(self._batches):
        try:
          finished = batch.step()
        except Exception as e:  # pylint: disable=broad-except
          traceback.print_exc()
          for key in batch.keys():
            self._finish(self._running.get(key), e)
          self._batches.remove(batch)
          continue
        self._stream_and_stop(batch)
        for key in finished:
          job = self._running.get(key)
          arrays = batch.pop(key, sort=False)
          self._where.pop(key, None)
          if job is not None:
            self._guard(job, self._complete, job, arrays)
        if not batch.keys():
          self._batches.remove(batch)

  def _guard(self, job, fn, *args):
    try:
      fn(*args)
    except Exception as e:  # pylint: disable=broad-except
      self._finish(job, e)

  def _admit(self, job: Job):
    if job.sampling.method is Method.BEAM:
      arrays = llm_lib.decode(self.llm, job.ids, job.sampling)
      self._complete(job, arrays)
      return
    request, layout = llm_lib.llm_request(self.llm, job.ids, job.sampling)
    for batch in self._batches:
      try:
        batch.join(job.key, request)
      except ValueError:
        continue
      self._where[job.key] = batch
      return
    batch = Compacted(request, layout, llm_lib.LLM_COMPACTION, key=job.key)
    self._batches.append(batch)
    self._where[job.key] = batch

  def _end(self, job: Job):
    batch = self._where.get(job.key)
    if batch is not None and job.key in batch.parts:
      batch.end(job.key)
    self._finish(job, None)

  def _order(self, job: Job, codes: np.ndarray) -> np.ndarray:
    """Choice order within a prompt: by code (arithmetic sampling, as
    `generate` returns them), else by sample index."""
    if job.sampling.method is Method.ARITHMETIC:
      return np.argsort(codes, axis=1, kind="stable")
    return np.broadcast_to(np.arange(codes.shape[1]), codes.shape)

  def _stream_and_stop(self, batch: Compacted):
    """After a segment: streamed text out, rows past a stop string ended."""
    for key in batch.keys():
      job = self._running.get(key)
      if job is None or (job.on_progress is None and not job.stops):
        continue
      tokens, ended = batch.progress(key)
      part = batch.parts[key]
      codes = part.codes.reshape(part.batch, part.num_decodes)
      order = self._order(job, codes)
      stops = set(self.llm.stop_ids + job.sampling.stop_ids)
      to_end = []
      for b, prompt in enumerate(job.ids):
        for i, j in enumerate(order[b]):
          row = b * part.num_decodes + int(j)
          new = tokens[row, len(prompt):len(prompt) +
                       job.sampling.max_new_tokens].tolist()
          end = next((t for t, x in enumerate(new) if x in stops), None)
          if end is not None:
            new = new[:end]
          elif not ended[row]:
            while new and new[-1] == 0:  # not yet written
              new.pop()
          text, stopped = cut_at_stop(self.llm.decode(new), job.stops,
                                      growing=end is None and not ended[row])
          if stopped and not ended[row]:
            to_end.append(row)
          index = b * part.num_decodes + i
          if job.on_progress is not None and not (ended[row] or stopped):
            shown = safe_prefix(text, job.stops)
            if shown != job.sent.get(index, ""):
              job.sent[index] = shown
              job.loop.call_soon_threadsafe(job.on_progress, index, shown,
                                            False)
      if to_end:
        batch.end(key, to_end)

  def _complete(self, job: Job, arrays):
    """Choices of a finished job from its (tokens [B, N, L], log-probs,
    codes) in sample order: by code for arithmetic sampling, else by
    sample index (beam search: by score)."""
    tokens, scores, codes = (np.asarray(a) for a in arrays)
    order = self._order(job, codes)
    arrays = (np.take_along_axis(tokens, order[:, :, None], axis=1),
              np.take_along_axis(scores, order, axis=1),
              np.take_along_axis(codes, order, axis=1))
    gen = llm_lib.collect(self.llm, job.sampling.method, job.texts, job.ids,
                          job.sampling.max_new_tokens, arrays,
                          self.llm.stop_ids + job.sampling.stop_ids)
    choices = []
    for b in range(len(job.ids)):
      scored = None
      if job.top_logprobs is not None:
        scored = llm_lib.token_log_probs(
            self.llm, job.ids[b], gen.tokens[b], job.sampling,
            top=job.top_logprobs)
      for j, tokens in enumerate(gen.tokens[b]):
        text, stopped = cut_at_stop(gen.texts[b][j], job.stops)
        if stopped:  # the tokens whose text lies before the stop
          keep = 0
          while keep < len(tokens) and len(self.llm.decode(
              tokens[:keep + 1])) <= len(text):
            keep += 1
          tokens = tokens[:keep]
        reason = "stop" if stopped or gen.finished[b, j] else "length"
        lps = top = None
        if scored is not None:
          lps = scored[0][j][:len(tokens)].tolist()
          if scored[1] is not None:
            top = [list(zip(scored[1][j][t].tolist(),
                            scored[2][j][t].tolist()))
                   for t in range(len(tokens))]
        choices.append(Choice(
            prompt=b, text=text, tokens=list(tokens), finish_reason=reason,
            code=(float(gen.codes[b, j]) if job.sampling.method is
                  Method.ARITHMETIC else None),
            log_prob=float(gen.log_probs[b, j]), token_log_probs=lps,
            top=top))
    self._finish(job, choices)

  def _finish(self, job: Optional[Job], result):
    if job is None:
      return
    with self._cv:
      self._running.pop(job.key, None)
      self.counters["finished" if isinstance(result, list) else
                    "failed" if result is not None else "cancelled"] += 1
    if result is not None or job.cancelled:
      job.loop.call_soon_threadsafe(
          job.on_done, result if result is not None else
          ConnectionAbortedError("the client left"))

  def _fail_all(self, error: Exception):
    """Every queued and running job fails with `error` (called locked)."""
    jobs = list(self._queue) + list(self._running.values())
    self._queue.clear()
    for job in jobs:
      self._running.pop(job.key, None)
      batch = self._where.pop(job.key, None)
      if batch is not None and job.key in batch.parts:
        batch.end(job.key)
      job.loop.call_soon_threadsafe(job.on_done, error)
    self._batches = [b for b in self._batches if b.keys()]
