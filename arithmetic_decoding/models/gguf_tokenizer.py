"""The tokenizer and chat template a GGUF file declares, as Python objects.

`tokenizer.ggml.model` names the kind of vocabulary:

  "gpt2"   byte-level BPE (SmolLM2, Llama 3, Qwen): tokens spelled in
           GPT-2's byte alphabet, `tokenizer.ggml.merges` in rank order, the
           text first split by a regex that `tokenizer.ggml.pre` names.
  "llama"  SentencePiece BPE (Gemma): pieces with "▁" for a space, a score
           per piece and no merges; a merge's rank is its result's score
           (higher first), byte fallback through the <0xXX> pieces. Gemma
           files spell their whitespace-run pieces with real spaces; they are
           respelled with "▁" so the merges that build them exist.

Tokens whose `token_type` is CONTROL (3) are special (kept whole, never
produced from text by merges: `<|im_start|>`, `<start_of_turn>`);
USER_DEFINED (4) ones present in the vocabulary are kept whole too. The
result is a `tokenizers.Tokenizer` (the Rust tokenizer library).

  >>> vocab = GGUFVocab(kind="gpt2", tokens=["a", "b", "ab", "<s>"],
  ...                   token_types=[1, 1, 1, 3], merges=["a b"],
  ...                   pre="gpt2", scores=None, bos_id=3, eos_id=3,
  ...                   add_bos=False)
  >>> tok = build_tokenizer(vocab)
  >>> tok.encode("abab<s>").ids
  [2, 2, 3]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from arithmetic_decoding.models.vocab import Vocab, end_of_turn_ids

CONTROL, USER_DEFINED = 3, 4
SPACE = "\u2581"
# Pre-tokenizer split regexes by `tokenizer.ggml.pre` (byte-level vocabularies).
# None: GPT-2's own regex (the ByteLevel pre-tokenizer's).
_DIGITS = r"\p{N}"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "gpt2": (None,),
    "default": (None,),
    # SmolLM's: every digit its own piece, then GPT-2's regex (llama.cpp's
    # LLAMA_VOCAB_PRE_TYPE_SMOLLM).
    "smollm": (_DIGITS, None),
    "llama3": (_LLAMA3,),
    "llama-bpe": (_LLAMA3,),
}


def _require(module: str):
  import importlib
  try:
    return importlib.import_module(module)
  except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(f"this needs the `{module}` package: pip install "
                      "'arithmetic-decoding[llm]'") from e


@dataclasses.dataclass(frozen=True, kw_only=True)
class GGUFVocab(Vocab):
  """The tokenizer metadata of a GGUF file: a `vocab.Vocab` (special ids,
  stop ids, chat template) and what its tokenizer is built from.

  Attributes (besides `Vocab`'s):
    kind: `tokenizer.ggml.model` ("gpt2" or "llama").
    token_types: per token (1 normal, 2 unknown, 3 control, 4 user-defined,
      6 byte).
    merges: "left right" strings in rank order (gpt2), else None.
    pre: `tokenizer.ggml.pre` (gpt2), the split regex's name.
    scores: per token (llama), else None.
    rank_by_position: SentencePiece merges ranked by file position rather
      than by score (Gemma files).
  """

  kind: str
  token_types: Sequence[int]
  merges: Optional[Sequence[str]]
  pre: Optional[str]
  scores: Optional[Sequence[float]]
  rank_by_position: bool = False

  @classmethod
  def from_metadata(cls, metadata: Mapping[str, Any]) -> "GGUFVocab":
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
      raise ValueError(f"unsupported tokenizer.ggml.model {kind!r}: this "
                       "library reads 'gpt2' (byte-level BPE) and 'llama' "
                       "(SentencePiece BPE).")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    types = list(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    get = lambda key: metadata.get(f"tokenizer.ggml.{key}")
    add_bos = get("add_bos_token")
    # llama.cpp's default: SentencePiece vocabularies add BOS, BPE ones not.
    add_bos = (kind == "llama") if add_bos is None else bool(add_bos)
    stops = end_of_turn_ids(tokens, {i for i, ty in enumerate(types)
                                     if ty == CONTROL})
    eos = get("eos_token_id")
    return cls(kind=kind, tokens=tokens, token_types=types,
               merges=list(get("merges")) if get("merges") is not None else None,
               pre=get("pre"),
               scores=list(get("scores")) if get("scores") is not None else None,
               bos_id=get("bos_token_id"), eos_id=eos, add_bos=add_bos,
               chat_template=metadata.get("tokenizer.chat_template"),
               extra_stop_ids=tuple(i for i in stops if i != eos),
               rank_by_position=str(metadata.get(
                   "general.architecture", "")).startswith("gemma"))


def _byte_level(vocab: GGUFVocab):
  tk = _require("tokenizers")
  if vocab.merges is None:
    raise ValueError("a gpt2 (byte-level BPE) vocabulary needs "
                     "tokenizer.ggml.merges.")
  if vocab.pre not in PRE_TOKENIZERS:
    raise ValueError(f"unsupported tokenizer.ggml.pre {vocab.pre!r}: this "
                     f"library knows {sorted(PRE_TOKENIZERS)}.")
  ids = {t: i for i, t in enumerate(vocab.tokens)}
  merges = [tuple(m.split(" ", 1)) for m in vocab.merges]
  tokenizer = tk.Tokenizer(tk.models.BPE(vocab=ids, merges=merges,
                                         fuse_unk=False))
  splits = []
  for regex in PRE_TOKENIZERS[vocab.pre]:
    if regex is None:
      splits.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                use_regex=True))
    else:
      splits.append(tk.pre_tokenizers.Split(tk.Regex(regex), "isolated"))
  if splits[-1].__class__.__name__ != "ByteLevel":
    splits.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                              use_regex=False))
  tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(splits)
  tokenizer.decoder = tk.decoders.ByteLevel()
  return tokenizer


def sentencepiece_merges(pieces: Sequence[str],
                         ranks: Sequence[float]) -> list:
  """The BPE merges a ranked SentencePiece vocabulary implies.

  Every piece that is two other pieces joined yields the merge (left,
  right). Merges go best first by the joined piece's rank (higher first),
  then by the left piece's length (longer first), then the right's; ties
  keep vocabulary order (pieces, then the two parts' ids). A piece spelled
  twice counts with its last id and rank. This is the order Hugging Face's
  GGUF conversion gives, which the integration tests compare against.

  >>> sentencepiece_merges(["a", "b", "c", "ab", "abc", "bc"],
  ...                      [0, 0, 0, -1, -3, -2])
  [('a', 'b'), ('b', 'c'), ('ab', 'c'), ('a', 'bc')]
  """
  ids, rank_of = {}, {}
  for i, p in enumerate(pieces):
    ids[p] = i
    rank_of[p] = ranks[i]
  found = []
  for piece, rank in rank_of.items():
    local = [(piece[:cut], piece[cut:]) for cut in range(1, len(piece))
             if piece[:cut] in ids and piece[cut:] in ids]
    local.sort(key=lambda lr: (ids[lr[0]], ids[lr[1]]))
    found += [(rank, left, right) for left, right in local]
  found.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
  return [(left, right) for _, left, right in found]


def _sentencepiece(vocab: GGUFVocab):
  tk = _require("tokenizers")
  if vocab.scores is None:
    raise ValueError("a llama (SentencePiece) vocabulary needs "
                     "tokenizer.ggml.scores.")
  pieces = [SPACE * len(t) if t and " " in t and not t.strip() else t
            for t in vocab.tokens]
  ids = {p: i for i, p in enumerate(pieces)}
  unk = next((t for t, ty in zip(pieces, vocab.token_types) if ty == 2), None)
  # Gemma's merge order is its file order; its scores nearly follow it but
  # not everywhere. Other SentencePiece vocabularies rank by score.
  ranks = ([-float(i) for i in range(len(pieces))]
           if vocab.rank_by_position else vocab.scores)
  tokenizer = tk.Tokenizer(tk.models.BPE(
      vocab=ids, merges=sentencepiece_merges(pieces, ranks),
      unk_token=unk, fuse_unk=True, byte_fallback=True))
  tokenizer.normalizer = tk.normalizers.Replace(" ", SPACE)
  tokenizer.decoder = tk.decoders.Sequence([
      tk.decoders.Replace(SPACE, " "), tk.decoders.ByteFallback(),
      tk.decoders.Fuse()])
  return tokenizer


def build_tokenizer(vocab: GGUFVocab):
  """A `tokenizers.Tokenizer` equivalent to the file's vocabulary, with its
  special tokens kept whole; BOS is not added here (see `GGUFVocab.add_bos`)."""
  tk = _require("tokenizers")
  tokenizer = (_byte_level(vocab) if vocab.kind == "gpt2" else
               _sentencepiece(vocab))
  model_vocab = tokenizer.get_vocab()
  if vocab.kind == "gpt2":
    alphabet = set(tk.pre_tokenizers.ByteLevel.alphabet())
    spelled = lambda t: set(t) <= alphabet
  else:
    spelled = lambda t: True
  special = [tk.AddedToken(t, special=True, normalized=False)
             for t, ty in zip(vocab.tokens, vocab.token_types)
             if ty == CONTROL and spelled(t)]
  tokenizer.add_special_tokens(special)
  user = [tk.AddedToken(t, special=False, normalized=False)
          for t, ty in zip(vocab.tokens, vocab.token_types)
          if ty == USER_DEFINED and t in model_vocab]
  tokenizer.add_tokens(user)
  return tokenizer


def render_chat(template: str, messages, add_generation_prompt: bool = True,
                **variables) -> str:
  """Renders a chat template (Jinja, as Hugging Face renders them: trimmed
  blocks, `raise_exception` available).

  >>> render_chat("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
  ...             "{% endfor %}{% if add_generation_prompt %}<bot>{% endif %}",
  ...             [{"role": "user", "content": "hi"}])
  '<user>hi<bot>'
  """
  jinja2 = _require("jinja2")
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
  env.globals["raise_exception"] = raise_exception
  return env.from_string(template).render(
      messages=list(messages), add_generation_prompt=add_generation_prompt,
      **variables)
