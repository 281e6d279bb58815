"""glibc's allocator keeps a step's freed memory (allocator.py): on where glibc is, off on request."""

import ctypes
import os
import subprocess
import sys

import pytest

from ega_lightning import allocator

GLIBC = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")
# a fresh process: the settings applied as `ega` applies them, then one block of 64 MiB (above glibc's default mmap
# threshold) allocated; it prints the bytes of it glibc serves by mmap (the growth of mallinfo2's hblkhd)
MMAPPED_AFTER_A_LARGE_BLOCK = """
import ctypes
from ega_lightning.allocator import keep_freed_memory

print(keep_freed_memory())
NAMES = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in NAMES]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
before = libc.mallinfo2().hblkhd
block = libc.malloc(64 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def mmapped_after_a_large_block(env: dict[str, str]) -> tuple[str, int]:
    cmd = [sys.executable, "-c", MMAPPED_AFTER_A_LARGE_BLOCK]
    applied, mmapped = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
    return applied, int(mmapped)


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_a_large_block_stays_on_the_heap_unless_the_settings_are_turned_off():
    on = {k: v for k, v in os.environ.items() if k != allocator.ENV}
    assert mmapped_after_a_large_block(on) == ("True", 0)  # served from the heap, kept there when freed
    applied, mmapped = mmapped_after_a_large_block({**on, allocator.ENV: "0"})
    assert applied == "False" and mmapped >= 64 << 20  # glibc's default: a mmap of its own, returned on free
