"""glibc's allocator told to keep the memory a training step frees, for the next step to reuse.

A step at the paper's size allocates and frees activations of hundreds of MB (a (B, nh, T, T) attention of batch 64,
8 heads and block 256 is 134 MB in fp32). glibc serves each such block with its own mmap and returns it to the kernel
when it is freed, so every step faults its pages in again: measured on an AMD EPYC (AVX-512, 2 cores), a third of
a paper-size step's time was the kernel's (sys), and the author's baseline stepped in 9.4 s against 5.9 s with the
settings below (scripts/paired_steps.py, issue 67). They change where tensors live, never what is computed: a run's
numbers are the same bits either way. The cost is memory: the process keeps its peak (about 6 GB at the paper size,
which it reaches at every step anyway).

`ega` applies them at its start (`ega_lightning.commands.main`); ``EGA_KEEP_FREED_MEMORY=0`` leaves glibc's defaults.
Elsewhere (not glibc: musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import sys

ENV = "EGA_KEEP_FREED_MEMORY"
# mallopt's parameters (malloc.h) and their values: no block is served by its own mmap (the threshold at mallopt's
# largest int), the heap's top is never trimmed back to the kernel, and it grows by 1 GiB at a time
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = ((M_MMAP_THRESHOLD, 2**31 - 1), (M_TRIM_THRESHOLD, 2**31 - 1), (M_TOP_PAD, 2**30))


def keep_freed_memory() -> bool:
    """Applies `SETTINGS` to this process's glibc allocator; whether all took (False where it is off or no glibc)."""
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another C library
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(parameter, value) == 1 for parameter, value in SETTINGS)
