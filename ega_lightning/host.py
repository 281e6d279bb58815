"""The machine this process runs on, described once: for a run's record and for `ega bench`'s tables.

No torch here (`ega report` imports it through the records): what torch knows of the machine, the
vector instructions its CPU kernels dispatch to, is handed in by the caller.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows of it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gpus() -> str | None:
    """The GPUs' names, comma-separated; None when there are none (or no nvidia-smi to ask)."""
    # nvidia-smi, not torch.cuda: the sweep's own process must not hold a CUDA context beside its runs
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.split(" (UUID")[0].split(": ", 1)[-1] for line in listed.stdout.splitlines() if line.strip()]
    return ", ".join(names) or None


def version(package: str) -> str | None:
    """An installed distribution's version; None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> str:
    """This machine, as far as a run's numbers depend on it: runs on different machines round
    differently, and their tokens/s do not compare."""
    found = gpus()
    devices = f"{cpu_model()} x{os.cpu_count()}" + (f" + {found}" if found else "")
    return f"{devices}; {platform.platform()}; torch {version('torch') or '?'}"


# platform.platform() on Linux: "Linux-<kernel release>-<arch>-with-<libc>"; the kernel's release changes with
# every boot of a VM image, and a run's arithmetic does not depend on it
_PLATFORM = re.compile(r"^(?P<system>[A-Za-z]+)-.*-(?P<arch>[^-]+)-with-(?P<libc>.+)$")


def machine_kind(described: str) -> str:
    """A `machine` string without the kernel's release: the machines whose runs round alike (the same CPU model
    and cores, GPUs, architecture, C library and torch) get one kind, whichever kernel build booted them."""
    parts = []
    for part in described.split("; "):
        found = _PLATFORM.match(part)
        parts.append(f"{found['system']}-{found['arch']}-with-{found['libc']}" if found else part)
    return "; ".join(parts)


def cpu_name(capability: str) -> str:
    """The CPU as a reader of a benchmark can tell machines apart by: its model, the vector instructions
    torch's kernels dispatch to (``capability``: they set what an extra head channel costs) and its
    logical cores."""
    return f"{cpu_model()} ({platform.machine()}, {capability}, {os.cpu_count()} logical cores)"


# the vector units that set a CPU's kernels, so its rounding and its speed, by the /proc/cpuinfo flag that shows each,
# in the order the brief names them: an "AMD EPYC" is either of the first two kinds, an Intel Xeon may add AMX
VECTOR_UNITS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX-512 BF16"), ("amx_tile", "AMX"))


def cpu_flags() -> set[str]:
    """The CPU's flags (/proc/cpuinfo's first ``flags`` line); empty where the machine does not say."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def vector_units(flags: set[str] | None = None) -> list[str]:
    """The vector units of `VECTOR_UNITS` this CPU has, by name (``flags``: this machine's by default)."""
    flags = cpu_flags() if flags is None else flags
    return [name for flag, name in VECTOR_UNITS if flag in flags]


def cpu_kind(capability: str, flags: set[str] | None = None) -> dict[str, Any]:
    """This CPU as a record names it: the model, the instructions torch's kernels dispatch to (``capability``,
    ``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512, ...), the vector units the CPU has (AMX and AVX-512
    BF16 are oneDNN's, not in the capability) and its logical cores. Two segments of one run compare by it."""
    return {
        "model": cpu_model(),
        "capability": capability,
        "units": vector_units(flags),
        "cores": os.cpu_count(),
    }


def cpu_kind_line(capability: str, flags: set[str] | None = None) -> str:
    """`cpu_kind` in one line, as CI prints it beside each suite's time: "AMD EPYC (AVX512 kernels; AVX2, AVX-512,
    AVX-512 BF16), 2 cores"."""
    kind = cpu_kind(capability, flags)
    units = ", ".join(kind["units"]) or "no vector units"
    return f"{kind['model']} ({capability} kernels; {units}), {kind['cores']} cores"
