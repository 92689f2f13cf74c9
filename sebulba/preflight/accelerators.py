"""Accelerators a run can be checked for without having them: their devices and figures.

`devices(topology)` gives the devices of a slice or node that is not attached:

* a Cloud TPU slice by its topology name (`v5e:2x4`, `v4:2x2x2`, `v5p:2x2x2`,
  `v6e:2x2`), from the `libtpu` wheel (`pip install -e ".[tpu-check]"`): XLA compiles
  for those chips for real, on any machine, split into hosts as Cloud TPU rents them
  (`host_shape`; a shape it does not rent is refused in one line);
* NVIDIA GPUs, one node (`h100:8`, `h200:1`, `a100:4`) or several (`h100:2x8`: 2 hosts
  of 8), as XLA's compile-only CUDA devices where JAX's CUDA plugin is installed
  (`pip install -e ".[gpu-check]"`; `sebulba.preflight.gpu_targets`): XLA:GPU compiles
  for the card itself, on any machine. Without the plugin (or with `gpu_proxy`), one node
  is that many virtual CPU devices: the program is partitioned and its collectives placed
  as on GPUs, but XLA:CPU compiles it, so its memory and operation counts are a proxy.

`CHIPS` holds the published figures each prediction uses; every one names its source.
GPUs price float32 products at their TF32 rate, hold what JAX's allocator takes of the
card (75% by default) and leave the runtime its own memory beside it (`GPU_RUNTIME_BYTES`,
an assumption), and run at `GPU_ACHIEVED_FRACTION` of their peaks, calibrated against a
measurement (docs/scaling.md); TPUs are priced at their published peaks.
All-reduce bandwidth per chip is what Google publishes per pod divided by the pod's
chips (v4, v5e, v6e) or half the bidirectional ICI bandwidth per chip (v5p, for which no
per-pod figure is published; the two agree for v5e and v6e). No per-hop ICI or NVLink
latency is published; `hop_latency_s` is an assumption and is labelled so in every
report.
"""

from __future__ import annotations

import dataclasses
import os
import re

from sebulba.errors import ConfigError

