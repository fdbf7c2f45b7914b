"""What the heuristics know of the host: vector register width, caches, cores.

The CPU features come from llvmlite (the same source the code generator uses), the
cache sizes from the OS (/sys), the core count from the process's CPU affinity.
Nothing assumes AVX-512: a host without it gets 256- or 128-bit vectors.
"""
import functools
import os

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=None)
def features():
    return set(llvm.get_host_cpu_features().flatten().split(","))


def register_bits():
    """The vector register width: 512 (avx512f), 256 (avx2) or 128."""
    f = features()
    if "+avx512f" in f:
        return 512
    if "+avx2" in f:
        return 256
    return 128


def lanes(dtype):
    """Elements of `dtype` in one vector register."""
    import numpy as np
    return max(1, register_bits() // (8 * np.dtype(dtype).itemsize))


@functools.lru_cache(maxsize=None)
def cache_sizes():
    """{level: bytes} of the data caches of CPU 0, from /sys (empty when unavailable)."""
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "size")) as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(size[-1], 1)
            out[level] = int(size.rstrip("KMG")) * scale
    return out


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
