"""Python's cyclic garbage collector held off while a kernel compiles.

A first matmul allocates hundreds of thousands of Python objects (symbolic expressions,
llvmlite IR values), and every 700 allocations the collector walks the young ones,
every tenth time the older ones too, up to every object of the process (numpy's modules
included): 72 collections, about a sixth of a first matmul's time
(Zen 5). A compile leaves little cyclic garbage behind (llvmlite's IR graph, dropped
with its module); the first collection after it frees that.

The pause sets the first generation's threshold to 0 (which stops automatic
collections) rather than calling gc.disable(): whether the collector is enabled stays
the user's to say, from any thread, during a compile too. Compiles may nest (a deferred
specialization built inside a call) and run on several Python threads at once: the
thresholds come back when the last one ends. A forked child starts unpaused.
"""
import contextlib
import gc
import os
import threading

_lock = threading.Lock()
_depth = 0
_saved = None           # the thresholds the outermost pause replaced


@contextlib.contextmanager
def paused():
    """No automatic cyclic garbage collection inside the block (reference counting
    still frees everything that is not in a cycle; gc.collect() still collects)."""
    global _depth, _saved
    entered = False
    try:
        with _lock:
            if _depth == 0:
                _saved = gc.get_threshold()
                gc.set_threshold(0, *_saved[1:])
            _depth += 1
            entered = True
        yield
    finally:
        if entered:
            with _lock:
                _depth -= 1
                if _depth == 0:
                    gc.set_threshold(*_saved)


def _restart_in_child():
    """After fork: the child runs none of the parent's compiles."""
    global _lock, _depth, _saved
    _lock = threading.Lock()
    if _depth and _saved is not None:
        gc.set_threshold(*_saved)
    _depth, _saved = 0, None


os.register_at_fork(after_in_child=_restart_in_child)
