"""A Hugging Face folder's tokenizer, special tokens and chat template.

tokenizer.json is already a `tokenizers.Tokenizer` (the Rust library's own
serialisation, written by the same code transformers tokenizes with), so
it is loaded as it is. What generation needs besides it (`vocab.Vocab`)
comes from the other files:

  bos_id, eos_id   tokenizer_config.json's bos_token / eos_token (a text,
                   or {"content": text}); else config.json's
                   bos_token_id / eos_token_id
  stop ids         EOS, every id of generation_config.json's and
                   config.json's eos_token_id (an int or a list), and the
                   special tokens named in `vocab.END_OF_TURN`
  add_bos          tokenizer_config.json's add_bos_token; else whether
                   tokenizer.json's post-processor puts BOS first
  chat template    chat_template.jinja (what transformers 5 saves); else
                   tokenizer_config.json's chat_template (a text, or a
                   list of named templates: the one named "default")

  tokenizer = load_tokenizer(folder)
  vocab = read_vocab(folder, tokenizer, config, generation_config)

Needs the `llm` extra (tokenizers).
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional

from arithmetic_decoding.models.hf_loader import read_json
from arithmetic_decoding.models.vocab import Vocab, end_of_turn_ids

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def load_tokenizer(folder: str):
  """tokenizer.json as a `tokenizers.Tokenizer`.

  Raises:
    FileNotFoundError: the folder has no tokenizer.json.
    ValueError: tokenizer.json cannot be read by the tokenizers library.
  """
  try:
    import tokenizers
  except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("this needs the `tokenizers` package: pip install "
                      "'arithmetic-decoding[llm]'") from e
  path = os.path.join(os.fspath(folder), TOKENIZER_FILE)
  if not os.path.isfile(path):
    hint = (" (a SentencePiece tokenizer.model alone is not read: save the "
            "tokenizer with transformers to get tokenizer.json)"
            if os.path.isfile(os.path.join(folder, "tokenizer.model")) else "")
    raise FileNotFoundError(f"no {TOKENIZER_FILE} in {folder!r}{hint}.")
  try:
    return tokenizers.Tokenizer.from_file(path)
  except Exception as e:  # the Rust side raises a plain Exception
    raise ValueError(f"{path!r} is not a tokenizer the tokenizers library "
                     f"reads: {e}") from e


def special_text(value: Any) -> Optional[str]:
  """A special token's text as tokenizer_config.json writes it.

  >>> special_text("<eos>"), special_text({"content": "<bos>"}), special_text(None)
  ('<eos>', '<bos>', None)
  """
  if isinstance(value, Mapping):
    value = value.get("content")
  return value if isinstance(value, str) else None


def _ids(value: Any) -> List[int]:
  """An eos_token_id field (None, an int or a list) as a list."""
  if value is None:
    return []
  return [int(v) for v in (value if isinstance(value, list) else [value])]


def chat_template(folder: str, tokenizer_config: Mapping[str, Any]
                  ) -> Optional[str]:
  """The folder's chat template, or None (a base model).

  >>> chat_template("/nonexistent", {"chat_template": [
  ...     {"name": "tool_use", "template": "T"},
  ...     {"name": "default", "template": "D"}]})
  'D'
  """
  path = os.path.join(folder, CHAT_TEMPLATE_FILE)
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      return f.read()
  template = tokenizer_config.get("chat_template")
  if isinstance(template, list):
    named = {t.get("name"): t.get("template") for t in template
             if isinstance(t, Mapping)}
    if "default" not in named:
      raise ValueError(f"{TOKENIZER_CONFIG_FILE}: chat_template lists "
                       f"{sorted(map(str, named))} but no 'default'.")
    template = named["default"]
  if template is not None and not isinstance(template, str):
    raise ValueError(f"{TOKENIZER_CONFIG_FILE}: chat_template must be a "
                     f"text or a list of named templates; got {template!r}.")
  return template or None


def read_vocab(folder: str, tokenizer, config: Mapping[str, Any],
               generation_config: Mapping[str, Any]) -> Vocab:
  """The `Vocab` of a folder whose tokenizer.json is `tokenizer`, with its
  config.json and generation_config.json (dicts).

  Raises:
    ValueError: a special token named in tokenizer_config.json is not in
      the vocabulary, or an eos/bos id is outside it.
  """
  folder = os.fspath(folder)
  tok_config = read_json(os.path.join(folder, TOKENIZER_CONFIG_FILE),
                         required=False) or {}
  by_text = tokenizer.get_vocab(with_added_tokens=True)
  tokens = [""] * (max(by_text.values(), default=-1) + 1)
  for text, i in by_text.items():
    tokens[i] = text

  def named(field: str) -> Optional[int]:
    text = special_text(tok_config.get(field))
    if text is None:
      return None
    if text not in by_text:
      raise ValueError(f"{TOKENIZER_CONFIG_FILE}: {field} {text!r} is not in "
                       f"{TOKENIZER_FILE}'s vocabulary.")
    return by_text[text]

  def configured(field: str) -> List[int]:
    return _ids(generation_config.get(field)) + _ids(config.get(field))

  bos = named("bos_token")
  if bos is None:
    bos = next(iter(configured("bos_token_id")), None)
  eos_ids = configured("eos_token_id")
  eos = named("eos_token")
  if eos is None:
    eos = next(iter(eos_ids), None)
  for field, i in [("bos_token_id", bos)] + [("eos_token_id", e)
                                             for e in eos_ids]:
    if i is not None and not 0 <= i < len(tokens):
      raise ValueError(f"{field} {i} is outside the vocabulary of "
                       f"{len(tokens)} tokens.")
  special = [i for i, t in tokenizer.get_added_tokens_decoder().items()
             if t.special]
  stops = [i for i in eos_ids + list(end_of_turn_ids(tokens, special))
           if i != eos]
  add_bos = tok_config.get("add_bos_token")
  if not isinstance(add_bos, bool):
    # As the tokenizer's post-processor does it: BOS first, added.
    probe = tokenizer.encode("a", add_special_tokens=True).ids
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    add_bos = bos is not None and probe[:1] == [bos] and plain[:1] != [bos]
  return Vocab(tokens=tokens, bos_id=bos, eos_id=eos, add_bos=add_bos,
               chat_template=chat_template(folder, tok_config),
               extra_stop_ids=tuple(dict.fromkeys(stops)))
