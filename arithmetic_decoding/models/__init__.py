"""Models that speak T5X's decoding protocol: a T5.1.1 / mT5 encoder-decoder,
and a decoder-only family (Llama-style, Gemma 3) loaded from GGUF files or
Hugging Face model folders.

  config, t5, encoder_decoder, t5x_checkpoint   the encoder-decoder
  decoder_config, decoder_only, decoder_model   the decoder-only family
  gguf_loader, gguf_tokenizer                   GGUF files (`llm` extra)
  hf_loader, hf_tokenizer                       Hugging Face folders (`llm`)
  vocab                                         special and stop ids, chat
                                                template (both formats)
  initializers                                  random parameters (both
                                                families) in one program
"""

from arithmetic_decoding.models.config import PRESETS, T5Config, preset
from arithmetic_decoding.models.decoder_config import TINY, DecoderConfig
from arithmetic_decoding.models.decoder_model import DecoderOnlyModel
from arithmetic_decoding.models.decoder_only import DecoderOnly
from arithmetic_decoding.models.encoder_decoder import (CrossKV,
                                                        EncoderDecoderModel,
                                                        init_cache)
from arithmetic_decoding.models.t5 import T5, relative_position_bucket

__all__ = [
    "CrossKV",
    "DecoderConfig",
    "DecoderOnly",
    "DecoderOnlyModel",
    "EncoderDecoderModel",
    "PRESETS",
    "T5",
    "T5Config",
    "TINY",
    "init_cache",
    "preset",
    "relative_position_bucket",
]
