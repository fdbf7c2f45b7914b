"""Python's cyclic garbage collector held off while a kernel compiles.

A first matmul allocates hundreds of thousands of Python objects (sympy expressions,
llvmlite IR values), and every 700 allocations the collector walks the young ones,
every tenth time the older ones too, up to every object of the process (sympy's and
numpy's modules included): 81 collections, about a sixth of a first matmul's time
(Zen 5). A compile leaves little cyclic garbage behind (llvmlite's IR graph, dropped
with its module); the first collection after it frees that. Compiles may nest (a
deferred specialization built inside a call) and run on several Python threads at once:
the collector runs again when the last one ends, if it ran before the first began.
"""
import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused():
    """No cyclic garbage collection inside the block (reference counting still frees
    everything that is not in a cycle)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