_GB = 10**9
_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator chip's published figures.

    Attributes:
      name: what reports call it.
      hbm_bytes: memory per chip.
      peak_flops: dense bf16 FLOP/s of the matrix units.
      hbm_bytes_per_s: memory bandwidth.
      allreduce_bytes_per_s: bandwidth an all-reduce gets per chip (ring-equivalent).
      hop_latency_s: latency per step of a ring collective (an assumption; see above).
      interconnect: the link it prices collectives with.
      source: where the figures are published.
      proxy: True where the program was compiled for CPU devices standing in for it.
      tf32_flops: dense FLOP/s of float32 products, which NVIDIA's tensor cores run as
        TF32 (JAX's default precision on GPUs); None where float32 products run at the
        bf16 rate (TPUs: XLA's default precision multiplies them in one bf16 pass).
      allocator_fraction: the part of `hbm_bytes` a JAX process can allocate (JAX's GPU
        allocator takes 75% of the card unless told otherwise; see `allocatable_bytes`).
      achieved_fraction: the part of peak FLOP/s and of HBM bandwidth its programs reach
        (1 for TPUs: libtpu's own program is priced; GPUs: see `GPU_ACHIEVED_FRACTION`).
      runtime_bytes: device memory the runtime holds beside the allocator's share (GPUs:
        `GPU_RUNTIME_BYTES`).
      network_bytes_per_s: what a collective gets per chip between hosts, where that is
        another link than `interconnect` (a GPU cluster's network; None for TPU slices,
        whose ICI spans their hosts).
      network: that link.
    """

    name: str
    hbm_bytes: int
    peak_flops: float
    hbm_bytes_per_s: float
    allreduce_bytes_per_s: float
    hop_latency_s: float
    interconnect: str
    source: str
    proxy: bool = False
    tf32_flops: float | None = None
    allocator_fraction: float = 1.0
    achieved_fraction: float = 1.0
    runtime_bytes: int = 0
    network_bytes_per_s: float | None = None
    network: str = ""

    def flops_per_s(self, element_type: str) -> float:
        """The rate at which the chip's programs multiply `element_type` products."""
        peak = self.peak_flops
        if element_type == "f32" and self.tf32_flops is not None:
            peak = self.tf32_flops
        return peak * self.achieved_fraction

    @property
    def is_gpu(self) -> bool:
        """An NVIDIA GPU (float32 products on its tensor cores as TF32), not a TPU."""
        return self.tf32_flops is not None

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.hbm_bytes_per_s * self.achieved_fraction

    def across_hosts(self) -> Chip:
        """The chip as collectives among several hosts' chips see it: at most the
        network's bandwidth per chip."""
        if self.network_bytes_per_s is None:
            return self
        return dataclasses.replace(
            self,
            allreduce_bytes_per_s=min(self.allreduce_bytes_per_s, self.network_bytes_per_s),
            interconnect=self.network,
        )

    @property
    def allocatable_bytes(self) -> int:
        """What one device's allocator can hand to a JAX program: its share of the card, at
        most what the runtime's own memory leaves (a share raised towards 100%)."""
        return min(
            int(self.hbm_bytes * self.allocator_fraction), self.hbm_bytes - self.runtime_bytes
        )


_ASSUMED_HOP_LATENCY_S = 5e-6
# JAX preallocates 75% of a GPU's memory and its allocator stays within that share, with or
# without preallocation (XLA_PYTHON_CLIENT_PREALLOCATE=false), unless
# XLA_PYTHON_CLIENT_MEM_FRACTION (XLA_CLIENT_MEM_FRACTION in newer JAX) says otherwise.
GPU_ALLOCATOR_FRACTION = 0.75
# A GPU reaches neither its datasheet's HBM bandwidth nor its tensor cores' peak, least
# of all in memory-bound kernels and convolutions of few channels. The share is
# calibrated on one measurement (docs/scaling.md: ppo_atari's learner update on one H100,
# 910 ms), separately for each route, as their traffic differs: XLA:GPU's compiled
# update moves 1,076.7 GiB, which at full bandwidth explains 38% of the 910 ms; the
# proxy's XLA:CPU fusions moved 1,941.4 GiB when it was calibrated (68%).
GPU_ACHIEVED_FRACTION = 0.38
GPU_PROXY_ACHIEVED_FRACTION = 0.7
# What a GPU process holds outside JAX's allocator: the CUDA context, the kernels it loads
# and the cuBLAS, cuDNN and NCCL handles. It bounds the allocator's share only where that
# is raised towards the whole card (`Chip.allocatable_bytes`).
GPU_RUNTIME_BYTES = 2**30
GPU_RUNTIME_SOURCE = (
    "assumed: NVIDIA publishes no size for a CUDA context and the libraries' handles; "
    "the programs' cuBLAS and cuDNN workspaces are XLA buffers, in their temporaries "
    "(each library call's scratch result in the compiled module)"
)


def gpu_allocator_fraction() -> float:
    """The share of each GPU JAX's allocator takes: XLA_PYTHON_CLIENT_MEM_FRACTION (or
    XLA_CLIENT_MEM_FRACTION) where set, as the launch on the GPU node would read it."""
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        value = os.environ.get(name)
        if value:
            try:
                fraction = float(value)
            except ValueError:
                raise ConfigError(f"{name}={value!r} is not a fraction of the GPU memory") from None
            if not 0 < fraction <= 1:
                raise ConfigError(f"{name}={value} must lie in (0, 1]")
            return fraction
    return GPU_ALLOCATOR_FRACTION


CHIPS = {
    "TPU v4": Chip(
        "TPU v4", 32 * _GIB, 275e12, 1200 * _GB, 1.1e15 / 4096, _ASSUMED_HOP_LATENCY_S,
        "ICI (3D torus)", "https://cloud.google.com/tpu/docs/v4",
    ),
    "TPU v5 lite": Chip(
        "TPU v5e", 16 * _GB, 197e12, 819 * _GB, 51.2e12 / 256, _ASSUMED_HOP_LATENCY_S,
        "ICI (2D torus)", "https://cloud.google.com/tpu/docs/v5e",
    ),
    "TPU v5": Chip(
        "TPU v5p", 95 * _GB, 459e12, 2765 * _GB, 1200 * _GB / 2, _ASSUMED_HOP_LATENCY_S,
        "ICI (3D torus)", "https://cloud.google.com/tpu/docs/v5p",
    ),
    "TPU v6 lite": Chip(
        "TPU v6e", 32 * _GB, 918e12, 1638 * _GB, 102.4e12 / 256, _ASSUMED_HOP_LATENCY_S,
        "ICI (2D torus)", "https://cloud.google.com/tpu/docs/v6e",
    ),
    # Dense (no sparsity) tensor-core peaks: bf16 989 and TF32 494.7 TFLOP/s (H100 SXM and
    # H200 SXM, which differ in memory), bf16 312 and TF32 156 TFLOP/s (A100). Between
    # hosts, one network adapter per GPU as NVIDIA's DGX systems have: DGX H100 and H200,
    # ConnectX-7 at 400 Gb/s; DGX A100, ConnectX-6 at 200 Gb/s.
    "h100": Chip(
        "NVIDIA H100 SXM", 80 * _GB, 989e12, 3350 * _GB, 900 * _GB / 2, _ASSUMED_HOP_LATENCY_S,
        "NVLink 4", "https://www.nvidia.com/en-us/data-center/h100/ (datasheet, SXM); "
        "https://www.nvidia.com/en-us/data-center/dgx-h100/ (network)", False,
        494.7e12, GPU_ALLOCATOR_FRACTION, GPU_ACHIEVED_FRACTION, GPU_RUNTIME_BYTES,
        400e9 / 8, "InfiniBand NDR, 400 Gb/s per GPU",
    ),
    "h200": Chip(
        "NVIDIA H200 SXM", 141 * _GB, 989e12, 4800 * _GB, 900 * _GB / 2, _ASSUMED_HOP_LATENCY_S,
        "NVLink 4", "https://www.nvidia.com/en-us/data-center/h200/ (datasheet, SXM); "
        "https://www.nvidia.com/en-us/data-center/dgx-h200/ (network)", False,
        494.7e12, GPU_ALLOCATOR_FRACTION, GPU_ACHIEVED_FRACTION, GPU_RUNTIME_BYTES,
        400e9 / 8, "InfiniBand NDR, 400 Gb/s per GPU",
    ),
    "a100": Chip(
        "NVIDIA A100 SXM 80GB", 80 * _GB, 312e12, 2039 * _GB, 600 * _GB / 2,
        _ASSUMED_HOP_LATENCY_S, "NVLink 3",
        "https://www.nvidia.com/en-us/data-center/a100/ (datasheet, SXM); "
        "https://www.nvidia.com/en-us/data-center/dgx-a100/ (network)", False,
        156e12, GPU_ALLOCATOR_FRACTION, GPU_ACHIEVED_FRACTION, GPU_RUNTIME_BYTES,
        200e9 / 8, "InfiniBand HDR, 200 Gb/s per GPU",
    ),
}  # fmt: skip

# The TPU generations `devices` accepts, as JAX names their topologies.
TPU_GENERATIONS = ("v4", "v5e", "v5p", "v6e")
# Cloud TPU accelerator types (`gcloud ... --accelerator-type`, TPU_ACCELERATOR_TYPE):
# prefix -> (generation, TensorCores counted per chip).
_ACCELERATOR_TYPES = {
    "v4": ("v4", 2), "v5litepod": ("v5e", 1), "v5p": ("v5p", 2), "v6e": ("v6e", 1),
}  # fmt: skip
# Cloud TPU's default slice shapes by chip count (the v4, v5e, v5p and v6e pages).
_SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
              256: "16x16"}  # fmt: skip
_SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8",
              256: "4x8x8", 512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16",
              4096: "16x16x16"}  # fmt: skip


