"""Compile-latency figures of issue 13, each measured in a fresh interpreter.

    python tools/latency.py [--repeat N] [--runtime]

Rows: `import tex` beyond `import numpy`; the first call of five einsums with an empty
kernel cache (the time of the call alone, after `import tex`: whatever the import
deferred is paid here, and the "import + call" column adds both); a matmul in a new
process whose cache already holds the kernel (warm start). `--runtime` also times a
1024^3 float32 matmul and a 4096x4096 row sum (best of several, after a warm-up) to
check that run time did not regress. Medians of --repeat runs (default 3).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import sys, time
import numpy as np
t0, c0 = time.perf_counter(), time.process_time()
import tex
t1, c1 = time.perf_counter(), time.process_time()
spec, shapes = {spec!r}, {shapes!r}
ops = [np.ones(s, np.float32) for s in shapes]
t2, c2 = time.perf_counter(), time.process_time()
tex.einsum(spec, *ops)
t3, c3 = time.perf_counter(), time.process_time()
heavy = [m for m in ("sympy", "networkx", "llvmlite.binding", "tex.symbolic") if m in sys.modules]
print(t1 - t0, t3 - t2, c1 - c0, c3 - c2, ",".join(heavy) or "-")
"""

CASES = [
    ("elementwise ij,ij->ij 256^2", "ij,ij->ij", [(256, 256), (256, 256)]),
    ("row reduction ij->i 256^2", "ij->i", [(256, 256)]),
    ("matmul ik,kj->ij 256^2", "ik,kj->ij", [(256, 256), (256, 256)]),
    ("3-operand ij,jk,kl->il 64^2", "ij,jk,kl->il", [(64, 64)] * 3),
    ("batched bij,bjk->bik 8x64^2", "bij,bjk->bik", [(8, 64, 64), (8, 64, 64)]),
]

RUNTIME = """
import time, numpy as np, tex
def best(f, n):
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return min(ts)
rng = np.random.default_rng(0)
a = rng.random((1024, 1024), dtype=np.float32)
b = rng.random((1024, 1024), dtype=np.float32)
x = rng.random((4096, 4096), dtype=np.float32)
mm = best(lambda: tex.einsum("ik,kj->ij", a, b), 15)
rs = best(lambda: tex.einsum("ij->i", x), 15)
print(mm, rs)
"""


def run(code, cache):
    env = dict(os.environ, TEX_CACHE_DIR=cache)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout.split()


def first_call(spec, shapes, cache):
    *times, heavy = run(CHILD.format(spec=spec, shapes=shapes), cache)
    return (*map(float, times), heavy)


def measure(repeat):
    rows = []
    for label, spec, shapes in CASES:
        runs = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="tex-latency-") as cache:
                runs.append(first_call(spec, shapes, cache))
        rows.append((f"first {label}", runs))
    with tempfile.TemporaryDirectory(prefix="tex-latency-") as cache:
        first_call("ik,kj->ij", [(256, 256), (256, 256)], cache)
        runs = [first_call("ik,kj->ij", [(256, 256), (256, 256)], cache)
                for _ in range(repeat)]
    rows.append(("warm start matmul (on disk)", runs))
    return rows


def import_only(repeat):
    code = ("import time, sys, numpy\nt, c = time.perf_counter(), time.process_time()\n"
            "import tex\nprint(time.perf_counter() - t, 0, time.process_time() - c, 0, "
            "','.join(m for m in ('sympy', 'networkx', 'llvmlite', 'tex.symbolic') if m in sys.modules) or '-')")
    with tempfile.TemporaryDirectory(prefix="tex-latency-") as cache:
        return [(*map(float, r[:4]), r[4]) for r in (run(code, cache) for _ in range(repeat))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runtime", action="store_true")
    args = ap.parse_args()
    imports = import_only(args.repeat)
    print("milliseconds, median of each figure over the runs; cpu = this process's CPU time")
    print(f"{'what':40s} {'wall':>6s} {'cpu':>6s} {'import+call':>12s} {'cpu':>6s}"
          "  heavy modules loaded")

    def med(runs, f):
        return 1e3 * statistics.median(f(r) for r in runs)
    print(f"{'import tex (beyond numpy)':40s} {med(imports, lambda r: r[0]):6.0f} "
          f"{med(imports, lambda r: r[2]):6.0f} {'':12s} {'':6s}  {imports[-1][4]}")
    for label, runs in measure(args.repeat):
        print(f"{label:40s} {med(runs, lambda r: r[1]):6.0f} {med(runs, lambda r: r[3]):6.0f} "
              f"{med(runs, lambda r: r[0] + r[1]):12.0f} {med(runs, lambda r: r[2] + r[3]):6.0f}"
              f"  {runs[-1][4]}")
    if args.runtime:
        with tempfile.TemporaryDirectory(prefix="tex-latency-") as cache:
            mm, rs = map(float, run(RUNTIME, cache))
        print(f"{'run time: matmul 1024^3 f32 (best)':44s} {1e3 * mm:9.2f}")
        print(f"{'run time: row sum 4096^2 f32 (best)':44s} {1e3 * rs:9.2f}")


if __name__ == "__main__":
    main()
