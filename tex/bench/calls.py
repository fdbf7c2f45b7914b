"""Per-call overhead and compile times."""
import os
import statistics
import subprocess
import sys
import tempfile
from functools import partial

import numpy as np

import tex

from .harness import Result, compare, workload


def _rng():
    return np.random.default_rng(0)


@workload
def call_overhead_einsum_i_i_8(opts):
    """tex.einsum("i,i->") on 8-element float32 arrays (a cached kernel) vs np.dot, x @ y
    and np.einsum (optimize=False: its fastest mode at this size, no path search)."""
    x, y = _rng().standard_normal((2, 8), dtype=np.float32)
    return compare(partial(tex.einsum, "i,i->", x, y),
                   {"np.dot": partial(np.dot, x, y), "x @ y": partial(np.matmul, x, y),
                    "np.einsum": partial(np.einsum, "i,i->", x, y)},
                   opts, unit="ns/call", reference=lambda: np.float32(np.sum(x * y)),
                   threads=1, same_threads=False)


@workload
def call_overhead_compiled_8(opts):
    """A compiled dot product called as f(x=..., y=...) on 8 float32 elements vs np.dot
    and x @ y (the fastest is the ratio)."""
    n = tex.sizes("n")
    i = tex.indices("i")
    X, Y = tex.tensor("x", (n,), "float32"), tex.tensor("y", (n,), "float32")
    f = tex.compile(tex.compute("dot", (), tex.sum(X[i] * Y[i], over=i)))
    x, y = _rng().standard_normal((2, 8), dtype=np.float32)
    return compare(partial(f, x=x, y=y),
                   {"np.dot": partial(np.dot, x, y), "x @ y": partial(np.matmul, x, y)},
                   opts, unit="ns/call", reference=lambda: np.float32(np.sum(x * y)),
                   threads=1, same_threads=False)


# The child times `import tex` (numpy already loaded) and the first einsum call, which
# compiles the kernel or loads it from TEX_CACHE_DIR, then checks the product against
# numpy's. 64x64 keeps the run itself negligible.
_FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
import tex
t1 = time.perf_counter()
a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
c = tex.einsum("ik,kj->ij", a, a)
t2 = time.perf_counter()
assert np.allclose(c, a @ a, rtol=1e-4, atol=1e-4), "tex.einsum disagrees with a @ a"
print(t1 - t0, t2 - t1)
"""


def _fresh_process_first_call(cache_dir):
    """(import seconds, first-call seconds) in a new interpreter using `cache_dir`."""
    env = dict(os.environ, TEX_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        raise RuntimeError(f"child process failed: {err.splitlines()[-1] if err else ''}"
                           f"\n{err[-2000:]}")
    import_s, first_s = map(float, proc.stdout.split()[-2:])
    return import_s, first_s


def _first_call_result(runs):
    return Result("ms", tex_s=statistics.median(r[1] for r in runs),
                  tex_threads=tex.get_num_threads(),
                  extra={"import_ms": 1e3 * statistics.median(r[0] for r in runs)})


@workload
def compile_cold_matmul_f32(opts):
    """First tex.einsum("ik,kj->ij") float32 call in a new process with an empty kernel
    cache: parsing, lowering, LLVM O3 and codegen. `import_ms` is `import tex` alone."""
    runs = []
    for _ in range(opts.repeat):
        with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
            runs.append(_fresh_process_first_call(cache))
    return _first_call_result(runs)


@workload
def compile_warm_disk_matmul_f32(opts):
    """The same first call in a new process whose kernel cache on disk already holds the
    kernel (filled by one untimed process first)."""
    with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
        _fresh_process_first_call(cache)
        runs = [_fresh_process_first_call(cache) for _ in range(opts.repeat)]
    return _first_call_result(runs)