def topology_name(topology: str) -> str:
    """`topology` as JAX names a slice: an accelerator type (v5litepod-8, v4-16) becomes
    GENERATION:SHAPE (v5e:2x4, v4:2x2x2); other names are returned as they are."""
    prefix, _, count = topology.rpartition("-")
    if prefix not in _ACCELERATOR_TYPES or not count.isdigit():
        return topology
    generation, cores_per_chip = _ACCELERATOR_TYPES[prefix]
    chips = int(count) // cores_per_chip
    shapes = _SHAPES_3D if generation in ("v4", "v5p") else _SHAPES_2D
    if chips not in shapes or int(count) % cores_per_chip:
        raise _usage(topology, f"no default slice shape for {chips} {generation} chips")
    return f"{generation}:{shapes[chips]}"


def accelerator_type(topology: str) -> str | None:
    """The Cloud TPU accelerator type of a GENERATION:SHAPE name (None for GPU nodes)."""
    generation, _, shape = topology_name(topology).partition(":")
    for prefix, (known, cores_per_chip) in _ACCELERATOR_TYPES.items():
        if known == generation and re.fullmatch(r"\d+(x\d+){1,2}", shape):
            chips = 1
            for size in shape.split("x"):
                chips *= int(size)
            return f"{prefix}-{chips * cores_per_chip}"
    return None


