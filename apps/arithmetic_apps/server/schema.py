"""The OpenAI API's request and response bodies, as pydantic models.

One model per request and response type, with the fields the sampling
server honours; unknown fields are refused (400), as are fields whose
non-default values it does not implement (`unsupported`). Extensions of
the API (not in OpenAI's): `method` ("arithmetic" by default, "ancestral",
"greedy", "beam"), `top_k`, `code_scheme`, `code_resolution` in a request,
and each choice's `code` (the point of [0, 1) its completion was decoded
from; null but for arithmetic sampling) and the response's `seed` (the seed
used, drawn when the request gave none).

  >>> CompletionRequest(model="m", prompt="Hi", n=4).n
  4
  >>> try:
  ...   CompletionRequest(model="m", prompt="Hi", n=0)
  ... except pydantic.ValidationError as e:
  ...   print(e.errors()[0]["loc"], e.errors()[0]["type"])
  ('n',) greater_than_equal
"""

from __future__ import annotations

from typing import Dict, List, Literal, Optional, Union

import pydantic
from pydantic import Field

Method = Literal["arithmetic", "ancestral", "greedy", "beam"]
Scheme = Literal["shifted_lattice", "van_der_corput", "iid"]


class _Strict(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="forbid", strict=False)


class StreamOptions(_Strict):
  include_usage: bool = False


class _Sampling(_Strict):
  """Fields that completions and chat completions share."""

  model: str
  n: int = Field(1, ge=1)
  temperature: float = Field(1.0, ge=0.0, le=2.0)
  top_p: float = Field(1.0, gt=0.0, le=1.0)
  stop: Optional[Union[str, List[str]]] = None
  seed: Optional[int] = Field(None, ge=0, lt=2**32)
  stream: bool = False
  stream_options: Optional[StreamOptions] = None
  user: Optional[str] = Field(None, max_length=256)
  presence_penalty: float = 0.0
  frequency_penalty: float = 0.0
  logit_bias: Optional[Dict[str, float]] = None
  # Extensions.
  method: Method = "arithmetic"
  top_k: int = Field(0, ge=0)
  code_scheme: Scheme = "shifted_lattice"
  code_resolution: Optional[float] = Field(None, ge=2.0 ** -22, le=1.0)

  @pydantic.field_validator("stop")
  @classmethod
  def _stops(cls, value):
    stops = [value] if isinstance(value, str) else (value or [])
    if len(stops) > 4 or any(not s for s in stops):
      raise ValueError("stop must be up to 4 non-empty strings")
    return stops or None

  def stops(self) -> List[str]:
    return list(self.stop or [])

  def unsupported(self) -> Optional[str]:
    """The name of a field set to a value this server does not implement."""
    if self.presence_penalty or self.frequency_penalty:
      return ("presence_penalty" if self.presence_penalty else
              "frequency_penalty")
    if self.logit_bias:
      return "logit_bias"
    if self.top_k and self.top_p < 1.0:
      return "top_k"  # at most one of the two cuts
    return None


class CompletionRequest(_Sampling):
  """POST /v1/completions."""

  prompt: Union[str, List[str]]
  max_tokens: int = Field(16, ge=1)
  logprobs: Optional[int] = Field(None, ge=0, le=5)
  echo: bool = False
  best_of: Optional[int] = Field(None, ge=1)
  suffix: Optional[str] = None

  @pydantic.field_validator("prompt")
  @classmethod
  def _prompts(cls, value):
    prompts = [value] if isinstance(value, str) else value
    if not prompts or any(not isinstance(p, str) or not p for p in prompts):
      raise ValueError("prompt must be a non-empty string or list of them")
    return value

  def prompts(self) -> List[str]:
    return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

  def unsupported(self) -> Optional[str]:
    if self.echo:
      return "echo"
    if self.best_of not in (None, self.n):
      return "best_of"
    if self.suffix:
      return "suffix"
    return super().unsupported()


class ChatMessage(_Strict):
  role: Literal["system", "user", "assistant", "developer"]
  content: str
  name: Optional[str] = None


class ChatCompletionRequest(_Sampling):
  """POST /v1/chat/completions."""

  messages: List[ChatMessage] = Field(min_length=1)
  max_tokens: Optional[int] = Field(None, ge=1)
  max_completion_tokens: Optional[int] = Field(None, ge=1)
  logprobs: bool = False
  top_logprobs: Optional[int] = Field(None, ge=0, le=5)

  def new_tokens(self) -> int:
    return self.max_completion_tokens or self.max_tokens or 16


# Responses.


class Usage(pydantic.BaseModel):
  prompt_tokens: int
  completion_tokens: int
  total_tokens: int


class CompletionLogprobs(pydantic.BaseModel):
  tokens: List[str]
  token_logprobs: List[float]
  top_logprobs: Optional[List[Dict[str, float]]] = None
  text_offset: List[int]


class CompletionChoice(pydantic.BaseModel):
  index: int
  text: str
  logprobs: Optional[CompletionLogprobs] = None
  finish_reason: Optional[Literal["stop", "length"]] = None
  code: Optional[float] = None


class CompletionResponse(pydantic.BaseModel):
  id: str
  object: Literal["text_completion"] = "text_completion"
  created: int
  model: str
  choices: List[CompletionChoice]
  usage: Optional[Usage] = None
  seed: Optional[int] = None


class TopLogprob(pydantic.BaseModel):
  token: str
  logprob: float
  bytes: Optional[List[int]] = None


class TokenLogprob(TopLogprob):
  top_logprobs: List[TopLogprob] = []


class ChoiceLogprobs(pydantic.BaseModel):
  content: Optional[List[TokenLogprob]] = None


class AssistantMessage(pydantic.BaseModel):
  role: Literal["assistant"] = "assistant"
  content: Optional[str] = None


class ChatChoice(pydantic.BaseModel):
  index: int
  message: AssistantMessage
  logprobs: Optional[ChoiceLogprobs] = None
  finish_reason: Optional[Literal["stop", "length"]] = None
  code: Optional[float] = None


class ChatCompletionResponse(pydantic.BaseModel):
  id: str
  object: Literal["chat.completion"] = "chat.completion"
  created: int
  model: str
  choices: List[ChatChoice]
  usage: Optional[Usage] = None
  seed: Optional[int] = None


class ModelCard(pydantic.BaseModel):
  id: str
  object: Literal["model"] = "model"
  created: int
  owned_by: str = "arithmetic-decoding"


class ModelList(pydantic.BaseModel):
  object: Literal["list"] = "list"
  data: List[ModelCard]


class ErrorBody(pydantic.BaseModel):
  message: str
  type: str
  param: Optional[str] = None
  code: Optional[str] = None


class ErrorResponse(pydantic.BaseModel):
  error: ErrorBody
