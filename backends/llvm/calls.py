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


def thread_parts(threads, work, length, block, crowded):
    """The part count of AutoParts rule "threads" (runtime.PART_RULES): a fused matmul's
    `length` columns in blocks of `block`, dealt in parts to the threads (each part
    packs its own B blocks: one parallel region a call), or 1 part (a region per block,
    its rows shared). Parts pay when a block's rows x k (`work`) are few: with more, a
    region per block is long enough that a worker joining it late (its CPU taken by
    numpy's spinning BLAS thread) still takes a share of its rows (4096 x 512 x 1000
    argmax right after a numpy call: numpy/tex 1.2 with regions, 0.8-0.95 with parts).
    For the same reason, 1 part while the CPUs are crowded (`crowded()`: the thread
    runtime's flag; four parts a thread there did no better). Otherwise a part a thread
    (1024^3 row max: 4.6 -> 4.3 ms) when each part gets four blocks or more and the
    largest is at most 1/16 over an even share (AVX2's 112-column blocks of 1000
    columns, 5 and 4 to 2 threads, were 10% slower than regions)."""
    if threads <= 1 or work > PART_WORK:
        return 1
    blocks = -(-length // block)
    if blocks < 4 * threads or -(-blocks // threads) * block * threads * 16 > 17 * length:
        return 1
    return 1 if crowded() else threads


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
