"""Models that speak T5X's decoding protocol: a T5.1.1 / mT5 encoder-decoder."""

from arithmetic_decoding.models.config import PRESETS, T5Config, preset
from arithmetic_decoding.models.encoder_decoder import (CrossKV,
                                                        EncoderDecoderModel,
                                                        init_cache)
from arithmetic_decoding.models.t5 import T5, relative_position_bucket

__all__ = [
    "CrossKV",
    "EncoderDecoderModel",
    "PRESETS",
    "T5",
    "T5Config",
    "init_cache",
    "preset",
    "relative_position_bucket",
]
