"""Which JAX platforms a process starts, decided before JAX does.

The test extra installs libtpu (for `sebulba.check`'s TPU compilations), and with libtpu
installed JAX tries a TPU backend on every machine, where libtpu prints five lines of
errors about the TPU VM it cannot find. On a machine with no accelerator at all (no
TPU on the PCI bus, no NVIDIA or AMD GPU device node) only the CPU backend can start, so
`skip_absent_accelerators` asks JAX for it alone and the errors never appear. Wherever an
accelerator may be present, or the user chose `JAX_PLATFORMS` (or `jax_platforms` in
code), nothing changes. `import sebulba` calls it, so that library callers are as quiet as
the command lines.

The test extra also installs JAX's CUDA plugin (for `sebulba.check`'s compilations for
GPUs without a GPU), whose native libraries each log "Could not find cuda drivers on your
machine" when they load on a machine without CUDA, three notices of two lines in every
process that starts JAX, straight to file descriptor 2 before anything could configure
their logging. `load_cuda_plugin_quietly` loads them first, with those lines dropped, so
that JAX's own load of them later prints nothing. It imports nothing of JAX.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import re
import sys
import tempfile

_GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips sit on the PCI bus under Google's vendor id.
_GPU_DEVICE_NODES = ("/dev/nvidia*", "/dev/kfd", "/dev/dxg")


def _tpu_on_pci_bus() -> bool:
    for vendor_path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor_path, encoding="ascii") as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def only_cpu_present() -> bool:
    """Whether this machine has neither a TPU nor a GPU device for JAX to start."""
    gpu_nodes = any(glob.glob(pattern) for pattern in _GPU_DEVICE_NODES)
    return not gpu_nodes and not _tpu_on_pci_bus()


def skip_absent_accelerators() -> None:
    """Sets `JAX_PLATFORMS=cpu` where libtpu is installed but no accelerator exists.

    Call before JAX starts a backend; does nothing once `JAX_PLATFORMS` is set, or
    `jax_platforms` in code.
    """
    if "JAX_PLATFORMS" in os.environ or importlib.util.find_spec("libtpu") is None:
        return
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_platforms:  # The caller chose in code.
        return
    if only_cpu_present():
        os.environ["JAX_PLATFORMS"] = "cpu"
        if jax is not None:  # Imported already: its config read the variable then.
            jax.config.update("jax_platforms", "cpu")


# The CUDA plugin's native libraries: (package, subdirectory) holding them, CUDA 12 and 13.
_CUDA_PLUGIN_LIBRARIES = (
    ("jax_cuda12_plugin", ""), ("jax_plugins", "xla_cuda12"),
    ("jax_cuda13_plugin", ""), ("jax_plugins", "xla_cuda13"),
)  # fmt: skip
# What each of them logs as it loads where no CUDA driver is installed.
CUDA_LOAD_NOTICE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR|\S+ \S+ +\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your "
    r"machine, GPU will not be used\.)$"
)


def _cuda_plugin_libraries() -> list[str]:
    found = []
    for package, subdirectory in _CUDA_PLUGIN_LIBRARIES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            found += sorted(glob.glob(os.path.join(folder, subdirectory, "*.so")))
    return found


def load_cuda_plugin_quietly() -> None:
    """Loads the CUDA plugin's native libraries where it is installed on a machine with
    no GPU, dropping the notices they log as they load (every other line is written as it
    came). Call before JAX starts a backend; does nothing where a GPU device node exists
    or the plugin is not installed."""
    libraries = _cuda_plugin_libraries()
    if not libraries or not only_cpu_present():
        return
    # Without a GPU the plugin only compiles (sebulba.check), and XLA:GPU notes each such
    # compile at INFO level ("Found GPU target config and no PjRtClient. Performing a
    # deviceless compilation."). The libraries read the level once, as they load.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            for library in libraries:
                try:
                    ctypes.CDLL(library)
                except OSError:
                    continue  # JAX's own load of it will say what is wrong.
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        lines = captured.read().decode(errors="replace").splitlines(keepends=True)
    kept = "".join(line for line in lines if not CUDA_LOAD_NOTICE.match(line.rstrip("\n")))
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()
