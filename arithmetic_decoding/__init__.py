"""Arithmetic sampling for T5X: parallel, diverse, unbiased decoding.

Each sample is named by a code in [0, 1); the model's conditionals define an
implicit arithmetic codebook, and decoding a code walks it one token at a time
at the cost of ordinary sampling. N codes on a randomly shifted lattice give N
diverse, stratified, individually exact samples, each decoded on its own.

Modules, in reading order (codes -> one step -> loop -> request -> schedulers):
  codes         code schemes and `make_codes`
  categorical   the one-step arithmetic categorical (the heart of the method)
  transforms    temperature / top-k / top-p, as T5X applies them
  protocol      T5X's DecodingState / SamplingLoopState, cache expansion,
                the checked model call
  choosers      how a step picks a token: Arithmetic (which makes its own
                codes), Ancestral, TeacherForced, Greedy; where a row's
                noise comes from (`Noise`)
  ancestral     jax.random.categorical's draw, noise only for tokens that
                can win (`Ancestral(pruned=True)`)
  loop          T5X's sampling loop with a pluggable chooser, and segments
  rows          B inputs x N decodes as B*N independent rows
  methods       the decode methods, named once: `Method`
  request       one decode request, built and validated once (`build`,
                `from_t5x` for T5X's signature); `SamplingParams`
  engine        the schedulers of a request: `run_fused`; `decode`
  compaction    the compacted scheduler: ended rows dropped, prefixes shared,
                requests joining a running batch (`Compacted`)
  decoding      `arithmetic_sample` (T5X drop-in), `ancestral_sample`
  encoding      `arithmetic_encode` (sequences -> code intervals)
  beam_search   T5X's beam search, in the same protocol (wide_topk: its top-k)
  partitioning  logical axis rules and placement on a data x model mesh
  sharding      the mesh scheduler: sharded decoding of a `RowModel`
  models        T5.1.1 / mT5 in Flax and T5X checkpoint I/O (`models` extra);
                decoder-only LLMs (Llama-style, Gemma 3) from GGUF files or
                Hugging Face folders
  seeds         the LLM entry points' seed policy (codes, noise ids)
  llm           load an LLM and `generate` N completions with any method
                (`llm` extra); `decode`, `token_log_probs`
  rollouts      group rollouts for RL and pass@k
  toy           a small enumerable language model (examples and tests)
  testing       exact numpy references (enumeration of the toy model)
  validation    argument checks that name the argument and its allowed range

The applications (translation, the paper's experiments, the Figure 5 study,
the sampling server, the sandbox and pass@k, the demo) are the separate
package `arithmetic_apps`, which imports this one.
"""

from arithmetic_decoding.beam_search import beam_search
from arithmetic_decoding.categorical import arithmetic_categorical, token_interval
from arithmetic_decoding.codes import CodeScheme, make_codes, radical_inverse_base2
from arithmetic_decoding.decoding import ancestral_sample, arithmetic_sample
from arithmetic_decoding.encoding import arithmetic_encode
from arithmetic_decoding.methods import Method
from arithmetic_decoding.protocol import DecodingState, SamplingLoopState

__all__ = [
    "CodeScheme",
    "DecodingState",
    "Method",
    "SamplingLoopState",
    "ancestral_sample",
    "arithmetic_categorical",
    "arithmetic_encode",
    "arithmetic_sample",
    "beam_search",
    "make_codes",
    "radical_inverse_base2",
    "token_interval",
]

__version__ = "0.1.0"