# CARD:N (one host of N GPUs) or CARD:HxN (H hosts of N GPUs each).
_GPU_TOPOLOGY = re.compile(r"^(h100|h200|a100):(?:(\d+)x)?(\d+)$")
MAX_GPUS_PER_NODE = 8


def _usage(topology: str, why: str) -> ConfigError:
    return ConfigError(
        f"--topology={topology}: {why}; give a TPU slice as GENERATION:SHAPE "
        f"({', '.join(TPU_GENERATIONS)}; e.g. v5e:2x4, v4:2x2x2) or as its accelerator "
        "type (v5litepod-8, v4-16), or GPUs as h100:N, h200:N or a100:N (one host of "
        f"N <= {MAX_GPUS_PER_NODE}) or CARD:HxN (H hosts of N, e.g. h100:2x8)"
    )


def gpu_hosts(topology: str) -> tuple[str, int, int] | None:
    """(card, hosts, GPUs per host) of a GPU topology name; None for any other name."""
    match = _GPU_TOPOLOGY.match(topology)
    if match is None:
        return None
    card, hosts, per_host = match.groups()
    return card, int(hosts or 1), int(per_host)


def is_gpu_proxy(topology: str, gpu_proxy: bool = False) -> bool:
    """Whether `topology` compiles on virtual CPU devices standing in for GPUs: a GPU name
    where JAX's CUDA plugin is missing or the proxy is asked for (decided before JAX
    starts, which then needs `request_virtual_devices`)."""
    from sebulba.preflight import gpu_targets

    if gpu_hosts(topology) is None:
        return False
    return gpu_proxy or gpu_targets.plugin_missing_reason() is not None


def virtual_device_count(topology: str, gpu_proxy: bool = False) -> int | None:
    """The CPU devices a GPU proxy needs (XLA reads the count before JAX starts); None
    where `topology` is compiled for its own chips."""
    if not is_gpu_proxy(topology, gpu_proxy):
        return None
    _, hosts, per_host = gpu_hosts(topology)
    return per_host if hosts == 1 else None  # Several hosts have no proxy (`devices`).


def request_virtual_devices(count: int) -> None:
    """Asks XLA:CPU for `count` devices; must run before JAX initialises its backends."""
    flag = f"--xla_force_host_platform_device_count={count}"
    existing = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{existing} {flag}".strip()


def devices(topology: str, *, gpu_proxy: bool = False) -> tuple[list, Chip]:
    """The devices of `topology` and the chip figures that price them.

    Args:
      topology: a TPU slice or GPU hosts (the module's docstring lists the names).
      gpu_proxy: compile GPUs' programs on virtual CPU devices even where JAX's CUDA
        plugin could compile for the cards (one host only).

    Raises:
      ConfigError: a name that is neither a TPU topology nor GPU hosts, a GPU proxy
        whose virtual devices were not requested in time, several GPU hosts without the
        CUDA plugin, or no `libtpu` installed.
    """
    gpus = gpu_hosts(topology)
    if gpus is not None:
        return _gpu_devices(topology, *gpus, gpu_proxy=gpu_proxy)
    topology = topology_name(topology)
    generation, _, shape = topology.partition(":")
    if generation not in TPU_GENERATIONS or not re.fullmatch(r"\d+(x\d+){1,2}", shape):
        raise _usage(topology, "not a topology name")
    host = host_shape(topology)
    try:
        from jax.experimental import topologies

        # Megacore: each v4 or v5p chip's two TensorCores are one JAX device, as on the
        # TPU VMs (docs/multihost.md: "each chip is one JAX device").
        options: dict = {"chip_config_name": "megacore"} if generation in ("v4", "v5p") else {}
        options["chips_per_host_bounds"] = list(host)
        described = topologies.get_topology_desc(platform="tpu", topology_name=topology, **options)
    except Exception as error:  # noqa: BLE001 - libtpu's own message says what is wrong.
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "not installed" in first or isinstance(error, ImportError):
            first = 'compiling for TPU needs libtpu: pip install -e ".[tpu-check]"'
        raise ConfigError(f"--topology={topology}: {first}") from None
    found = list(described.devices)
    kind = found[0].device_kind
    if kind not in CHIPS:
        raise ConfigError(f"--topology={topology}: no published figures for {kind!r} chips")
    # Were a chip's TensorCores separate devices, each would get its share of the chip.
    cores = len({getattr(device, "core_on_chip", 0) for device in found})
    return found, per_device(CHIPS[kind], cores)


