"""`python -m tex bench --dask`: tex over dask arrays against dask's own chunk functions,
on one LocalCluster of single-threaded worker processes (issue 15's three numbers).

    matmul     float32 N x N @ N x N in C x C chunks: tex.einsum vs x @ y
    row sums   int8 -> int32 row sums of an S MiB array in S/8 MiB row chunks:
               a compiled tex.sum vs x.sum(axis=1, dtype=np.int32)
    overhead   an elementwise program on 1,000 tiny chunks vs a numpy chunk function:
               the time per task tex adds

The operands are made on the workers (dask's random generator) and persisted before
timing, and each result is persisted on the workers (not gathered), so the numbers are
the chunk tasks' work and dask's scheduling, not transfers to this process. Every
timing is the median of interleaved rounds (tex, dask, tex, dask, ...), after a warm-up
of two rounds (compiling the kernels; a fresh worker's first rounds are slow
for dask's own chunk functions too).
"""
import argparse
import os
import statistics
import time

import numpy as np

import tex

BIG = {"n": 4096, "chunk": 1024, "mib": 512}
SMALL = {"n": 1024, "chunk": 512, "mib": 64}


def timed(client, make):
    """Seconds to build the graph and compute its result on the workers. The keys are
    deterministic, so the next round would find this result still held: it is released,
    and the scheduler has forgotten it, before the next round starts."""
    from dask.core import flatten
    from distributed import wait
    t = time.perf_counter()
    r = client.persist(make())
    wait(r)
    s = time.perf_counter() - t
    keys = list(flatten(r.__dask_keys__()))
    del r                               # released (not cancelled: that races a re-submit)
    for _ in range(2000):
        if not client.run_on_scheduler(_held, keys):
            break
        time.sleep(0.005)
    return s


def _held(keys, dask_scheduler=None):
    return any(k in dask_scheduler.tasks for k in keys)


def interleaved(client, rounds, *makes):
    """Median seconds of each graph maker, sampled in turn (a, b, a, b, ...)."""
    for _ in range(2):              # warm-up: compile, and fresh workers' first-touch costs
        for make in makes:
            timed(client, make)
    samples = [[] for _ in makes]
    for _ in range(rounds):
        for out, make in zip(samples, makes):
            out.append(timed(client, make))
    return [statistics.median(s) for s in samples]


def check(client, got, want, exact):
    g, w = client.compute([got, want], sync=True)
    ok = np.array_equal(g, w) if exact else np.allclose(g, w, rtol=1e-3, atol=1e-2)
    if not ok:
        raise AssertionError("tex and dask disagree")


def bench_matmul(client, n, chunk, rounds):
    import dask.array as da
    from distributed import wait
    rng = da.random.default_rng(0)
    x = rng.standard_normal((n, n), chunks=chunk, dtype=np.float32).persist()
    y = rng.standard_normal((n, n), chunks=chunk, dtype=np.float32).persist()
    wait([x, y])
    check(client, tex.einsum("ik,kj->ij", x[:chunk], y), (x[:chunk] @ y), exact=False)
    return interleaved(client, rounds, lambda: tex.einsum("ik,kj->ij", x, y), lambda: x @ y,
                       lambda: da.einsum("ik,kj->ij", x, y))


def row_sum():
    M, N = tex.sizes("M N")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "int8")
    return tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype="int32")))


def bench_row_sums(client, mib, rounds):
    import dask.array as da
    from distributed import wait
    cols = 16384
    rows = mib * 2**20 // cols
    chunk_rows = max(rows // 8, 1)
    x = da.random.default_rng(1).integers(-128, 128, (rows, cols), dtype=np.int8,
                                          chunks=(chunk_rows, cols)).persist()
    wait(x)
    f = row_sum()
    check(client, f(x), x.sum(axis=1, dtype=np.int32), exact=True)
    return interleaved(client, rounds, lambda: f(x), lambda: x.sum(axis=1, dtype=np.int32))


def _numpy_chunk(b):
    return np.exp(b) * np.float32(2) + np.float32(1)


def bench_overhead(client, tasks, rounds):
    """(tex, numpy) seconds for a graph of `tasks` 8-element chunks of exp(x) * 2 + 1."""
    import dask.array as da
    from distributed import wait
    i = tex.indices("i")
    X = tex.tensor("X", (tex.sizes("N"),), "float32")
    f = tex.compile(tex.compute("E", (i,), tex.exp(X[i]) * 2 + 1))
    x = da.random.default_rng(2).standard_normal(8 * tasks, chunks=8, dtype=np.float32)
    x = x.persist()
    wait(x)
    check(client, f(x), x.map_blocks(_numpy_chunk), exact=False)
    return interleaved(client, rounds, lambda: f(x), lambda: x.map_blocks(_numpy_chunk))


def fmt(s):
    return f"{s * 1e3:9.1f} ms"


def run(big=False, rounds=3, workers=2, tasks=1000, out=print):
    """Start the cluster, run the three benchmarks, print a table; returns the rows."""
    from distributed import Client, LocalCluster
    size = BIG if big else SMALL
    # one thread per worker for tex and BLAS alike, set before the workers start (they
    # read it when they import tex or numpy)
    single = {v: "1" for v in ("TEX_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                               "MKL_NUM_THREADS")}
    saved = {v: os.environ.get(v) for v in single}
    os.environ.update(single)
    rows = []
    try:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None, env=single) as cluster, \
                Client(cluster) as client:
            out(f"LocalCluster: {workers} worker processes x 1 thread (tex threads: "
                f"{sorted(set(client.run(tex.get_num_threads).values()))}); median of "
                f"{rounds} interleaved rounds after a warm-up")
            n, c, mib = size["n"], size["chunk"], size["mib"]
            t, d, e = bench_matmul(client, n, c, rounds)
            rows.append((f"matmul float32 {n}^2 @ {n}^2 in {c}^2 chunks vs x @ y", t, d))
            rows.append(("  the same vs dask.array.einsum", t, e))
            t, d = bench_row_sums(client, mib, rounds)
            rows.append((f"int8->int32 row sums, {mib} MiB in {mib // 8} MiB chunks", t, d))
            t, d = bench_overhead(client, tasks, rounds)
            rows.append((f"exp(x)*2+1 on {tasks} chunks of 8 vs numpy chunk fn", t, d))
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    out(f"{'workload':58} {'tex':>12} {'dask':>12} {'dask/tex':>9}")
    for name, t, d in rows:
        out(f"{name:58} {fmt(t)} {fmt(d)} {d / t:8.2f}x")
    extra = (rows[-1][1] - rows[-1][2]) / tasks
    out(f"per-task overhead tex adds over a numpy chunk function: {extra * 1e6:.0f} us")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tex bench --dask", description=__doc__)
    p.add_argument("--big", action="store_true",
                   help="issue 15's sizes: 4096^2 matmul in 1024^2 chunks, 512 MiB int8")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    run(big=args.big, rounds=args.repeat, workers=args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
