"""What generation needs of a vocabulary besides the tokenizer itself.

A loaded LLM carries a `tokenizers.Tokenizer` (text <-> ids) and this
record: the special ids, which ids end a completion, whether a prompt
starts with BOS, and the chat template. Each file format fills it from its
own metadata: `gguf_tokenizer.GGUFVocab` (a GGUF file, with the fields its
tokenizer is built from) and `hf_tokenizer.read_vocab` (a Hugging Face
folder, whose tokenizer.json is the tokenizer).

  >>> v = Vocab(tokens=["<pad>", "<eos>", "<bos>", "<end_of_turn>"],
  ...           bos_id=2, eos_id=1, add_bos=True, extra_stop_ids=(3,))
  >>> v.stop_ids
  (1, 3)
  >>> end_of_turn_ids(v.tokens, special={3})
  (3,)
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Optional, Sequence, Tuple

# Control tokens that end an assistant's turn in the chat formats of the
# supported families (Gemma, Llama 3, ChatML / SmolLM2): they stop a
# completion wherever the vocabulary has them as special tokens.
END_OF_TURN = ("<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>")


@dataclasses.dataclass(frozen=True)
class Vocab:
  """The special tokens and chat template of a vocabulary.

  Attributes:
    tokens: every token's text, id order (`tokens[i]` spells id i).
    bos_id, eos_id: the special ids (None when absent).
    add_bos: prepend BOS when encoding a prompt.
    chat_template: the Jinja chat template, or None (a base model).
    extra_stop_ids: ids other than EOS that also end generation
      (`<end_of_turn>`, `<|im_end|>`).
  """

  tokens: Sequence[str]
  bos_id: Optional[int]
  eos_id: Optional[int]
  add_bos: bool
  chat_template: Optional[str] = None
  extra_stop_ids: Tuple[int, ...] = ()

  @property
  def stop_ids(self) -> Tuple[int, ...]:
    """EOS first, then the other end-of-turn tokens."""
    first = () if self.eos_id is None else (int(self.eos_id),)
    return first + tuple(self.extra_stop_ids)


def end_of_turn_ids(tokens: Sequence[str],
                    special: Collection[int]) -> Tuple[int, ...]:
  """Ids, among the `special` ones, whose text is in `END_OF_TURN`."""
  return tuple(i for i in sorted(special) if tokens[i] in END_OF_TURN)