def _gpu_devices(
    topology: str, card: str, hosts: int, per_host: int, *, gpu_proxy: bool
) -> tuple[list, Chip]:
    """`devices` of GPU hosts: XLA:GPU's compile-only devices, or the CPU proxy's."""
    import jax

    from sebulba.preflight import gpu_targets

    if not 1 <= per_host <= MAX_GPUS_PER_NODE:
        raise _usage(topology, f"a GPU host has 1 to {MAX_GPUS_PER_NODE} GPUs")
    if hosts < 1:
        raise _usage(topology, "GPUs need at least one host")
    chip = dataclasses.replace(CHIPS[card], allocator_fraction=gpu_allocator_fraction())
    missing = gpu_targets.plugin_missing_reason()
    if not (gpu_proxy or missing):
        try:
            return list(gpu_targets.topology_devices(card, hosts, per_host)), chip
        except Exception as error:  # noqa: BLE001 - the plugin's own message says what is wrong.
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            if "not implemented for cuda" in first:  # The plugin failed its CUDA check.
                first += " (start JAX with JAX_PLATFORMS=cpu: gpu_targets.prepare_environment)"
            raise ConfigError(f"--topology={topology}: {first}") from None
    if hosts > 1:
        why = "the CPU proxy (--gpu_proxy) stands in for one host only" if gpu_proxy else missing
        raise ConfigError(
            f"--topology={topology}: several GPU hosts are compiled for the GPUs themselves: {why}"
        )
    cpus = jax.devices("cpu")
    if len(cpus) < per_host:
        raise ConfigError(
            f"--topology={topology}: needs {per_host} virtual CPU devices, JAX has "
            f"{len(cpus)} (call request_virtual_devices before JAX starts)"
        )
    return cpus[:per_host], dataclasses.replace(
        chip, proxy=True, achieved_fraction=GPU_PROXY_ACHIEVED_FRACTION
    )


# The slices Cloud TPU rents of the 2D-torus generations (the v5e and v6e pages' tables),
# and the chips of one host in each: up to 8 chips a slice is one host, larger slices are
# hosts of 2x4 chips (4x4: 2 hosts, 8x8: 8 hosts, 16x16: 32 hosts).
RENTED_2D_SHAPES = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_MULTI_HOST_2D = (2, 4, 1)
# v4 and v5p hosts hold 4 chips, 2x2x1 of the 3D torus (v4-8 and v5p-8 are one host).
_HOST_3D = (2, 2, 1)


def host_shape(topology: str) -> tuple[int, int, int]:
    """The chips of one host of a TPU slice as Cloud TPU rents it, as (x, y, z).

    Raises:
      ConfigError: a shape Cloud TPU does not rent for that generation, in one line.
    """
    generation, _, shape = topology_name(topology).partition(":")
    dims = [int(size) for size in shape.split("x")]
    if generation in ("v5e", "v6e"):
        if shape not in RENTED_2D_SHAPES:
            raise ConfigError(
                f"--topology={topology}: Cloud TPU rents {generation} slices as "
                f"{', '.join(RENTED_2D_SHAPES)}, not {shape}"
            )
        return (dims[0], dims[1], 1) if dims[0] * dims[1] <= 8 else _MULTI_HOST_2D
    if len(dims) != 3 or any(size % host for size, host in zip(dims, _HOST_3D, strict=True)):
        raise ConfigError(
            f"--topology={topology}: a {generation} slice is XxYxZ chips made of hosts of "
            f"2x2x1 chips (X and Y even, e.g. 2x2x1, 2x2x2, 2x4x4), not {shape}"
        )
    return _HOST_3D


def per_device(chip: Chip, devices_per_chip: int) -> Chip:
    """The share of `chip` one of its `devices_per_chip` devices gets."""
    if devices_per_chip == 1:
        return chip
    return dataclasses.replace(
        chip,
        name=f"{chip.name} (1 of {devices_per_chip} TensorCores)",
        hbm_bytes=chip.hbm_bytes // devices_per_chip,
        peak_flops=chip.peak_flops / devices_per_chip,
        hbm_bytes_per_s=chip.hbm_bytes_per_s / devices_per_chip,
        tf32_flops=None if chip.tf32_flops is None else chip.tf32_flops / devices_per_chip,
        allreduce_bytes_per_s=chip.allreduce_bytes_per_s / devices_per_chip,
    )
