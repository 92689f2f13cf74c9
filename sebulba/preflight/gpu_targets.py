"""The NVIDIA GPUs a run can be compiled for on a machine without one (`sebulba.check`).

JAX's CUDA plugin (`pip install -e ".[gpu-check]"`: the jax-cuda12-plugin and
jax-cuda12-pjrt wheels, no CUDA libraries) builds a topology of compile-only devices from
a text `stream_executor.GpuTargetConfigProto` that describes the card, and XLA:GPU
compiles for those devices as for attached ones, down to the cubin: the scheduled module
with its fusions, cuBLAS and cuDNN calls and collectives, and its buffer assignment
(`memory_analysis()`). Nothing can run on them. The descriptions are XLA's published
specs, shipped beside this module (`gpu_targets/*.txtpb`; each file names its source).

What such a compile cannot give:

* autotuning: no GPU times the candidate kernels, so GEMMs keep XLA's default Triton
  tilings and convolutions cuDNN's default algorithm, without the scratch space a tuned
  algorithm may ask for; on the card, fusions, kernels and temporaries can differ a little;
* timings, and `compiled.cost_analysis()` (this client does not implement it):
  `sebulba.preflight.hlo_cost` reads FLOPs, traffic and collectives from the module.

The plugin's start-up check of the CUDA installation calls `cuInit`, which fails without
a driver, and then the plugin is not registered at all; JAX skips that check where
`JAX_PLATFORMS` names no CUDA platform (`prepare_environment`) or
`JAX_SKIP_CUDA_CONSTRAINTS_CHECK` is set.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

# The card's name in `--topology=CARD:...` -> its target description in gpu_targets/.
TARGET_FILES = {"h100": "h100_sxm.txtpb", "h200": "h200.txtpb", "a100": "a100_sxm_80.txtpb"}
# The plugin's Python package and its extensions' package, for CUDA 12 and CUDA 13 wheels.
_PLUGINS = (
    ("jax_plugins.xla_cuda12", "jax_cuda12_plugin"),
    ("jax_plugins.xla_cuda13", "jax_cuda13_plugin"),
)
INSTALL_HINT = 'pip install -e ".[gpu-check]"'


def plugin_missing_reason() -> str | None:
    """Why XLA's compile-only CUDA client cannot be used in this environment; None if it can.

    Looks for the packages only (nothing is imported), so it can decide before JAX starts.
    """
    for plugin, extensions in _PLUGINS:
        if _installed(plugin) and _installed(extensions):
            return None
    return (
        "JAX's CUDA plugin is not installed (jax_plugins.xla_cuda12 and jax_cuda12_plugin): "
        f"{INSTALL_HINT}"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def prepare_environment() -> None:
    """Before JAX starts: keeps the CUDA plugin's start-up from probing for a driver.

    With `JAX_PLATFORMS=cpu` the plugin registers without its CUDA version check (whose
    `cuInit` fails where no driver is installed, after which the "cuda" topology does not
    exist), and JAX's own backend is the CPU's; a value the user set is kept.
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def target_config(card: str) -> str:
    """The text `GpuTargetConfigProto` of `card` (a key of `TARGET_FILES`)."""
    folder = importlib.resources.files(__package__).joinpath("gpu_targets")
    return folder.joinpath(TARGET_FILES[card]).read_text(encoding="utf-8")


@functools.cache
def topology_devices(card: str, hosts: int, gpus_per_host: int) -> list[Any]:
    """The compile-only devices of `hosts` hosts of `gpus_per_host` `card` GPUs each.

    Device i lives on host `i // gpus_per_host` (its `process_index`), as on the
    cluster. One call per topology and process (cached): programs placed on its devices
    compile together, those of another call's devices would not.

    Raises:
      RuntimeError: the plugin is missing or refuses the target (JAX's message).
    """
    from jax.experimental import topologies

    described = topologies.get_topology_desc(
        platform="cuda",
        topology=f"1x{hosts}x{gpus_per_host}",
        target_config=target_config(card),
    )
    return list(described.devices)


def compile_stablehlo(text: str, devices: Sequence[Any]):
    """Compiles a StableHLO module's text for compile-only GPU `devices`.

    Args:
      text: the module, e.g. `jax.jit(f).lower(...).as_text()` lowered on CPU devices
        (the module's own shardings must be for `len(devices)` partitions).
      devices: `topology_devices`'s devices, in the program's partition order. The
        custom calls the module makes must have handlers registered for CUDA in this
        process (envpool registers its own when a pool's `xla()` is called).

    Returns:
      The loaded executable: `hlo_modules()[0].to_string()` is the scheduled module,
      `get_compiled_memory_stats()` its buffers.
    """
    import numpy as np
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    client = devices[0].client
    options = compiler.get_compile_options(
        num_replicas=1,
        num_partitions=len(devices),
        device_assignment=np.array([list(devices)]),
        backend=client,
    )
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        return compiler.backend_compile_and_load(
            client, module, xla_client.DeviceList(tuple(devices)), options, []
        )


def not_persistently_cached() -> contextlib.AbstractContextManager:
    """A context in which the thread's compilations skip JAX's disk cache.

    An executable compiled for compile-only devices can be written there, but no process
    can load it again (JAX warns "PjRtCompiler must be constructed with a Client to call
    DeserializeLoadedExecutable" and compiles anew), so an entry would only take space.
    The setting's thread-local form is JAX's internal config; where a JAX version lacks
    it, the cache is used as before.
    """
    try:
        from jax._src import config as jax_config

        return jax_config.enable_compilation_cache(False)
    except (ImportError, AttributeError, TypeError):
        return contextlib.nullcontext()
