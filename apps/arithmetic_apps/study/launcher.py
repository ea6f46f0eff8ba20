"""Cloud TPU launcher for the study's measure mode: the gcloud commands that
create a slice, install this package and T5X, measure on the real chips,
copy the JSON lines to a bucket and delete the slice.

Slices are grouped by accelerator type: one v4-8 (one host, 4 chips) runs
the sub-host topologies in turn (1x1x1, 1x2x1, 2x2x1), each restricted to
its chips by the environment in its `tpu_configs/` file; one v4-16 (two
hosts) runs 2x2x2 with the same command on every worker (`--worker=all`;
JAX finds the slice). Nothing is tied to an account: project, zone, bucket,
repository and checkpoint are arguments. `plan` only builds the commands;
`execute` runs them (the CLI runs them only with --execute).

  >>> cfg = LaunchConfig(project="p", zone="us-central2-b", bucket="gs://b",
  ...                    repository="https://example.com/arithmetic-decoding")
  >>> steps = plan(cfg, ["v4-1x1x1"])
  >>> [s.name for s in steps]
  ['create v4-8', 'install', 'measure v4-1x1x1', 'copy v4-1x1x1', 'delete v4-8']
  >>> "TPU_VISIBLE_CHIPS=0 python3" in steps[2].shell()
  True
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from arithmetic_apps.topology import load_topology

T5X_REPOSITORY = "https://github.com/google-research/t5x"


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
  """Where and what to run.

  Attributes:
    project, zone: the Google Cloud project and a zone with TPU v4.
    bucket: gs:// prefix for the results.
    repository: this package's git URL.
    checkpoint: a T5X checkpoint (gs://) or None for random weights.
    preset, methods, lengths, ns: the measure grid.
    runtime: the TPU VM software version.
    prefix: slice names are <prefix>-<accelerator type>.
  """

  project: str
  zone: str
  bucket: str
  repository: str
  checkpoint: Optional[str] = None
  preset: str = "xxl"
  methods: Tuple[str, ...] = ("beam", "arithmetic")
  lengths: Tuple[int, ...] = (128, 256, 512, 1024)
  ns: Tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
  runtime: str = "tpu-ubuntu2204-base"
  prefix: str = "ad-study"

  def __post_init__(self):
    if not self.bucket.startswith("gs://"):
      raise ValueError(f"bucket must start with gs://; got {self.bucket!r}.")
    for name in ("project", "zone", "repository"):
      if not getattr(self, name):
        raise ValueError(f"{name} must be set.")


@dataclasses.dataclass(frozen=True)
class Step:
  name: str
  command: Tuple[str, ...]

  def shell(self) -> str:
    return " ".join(shlex.quote(c) for c in self.command)


def _gcloud(cfg: LaunchConfig, *args: str) -> Tuple[str, ...]:
  return ("gcloud", "compute", "tpus", "tpu-vm", *args,
          f"--project={cfg.project}", f"--zone={cfg.zone}")


def _ssh(cfg: LaunchConfig, slice_name: str, worker: str,
         command: str) -> Tuple[str, ...]:
  return _gcloud(cfg, "ssh", slice_name, f"--worker={worker}",
                 f"--command={command}")


def measure_command(cfg: LaunchConfig, topology_name: str) -> str:
  """The shell command every worker of the slice runs for one topology."""
  topology = load_topology(topology_name)
  env = " ".join(f"{k}={v}" for k, v in sorted(topology.environment.items()))
  args = ["python3", "-m", "arithmetic_apps.study.measure",
          f"--preset={cfg.preset}", f"--topology={topology.name}",
          "--methods", *cfg.methods, "--lengths", *map(str, cfg.lengths),
          "--n", *map(str, cfg.ns), f"--out=/tmp/measure-{topology.name}.jsonl"]
  if cfg.checkpoint:
    args.append(f"--checkpoint={cfg.checkpoint}")
  return (env + " " if env else "") + " ".join(shlex.quote(a) for a in args)


def plan(cfg: LaunchConfig, topologies: Sequence[str]) -> List[Step]:
  """Every command, in order, for the given topologies."""
  groups: Dict[str, List[str]] = {}
  for name in topologies:
    groups.setdefault(load_topology(name).accelerator_type, []).append(name)
  install = (f"pip install -U 'jax[tpu]' && git clone {T5X_REPOSITORY} && "
             f"pip install -e ./t5x && git clone {cfg.repository} "
             "arithmetic-decoding && pip install -e "
             "'./arithmetic-decoding[checkpoints]'")
  steps = []
  for accelerator, names in groups.items():
    slice_name = f"{cfg.prefix}-{accelerator}"
    steps.append(Step(f"create {accelerator}", _gcloud(
        cfg, "create", slice_name, f"--accelerator-type={accelerator}",
        f"--version={cfg.runtime}")))
    steps.append(Step("install", _ssh(cfg, slice_name, "all", install)))
    for name in names:
      steps.append(Step(f"measure {name}", _ssh(
          cfg, slice_name, "all", measure_command(cfg, name))))
      steps.append(Step(f"copy {name}", _ssh(
          cfg, slice_name, "0",
          f"gcloud storage cp /tmp/measure-{name}.jsonl "
          f"{cfg.bucket.rstrip('/')}/{cfg.preset}/{name}.jsonl")))
    steps.append(Step(f"delete {accelerator}", _gcloud(
        cfg, "delete", slice_name, "--quiet")))
  return steps


def execute(steps: Sequence[Step]) -> None:
  """Runs the steps in order; stops at the first failure (then delete the
  slice by hand: its command is the plan's last step for that slice)."""
  for step in steps:
    print(f"# {step.name}\n{step.shell()}", flush=True)
    subprocess.run(step.command, check=True)
