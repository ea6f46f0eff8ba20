"""Applications of `arithmetic_decoding`: they import the library, never the
other way round.

  translation  the embedded English->French model: data, tokenizer,
               training, `Translator`, the paper's experiments (Figs. 2-4)
               and confidence intervals
  study        the Figure 5 study: chips needed for N samples of mT5-XXL
               (ahead-of-time TPU compiles, memory model, Cloud TPU launcher)
  llms         the registered LLMs (GGUF files installed by pip)
  llm_sample   N completions of one prompt from the command line
  server       the OpenAI-compatible sampling server (continuous batching
               on the engine's compacted scheduler)
  sandbox      running model-written programs isolated (bubblewrap,
               cgroups, seccomp), a pass proven outside the program
  verifiable   HumanEval and word problems with their estimators (pass@k,
               self-consistency, GRPO groups)
  topology     TPU topologies (`tpu_configs/` at the repository's top) and
               meshes over them
  metrics      BLEU, n-gram diversity and sample-set statistics
  programs     when long runs release their compiled programs
  jsonl        resumable JSON-lines result files for long runs
  demo         `make demo`
  bench        timing helpers of the benchmark scripts
"""
