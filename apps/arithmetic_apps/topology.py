"""TPU v4 topologies from `tpu_configs/` and meshes built over them.

One TOML file per topology of the paper's study (v4-1x1x1, v4-1x2x1,
v4-2x2x1, v4-2x2x2) gives its chips, hosts, chips-per-host bounds, HBM per
chip, the Cloud TPU accelerator type to create, the environment that
restricts a v4-8 host to a sub-host slice, and the `data x model` mesh
shapes worth trying. `make_mesh` builds a `jax.sharding.Mesh` with axes
("data", "model") from one of them over whatever devices there are: real
TPUs, CPU devices emulated with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`, or the devices of an
ahead-of-time TPU topology description (`aot_devices`, which needs libtpu).

  >>> topo = load_topology("v4-2x2x2")
  >>> topo.chips, topo.hosts, topo.accelerator_type, topo.mesh_shapes[1]
  (8, 2, 'v4-16', (4, 2))
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import tomllib
from typing import Mapping, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh

MESH_AXES = ("data", "model")
_GIB = 1 << 30


# The one place topology files are read from: `tpu_configs/` at the top of
# the repository (the applications run from a checkout; they are not a wheel).
CONFIG_DIR = pathlib.Path(__file__).resolve().parents[2] / "tpu_configs"


def _config_dir() -> pathlib.Path:
  """`tpu_configs/` of the repository."""
  if not CONFIG_DIR.is_dir():
    raise FileNotFoundError(f"no tpu_configs/ at {CONFIG_DIR}")
  return CONFIG_DIR


@dataclasses.dataclass(frozen=True)
class TpuTopology:
  """One TPU slice.

  Attributes:
    name: e.g. "v4-2x2x1".
    generation: "v4".
    topology: chip grid, e.g. "2x2x1".
    chips: chips in the slice (one JAX device per v4 chip: megacore).
    hosts: TPU VM hosts (processes) in the slice.
    chips_per_host_bounds: per-host chip grid, for the AOT description.
    hbm_bytes_per_chip: device memory of one chip.
    accelerator_type: what to create on Cloud TPU (e.g. "v4-8").
    environment: variables that restrict a host to this slice (empty for
      whole hosts).
    mesh_shapes: (data, model) factorisations of `chips` worth trying.
    chip_config: libtpu's chip configuration for the AOT description
      ("megacore": one device per v4 / v5p chip; "default" for one-core
      chips such as v5e and v6e).
  """

  name: str
  generation: str
  topology: str
  chips: int
  hosts: int
  chips_per_host_bounds: Tuple[int, int, int]
  hbm_bytes_per_chip: int
  accelerator_type: str
  environment: Mapping[str, str]
  mesh_shapes: Tuple[Tuple[int, int], ...]
  chip_config: str = "megacore"

  def __post_init__(self):
    grid = [int(x) for x in self.topology.split("x")]
    if int(np.prod(grid)) != self.chips:
      raise ValueError(f"{self.name}: topology {self.topology} has "
                       f"{int(np.prod(grid))} chips, not chips = {self.chips}.")
    for shape in self.mesh_shapes:
      if len(shape) != 2 or shape[0] * shape[1] != self.chips:
        raise ValueError(f"{self.name}: mesh shape {shape} must be "
                         f"(data, model) with data * model = {self.chips}.")

  @property
  def topology_name(self) -> str:
    """The name `get_topology_desc` takes, e.g. "v4:2x2x1"."""
    return f"{self.generation}:{self.topology}"


def available_topologies() -> Tuple[str, ...]:
  """Names of the topology files, sorted by chip count."""
  names = [p.stem for p in _config_dir().glob("*.toml")]
  return tuple(sorted(names, key=lambda n: (load_topology(n).chips, n)))


def load_topology(name_or_path: str) -> TpuTopology:
  """Reads `tpu_configs/<name>.toml` (or a path to such a file)."""
  path = pathlib.Path(name_or_path)
  if path.suffix != ".toml":
    path = _config_dir() / f"{name_or_path}.toml"
    if not path.is_file():  # hardware beyond the paper's (not swept)
      path = _config_dir() / "other" / f"{name_or_path}.toml"
    if not path.is_file():
      raise ValueError(
          f"topology must be one of {sorted(p.stem for p in _config_dir().glob('*.toml'))}"
          f" or a .toml path; got {name_or_path!r}.")
  with open(path, "rb") as f:
    raw = tomllib.load(f)
  return TpuTopology(
      name=raw["name"],
      generation=raw["generation"],
      topology=raw["topology"],
      chips=int(raw["chips"]),
      hosts=int(raw["hosts"]),
      chips_per_host_bounds=tuple(int(x) for x in raw["chips_per_host_bounds"]),
      hbm_bytes_per_chip=int(raw["hbm_gib_per_chip"]) * _GIB,
      accelerator_type=raw["accelerator_type"],
      environment=dict(raw.get("environment", {})),
      mesh_shapes=tuple(tuple(int(x) for x in s) for s in raw["mesh_shapes"]),
      chip_config=raw.get("chip_config", "megacore"))


def aot_devices(topology: TpuTopology) -> Sequence[jax.Device]:
  """The devices of an ahead-of-time TPU description of `topology`.

  Needs libtpu (`pip install libtpu`, the version jax[tpu] pins) but no TPU:
  programs lowered for these devices compile with the real TPU compiler,
  and `compiled.memory_analysis()` reports per-chip bytes. Set
  `JAX_PLATFORMS=cpu` on a machine without TPUs so ordinary arrays stay on
  the CPU.
  """
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  # libtpu reads the accelerator type once per process, when it starts: one
  # generation per process (v4 as a v4-8 host, whatever the slice).
  os.environ.setdefault("TPU_ACCELERATOR_TYPE",
                        "v4-8" if topology.generation == "v4" else
                        topology.accelerator_type)
  # Compiling only: several processes may load libtpu at once (otherwise
  # the second one fails on libtpu's lockfile).
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  desc = topologies.get_topology_desc(
      platform="tpu",
      topology_name=topology.topology_name,
      chip_config_name=topology.chip_config,
      chips_per_host_bounds=topology.chips_per_host_bounds,
      num_slices=1)
  return list(desc.devices)


def make_mesh(topology: TpuTopology, mesh_shape: Optional[Tuple[int, int]] = None,
              devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A ("data", "model") mesh of `topology.chips` devices.

  Args:
    topology: the slice.
    mesh_shape: (data, model); default the first of `topology.mesh_shapes`
      (all data-parallel).
    devices: default `jax.devices()` (all processes'); the first
      `topology.chips` are used. On TPUs they are laid out along the
      physical torus (`mesh_utils.create_device_mesh`); elsewhere in order.

  Raises:
    ValueError: the mesh shape does not factor the chips, or there are
      fewer devices than chips.
  """
  if mesh_shape is None:
    mesh_shape = topology.mesh_shapes[0]
  mesh_shape = tuple(int(x) for x in mesh_shape)
  if len(mesh_shape) != 2 or mesh_shape[0] * mesh_shape[1] != topology.chips:
    raise ValueError(
        f"mesh_shape must be (data, model) with data * model = "
        f"{topology.chips} chips of {topology.name}; got {mesh_shape}.")
  if devices is None:
    devices = jax.devices()
  devices = list(devices)
  if len(devices) < topology.chips:
    raise ValueError(
        f"{topology.name} needs {topology.chips} devices; {len(devices)} are "
        "available (emulate CPU devices with XLA_FLAGS="
        "--xla_force_host_platform_device_count=N before jax starts).")
  devices = devices[:topology.chips]
  if devices[0].platform == "tpu" and len(devices) > 1:
    from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
    grid = mesh_utils.create_device_mesh(mesh_shape, devices)
  else:
    grid = np.asarray(devices, dtype=object).reshape(mesh_shape)
  return Mesh(grid, MESH_AXES)
