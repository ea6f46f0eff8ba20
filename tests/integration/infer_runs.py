"""Runs the real `python -m t5x.infer` on CPU and reads what it writes.

Every run is the command in the README ("With T5X") plus one last gin file
written here: batch size 6 (one batch), token ids written next to the text,
topk 0 for T5X's own temperature_sample, and the vocabulary file for models
whose gin does not set it.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Dict, List, Sequence

import jax

from arithmetic_apps.translation.tokenizer import SPM_PATH

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
TASK = "bible_en_fr_infer"
INPUT_LENGTH, TARGET_LENGTH = 32, 40
BATCH = 6  # the TSV's lines: one batch, one chunk


def run_gin(model_lines: str) -> str:
  """The run's own gin (last): the task module, the vocabulary file, batch
  size, float32 restore and token ids in the output."""
  return textwrap.dedent('''\
      from __gin__ import dynamic_registration
      import __main__ as infer_script
      import seqio
      from t5x import decoding
      from t5x import utils
      ''') + model_lines + textwrap.dedent(f'''\
      seqio.SentencePieceVocabulary.sentencepiece_model_file = "{SPM_PATH}"
      utils.DatasetConfig.batch_size = {BATCH}
      infer_script.infer.write_fn = @infer_script.write_inferences_to_file
      infer_script.write_inferences_to_file:
        output_ids = True
        input_fields_to_include = ['inputs']
      decoding.temperature_sample.topk = 0
      ''')


def t5x_infer(workdir: pathlib.Path, name: str, gin_files: Sequence[str],
              bindings: Dict[str, str], checkpoint: str,
              run_gin_text: str) -> List[dict]:
  """One `python -m t5x.infer` run; returns the JSON lines it wrote."""
  out = workdir / name
  run_gin_path = workdir / f"{name}_run.gin"
  run_gin_path.write_text(run_gin_text)
  command = [sys.executable, "-m", "t5x.infer",
             f"--gin_search_paths={REPO / 'gin'}"]
  command += [f"--gin_file={f}" for f in gin_files]
  command += [f"--gin_file={run_gin_path}",
              f"--gin.MIXTURE_OR_TASK_NAME='{TASK}'",
              "--gin.MIXTURE_OR_TASK_MODULE='t5x_tasks'",
              f"--gin.TASK_FEATURE_LENGTHS={{'inputs': {INPUT_LENGTH}, "
              f"'targets': {TARGET_LENGTH}}}",
              f"--gin.CHECKPOINT_PATH='{checkpoint}'",
              f"--gin.INFER_OUTPUT_DIR='{out}'",
              "--gin.infer.mode='predict_with_aux'",
              "--gin.utils.RestoreCheckpointConfig.dtype='float32'"]
  command += [f"--gin.{k}={v}" for k, v in bindings.items()]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(HERE), os.environ.get("PYTHONPATH", "")]), JAX_PLATFORMS="cpu",
             TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("XLA_FLAGS", None)
  done = subprocess.run(command, env=env, capture_output=True, text=True,
                        timeout=900, check=False)
  (workdir / f"{name}.log").write_text(done.stdout + done.stderr)
  if done.returncode:
    raise AssertionError(f"t5x.infer failed ({done.returncode}):\n"
                         f"{' '.join(command)}\n{done.stderr[-4000:]}")
  files = sorted(p for p in out.glob(f"{TASK}-predict_with_aux.jsonl-*")
                 if not p.name.endswith(".COMPLETED"))
  assert len(files) == 1, f"expected one output file in {out}: {files}"
  return [json.loads(line) for line in files[0].read_text().splitlines()]


def first_batch_key(seed=None) -> jax.Array:
  """The key `t5x infer` hands the decode function for chunk 0, batch 0
  (fold_in(PRNGKey(0), chunk), then split per batch), with our gin `seed`
  folded in as arithmetic_sample does."""
  step_key, _ = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), 0))
  return step_key if seed is None else jax.random.fold_in(step_key, seed)
