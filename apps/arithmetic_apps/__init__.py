"""Applications of `arithmetic_decoding`: they import the library, never the
other way round.

  translation  the embedded English->French model: data, tokenizer,
               training, `Translator`, the paper's experiments (Figs. 2-4)
               and confidence intervals
  study        the Figure 5 study: chips needed for N samples of mT5-XXL
               (ahead-of-time TPU compiles, memory model, Cloud TPU launcher)
  topology     TPU topologies (`tpu_configs/` at the repository's top) and
               meshes over them
  metrics      BLEU, n-gram diversity and sample-set statistics
  jsonl        resumable JSON-lines result files for long runs
  demo         `make demo`
"""
