"""The light half of the call path: the thread count every generated call path reads,
kept here (no sympy, no llvmlite) so that `import tex` and a warm start (backends/llvm/warm.py)
need neither. runtime.py re-exports these names."""
import os
import warnings

import numpy as np

from .threads import MAX_WORKERS

# threads at most: more than the pool's MAX_WORKERS + 1 would not run anyway, and a
# count far beyond the machine only costs memory (each thread has its own stack)
MAX_THREADS = MAX_WORKERS + 1


def _available_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _default_threads():
    """TEX_NUM_THREADS, else the CPUs this process may use. A value that is not an
    integer from 1 to MAX_THREADS gets a warning (never an error: `import tex` must
    not fail on the environment) and the default."""
    env = os.environ.get("TEX_NUM_THREADS")
    cpus = min(MAX_THREADS, _available_cpus() or 1)
    if not env:
        return cpus
    try:
        n = int(env)
    except ValueError:
        n = None
    if n is None or not 1 <= n <= MAX_THREADS:
        warnings.warn(f"TEX_NUM_THREADS={env!r} is not an integer from 1 to {MAX_THREADS}; "
                      f"using {cpus} threads", RuntimeWarning, stacklevel=2)
        return cpus
    return n


_NUM_THREADS = [_default_threads()]     # read by every generated call path

# a block's rows x k above which a region per column block pays (thread_parts)
PART_WORK = 1 << 20
PARTS_PER_THREAD = 4      # at most, when parts pay (thread_parts)


def thread_parts(threads, work, length, block, crowded):
    """The part count of AutoParts rule "threads" (runtime.PART_RULES): a fused matmul's
    `length` columns in blocks of `block`, dealt in parts to the threads (each part
    packs its own B blocks: one parallel region a call), or 1 part (a region per block,
    its rows shared). Parts pay when a block's rows x k (`work`) are few: with more, a
    region per block is long enough that a worker joining it late (its CPU taken by
    numpy's spinning BLAS thread) still takes a share of its rows (4096 x 512 x 1000
    argmax right after a numpy call: numpy/tex 1.2 with regions, 0.8-0.95 with parts).
    For the same reason, 1 part while the CPUs are crowded (`crowded()`: the thread
    runtime's flag). Otherwise up to PARTS_PER_THREAD parts a thread, taken one at a
    time from the region's counter, so a thread whose CPU is shared takes fewer: with a
    part a thread, 1024^3 row max right after a numpy call ran 20-22 ms (the thread
    sharing its CPU with numpy's spinning BLAS thread held up the region with half the
    work), with four 14.7-15.5 (11 alone either way; Emerald Rapids, 2 threads). Parts
    pay when there are four blocks a thread or more and the thread with the most blocks
    has at most 1/16 over an even share (AVX2's 112-column blocks of 1000 columns, 5 and
    4 to 2 threads, were 10% slower than regions): the most parts that keep that."""
    if threads <= 1 or work > PART_WORK:
        return 1
    blocks = -(-length // block)
    if blocks < 4 * threads:
        return 1
    for parts in range(min(blocks, PARTS_PER_THREAD * threads), threads - 1, -1):
        size = -(-blocks // parts)          # blocks a part (the last ones fewer)
        dealt = -(-blocks // size)          # the parts that get blocks
        most = -(-dealt // threads) * size  # a thread's blocks, at most
        if most * block * threads * 16 <= 17 * length:
            return 1 if crowded() else parts
    return 1


def set_num_threads(n):
    """Threads for parallel loops from now on (default: TEX_NUM_THREADS, else the CPUs
    this process may use): an integer from 1 to MAX_THREADS (256)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: the thread count must be an integer, not {n!r}")
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"set_num_threads: the thread count must be from 1 to {MAX_THREADS}, "
                         f"got {n}")
    _NUM_THREADS[0] = int(n)


def get_num_threads():
    """Threads parallel loops use (tex.set_num_threads; default TEX_NUM_THREADS, else the
    CPUs this process may use)."""
    return _NUM_THREADS[0]
