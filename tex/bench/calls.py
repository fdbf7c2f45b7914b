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
# compiles the kernel or loads it from TEX_CACHE_DIR, then checks the result against
# numpy.einsum. Small sizes keep the run itself negligible.
_FIRST_CALL = """
import sys, time, numpy as np
spec, shapes = sys.argv[1], eval(sys.argv[2])
rng = np.random.default_rng(0)
ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
t0 = time.perf_counter()
import tex
t1 = time.perf_counter()
c = tex.einsum(spec, *ops)
t2 = time.perf_counter()
assert np.allclose(c, np.einsum(spec, *ops), rtol=1e-4, atol=1e-4), "tex.einsum disagrees"
print(t1 - t0, t2 - t1)
"""

# issue 13's kinds of first call (its goals on a 2-core Zen 3: 50, 80, 200, 400 ms cold;
# 15 ms warm), and a batched product
FIRST_CALLS = {
    "elementwise": ("ij,ij->ij", [(256, 256), (256, 256)]),
    "row_reduction": ("ij->i", [(256, 256)]),
    "matmul": ("ik,kj->ij", [(256, 256), (256, 256)]),
    "three_operand": ("ij,jk,kl->il", [(64, 48), (48, 32), (32, 40)]),
    "batched": ("bij,bjk->bik", [(8, 64, 64), (8, 64, 64)]),
}


def _fresh_process_first_call(cache_dir, spec="ik,kj->ij", shapes=((64, 64), (64, 64))):
    """(import seconds, first-call seconds) in a new interpreter using `cache_dir`."""
    env = dict(os.environ, TEX_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL, spec, repr(list(shapes))],
                          env=env, capture_output=True, text=True)
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


def _cold(spec, shapes, opts):
    runs = []
    for _ in range(opts.repeat):
        with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
            runs.append(_fresh_process_first_call(cache, spec, shapes))
    return _first_call_result(runs)


def _warm(spec, shapes, opts):
    with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
        _fresh_process_first_call(cache, spec, shapes)
        runs = [_fresh_process_first_call(cache, spec, shapes) for _ in range(opts.repeat)]
    return _first_call_result(runs)


def _first_call_workloads():
    for kind, (spec, shapes) in FIRST_CALLS.items():
        dims = " and ".join("x".join(map(str, s)) for s in shapes)
        cold = partial(_cold, spec, shapes)
        cold.__name__ = f"compile_cold_{kind}_f32"
        cold.__doc__ = (f"First tex.einsum({spec!r}) call on float32 {dims} in a new process "
                        "with an empty kernel cache: scheduling, IR, LLVM (a light "
                        "compile where its quick code computes the optimized code's "
                        "values: backends/llvm/tiers.py), the call itself (and the DSL "
                        "and llvmlite imports it needs). `import_ms` is `import tex` "
                        "alone.")
        warm = partial(_warm, spec, shapes)
        warm.__name__ = f"compile_warm_disk_{kind}_f32"
        warm.__doc__ = (f"The same first call of {spec!r} in a new process whose kernel "
                        "cache on disk already holds it (filled by one untimed process, "
                        "whose exit waits for its optimized code to reach the disk).")
        workload(cold)
        workload(warm)


_first_call_workloads()


@workload
def import_tex(opts):
    """`import tex` in a new process, beyond `import numpy` (issue 13's goal: 150 ms on a
    2-core Zen 3)."""
    code = "import time, numpy; t = time.perf_counter(); import tex; print(time.perf_counter() - t)"
    runs = []
    for _ in range(opts.repeat):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True)
        runs.append(float(proc.stdout.split()[-1]))
    return Result("ms", tex_s=statistics.median(runs), tex_threads=tex.get_num_threads())
